"""Partition reassignment (KIP-455) on four real nodes, driven by kafka-python's admin client
(alter_partition_reassignments / list_partition_reassignments, what kafka-reassign-partitions
and Cruise Control send) and read back by confluent-kafka's (whose Python admin has no
reassignment calls: it reads Metadata and consumes) and by `raftlog topic describe`.
A move held in progress (the node it adds paused) shows its full replica set in every live
node's Metadata and its adding and removing replicas in the list and the CLI, and the bytes
it still has to copy on its leader's admin port, /metrics and in the CLI; a move
replacing it keeps the first one's original; a cancellation is a move back to the original
replicas, finished by the leader. A move let run ends at its target: the added node holds every
record, the removed one has deleted its copy and its metrics. Refusals get Kafka's codes."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from confluent_kafka.admin import AdminClient
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    InvalidReplicationAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)
from prometheus_client.parser import text_string_to_metric_families
from support import groups as G
from support import records as R
from support import wire as W
from support.cluster import Cluster, wait_for

from epoch import history
from raftlog_app.replicas_cli import size_text

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOPIC = "moving"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with G.running_cluster(tmp_path_factory.mktemp("moves"), nodes=4, name="moves") as c:
        c.create_topic(TOPIC, partitions=3, replication_factor=3)
        yield c


@pytest.fixture
def admin(cluster: Cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    yield client
    client.close()


def _replicas(cluster: Cluster, node_id: int, partition: int) -> list[int]:
    """The partition's replicas as one node's Metadata names them."""
    md = W.topic_metadata(cluster.node(node_id).kafka, TOPIC)
    return list(md.topics[TOPIC][partition].replicas)


def _everywhere(cluster: Cluster, partition: int, replicas: list[int]) -> None:
    """Every node's Metadata names these replicas (each answers from its own copy of the
    controller's state)."""
    for node_id in cluster.node_ids:
        wait_for(
            lambda n=node_id: _replicas(cluster, n, partition) == replicas,
            30,
            what=f"node {node_id} naming replicas {replicas} for {TOPIC}-{partition}",
        )


def _exported(cluster: Cluster, node_id: int, partition: int) -> bool:
    """Whether the node's /metrics has series of its replica of the partition."""
    url = f"http://{cluster.node(node_id).admin}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - loopback
        text = answer.read().decode()
    return f'{{partition="{partition}",topic="{TOPIC}"}}' in text


def _series(cluster: Cluster, node_id: int, name: str, partition: int) -> float | None:
    """The value of the node's /metrics series `name` for the partition, if it has one."""
    url = f"http://{cluster.node(node_id).admin}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - loopback
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == {"topic": TOPIC, "partition": str(partition)}:
                return float(s.value)
    return None


def _wait_moves_done(admin: KafkaAdminClient, timeout: float = 60.0) -> None:
    """Until no reassignment is in progress (a completed or cancelled move)."""
    deadline = time.monotonic() + timeout
    while (moving := admin.list_partition_reassignments()) != {}:
        assert time.monotonic() < deadline, f"still moving after {timeout}s: {moving}"
        time.sleep(0.2)


def _moving(partition: int, full: list[int], adding: list[int], removing: list[int]):
    return {
        TopicPartition(TOPIC, partition): {
            "replicas": full,
            "adding_replicas": adding,
            "removing_replicas": removing,
        }
    }


