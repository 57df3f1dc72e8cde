"""DeleteRecords (KIP-107) with real clients on three real nodes: confluent-kafka's and
kafka-python's admins move a partition's log start; ListOffsets earliest and Fetch's
log_start_offset then answer it, a fetch below it gets OFFSET_OUT_OF_RANGE and a consumer
positioned there resets by its auto.offset.reset; Kafka's errors for an offset past the high
watermark, an unknown partition and an internal topic; and the start holds on every replica
after the leader is killed and after the whole cluster restarts, and the epoch audit of
the cluster takes the deleted prefix for deleted, not lost."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient
from kafka.errors import OffsetOutOfRangeError
from kafka.structs import TopicPartition as KafkaPythonTopicPartition
from support import records as R
from support import wire as W
from support.cluster import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

DELETE_RECORDS = 21
COUNT = 300


@pytest.fixture(scope="module")
def cluster(module_cluster: Any) -> Any:
    return module_cluster


def _topic(cluster: Any, name: str) -> str:
    cluster.create_topic(name, partitions=1, replication_factor=3)
    outcome = R.produce_confluent(cluster.bootstrap, name, R.make_records(name, COUNT, 1))
    assert len(outcome.acked) == COUNT, outcome.failed[:3]
    return name


def _delete(bootstrap: str, topic: str, offset: int) -> Any:
    """confluent-kafka's AdminClient.delete_records for partition 0: its DeletedRecords."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, offset)], request_timeout=30)
    return futures[TopicPartition(topic, 0)].result(timeout=60)


def _earliest(bootstrap: str, topic: str) -> int:
    with W.KafkaWire(W.find_partition_leader(bootstrap, topic, 0)[1]) as w:
        found = w.list_offsets(topic, 0, timestamp=-2)
    assert found.error == 0
    return found.offset


def _starts(cluster: Any, topic: str) -> dict[int, int]:
    """Each live node's log start for partition 0 (its /v1/status)."""
    return {n: int(p["log_start_offset"]) for n, p in cluster.partition_status(topic, 0).items()}


def _first_offset_consumed(bootstrap: str, topic: str, position: int, reset: str) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-{reset}",
            "auto.offset.reset": reset,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, position)])
        msg = wait_for(lambda: _message(consumer), 60, what="a record after the reset")
        return msg.offset()
    finally:
        consumer.close()


def _message(consumer: Consumer) -> Any:
    msg = consumer.poll(0.5)
    if msg is None or msg.error() is not None:
        return None
    return msg


def test_confluent_admin_moves_the_start_and_consumers_below_it_reset(cluster: Any) -> None:
    topic = _topic(cluster, "dr-confluent")
    deleted = _delete(cluster.bootstrap, topic, 120)
    assert deleted.low_watermark == 120
    assert _earliest(cluster.bootstrap, topic) == 120
    _, leader = W.find_partition_leader(cluster.bootstrap, topic, 0)
    with W.KafkaWire(leader) as w:
        assert w.fetch(topic, 0, 119).error == 1  # OFFSET_OUT_OF_RANGE
        at_start = w.fetch(topic, 0, 120)
    assert at_start.error == 0 and at_start.log_start_offset == 120
    assert at_start.high_watermark == COUNT
    # a consumer positioned below the start resets by its policy
    assert _first_offset_consumed(cluster.bootstrap, topic, 10, "earliest") == 120
    # every replica has it, once committed (the answer waited for that)
    assert set(_starts(cluster, topic).values()) == {120}
    # a start below the current one moves nothing, and is answered with the current one
    assert _delete(cluster.bootstrap, topic, 50).low_watermark == 120
    # past the high watermark: OFFSET_OUT_OF_RANGE; -1 is the high watermark
    with pytest.raises(KafkaException) as past:
        _delete(cluster.bootstrap, topic, COUNT + 1)
    assert past.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert _delete(cluster.bootstrap, topic, -1).low_watermark == COUNT
    assert _earliest(cluster.bootstrap, topic) == COUNT


def test_kafka_python_admin_and_consumer(cluster: Any) -> None:
    topic = _topic(cluster, "dr-kafka-python")
    tp = KafkaPythonTopicPartition(topic, 0)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","))
    try:
        answer = admin.delete_records({tp: 77}, timeout_ms=30_000)
    finally:
        admin.close()
    assert answer[tp]["low_watermark"] == 77
    assert _earliest(cluster.bootstrap, topic) == 77
    assert _kafka_python_first(cluster.bootstrap, tp, 3, "earliest") == 77
    with pytest.raises(OffsetOutOfRangeError):  # no policy: the application is told
        _kafka_python_first(cluster.bootstrap, tp, 3, "none")


