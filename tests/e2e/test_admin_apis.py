"""DescribeTopicPartitions (75), DescribeQuorum (55) and AlterReplicaLogDirs (34), over the wire
and through kafka-python's admin: what Kafka 3.9+ tools send (kafka-topics --describe,
kafka-metadata-quorum, kafka-reassign-partitions --replica-log-dirs) answered with raftlog's
real state or Kafka's errors, never a closed connection. The partition reassignment APIs
(45, 46) are tests/e2e/test_reassignments.py's."""

from __future__ import annotations

import pytest
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    NoError,
    ReplicaNotAvailableError,
)
from kio.schema.describe_topic_partitions.v0.request import Cursor
from support import wire as W
from support.cluster import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DESCRIBE_TOPIC_PARTITIONS, DESCRIBE_QUORUM, ALTER_REPLICA_LOG_DIRS = 75, 55, 34
TOPIC, SMALL = "dtp-big", "dtp-small"
INVALID_REQUEST = 42
LOG_DIR_NOT_FOUND = 57
REPLICA_NOT_AVAILABLE = 9


@pytest.fixture(scope="module")
def cluster(module_cluster):
    module_cluster.create_topic(TOPIC, partitions=5, replication_factor=3)
    module_cluster.create_topic(SMALL, partitions=1, replication_factor=1)
    return module_cluster


def _describe(w: W.KafkaWire, topics: list[str], limit: int, cursor: Cursor | None = None):
    return w.call(
        DESCRIBE_TOPIC_PARTITIONS,
        0,
        {
            "topics": [{"name": t} for t in topics],
            "response_partition_limit": limit,
            "cursor": cursor,
        },
    )


def test_describe_topic_partitions_pages_with_its_cursor(cluster) -> None:
    md = W.topic_metadata(cluster.bootstrap, TOPIC)
    pages = []
    cursor = None
    with W.KafkaWire(cluster.bootstrap.split(",")[0]) as w:
        while True:
            response = _describe(w, [TOPIC, SMALL, "dtp-missing"], 2, cursor)
            pages.append(
                [
                    (t.name, t.error_code, [p.partition_index for p in t.partitions])
                    for t in response.topics
                ]
            )
            cursor = response.next_cursor
            if cursor is None:
                break
            cursor = Cursor(topic_name=cursor.topic_name, partition_index=cursor.partition_index)
        last = response
        # The partitions read as Metadata reports them.
        first = _describe(w, [TOPIC], 10).topics[0]
        # A cursor on a topic the request does not name.
        refused = _describe(w, [SMALL], 10, Cursor(topic_name=TOPIC, partition_index=0))
    # Names in order from the cursor on, two partitions a page; the unknown topic is answered
    # where its name falls.
    assert pages == [
        [(TOPIC, 0, [0, 1])],
        [(TOPIC, 0, [2, 3])],
        [(TOPIC, 0, [4]), ("dtp-missing", W.UNKNOWN_TOPIC_OR_PARTITION, []), (SMALL, 0, [0])],
    ], pages
    assert last.topics[-1].partitions[0].replica_nodes
    for p in first.partitions:
        meta = md.partition(TOPIC, p.partition_index)
        assert (p.leader_id, list(p.replica_nodes)) == (meta.leader, list(meta.replicas))
        assert p.leader_epoch == meta.leader_epoch
    assert first.topic_id is not None
    assert [(t.name, t.error_code) for t in refused.topics] == [(SMALL, INVALID_REQUEST)]


def test_describe_topic_partitions_of_every_topic(cluster) -> None:
    with W.KafkaWire(cluster.bootstrap.split(",")[0]) as w:
        response = _describe(w, [], 1000)
    names = [t.name for t in response.topics]
    assert names == sorted(names) and {TOPIC, SMALL} <= set(names)
    assert response.next_cursor is None


