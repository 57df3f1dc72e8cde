"""Node config files (raftlog/config/node_config.py): every mistake is one ConfigError naming it, never a
traceback, and a config that would start a node serving nothing is refused."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from raftlog.common.errors import ConfigError
from raftlog.common.http_listener import HttpLimits
from raftlog.config.node_config import NodeConfig

GOOD = """
node_id = 1
data_dir = "data"
kafka_listen = "127.0.0.1:9092"
raft_listen = "127.0.0.1:10092"
cluster_secret = "s"
admin_token = "t"

[[peers]]
id = 1
raft = "127.0.0.1:10092"

[[peers]]
id = 2
raft = "127.0.0.1:10093"

[broker]
"num.partitions" = 3
"auto.create.topics.enable" = false
"""


def load(tmp_path: Path, text: str) -> NodeConfig:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return NodeConfig.load(path)


def test_a_good_config(tmp_path: Path) -> None:
    config = load(tmp_path, GOOD)
    assert config.peers == {1: ("127.0.0.1", 10092), 2: ("127.0.0.1", 10093)}
    assert config.admin_listen == ("127.0.0.1", 11092)  # loopback by default
    assert config.admin_token == "t"
    assert config.data_dir == (tmp_path / "data").resolve()
    assert config.broker_setting("num.partitions") == 3


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("node_id = 1", 'node_id = "one"', "node_id: expected a whole number"),
        ('kafka_listen = "127.0.0.1:9092"', "kafka_listen = 9092", "kafka_listen: expected"),
        ('kafka_listen = "127.0.0.1:9092"', 'kafka_listen = "h:70000"', "from 1 to 65535"),
        ('"num.partitions" = 3', '"num.partitions" = "3x"', "num.partitions: expected a whole"),
        ('"num.partitions" = 3', '"num.partitions" = 3.5', "num.partitions: expected a whole"),
        ("= false", '= "no"', "expected true or false"),
        ('"num.partitions" = 3', '"num.partition" = 3', "unknown [broker] settings"),
        ('"num.partitions" = 3', '"log.format" = "xml"', "log.format: expected text or json"),
        ("[[peers]]\nid = 1", "[[peers]]\nid = 3", "node_id 1 is not among [[peers]] (2, 3)"),
        ('raft = "127.0.0.1:10093"', 'raft = "127.0.0.1:10092"', "is this node's"),
        ("[[peers]]\nid = 2", "[[peers]]\nid = 1", "lists node 1 twice"),
        ('id = 2\nraft = "127.0.0.1:10093"', "id = 2", "needs id and raft"),
        ('admin_token = "t"', 'raft_engine = "pysyncobj"', "delete the raft_engine line"),
        ('admin_token = "t"', 'raft_engine = "etcd"', 'only "core" is served'),
    ],
)
def test_each_mistake_is_named(tmp_path: Path, old: str, new: str, message: str) -> None:
    assert old in GOOD
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(tmp_path, GOOD.replace(old, new, 1))


def test_two_peers_at_one_address_are_refused(tmp_path: Path) -> None:
    text = GOOD + '\n[[peers]]\nid = 3\nraft = "127.0.0.1:10093"\n'
    with pytest.raises(ConfigError, match="nodes 2 and 3 share the raft address"):
        load(tmp_path, text)


@pytest.mark.parametrize("what", ["missing", "directory", "not toml"])
def test_an_unreadable_config_file_is_named(tmp_path: Path, what: str) -> None:
    path: Any = tmp_path / "node.toml"
    if what == "directory":
        path.mkdir()
    elif what == "not toml":
        path.write_text("node_id = = 1\n")
    with pytest.raises(ConfigError, match=str(path)):
        NodeConfig.load(path)


LISTENERS = """
node_id = 1
data_dir = "data"
raft_listen = "127.0.0.1:10092"
cluster_secret = "s"

