"""Topic, broker and share-group configs as Kafka's clients use them, against a 3-node cluster
whose [broker] is set as confluent-kafka's share-consumer suite sets its own test broker (a 1 s
record lock, and a 1 s floor under it) plus one topic default (log.retention.ms):
- CreateTopics takes Kafka's topic configs (compression.type, the timestamp bounds, 3.9's
  message.format.version) and DescribeConfigs reports each with its source and type: the
  topic's own DYNAMIC_TOPIC_CONFIG, the node's STATIC_BROKER_CONFIG, the rest DEFAULT_CONFIG;
- a record stamped outside message.timestamp.before/after.max.ms is refused with
  INVALID_TIMESTAMP, one inside is written;
- a compacted topic refuses a record without a key with INVALID_RECORD, naming it;
- broker entries carry Kafka's config types, none UNKNOWN;
- a ShareConsumer's unacknowledged record comes back to the group after the node's 1 s lock."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from support import groups as G
from support import records as R
from support import wire as W
from support.cluster import Cluster
from support.share import share_consumer, share_group, share_topic

from raftlog.storage.batch import iter_batches

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DESCRIBE_CONFIGS = 32
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
BOOLEAN, STRING, INT, SHORT, LONG, LIST, PASSWORD = 1, 2, 3, 4, 5, 7, 9
DYNAMIC_TOPIC, STATIC_BROKER, DEFAULT = 1, 4, 5
HOUR_MS = 3_600_000
CODECS = {"uncompressed": 0, "gzip": 1, "zstd": 4}  # a batch's codec ids
BROKER = {
    "group.share.record.lock.duration.ms": 1000,
    "group.share.min.record.lock.duration.ms": 1000,
    "log.retention.ms": 86_400_000,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with G.running_cluster(tmp_path_factory.mktemp("configs"), name="configs", broker=BROKER) as c:
        yield c


def admin_for(cluster: Cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def create(cluster: Cluster, configs: dict[str, str]) -> str:
    name = f"cfg-{uuid.uuid4().hex[:8]}"
    topic = NewTopic(name, num_partitions=1, replication_factor=3, config=configs)
    admin = admin_for(cluster)  # held: a collected client fails its futures
    for future in admin.create_topics([topic]).values():
        future.result(30)
    return name


def _raw(cluster: Cluster, kind: int, name: str, synonyms: bool = False) -> dict[str, Any]:
    """DescribeConfigs v4 on the wire (the AdminClient shows no config types): name -> the
    config's (value, source, type, synonyms)."""
    with W.KafkaWire(cluster.node(cluster.node_ids[0]).kafka_addr) as conn:
        response = conn.call(
            DESCRIBE_CONFIGS,
            4,
            {
                "resources": [
                    {"resource_type": kind, "resource_name": name, "configuration_keys": None}
                ],
                "include_synonyms": synonyms,
                "include_documentation": False,
            },
        )
    (result,) = response.results
    assert W.code(result.error_code) == 0, result.error_message
    return {
        c.name: SimpleNamespace(
            value=c.value,
            source=int(c.config_source),
            type=int(c.config_type),
            synonyms=[(s.name, s.value, int(s.source)) for s in c.synonyms],
        )
        for c in result.configs
    }


def described(cluster: Cluster, kind: int, name: str) -> dict[str, tuple[str | None, int, int]]:
    """(value, source, config type) per config."""
    return {k: (c.value, c.source, c.type) for k, c in _raw(cluster, kind, name).items()}


