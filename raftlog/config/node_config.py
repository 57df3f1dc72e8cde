"""A node's configuration file (TOML), as `raftlog serve --config FILE` reads it.

```toml
node_id = 1
data_dir = "/var/lib/raftlog"
kafka_listen = "0.0.0.0:9092"
advertised_kafka = "node1:9092"
raft_listen = "0.0.0.0:10092"
advertised_raft = "node1:10092"   # optional; what joining nodes dial
admin_listen = "127.0.0.1:11092"  # the default; reads are open, changes need admin_token
admin_token = "change-me-too"    # optional; without it no admin endpoint changes anything
cluster_secret = "change-me"

[[peers]]            # every node of the cluster (this one may be listed too)
id = 2
raft = "node2:10092"

[broker]             # optional; Kafka's names and defaults
"broker.rack" = "eu-west-1a"   # optional; replicas of a partition go to distinct racks
"num.partitions" = 1
"default.replication.factor" = 1
"auto.create.topics.enable" = true
```
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftlog.common.http_listener import HttpLimits
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
from raftlog.security import listeners as kafka_listeners
from raftlog.security.listeners import DEFAULT_PROTOCOL_MAP, Listener
from raftlog.security.sasl import SUPPORTED as SASL_MECHANISMS
from raftlog.security.tls import TlsError, TlsSettings

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


class ConfigError(ValueError):
    pass


# The longest rack name a node takes (Kafka sets none; each Metadata answer carries all).
MAX_RACK_CHARS = 255


def toml_value(value: Any) -> str:
    """A setting written as TOML: the configs `raftlog cluster up`, the tests and the
    benchmark write are read back by NodeConfig.load."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(str(value))


def parse_address(value: Any, what: str) -> tuple[str, int]:
    if not isinstance(value, str):
        raise ConfigError(f'{what}: expected a "host:port" string, got {value!r}')
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{what}: expected host:port with a port from 1 to 65535, got {value!r}")
    return host or "0.0.0.0", int(port)


def _whole(value: Any, what: str) -> int:
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


def _check_broker(broker: dict[str, Any]) -> None:
    """Checks [broker] and replaces each value by what it means: a boolean or number may be
    written as TOML's own or as the text Kafka's server.properties holds ("true", "3")."""
    unknown = sorted(set(broker) - set(BROKER_DEFAULTS))
    if unknown:
        raise ConfigError(f"unknown [broker] settings: {', '.join(unknown)}")
    for name, value in broker.items():
        broker[name] = _broker_value(name, value)
    _check_share_bounds({name: broker.get(name, BROKER_DEFAULTS[name]) for name in BROKER_RANGES})


def _broker_value(name: str, value: Any) -> Any:
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
    text = value if isinstance(value, str) else str(_whole(value, what))
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


def _check_share_bounds(settings: dict[str, int]) -> None:
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


def _peers(
    listed: Any, node_id: int, raft: tuple[str, int], advertised: tuple[str, int]
) -> dict[int, tuple[str, int]]:
    """Every member's Raft address. A node missing from a [[peers]] list that names others
    would start as a cluster of its own and serve nothing; two members at one address would
    dial themselves forever."""
    if not isinstance(listed, list) or not all(isinstance(p, dict) for p in listed):
        raise ConfigError("[[peers]] must be a list of tables with id and raft")
    peers: dict[int, tuple[str, int]] = {}
    for peer in listed:
        if "id" not in peer or "raft" not in peer:
            raise ConfigError("each [[peers]] entry needs id and raft")
        peer_id = _whole(peer["id"], "[[peers]] id")
        if peer_id in peers:
            raise ConfigError(f"[[peers]] lists node {peer_id} twice")
        peers[peer_id] = parse_address(peer["raft"], f"peer {peer_id} raft")
    if peers and node_id not in peers:
        raise ConfigError(
            f"node_id {node_id} is not among [[peers]] ({', '.join(map(str, sorted(peers)))})"
        )
    peers.setdefault(node_id, raft)
    own = {peers[node_id], raft, advertised}
    seen: dict[tuple[str, int], int] = {}
    for peer_id, address in sorted(peers.items()):
        if peer_id != node_id and address in own:
            raise ConfigError(
                f"peer {peer_id}'s raft address {address[0]}:{address[1]} is this node's"
            )
        if address in seen:
            raise ConfigError(
                f"nodes {seen[address]} and {peer_id} share the raft address "
                f"{address[0]}:{address[1]}"
            )
        seen[address] = peer_id
    return peers


