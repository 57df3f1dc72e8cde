"""Transactions across kill -9: the transaction coordinator killed while a transaction is
open, or right after it decided to commit (before every marker was written), and a data
partition's leader killed mid-transaction. A transaction whose commit was acknowledged is read
whole by read_committed consumers, exactly once; nothing of one that did not commit is."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from support import transactions as T

from raftlog.groups.metadata_manager import coordinator_partition

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

PARTITIONS = 3
TXN_PARTITIONS = 16  # transaction.state.log.num.partitions


def send(producer: Producer, topic: str, values: list[bytes]) -> None:
    T.send(producer, topic, values, PARTITIONS)


def read_committed(bootstrap: str, topic: str, expected: int) -> list:
    return sorted(T.read_values(bootstrap, topic, range(PARTITIONS), expected=expected))


def test_a_coordinator_killed_mid_transaction_leaves_it_to_its_successor(cluster_factory):
    cluster = cluster_factory(name="txn-kill-coord")
    cluster.create_topic("t", partitions=PARTITIONS, replication_factor=3)
    producer = T.transactional(cluster.bootstrap, "survivor")
    coordinator, _ = cluster.leader(
        "__transaction_state", coordinator_partition("survivor", TXN_PARTITIONS)
    )
    producer.begin_transaction()
    send(producer, "t", [b"before-%d" % i for i in range(9)])
    cluster.kill(coordinator)
    send(producer, "t", [b"after-%d" % i for i in range(9)])  # added partitions, new coordinator
    producer.commit_transaction()
    expected = sorted([b"before-%d" % i for i in range(9)] + [b"after-%d" % i for i in range(9)])
    assert read_committed(cluster.bootstrap, "t", len(expected)) == expected


def test_a_commit_acknowledged_just_before_the_coordinator_dies_is_finished(cluster_factory):
    """The decision (PrepareCommit) is in the log when commit_transaction returns; the markers
    follow. A partition leader is paused so a marker cannot be written at once, and the
    coordinator is killed right after the commit was acknowledged: the next coordinator loads
    the decision and writes the markers, and every record of the transaction is read."""
    cluster = cluster_factory(name="txn-kill-decided")
    cluster.create_topic("t", partitions=PARTITIONS, replication_factor=3)
    producer = T.transactional(cluster.bootstrap, "decided")
    coordinator, _ = cluster.leader(
        "__transaction_state", coordinator_partition("decided", TXN_PARTITIONS)
    )
    producer.begin_transaction()
    send(producer, "t", [b"v-%d" % i for i in range(12)])
    leaders = {cluster.leader("t", p)[0] for p in range(PARTITIONS)}
    paused = next(iter(sorted(leaders - {coordinator})), None)
    if paused is not None:
        cluster.pause(paused)
    try:
        producer.commit_transaction()
        cluster.kill(coordinator)
    finally:
        if paused is not None:
            cluster.resume(paused)
    expected = sorted(b"v-%d" % i for i in range(12))
    assert read_committed(cluster.bootstrap, "t", len(expected)) == expected
    assert "transactions decided before this node led it" in cluster.log_tails(lines=400)


def test_a_partition_leader_killed_mid_transaction(cluster_factory):
    cluster = cluster_factory(name="txn-kill-leader")
    cluster.create_topic("t", partitions=PARTITIONS, replication_factor=3)
    producer = T.transactional(cluster.bootstrap, "leader-lost")
    coordinator, _ = cluster.leader(
        "__transaction_state", coordinator_partition("leader-lost", TXN_PARTITIONS)
    )
    victim = next(
        leader
        for leader in (cluster.leader("t", p)[0] for p in range(PARTITIONS))
        if leader != coordinator
    )
    producer.begin_transaction()
    send(producer, "t", [b"a-%d" % i for i in range(9)])
    cluster.kill(victim)
    send(producer, "t", [b"b-%d" % i for i in range(9)])
    producer.commit_transaction()
    expected = sorted([b"a-%d" % i for i in range(9)] + [b"b-%d" % i for i in range(9)])
    assert read_committed(cluster.bootstrap, "t", len(expected)) == expected