def test_topic_configs_are_created_and_described_with_sources_and_types(cluster) -> None:
    name = create(
        cluster,
        {
            "compression.type": "zstd",
            "message.timestamp.before.max.ms": str(HOUR_MS),
            "message.format.version": "3.0-IV1",
            "unclean.leader.election.enable": "false",
        },
    )
    configs = described(cluster, TOPIC_RESOURCE, name)
    assert configs["compression.type"] == ("zstd", DYNAMIC_TOPIC, STRING)
    assert configs["message.timestamp.before.max.ms"] == (str(HOUR_MS), DYNAMIC_TOPIC, LONG)
    assert configs["message.format.version"] == ("3.0-IV1", DYNAMIC_TOPIC, STRING)
    assert configs["unclean.leader.election.enable"] == ("false", DYNAMIC_TOPIC, BOOLEAN)
    assert configs["retention.ms"] == ("86400000", STATIC_BROKER, LONG)  # the node's [broker]
    assert configs["segment.bytes"] == ("134217728", DEFAULT, INT)
    assert configs["message.timestamp.after.max.ms"] == (str(HOUR_MS), DEFAULT, LONG)
    assert configs["cleanup.policy"] == ("delete", DEFAULT, LIST)
    # the AdminClient's reading of the same answer
    resource = ConfigResource(ResourceType.TOPIC, name)
    admin = admin_for(cluster)
    entries = admin.describe_configs([resource])[resource].result(30)
    assert entries["compression.type"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not entries["compression.type"].is_default
    assert entries["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["segment.ms"].is_default
    assert entries["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    # synonyms in Kafka's order: the node's [broker] value, then the default, under its name
    # (the AdminClient keys them by name, so only the wire shows both)
    assert _raw(cluster, TOPIC_RESOURCE, name, True)["retention.ms"].synonyms == [
        ("log.retention.ms", "86400000", STATIC_BROKER),
        ("log.retention.ms", "604800000", DEFAULT),
    ]


def test_incremental_alter_and_refusals_of_topic_configs(cluster) -> None:
    name = create(cluster, {})
    admin = admin_for(cluster)

    def alter(key: str, value: str) -> None:
        resource = ConfigResource(
            ResourceType.TOPIC,
            name,
            incremental_configs=[
                ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
            ],
        )
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(30)

    alter("compression.type", "gzip")
    alter("compression.gzip.level", "9")
    configs = described(cluster, TOPIC_RESOURCE, name)
    assert configs["compression.type"][:2] == ("gzip", DYNAMIC_TOPIC)
    assert configs["compression.gzip.level"] == ("9", DYNAMIC_TOPIC, INT)
    for key, value, words in (
        ("compression.type", "brotli", "String must be one of"),
        ("compression.gzip.level", "10", "between 1 and 9 or equal to -1"),
        ("remote.storage.enable", "true", "Tiered Storage functionality is disabled"),
        ("no.such.config", "1", "Unknown topic config name: no.such.config"),
    ):
        with pytest.raises(KafkaException) as caught:
            alter(key, value)
        error: KafkaError = caught.value.args[0]
        assert error.code() == KafkaError.INVALID_CONFIG, (key, error)
        assert words in error.str(), (key, error)


def _produce_at(cluster: Cluster, topic: str, timestamp_ms: int) -> KafkaError | None:
    """One record stamped `timestamp_ms` (CreateTime); the delivery error, None if written."""
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 30000}
    )
    outcome: list[KafkaError | None] = []
    producer.produce(
        topic, b"v", timestamp=timestamp_ms, on_delivery=lambda err, _m: outcome.append(err)
    )
    producer.flush(40)
    assert len(outcome) == 1
    return outcome[0]


def test_timestamps_outside_the_topics_bounds_are_refused(cluster) -> None:
    name = create(cluster, {"message.timestamp.before.max.ms": str(HOUR_MS)})
    now = int(time.time() * 1000)
    assert _produce_at(cluster, name, now - 60_000) is None
    for stamp in (now - 2 * HOUR_MS, now + 2 * HOUR_MS):  # behind its bound; past Kafka's 1 h
        error = _produce_at(cluster, name, stamp)
        assert error is not None and error.code() == KafkaError.INVALID_TIMESTAMP, error
    # the deprecated difference bound (Kafka 3.9) where the pair is not set
    lax = create(cluster, {"message.timestamp.difference.max.ms": str(3 * HOUR_MS)})
    assert _produce_at(cluster, lax, now + 2 * HOUR_MS) is None


def test_a_compacted_topic_refuses_records_without_a_key(cluster) -> None:
    """As Kafka's broker: the cleaner could never remove a record without a key, so a
    compacted topic refuses it (INVALID_RECORD, nothing of its batch stored) and takes a
    keyed one; Produce v8+ names each refused record by its index in its batch."""
    name = create(cluster, {"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    reported: list = []
    for key in (None, b"k"):  # a request each: a batch holding both is refused whole
        producer.produce(name, b"v", key=key, on_delivery=lambda e, m: reported.append((e, m)))
        producer.flush(30)
    (keyless, _), (keyed, delivered) = reported
    assert keyless is not None and keyless.code() == KafkaError.INVALID_RECORD, keyless
    assert keyed is None and delivered.offset() == 0
    leader, _ = cluster.leader(name, 0)
    records = W.make_batch([(b"a", b"1"), (None, b"2"), (None, b"3")])
    with W.KafkaWire(cluster.node(leader).kafka_addr) as conn:
        response = conn.call(
            W.PRODUCE,
            9,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": 30_000,
                "topic_data": [
                    {"name": name, "partition_data": [{"index": 0, "records": records}]}
                ],
            },
        )
        end = conn.list_offsets(name, 0).offset
    (partition,) = response.responses[0].partition_responses
    why = f"Compacted topic cannot accept message without key in topic partition {name}-0"
    assert W.code(partition.error_code) == KafkaError.INVALID_RECORD
    assert [(e.batch_index, e.batch_index_error_message) for e in partition.record_errors] == [
        (1, why),
        (2, why),
    ]
    assert partition.error_message.startswith(
        "One or more records have been rejected due to 2 record errors in total"
    )
    assert end == 1  # the log ends after the keyed record: no refused one took an offset
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "compacted-read"})
    try:
        consumer.assign([TopicPartition(name, 0, 0)])
        message = None
        deadline = time.monotonic() + 30
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
        assert message is not None and message.error() is None
        assert (message.offset(), message.key(), message.value()) == (0, b"k", b"v")
    finally:
        consumer.close()