def _kafka_python_first(bootstrap: str, tp: Any, position: int, reset: str) -> int:
    """The offset of the first record a kafka-python consumer positioned at `position` gets."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap.split(","),
        auto_offset_reset=reset,
        enable_auto_commit=False,
    )
    try:
        consumer.assign([tp])
        consumer.seek(tp, position)
        for _ in range(60):
            for records in consumer.poll(timeout_ms=1_000).values():
                return records[0].offset
        raise AssertionError("no record within 60 s")
    finally:
        consumer.close()


def test_every_version_and_kafkas_errors(cluster: Any) -> None:
    topic = _topic(cluster, "dr-wire")
    # a group's commit makes sure __consumer_offsets exists: an internal topic is refused
    _first_offset_consumed(cluster.bootstrap, topic, 0, "earliest")
    _, leader = W.find_partition_leader(cluster.bootstrap, topic, 0)
    with W.KafkaWire(leader) as w:
        assert w.api_versions()[DELETE_RECORDS] == (0, 2)
        for version, offset in ((0, 10), (1, 20), (2, 30)):
            answer = w.call(
                DELETE_RECORDS,
                version,
                {
                    "topics": [
                        {"name": topic, "partitions": [{"partition_index": 0, "offset": offset}]},
                        {
                            "name": "no-such-topic",
                            "partitions": [{"partition_index": 0, "offset": 1}],
                        },
                        {
                            "name": "__consumer_offsets",
                            "partitions": [{"partition_index": 0, "offset": 1}],
                        },
                    ],
                    "timeout": 30_000,
                },
            )
            got = {
                (t.name, p.partition_index): (W.code(p.error_code), int(p.low_watermark))
                for t in answer.topics
                for p in t.partitions
            }
            assert got == {
                (topic, 0): (0, offset),
                ("no-such-topic", 0): (3, -1),  # UNKNOWN_TOPIC_OR_PARTITION
                ("__consumer_offsets", 0): (17, -1),  # INVALID_TOPIC_EXCEPTION
            }
        partition = {"partition_index": 7, "offset": 1}
        answer = w.call(
            DELETE_RECORDS,
            2,
            {"topics": [{"name": topic, "partitions": [partition]}], "timeout": 30_000},
        )
    assert W.code(answer.topics[0].partitions[0].error_code) == 3
    # a follower answers NOT_LEADER_OR_FOLLOWER
    md = W.topic_metadata(cluster.bootstrap, topic)
    follower = next(n for n in md.brokers if n != md.partition(topic, 0).leader)
    with W.KafkaWire(md.brokers[follower]) as w:
        answer = w.call(
            DELETE_RECORDS,
            2,
            {
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 40}]}],
                "timeout": 30_000,
            },
        )
    assert W.code(answer.topics[0].partitions[0].error_code) == 6


def test_the_start_survives_a_leader_kill_and_a_full_restart(cluster: Any) -> None:
    topic = _topic(cluster, "dr-failover")
    assert _delete(cluster.bootstrap, topic, 150).low_watermark == 150
    leader, term = cluster.leader(topic, 0)
    cluster.kill(leader)
    cluster.leader(topic, 0, exclude=[leader], min_term=term, timeout=60)
    assert _earliest(cluster.bootstrap, topic) == 150
    # the next leader moves it further; the killed node learns that when it is back
    assert _delete(cluster.bootstrap, topic, 200).low_watermark == 200
    cluster.restart(leader)
    wait_for(
        lambda: (
            set(_starts(cluster, topic).values()) == {200} and len(_starts(cluster, topic)) == 3
        ),
        60,
        what="every replica at the new start",
    )
    for n in cluster.node_ids:
        cluster.kill(n)
    for n in cluster.node_ids:
        cluster.restart(n, wait=False)
    cluster.wait_all_ready(timeout=120)
    cluster.wait_topic_leaders(topic, 1, timeout=120)
    assert _starts(cluster, topic) == {n: 200 for n in cluster.node_ids}
    assert _earliest(cluster.bootstrap, topic) == 200
    assert _first_offset_consumed(cluster.bootstrap, topic, 0, "earliest") == 200
    # each replica recorded the deletions it applied in its history, for the epoch audit
    for n in cluster.node_ids:
        history = cluster.nodes[n].data_dir / "history.jsonl"
        starts = [
            r["log_start_offset"]
            for r in map(json.loads, history.read_text().splitlines())
            if r["kind"] == "log_start" and r["topic"] == topic
        ]
        assert starts and starts[-1] == 200
    # (the epoch audit of a cluster whose start DeleteRecords moved: e2e test_audit)