def test_a_held_move_shows_its_full_set_and_a_cancellation_moves_back_to_the_original(
    cluster: Cluster,
) -> None:
    """A partition moves one replica to the node that has none of it, that node paused just
    before: a peer counts as live for DEAD_AFTER (6 s), so the move (and one replacing it)
    is accepted, and the learner it adds cannot catch up, so the move stays in progress while
    the test looks. Of partitions 0 and 2, one whose paused node does not lead the
    controller; the clients ask the live nodes (a request to the paused one would wait), and
    confluent-kafka's and the CLI's once Metadata no longer names the paused node."""
    leader = wait_for(cluster.controller_leader, 30, what="a controller leader")
    candidates = {p: _replicas(cluster, 1, p) for p in (0, 2)}
    partition, original = next((p, r) for p, r in candidates.items() if leader in r)
    (extra,) = [n for n in cluster.node_ids if n not in original]
    live = [n for n in cluster.node_ids if n != extra]
    bootstrap = ",".join(cluster.node(n).kafka for n in live)
    tp = TopicPartition(TOPIC, partition)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    target = [*original[1:], extra]
    again = [original[2], extra, original[0]]
    held = R.make_records("held", 40, [partition], 1000)
    written = R.produce_confluent(bootstrap, TOPIC, held, compression="none")
    assert len(written.acked) == 40, written.failed[:3]
    # Nothing moves yet; asking now also makes the client learn the controller while every
    # node answers: kafka-python asks its least-loaded broker for it, which may be the paused one.
    assert admin.list_partition_reassignments() == {}
    cluster.pause(extra)
    try:
        assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
        moving = _moving(partition, [*target, original[0]], [extra], [original[0]])
        assert admin.list_partition_reassignments() == moving
        assert admin.list_partition_reassignments({TOPIC: [0, 1, 2, 7]}) == moving
        assert admin.list_partition_reassignments({"no-such-topic": [0]}) == {}
        # Replaced by another move: the first move's original is kept, every copy stays.
        assert admin.alter_partition_reassignments({tp: again}) == {tp: None}
        full = [*again, original[1]]
        assert admin.list_partition_reassignments() == _moving(
            partition, full, [extra], [original[1]]
        )
        for node_id in live:
            assert _replicas(cluster, node_id, partition) == full

        wait_for(
            lambda: extra not in W.topic_metadata(bootstrap, TOPIC).brokers,
            30,
            what=f"Metadata without the paused node {extra}",
        )
        confluent = AdminClient({"bootstrap.servers": bootstrap})
        described = confluent.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions
        assert described[partition].replicas == full
        assert described[1].replicas == _replicas(cluster, live[0], 1)  # the others stay
        # The bytes still to copy (raftlog's own figure, on the leader's admin port and
        # /metrics): all of the leader's log, which the paused node cannot take.
        head = W.topic_metadata(bootstrap, TOPIC).topics[TOPIC][partition].leader
        size = _series(cluster, head, "raftlog_partition_log_size_bytes", partition)
        assert size is not None and size > 40 * 1000
        wait_for(  # (a scrape may be given a listing made a few tenths of a second before)
            lambda: (
                _series(cluster, head, "raftlog_reassignment_bytes_remaining", partition) == size
            ),
            10,
            what=f"node {head}'s bytes still to copy for {TOPIC}-{partition}",
        )
        url = f"http://{cluster.node(head).admin}/v1/reassignments"
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 - loopback
            moves = json.load(answer)["moves"]
        assert moves == [
            {
                "topic": TOPIC,
                "partition": partition,
                "bytes_remaining": size,
                "adding": {str(extra): size},
            }
        ]
        admins = ",".join(cluster.node(n).admin for n in live)
        shown = cluster.cli(
            "topic", "describe", TOPIC, "--bootstrap", bootstrap, "--admin", admins
        ).stdout
        assert f"moving: adding [{extra}] removing [{original[1]}]  to copy " in shown, shown
        assert f"to copy {size_text(int(size))}" in shown, shown
        assert "topic moving  partitions 3  moving 1" in shown, shown

        # A cancellation is a move back to the original, which the leader finishes once its
        # group is back on it (here at once: the learner never caught up, no voter changed).
        assert admin.alter_partition_reassignments({tp: None}) == {tp: None}
        _wait_moves_done(admin)
        for node_id in live:
            assert _replicas(cluster, node_id, partition) == original
        assert admin.alter_partition_reassignments({tp: None}) == {
            tp: NoReassignmentInProgressError
        }
    finally:
        cluster.resume(extra)
        admin.close()
    _everywhere(cluster, partition, original)
    wait_for(
        lambda: not cluster.partition_dir(extra, TOPIC, partition).exists(),
        30,
        what=f"node {extra} holding no replica of {TOPIC}-{partition}",
    )


