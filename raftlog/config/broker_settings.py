"""The [broker] settings of a node's configuration file: Kafka's names and defaults, each
setting's type and bounds, and the checks a value passes as the file is read (node_config.py
reads the file)."""

from __future__ import annotations

from typing import Any

from raftlog.common.errors import ConfigError
from raftlog.config.config_def import (
    BOOLEAN,
    INT,
    LIST,
    LONG,
    PASSWORD,
    SHORT,
    STRING,
    Setting,
    parse_boolean,
    parse_number,
)
from raftlog.security.listeners import DEFAULT_PROTOCOL_MAP

BROKER_DEFAULTS: dict[str, Any] = {
    "num.partitions": 1,
    "default.replication.factor": 1,
    "auto.create.topics.enable": True,
    "message.max.bytes": 1048588,
    "log.segment.bytes": 134217728,
    "log.retention.ms": 604800000,
    "log.retention.bytes": -1,
    "log.retention.check.interval.ms": 300000,
    "log.cleaner.backoff.ms": 15000,
    # raftlog's: how often each Raft group takes a snapshot (cuts its window and saves its
    # producer state), each 1-1.5 times this at random; retention and compaction work only
    # below the last one (raftlog/raft/timings.py, compaction_seconds). As KRaft's
    # metadata.log.max.snapshot.interval.ms, for every partition and the controller.
    "raft.snapshot.interval.ms": 60000,
    # Defaults of the topic settings of the same meaning (TOPIC_SYNONYMS).
    "compression.type": "producer",
    "log.message.timestamp.type": "CreateTime",
    "log.message.timestamp.before.max.ms": 2**63 - 1,
    "log.message.timestamp.after.max.ms": 3600000,
    # __consumer_offsets and groups. 16 partitions, as Redpanda: each is a Raft group, and
    # Kafka's 50 would cost every idle node fifty more heartbeating groups.
    "offsets.topic.num.partitions": 16,
    "offsets.topic.replication.factor": 3,
    "offsets.retention.minutes": 10080,
    "offset.metadata.max.bytes": 4096,
    "group.initial.rebalance.delay.ms": 3000,
    "group.min.session.timeout.ms": 6000,
    "group.max.session.timeout.ms": 1800000,
    # __transaction_state and the transaction coordinator; 16 partitions for the same reason.
    "transaction.state.log.num.partitions": 16,
    "transaction.state.log.replication.factor": 3,
    "transaction.max.timeout.ms": 900000,
    "transactional.id.expiration.ms": 604800000,
    "transaction.remove.expired.transaction.cleanup.interval.ms": 3600000,
    # raftlog's: the transactional ids one __transaction_state partition keeps (txn/coordinator.py)
    "transactional.id.max.per.partition": 10000,
    # The Kafka listener: largest request frame, and how long a quiet connection is kept.
    "socket.request.max.bytes": 104857600,
    "fetch.max.bytes": 57671680,  # Kafka's: the most one Fetch response carries
    # Partition replicas one node may hold; -1: what its file descriptors allow (limits.py).
    "max.partition.replicas.per.node": -1,
    # Bytes per second a partition's leader sends each replica a reassignment adds while it
    # catches up (raftlog/cluster/reassignment.py); Kafka's name, applied to every moving replica
    # (Kafka's default is unthrottled: its reassignment tool sets a throttle per move).
    "leader.replication.throttled.rate": 32 * 1024 * 1024,
    # raftlog's: the voters of the controller quorum (1, 3 or 5; KRaft's controller.quorum
    # voters, as a count): a new cluster's first nodes by id, fewer if it has fewer nodes;
    # every other node observes (raftlog/controller/voters.py).
    "controller.quorum.size": 3,
    "connections.max.idle.ms": 600000,
    # Kafka client connections a node holds open over its Kafka listeners, and from one client
    # address (Kafka's names; kafka_api/connection_caps.py). -1: what the node's file
    # descriptors leave after its partition replicas and HTTP listeners
    # (raftlog/common/limits.py); Kafka's default is no cap, and for one address so is raftlog's.
    "max.connections": -1,
    "max.connections.per.ip": 2147483647,
    # What every listener of a node holds of requests, complete and half-read (Kafka's name;
    # Kafka's default is unbounded), and the largest frame before SASL authentication.
    "queued.max.request.bytes": 268435456,
    "sasl.server.max.receive.size": 524288,
    # The HTTP listeners, the admin port and the consume proxy (raftlog/common/http_listener.py),
    # each: the time a connection has to send a whole request head, from connecting and from
    # each answer (so also how long an idle keep-alive connection is kept; Jetty's idle
    # timeout), and the connections one listener, and one client address, may hold open.
    "http.header.read.timeout.ms": 30000,
    "http.max.connections": 256,
    "http.max.connections.per.ip": 64,
    # Listeners (raftlog/security/listeners.py). Empty: kafka_listen is one PLAINTEXT listener.
    "listeners": "",
    "advertised.listeners": "",
    "listener.security.protocol.map": DEFAULT_PROTOCOL_MAP,
    # TLS from PEM files (raftlog/security/tls.py), for SSL listeners, peer_tls and admin_tls.
    "ssl.keystore.location": "",
    "ssl.key.password": "",
    "ssl.truststore.location": "",
    "ssl.client.auth": "none",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
    # Authorization (raftlog/security): off while authorizer.class.name is empty, as in Kafka.
    "authorizer.class.name": "",
    "super.users": "",  # "User:alice;User:bob"
    "allow.everyone.if.no.acl.found": False,
    "log.format": "text",  # or "json": one object per line (raftlog_app/logs.py)
    # Share groups (Kafka 4's ShareGroupConfig and GroupCoordinatorConfig): each group's
    # default, and the bounds of what a group's own config may set (raftlog/config/group_config.py).
    "group.share.record.lock.duration.ms": 30000,
    "group.share.min.record.lock.duration.ms": 15000,
    "group.share.max.record.lock.duration.ms": 60000,
    "group.share.delivery.count.limit": 5,
    "group.share.min.delivery.count.limit": 2,
    "group.share.max.delivery.count.limit": 10,
    "group.share.session.timeout.ms": 45000,
    "group.share.min.session.timeout.ms": 45000,
    "group.share.max.session.timeout.ms": 60000,
    "group.share.heartbeat.interval.ms": 5000,
    "group.share.min.heartbeat.interval.ms": 5000,
    "group.share.max.heartbeat.interval.ms": 15000,
    "group.share.partition.max.record.locks": 2000,
    "group.share.min.partition.max.record.locks": 100,
    "group.share.max.partition.max.record.locks": 4000,
}
# A share group setting (raftlog/config/group_config.py) -> the [broker] settings of its default,
# minimum and maximum.
SHARE_GROUP_SETTINGS = {
    group: (f"group.{group}", f"group.share.min.{group[6:]}", f"group.share.max.{group[6:]}")
    for group in (
        "share.record.lock.duration.ms",
        "share.delivery.count.limit",
        "share.session.timeout.ms",
        "share.heartbeat.interval.ms",
        "share.partition.max.record.locks",
    )
}
# Kafka's ConfigType of each setting (DescribeConfigs v3+), where it is not what its default
# says (a bool BOOLEAN, a whole number INT, text STRING).
BROKER_TYPES = {
    **dict.fromkeys(
        (
            "default.replication.factor",
            "offsets.topic.replication.factor",
            "transaction.state.log.replication.factor",
        ),
        SHORT,
    ),
    **dict.fromkeys(
        (
            "log.retention.ms",
            "log.retention.bytes",
            "log.retention.check.interval.ms",
            "log.cleaner.backoff.ms",
            "raft.snapshot.interval.ms",
            "log.message.timestamp.before.max.ms",
            "log.message.timestamp.after.max.ms",
            "connections.max.idle.ms",
            "queued.max.request.bytes",
        ),
        LONG,
    ),
    "ssl.enabled.protocols": LIST,
    "sasl.enabled.mechanisms": LIST,
    "ssl.key.password": PASSWORD,
}
# Kafka's ConfigDef ranges of the settings that have one (low, high; None: unbounded).
QUORUM_SIZES = (1, 3, 5)  # controller.quorum.size: an even count adds a voter and no safety
BROKER_RANGES: dict[str, tuple[int, int | None]] = {
    "log.message.timestamp.before.max.ms": (0, None),
    "leader.replication.throttled.rate": (0, None),
    "raft.snapshot.interval.ms": (1000, None),
    "log.message.timestamp.after.max.ms": (0, None),
    "group.share.record.lock.duration.ms": (1000, 3600000),
    "group.share.min.record.lock.duration.ms": (1000, 30000),
    "group.share.max.record.lock.duration.ms": (30000, 3600000),
    "group.share.delivery.count.limit": (2, 10),
    "group.share.min.delivery.count.limit": (2, 5),
    "group.share.max.delivery.count.limit": (5, 25),
    "group.share.partition.max.record.locks": (100, 10000),
    "group.share.min.partition.max.record.locks": (100, 10000),
    "group.share.max.partition.max.record.locks": (100, 10000),
    **dict.fromkeys(
        (
            "group.share.session.timeout.ms",
            "group.share.min.session.timeout.ms",
            "group.share.max.session.timeout.ms",
            "group.share.heartbeat.interval.ms",
            "group.share.min.heartbeat.interval.ms",
            "group.share.max.heartbeat.interval.ms",
        ),
        (1, None),
    ),
}
# Shown by DescribeConfigs as null and sensitive, as Kafka shows passwords.
SENSITIVE = frozenset({"ssl.key.password"})
# Settings 0 or less would break: the byte bounds the Kafka listener enforces (it would
# refuse everything), the HTTP listeners' timeout and caps (likewise), and the transactional
# ids' expiry, its check interval and their bound.
BROKER_POSITIVE = frozenset(
    {
        "socket.request.max.bytes",
        "queued.max.request.bytes",
        "sasl.server.max.receive.size",
        "http.header.read.timeout.ms",
        "http.max.connections",
        "http.max.connections.per.ip",
        "max.connections.per.ip",
        "transactional.id.expiration.ms",
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "transactional.id.max.per.partition",
    }
)
# String settings that take one of a few values.
BROKER_CHOICES = {
    "log.format": ("text", "json"),
    "compression.type": ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    "log.message.timestamp.type": ("CreateTime", "LogAppendTime"),
}
# Broker settings that are also the defaults of topic settings (Kafka's synonyms).
TOPIC_SYNONYMS = {
    "message.max.bytes": "max.message.bytes",
    "log.segment.bytes": "segment.bytes",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "compression.type": "compression.type",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
}