[broker]
listeners = "PLAINTEXT://127.0.0.1:9092,SASL_SSL://:9093,INTERNAL://127.0.0.1:9094"
"advertised.listeners" = "SASL_SSL://kafka.example.com:19093"
"listener.security.protocol.map" = "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,INTERNAL:SASL_PLAINTEXT"
"sasl.enabled.mechanisms" = "PLAIN,SCRAM-SHA-512"
"ssl.keystore.location" = "node.pem"
"""


def test_listeners_are_read_as_kafka_names_them(tmp_path: Path) -> None:
    from raftlog_app.dev_certs import Authority

    Authority(tmp_path / "ca", "ca").issue("node", "node", server=True).bundle.rename(
        tmp_path / "node.pem"
    )
    cfg = load(tmp_path, LISTENERS)
    assert [(x.name, x.protocol, x.host, x.port) for x in cfg.listeners] == [
        ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092),
        ("SASL_SSL", "SASL_SSL", "0.0.0.0", 9093),
        ("INTERNAL", "SASL_PLAINTEXT", "127.0.0.1", 9094),
    ]
    assert (cfg.listeners[1].advertised_host, cfg.listeners[1].advertised_port) == (
        "kafka.example.com",
        19093,
    )
    assert cfg.kafka_listen == ("127.0.0.1", 9092)
    assert cfg.sasl_mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert cfg.tls is not None and cfg.tls.keystore == str(tmp_path / "node.pem")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('"advertised.listeners" = "SASL_SSL', '"advertised.listeners" = "OTHER'), "OTHER"),
        ((",INTERNAL:SASL_PLAINTEXT", ""), "INTERNAL has no security protocol"),
        (("SASL_SSL://:9093", "SASL_SSL://127.0.0.1:9092"), "share port"),
        (("SASL_SSL://:9093", "SASL_SSL//:9093"), "NAME://host:port"),
        (('"ssl.keystore.location" = "node.pem"', ""), "need ssl.keystore.location"),
        (("PLAIN,SCRAM-SHA-512", "GSSAPI"), "GSSAPI not served"),
        (('"advertised.listeners" = "SASL_SSL://kafka.example.com:19093"', ""), "advertised"),
    ],
)
def test_listener_mistakes_are_named(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    text = LISTENERS.replace(*change)
    assert text != LISTENERS
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(tmp_path, text)


def test_kafka_listen_and_listeners_cannot_both_be_set(tmp_path: Path) -> None:
    text = LISTENERS.replace("raft_listen = ", 'kafka_listen = "127.0.0.1:1"\nraft_listen = ')
    with pytest.raises(ConfigError, match="cannot both be set"):
        load(tmp_path, text)


def test_an_unreadable_keystore_is_refused_at_load(tmp_path: Path) -> None:
    (tmp_path / "node.pem").write_text("not a certificate")
    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        load(tmp_path, LISTENERS)


def _broker(tmp_path: Path, lines: str) -> NodeConfig:
    return load(tmp_path, GOOD.replace('"num.partitions" = 3\n', lines + "\n", 1))


@pytest.mark.parametrize(("text", "value"), [('"true"', True), ('" FALSE "', False)])
def test_a_broker_boolean_written_as_text_is_read_as_kafkas_properties_read_it(
    tmp_path: Path, text: str, value: bool
) -> None:
    config = _broker(tmp_path, f'"allow.everyone.if.no.acl.found" = {text}')
    assert config.broker_setting("allow.everyone.if.no.acl.found") is value


def test_a_broker_number_written_as_text_is_read_as_a_number(tmp_path: Path) -> None:
    config = _broker(tmp_path, '"num.partitions" = " 3 "\n"log.retention.ms" = "-1"')
    assert config.broker_setting("num.partitions") == 3
    assert config.broker_setting("log.retention.ms") == -1
    with pytest.raises(ConfigError, match=re.escape("[broker] num.partitions: expected a whole")):
        _broker(tmp_path, '"num.partitions" = "2147483648"')  # past Java's Integer


def test_share_group_broker_settings_have_kafkas_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, GOOD)
    assert config.group_bounds() == {
        "share.record.lock.duration.ms": (30000, 15000, 60000),
        "share.delivery.count.limit": (5, 2, 10),
        "share.session.timeout.ms": (45000, 45000, 60000),
        "share.heartbeat.interval.ms": (5000, 5000, 15000),
        "share.partition.max.record.locks": (2000, 100, 4000),
    }


def test_a_one_second_lock_as_confluent_kafkas_share_suite_runs_it(tmp_path: Path) -> None:
    config = _broker(
        tmp_path,
        '"group.share.record.lock.duration.ms" = 1000\n'
        '"group.share.min.record.lock.duration.ms" = "1000"',
    )
    assert config.group_bounds()["share.record.lock.duration.ms"] == (1000, 1000, 60000)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            '"group.share.record.lock.duration.ms" = 999',
            "group.share.record.lock.duration.ms: expected a number from 1000 to 3600000, got 999",
        ),
        (
            '"group.share.record.lock.duration.ms" = 1000',  # below the min's default, 15000
            "group.share.record.lock.duration.ms must be greater than or equal to "
            "group.share.min.record.lock.duration.ms (1000 < 15000)",
        ),
        (
            '"group.share.max.delivery.count.limit" = 5\n"group.share.delivery.count.limit" = 6',
            "group.share.max.delivery.count.limit must be greater than or equal to "
            "group.share.delivery.count.limit (5 < 6)",
        ),
        (
            '"group.share.heartbeat.interval.ms" = 45000\n'
            '"group.share.max.heartbeat.interval.ms" = 45000',
            "group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms",
        ),
        ('"group.share.session.timeout.ms" = 0', "expected a number at least 1, got 0"),
    ],
)
def test_share_group_broker_settings_are_bounded_as_kafka_checks_them_at_start(
    tmp_path: Path, lines: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        _broker(tmp_path, lines)


def test_broker_defaults_of_topic_configs_are_kafkas_synonyms(tmp_path: Path) -> None:
    config = _broker(
        tmp_path,
        '"compression.type" = "zstd"\n"log.message.timestamp.after.max.ms" = "60000"',
    )
    assert config.topic_defaults() == {
        "compression.type": "zstd",
        "message.timestamp.after.max.ms": "60000",
    }
    with pytest.raises(ConfigError, match=re.escape("compression.type: expected uncompressed")):
        _broker(tmp_path, '"compression.type" = "brotli"')
    with pytest.raises(ConfigError, match="before.max.ms: expected a number at least 0"):
        _broker(tmp_path, '"log.message.timestamp.before.max.ms" = -1')


def test_a_broker_number_is_held_to_its_java_type(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape("default.replication.factor: expected a")):
        _broker(tmp_path, '"default.replication.factor" = 32768')  # past Java's Short
    config = _broker(tmp_path, '"log.retention.bytes" = 4294967296')  # a Long takes it
    assert config.broker_setting("log.retention.bytes") == 2**32


def test_the_http_listeners_bounds_are_read_and_must_be_positive(tmp_path: Path) -> None:
    assert load(tmp_path, GOOD).http_limits() == HttpLimits(30.0, 256, 64)
    config = _broker(
        tmp_path,
        '"http.header.read.timeout.ms" = 1500\n"http.max.connections" = "10"\n'
        '"http.max.connections.per.ip" = 2',
    )
    assert config.http_limits() == HttpLimits(1.5, 10, 2)
    for name in ("http.header.read.timeout.ms", "http.max.connections.per.ip"):
        with pytest.raises(ConfigError, match=re.escape(f"[broker] {name}: expected a positive")):
            _broker(tmp_path, f'"{name}" = 0')


def test_broker_rack_is_read_as_kafka_operators_write_it(tmp_path: Path) -> None:
    """`broker.rack` in [broker], as server.properties names it, or `rack` at the top; both
    may be set if they agree; empty is no rack; and [broker] keeps no copy of it (so `cluster
    add-node`, which copies node 1's [broker], does not copy node 1's rack)."""
    assert load(tmp_path, GOOD).rack is None
    kafka = load(tmp_path, GOOD + '"broker.rack" = "eu-west-1a"\n')
    assert kafka.rack == "eu-west-1a" and "broker.rack" not in kafka.broker
    top = GOOD.replace('cluster_secret = "s"', 'cluster_secret = "s"\nrack = "r1"')
    assert load(tmp_path, top).rack == "r1"
    assert load(tmp_path, top + '"broker.rack" = "r1"\n').rack == "r1"
    assert load(tmp_path, GOOD + '"broker.rack" = ""\n').rack is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('"broker.rack" = 3', '[broker] "broker.rack": expected a string, got 3'),
        ('"broker.rack" = "' + "r" * 256 + '"', "expected at most 255 printable characters"),
        ('"broker.rack" = "a\\nb"', "expected at most 255 printable characters"),
    ],
)
def test_a_bad_broker_rack_is_named(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(tmp_path, GOOD + text + "\n")


def test_two_different_racks_are_refused(tmp_path: Path) -> None:
    top = GOOD.replace('cluster_secret = "s"', 'cluster_secret = "s"\nrack = "r1"')
    with pytest.raises(ConfigError, match="rack = 'r1' and .* = 'r2' differ; set one"):
        load(tmp_path, top + '"broker.rack" = "r2"\n')


def test_cluster_up_writes_each_nodes_rack(tmp_path: Path) -> None:
    """`raftlog cluster up --racks` writes broker.rack into each node's config, which the
    node reads back; a node written without one (add-node without --rack) has none."""
    from raftlog_app import local_nodes

    specs = local_nodes.node_specs(tmp_path, 2, 19092)
    local_nodes.write_config(specs[0], specs, "s", {"num.partitions": 3}, "t", "eu-west-1a")
    local_nodes.write_config(specs[1], specs, "s", {"num.partitions": 3}, "t")
    first, second = (NodeConfig.load(s.config_path) for s in specs)
    assert (first.rack, first.broker) == ("eu-west-1a", {"num.partitions": 3})
    assert (second.rack, second.broker) == (None, {"num.partitions": 3})