def test_a_move_ends_at_its_target_with_every_record(
    cluster: Cluster, admin: KafkaAdminClient
) -> None:
    """Partition 1 moves off one of its replicas onto the fourth node, records in it: the
    list empties, every node names the target, the added node holds a replica (and exports
    its metrics) and every acknowledged record is read back; the removed node has deleted
    its replica's files and its metrics. Their histories say so (the audit follows each
    replica of a node apart): the removed node's last record of the partition is its drop,
    the added node's first is the creation of a new, empty replica."""
    original = _replicas(cluster, 1, 1)
    (extra,) = [n for n in cluster.node_ids if n not in original]
    before = R.produce_confluent(cluster.bootstrap, TOPIC, R.make_records("move", 60, [1]))
    assert len(before.acked) == 60, before.failed[:3]
    gone = original[-1]
    target = [*original[:-1], extra]
    assert admin.alter_partition_reassignments({TopicPartition(TOPIC, 1): target}) == {
        TopicPartition(TOPIC, 1): None
    }
    _wait_moves_done(admin)
    _everywhere(cluster, 1, target)
    wait_for(
        lambda: not cluster.partition_dir(gone, TOPIC, 1).exists(),
        30,
        what=f"node {gone} deleting its replica of {TOPIC}-1",
    )
    assert cluster.partition_dir(extra, TOPIC, 1).is_dir()
    # (a scrape may be given a listing made up to a few tenths of a second before)
    wait_for(lambda: _exported(cluster, extra, 1), 10, what=f"node {extra}'s {TOPIC}-1 series")
    wait_for(lambda: not _exported(cluster, gone, 1), 10, what=f"node {gone} without them")
    ends = W.end_offsets(cluster.bootstrap, TOPIC)
    got = R.consume_confluent(cluster.bootstrap, TOPIC, {1: ends[1]}, starts={1: 0}, timeout=60)
    R.check_log(before.acked, got).raise_if_failed()
    dropped = _journal(cluster, gone, 1)
    assert (dropped[-1].kind, getattr(dropped[-1], "reason", None)) == ("replica_dropped", "moved")
    assert [r.kind for r in dropped].count("replica_dropped") == 1
    created = _journal(cluster, extra, 1)
    assert (created[0].kind, getattr(created[0], "reason", None)) == ("replica_created", "new")
    assert [r.kind for r in created].count("replica_created") == 1


def _journal(cluster: Cluster, node_id: int, partition: int) -> list[history.Record]:
    """The node's history records of one partition of TOPIC, in journal order."""
    path = cluster.partition_dir(node_id, TOPIC, partition).parent.parent / "history.jsonl"
    records = [history.parse(line) for line in path.read_text().splitlines()]
    return [r for r in records if (r.topic, r.partition) == (TOPIC, partition)]


def test_refusals_get_kafkas_codes(cluster: Cluster, admin: KafkaAdminClient) -> None:
    """The current assignment needs no move; a broker twice, an unknown broker, a
    cancellation with nothing to cancel and an unknown topic or partition are refused;
    nothing starts moving. (kafka-python refuses an empty list itself.)"""
    current = _replicas(cluster, 1, 1)
    answers = admin.alter_partition_reassignments(
        {
            TopicPartition(TOPIC, 1): current,
            TopicPartition(TOPIC, 2): [current[0], current[0]],
            TopicPartition(TOPIC, 0): [99],
            TopicPartition(TOPIC, 5): current,
            TopicPartition("no-such-topic", 0): current,
        }
    )
    assert answers == {
        TopicPartition(TOPIC, 1): None,
        TopicPartition(TOPIC, 2): InvalidReplicationAssignmentError,
        TopicPartition(TOPIC, 0): InvalidReplicationAssignmentError,
        TopicPartition(TOPIC, 5): UnknownTopicOrPartitionError,
        TopicPartition("no-such-topic", 0): UnknownTopicOrPartitionError,
    }
    assert admin.alter_partition_reassignments({TopicPartition(TOPIC, 1): None}) == {
        TopicPartition(TOPIC, 1): NoReassignmentInProgressError
    }
    assert admin.list_partition_reassignments() == {}