@dataclass
class NodeConfig:
    node_id: int
    data_dir: Path
    kafka_listen: tuple[str, int]
    advertised_kafka: tuple[str, int]
    raft_listen: tuple[str, int]
    advertised_raft: tuple[str, int]
    admin_listen: tuple[str, int]
    cluster_secret: str
    peers: dict[int, tuple[str, int]]  # every node's Raft address, this one included
    broker: dict[str, Any] = field(default_factory=dict)
    rack: str | None = None
    admin_token: str | None = None
    proxy_listen: tuple[str, int] | None = None  # the consume proxy's HTTP port; None: off
    # Kafka listeners; the first is kafka_listen / advertised_kafka.
    listeners: list[Listener] = field(default_factory=list)
    tls: TlsSettings | None = None  # the ssl.* settings, when a keystore is given
    peer_tls: bool = False  # the peer mesh over mutual TLS (besides its HMAC handshake)
    admin_tls: bool = False  # the admin HTTP listener over TLS

    @property
    def sasl_mechanisms(self) -> tuple[str, ...]:
        return _names(self.broker_setting("sasl.enabled.mechanisms"))

    @property
    def node_ids(self) -> list[int]:
        return sorted(self.peers)

    def broker_setting(self, name: str) -> Any:
        return self.broker.get(name, BROKER_DEFAULTS[name])

    def http_limits(self) -> HttpLimits:
        """The bounds of this node's HTTP listeners (admin, consume proxy)."""
        return HttpLimits(
            header_timeout=int(self.broker_setting("http.header.read.timeout.ms")) / 1000,
            max_connections=int(self.broker_setting("http.max.connections")),
            max_connections_per_address=int(self.broker_setting("http.max.connections.per.ip")),
        )

    def topic_defaults(self) -> dict[str, str]:
        """The [broker] settings given in this node's config that stand in for unset topic
        settings (one not given has the topic setting's own default)."""
        return {
            topic: str(self.broker[b]) for b, topic in TOPIC_SYNONYMS.items() if b in self.broker
        }

    def group_bounds(self) -> dict[str, tuple[int, int, int]]:
        """Each share group setting's default and bounds (raftlog.config.group_config.Bounds), from
        this node's [broker]."""
        return {
            group: (
                int(self.broker_setting(default)),
                int(self.broker_setting(low)),
                int(self.broker_setting(high)),
            )
            for group, (default, low, high) in SHARE_GROUP_SETTINGS.items()
        }

    @classmethod
    def load(cls, path: Path) -> NodeConfig:
        try:
            raw = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such config file") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: cannot read the config file: {e}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: {e}") from None
        try:
            return cls.from_dict(raw, base=path.parent)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None

    @classmethod
    def from_dict(cls, raw: dict[str, Any], base: Path) -> NodeConfig:
        broker = raw.get("broker", {})
        if not isinstance(broker, dict):
            raise ConfigError("[broker] must be a table of settings")
        broker = dict(broker)
        rack = _rack(raw.get("rack"), broker.pop("broker.rack", None))
        _check_broker(broker)
        required = ["node_id", "data_dir", "raft_listen", "cluster_secret"]
        if not broker.get("listeners"):
            required.append("kafka_listen")
        missing = [k for k in required if k not in raw]
        if missing:
            raise ConfigError(f"missing required settings: {', '.join(missing)}")
        node_id = _whole(raw["node_id"], "node_id")
        if not isinstance(raw["data_dir"], str) or not raw["data_dir"]:
            raise ConfigError(f"data_dir: expected a path, got {raw['data_dir']!r}")
        listeners = _listeners(raw, broker)
        kafka = (listeners[0].host, listeners[0].port)
        advertised = (listeners[0].advertised_host, listeners[0].advertised_port)
        raft = parse_address(raw["raft_listen"], "raft_listen")
        admin = parse_address(
            raw.get("admin_listen", f"127.0.0.1:{kafka[1] + 2000}"), "admin_listen"
        )
        proxy_setting = raw.get("proxy_listen", f"127.0.0.1:{kafka[1] + 3000}")
        proxy = parse_address(proxy_setting, "proxy_listen") if proxy_setting else None
        advertised_raft = parse_address(
            raw.get("advertised_raft", f"{raft[0]}:{raft[1]}"), "advertised_raft"
        )
        peers = _peers(raw.get("peers", []), node_id, raft, advertised_raft)
        peer_tls = _flag(raw, "peer_tls")
        admin_tls = _flag(raw, "admin_tls")
        tls = _tls(broker, any(x.tls for x in listeners) or peer_tls or admin_tls, base)
        _raft_engine(raw.get("raft_engine", "core"))
        data_dir = Path(raw["data_dir"])
        if not data_dir.is_absolute():
            data_dir = (base / data_dir).resolve()
        return cls(
            node_id=node_id,
            data_dir=data_dir,
            kafka_listen=kafka,
            advertised_kafka=advertised,
            raft_listen=raft,
            advertised_raft=advertised_raft,
            admin_listen=admin,
            cluster_secret=str(raw["cluster_secret"]),
            admin_token=str(raw["admin_token"]) if raw.get("admin_token") else None,
            peers=peers,
            broker=broker,
            rack=rack,
            proxy_listen=proxy,
            listeners=listeners,
            tls=tls,
            peer_tls=peer_tls,
            admin_tls=admin_tls,
        )