def test_broker_entries_carry_kafkas_config_types(cluster) -> None:
    configs = described(cluster, BROKER_RESOURCE, str(cluster.node_ids[0]))
    assert all(kind != 0 for _, _, kind in configs.values()), [
        n for n, (_, _, kind) in configs.items() if kind == 0
    ]
    assert configs["broker.id"][2] == INT
    assert configs["auto.create.topics.enable"] == ("true", DEFAULT, BOOLEAN)
    assert configs["default.replication.factor"][2] == SHORT
    assert configs["log.retention.ms"] == ("86400000", STATIC_BROKER, LONG)
    assert configs["group.share.record.lock.duration.ms"] == ("1000", STATIC_BROKER, INT)
    assert configs["group.share.max.record.lock.duration.ms"] == ("60000", DEFAULT, INT)
    assert configs["sasl.enabled.mechanisms"][2] == LIST
    assert configs["ssl.key.password"] == (None, DEFAULT, PASSWORD)
    with_synonyms = _raw(cluster, BROKER_RESOURCE, str(cluster.node_ids[0]), True)
    assert with_synonyms["log.retention.ms"].synonyms == [
        ("log.retention.ms", "86400000", STATIC_BROKER),
        ("log.retention.ms", "604800000", DEFAULT),
    ]
    assert with_synonyms["ssl.key.password"].synonyms == [("ssl.key.password", None, DEFAULT)]


def test_a_nodes_listeners_are_described_as_its_config_sets_them(cluster) -> None:
    """kafka_listen / advertised_kafka are the node's listeners: described as Kafka describes
    listeners set in server.properties (kafka-python's suite checks advertised.listeners)."""
    admin = admin_for(cluster)
    for node in cluster.node_ids:
        resource = ConfigResource(ResourceType.BROKER, str(node))
        entries = admin.describe_configs([resource])[resource].result(30)
        host, port = cluster.node(node).kafka_addr
        for name in ("listeners", "advertised.listeners"):
            assert entries[name].value == f"PLAINTEXT://{host}:{port}", name
            assert entries[name].source == STATIC_BROKER, name