def test_describe_quorum_names_the_controller_quorum(cluster) -> None:
    controller = wait_for(cluster.controller_leader, 30, what="a controller leader")
    for node_id in cluster.node_ids:  # the leader answers, and the others ask it
        with W.KafkaWire(cluster.node(node_id).kafka) as w:
            response = w.call(
                DESCRIBE_QUORUM,
                2,
                {
                    "topics": [
                        {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}
                    ]
                },
            )
            wrong = w.call(
                DESCRIBE_QUORUM,
                2,
                {"topics": [{"topic_name": TOPIC, "partitions": [{"partition_index": 0}]}]},
            )
        assert response.error_code == 0
        (partition,) = response.topics[0].partitions
        assert partition.error_code == 0, partition
        assert partition.leader_id == controller
        assert partition.leader_epoch >= 1 and partition.high_watermark > 0
        voters = {v.replica_id: v.log_end_offset for v in partition.current_voters}
        assert set(voters) == set(cluster.node_ids)
        assert voters[controller] >= partition.high_watermark
        assert wrong.topics[0].partitions[0].error_code == W.UNKNOWN_TOPIC_OR_PARTITION


def test_alter_replica_log_dirs_answers_per_partition(cluster) -> None:
    holder = cluster.leader(SMALL, 0)[0]
    node = cluster.node(holder)
    data_dir = str(node.data_dir / "data")
    other = next(i for i in cluster.node_ids if i != holder)
    asked = {
        "dirs": [
            {"path": data_dir, "topics": [{"name": SMALL, "partitions": [0]}]},
            {"path": "/nonexistent/dir", "topics": [{"name": TOPIC, "partitions": [0]}]},
        ]
    }
    with W.KafkaWire(node.kafka) as w:
        here = w.call(ALTER_REPLICA_LOG_DIRS, 2, asked)
    own = {
        "dirs": [
            {
                "path": str(cluster.node(other).data_dir / "data"),
                "topics": [{"name": SMALL, "partitions": [0]}],
            }
        ]
    }
    with W.KafkaWire(cluster.node(other).kafka) as w:
        elsewhere = w.call(ALTER_REPLICA_LOG_DIRS, 1, asked)
        not_held = w.call(ALTER_REPLICA_LOG_DIRS, 1, own)

    def codes(response):
        return {
            (t.topic_name, p.partition_index): p.error_code
            for t in response.results
            for p in t.partitions
        }

    assert codes(here) == {(SMALL, 0): 0, (TOPIC, 0): LOG_DIR_NOT_FOUND}
    # Another node's directory is not one of this node's; nor does it hold that replica.
    assert codes(elsewhere) == {(SMALL, 0): LOG_DIR_NOT_FOUND, (TOPIC, 0): LOG_DIR_NOT_FOUND}
    assert codes(not_held) == {(SMALL, 0): REPLICA_NOT_AVAILABLE}


def test_kafka_pythons_admin_calls(cluster) -> None:
    """kafka-python's describe_topic_partitions, describe_metadata_quorum and
    alter_replica_log_dirs, as a user calls them."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        seen: list[int] = []
        cursor = None
        while True:
            page = admin.describe_topic_partitions(
                [TOPIC], response_partition_limit=3, cursor=cursor
            )
            seen += [p["partition_index"] for t in page["topics"] for p in t["partitions"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == [0, 1, 2, 3, 4]
        quorum = admin.describe_metadata_quorum()
        (partition,) = quorum["topics"][0]["partitions"]
        assert partition["error"] is None
        assert partition["leader_id"] == cluster.controller_leader()
        assert sorted(v["replica_id"] for v in partition["current_voters"]) == cluster.node_ids
        holder = cluster.leader(SMALL, 0)[0]
        other = next(i for i in cluster.node_ids if i != holder)
        moved = admin.alter_replica_log_dirs(
            {
                TopicPartitionReplica(SMALL, 0, holder): str(
                    cluster.node(holder).data_dir / "data"
                ),
                TopicPartitionReplica(SMALL, 0, other): str(cluster.node(other).data_dir / "data"),
            }
        )
        assert moved == {
            TopicPartitionReplica(SMALL, 0, holder): NoError,
            TopicPartitionReplica(SMALL, 0, other): ReplicaNotAvailableError,
        }
    finally:
        admin.close()