def _rack(top_level: object, setting: object) -> str | None:
    """`[broker] "broker.rack"`, Kafka's name, or `rack` at the top (the older spelling);
    unset or empty: no rack. Every Metadata answer names it, so it is bounded."""
    given: list[str] = []
    for what, value in (("rack", top_level), ('[broker] "broker.rack"', setting)):
        if value is None:
            continue
        if not isinstance(value, str):
            raise ConfigError(f"{what}: expected a string, got {value!r}")
        if len(value) > MAX_RACK_CHARS or not value.isprintable():
            raise ConfigError(
                f"{what}: expected at most {MAX_RACK_CHARS} printable characters, got {value!r}"
            )
        given.append(value)
    if len(set(given)) > 1:
        raise ConfigError(
            f'rack = {given[0]!r} and [broker] "broker.rack" = {given[1]!r} differ; set one'
        )
    return given[0] if given and given[0] else None


def _raft_engine(setting: object) -> None:
    """The release before this one could run partitions on the pysyncobj fork; "core", its
    default, is the only engine now. A node set to the fork is refused rather than switched
    silently."""
    if setting == "pysyncobj":
        raise ConfigError(
            'raft_engine = "pysyncobj" is no longer served: partitions run on raftlog\'s own '
            "Raft core, which opens the data directory the fork wrote; delete the raft_engine line"
        )
    if setting != "core":
        raise ConfigError(f'raft_engine: only "core" is served, got {setting!r}')


def _names(setting: str) -> tuple[str, ...]:
    """A comma-separated list setting, upper-cased as Kafka compares mechanism names."""
    return tuple(m.strip().upper() for m in str(setting).split(",") if m.strip())


def _flag(raw: dict[str, Any], name: str) -> bool:
    value = raw.get(name, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{name}: expected true or false, got {value!r}")
    return value


def _listeners(raw: dict[str, Any], broker: dict[str, Any]) -> list[Listener]:
    """[broker] listeners when set; otherwise kafka_listen / advertised_kafka, as one
    PLAINTEXT listener (every config written before listeners existed)."""
    setting = broker.get("listeners", "")
    if setting:
        if "kafka_listen" in raw or "advertised_kafka" in raw:
            raise ConfigError("kafka_listen and [broker] listeners cannot both be set")
        try:
            listeners = kafka_listeners.parse(
                setting,
                broker.get("advertised.listeners", ""),
                broker.get("listener.security.protocol.map", DEFAULT_PROTOCOL_MAP),
            )
        except kafka_listeners.ListenerError as e:
            raise ConfigError(str(e)) from None
    else:
        kafka = parse_address(raw["kafka_listen"], "kafka_listen")
        advertised = parse_address(
            raw.get("advertised_kafka", f"{kafka[0]}:{kafka[1]}"), "advertised_kafka"
        )
        listeners = [Listener("PLAINTEXT", "PLAINTEXT", *kafka, *advertised)]
    mechanisms = _names(
        broker.get("sasl.enabled.mechanisms", BROKER_DEFAULTS["sasl.enabled.mechanisms"])
    )
    unknown = [m for m in mechanisms if m not in SASL_MECHANISMS]
    if unknown:
        raise ConfigError(
            f"sasl.enabled.mechanisms: {', '.join(unknown)} not served "
            f"(raftlog has {', '.join(SASL_MECHANISMS)})"
        )
    if any(x.sasl for x in listeners) and not mechanisms:
        raise ConfigError("a SASL listener needs sasl.enabled.mechanisms")
    return listeners


def _tls(broker: dict[str, Any], wanted: bool, base: Path) -> TlsSettings | None:
    """The ssl.* settings, files relative to the config file's directory."""

    def path(name: str) -> str:
        value = broker.get(name, "")
        return str((base / value).resolve()) if value else ""

    keystore = path("ssl.keystore.location")
    if not keystore:
        if wanted:
            raise ConfigError("SSL listeners, peer_tls and admin_tls need ssl.keystore.location")
        return None
    setting = broker.get("ssl.enabled.protocols", BROKER_DEFAULTS["ssl.enabled.protocols"])
    try:
        tls = TlsSettings(
            keystore=keystore,
            truststore=path("ssl.truststore.location"),
            key_password=broker.get("ssl.key.password", ""),
            client_auth=broker.get("ssl.client.auth", "none"),
            protocols=tuple(p.strip() for p in setting.split(",") if p.strip()),
        )
        tls.server_context()  # the files load now, not at the first client
    except TlsError as e:
        raise ConfigError(str(e)) from None
    return tls