def test_an_unacknowledged_record_comes_back_after_the_nodes_one_second_lock(cluster) -> None:
    share_topic(cluster, "share-lock", 1, 1)
    group = share_group(cluster)
    resource = ConfigResource(ResourceType.GROUP, group)
    admin = admin_for(cluster)
    entries = admin.describe_configs([resource])[resource].result(30)
    assert entries["share.record.lock.duration.ms"].value == "1000"  # the node's default
    holder = share_consumer(cluster, group, explicit=True)
    holder.subscribe(["share-lock"])
    taker = None
    try:
        held = _poll_one(holder, 60.0)
        assert held.delivery_count() == 1
        acquired = time.monotonic()
        # the holder polls no more and acknowledges nothing: its lock lapses after 1 s
        taker = share_consumer(cluster, group, explicit=True)
        taker.subscribe(["share-lock"])
        again = _poll_one(taker, 20.0)
        waited = time.monotonic() - acquired
        taker.acknowledge(again)
        taker.commit_sync(30)
    finally:
        holder.close()
        if taker is not None:
            taker.close()
    assert again.value() == held.value()
    assert again.delivery_count() == 2
    # well under the 30 s Kafka's default lock would take (the taker's join is in it too)
    assert waited < 15.0, waited


def _poll_one(consumer, seconds: float):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for m in consumer.poll(0.5) or []:
            assert m.error() is None, m.error()
            return m
    raise AssertionError(f"no record within {seconds:.0f}s")


def test_log_append_time_topics_carry_the_leaders_time(cluster) -> None:
    name = create(cluster, {"message.timestamp.type": "LogAppendTime"})
    stamped_by_producer = int(time.time() * 1000) - 10 * HOUR_MS  # ignored, bounds too
    before = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    reported: list = []
    producer.produce(
        name, b"v", timestamp=stamped_by_producer, on_delivery=lambda e, m: reported.append((e, m))
    )
    producer.flush(30)
    after = int(time.time() * 1000)
    ((error, delivered),) = reported
    assert error is None
    kind, stamp = delivered.timestamp()  # the ProduceResponse's log_append_time
    assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= stamp <= after
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"lat-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([name])
    try:
        got = None
        deadline = time.monotonic() + 30
        while got is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got = message
    finally:
        consumer.close()
    assert got is not None
    assert got.timestamp() == (TIMESTAMP_LOG_APPEND_TIME, stamp)


@pytest.mark.parametrize("codec", ["gzip", "zstd", "uncompressed"])
def test_compression_type_recompresses_what_producers_send(cluster, codec: str) -> None:
    name = create(cluster, {"compression.type": codec})
    records = R.make_records(name, 300, 1)
    out = R.produce_confluent(cluster.bootstrap, name, records, compression="lz4", timeout=60)
    assert len(out.acked) == len(records), out.failed[:3]
    ends = R.end_offsets_of(out.acked)
    for read in (R.consume_confluent, R.consume_kafka_python):
        got = read(cluster.bootstrap, name, ends, timeout=60)
        assert sorted(r.value for r in got) == sorted(r.value for r in records), read.__name__
    leader, _ = cluster.leader(name, 0)
    with W.KafkaWire(cluster.node(leader).kafka_addr) as conn:
        fetched = conn.fetch(name, 0, 0, max_bytes=16 * 1024 * 1024)
    assert fetched.error == W.NONE, fetched.error
    stored = [header.compression for _, header in iter_batches(fetched.records)]
    # every batch the lz4 producer sent, rebuilt (one request's rebuilt batches were once
    # dropped when another's rebuild ended in the same loop turn: raftlog/partition/produce.py)
    assert stored and set(stored) == {CODECS[codec]}, stored
