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

from raftlog.common.errors import ConfigError
from raftlog.common.http_listener import HttpLimits
from raftlog.config.broker_settings import (
    BROKER_DEFAULTS,
    SHARE_GROUP_SETTINGS,
    TOPIC_SYNONYMS,
    check_broker,
    whole_number,
)
from raftlog.security import listeners as kafka_listeners
from raftlog.security.listeners import DEFAULT_PROTOCOL_MAP, Listener
from raftlog.security.sasl import SUPPORTED as SASL_MECHANISMS
from raftlog.security.tls import TlsError, TlsSettings

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
        peer_id = whole_number(peer["id"], "[[peers]] id")
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
        check_broker(broker)
        required = ["node_id", "data_dir", "raft_listen", "cluster_secret"]
        if not broker.get("listeners"):
            required.append("kafka_listen")
        missing = [k for k in required if k not in raw]
        if missing:
            raise ConfigError(f"missing required settings: {', '.join(missing)}")
        node_id = whole_number(raw["node_id"], "node_id")
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