def whole_number(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{what}: expected a whole number, got {value!r}")
    return value


def broker_type(name: str) -> int:
    """Kafka's ConfigType of a [broker] setting."""
    default = BROKER_DEFAULTS[name]
    if name in BROKER_TYPES:
        return BROKER_TYPES[name]
    if isinstance(default, bool):
        return BOOLEAN
    return INT if isinstance(default, int) else STRING


def check_broker(broker: dict[str, Any]) -> None:
    """Checks [broker] and replaces each value by what it means: a boolean or number may be
    written as TOML's own or as the text Kafka's server.properties holds ("true", "3")."""
    unknown = sorted(set(broker) - set(BROKER_DEFAULTS))
    if unknown:
        raise ConfigError(f"unknown [broker] settings: {', '.join(unknown)}")
    for name, value in broker.items():
        broker[name] = broker_value(name, value)
    check_share_bounds({name: broker.get(name, BROKER_DEFAULTS[name]) for name in BROKER_RANGES})


def broker_value(name: str, value: Any) -> Any:
    default = BROKER_DEFAULTS[name]
    what = f"[broker] {name}"
    if isinstance(default, bool):
        if isinstance(value, str):
            flag = parse_boolean(Setting(name, BOOLEAN, "", ""), value)
            if isinstance(flag, bool):
                return flag
        if not isinstance(value, bool):
            raise ConfigError(f"{what}: expected true or false, got {value!r}")
        return value
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ConfigError(f"{what}: expected a string, got {value!r}")
        if value not in BROKER_CHOICES.get(name, (value,)):
            choices = " or ".join(BROKER_CHOICES[name])
            raise ConfigError(f"{what}: expected {choices}, got {value!r}")
        return value
    # TOML's integer or the text of one, within the setting's Java type (Short, Integer, Long)
    text = value if isinstance(value, str) else str(whole_number(value, what))
    number = parse_number(Setting(name, broker_type(name), "", ""), text)
    if not isinstance(number, int):
        raise ConfigError(f"{what}: expected a whole number, got {value!r}")
    if name in BROKER_POSITIVE and number < 1:
        raise ConfigError(f"{what}: expected a positive number, got {number}")
    if name == "controller.quorum.size" and number not in QUORUM_SIZES:
        raise ConfigError(f"{what}: expected 1, 3 or 5, got {number}")
    low, high = BROKER_RANGES.get(name, (None, None))
    if (low is not None and number < low) or (high is not None and number > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise ConfigError(f"{what}: expected a number {bound}, got {number}")
    return number


def check_share_bounds(settings: dict[str, int]) -> None:
    """Kafka's start-up checks of the share-group settings: each default within its own
    min and max, and a heartbeat interval shorter than the session timeout."""
    for default, low, high in SHARE_GROUP_SETTINGS.values():
        if settings[default] < settings[low]:
            raise ConfigError(
                f"[broker] {default} must be greater than or equal to {low} "
                f"({settings[default]} < {settings[low]})"
            )
        if settings[high] < settings[default]:
            raise ConfigError(
                f"[broker] {high} must be greater than or equal to {default} "
                f"({settings[high]} < {settings[default]})"
            )
    heartbeat = settings["group.share.heartbeat.interval.ms"]
    session = settings["group.share.session.timeout.ms"]
    if heartbeat >= session:
        raise ConfigError(
            "[broker] group.share.heartbeat.interval.ms must be less than "
            f"group.share.session.timeout.ms ({heartbeat} >= {session})"
        )
