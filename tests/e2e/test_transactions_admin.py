"""The transaction admin APIs (KIP-664) with real clients on three real nodes: while a
confluent-kafka producer holds a transaction open, kafka-python's admin describes it
(DescribeTransactions at its coordinator), lists it (ListTransactions on every broker,
filtered by state and duration) and sees its producer on each partition's leader
(DescribeProducers), and `raftlog transactions list|describe` print the same; once it
commits, all of them show it ended.

WriteTxnMarkers from a client, with no authorizer (raftlog's rules beyond Kafka's,
kafka_api/handlers/write_txn_markers.py): a forged ABORT of a live transaction, and markers
at epoch 32767, neither hide its committed records nor fence its id; the admin's
`abort_transaction` of a transaction its coordinator still runs is refused too. A
transaction its coordinator lost (the `__transaction_state` logs wiped on every node, so
the last test here restarts the cluster) is hanging: the admin aborts it on its partition
(WriteTxnMarkers to the leader), which releases the last stable offset there: a
read_committed consumer reads what was written after it, and never the aborted records."""

from __future__ import annotations

import shutil
import time
from typing import Any

import kafka.errors as KE
import pytest
from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient
from kafka.admin._transactions import AbortTransactionSpec, TransactionState
from kafka.structs import TopicPartition
from support import transactions as T
from support import wire as W
from support.cluster import Cluster, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TOPIC = "admin-txn"
PARTITIONS = 3
TXN_ID = "admin-writer"
TIMEOUT_MS = 120_000  # the producer's transaction.timeout.ms: no timeout abort mid-test
WRITE_TXN_MARKERS = 27
NONE, COORDINATOR_FENCED = 0, 52


@pytest.fixture(scope="module")
def cluster(module_cluster: Any) -> Any:
    """Three nodes (tests/conftest.py's module_cluster) and a topic of three partitions."""
    module_cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    return module_cluster


def _producer(bootstrap: str, txn_id: str) -> Producer:
    return T.transactional(bootstrap, txn_id, **{"transaction.timeout.ms": TIMEOUT_MS})


def _admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=30_000)


def _cli(cluster: Any, *args: str) -> list[list[str]]:
    proc = cluster.cli("transactions", *args, "--bootstrap", cluster.bootstrap, timeout=120)
    return [line.split() for line in proc.stdout.splitlines() if line.strip()]


def _listed(admin: KafkaAdminClient, **filters: Any) -> dict[str, tuple[int, str]]:
    """transactional id -> (producer id, state) over every broker's ListTransactions."""
    return {
        t.transactional_id: (t.producer_id, t.state.value)
        for listings in admin.list_transactions(**filters).values()
        for t in listings
    }


def _read_committed(bootstrap: str, partition: int, settle_s: float = 4.0) -> list[bytes]:
    return T.read_values(bootstrap, TOPIC, [partition], settle_s=settle_s)


def test_an_open_transaction_is_described_listed_and_seen_on_its_partitions(cluster: Any) -> None:
    producer = _producer(cluster.bootstrap, TXN_ID)
    producer.begin_transaction()
    for p in range(PARTITIONS):
        producer.produce(TOPIC, b"open-%d" % p, partition=p)
    producer.flush(30)
    admin = _admin(cluster.bootstrap)
    try:
        described = admin.describe_transactions([TXN_ID])[TXN_ID]
        assert described.state == TransactionState.ONGOING
        assert described.transaction_timeout_ms == TIMEOUT_MS
        assert 0 < described.transaction_start_time_ms <= time.time() * 1000
        assert described.topic_partitions == {TopicPartition(TOPIC, p) for p in range(PARTITIONS)}
        pid, epoch = described.producer_id, described.producer_epoch
        assert pid >= 0 and epoch >= 0

        assert _listed(admin)[TXN_ID] == (pid, "Ongoing")
        assert TXN_ID in _listed(admin, state_filters=["Ongoing"], producer_id_filters=[pid])
        assert TXN_ID not in _listed(admin, state_filters=["CompleteCommit"])
        assert TXN_ID in _listed(admin, duration_filter_ms=0)  # ListTransactions v1
        assert TXN_ID not in _listed(admin, duration_filter_ms=3_600_000)

        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        for tp, state in admin.describe_producers(partitions).items():
            (mine,) = [s for s in state.active_producers if s.producer_id == pid]
            assert mine.producer_epoch == epoch, tp
            assert mine.current_transaction_start_offset >= 0, tp
            assert mine.last_sequence >= 0, tp

        rows = _cli(cluster, "list")
        assert rows[0] == ["TRANSACTIONAL-ID", "STATE", "PRODUCER-ID", "COORDINATOR"]
        (row,) = [r for r in rows if r[0] == TXN_ID]
        assert row[1:3] == ["Ongoing", str(pid)]
        assert row[3] == str(described.coordinator_id)
        header, row = _cli(cluster, "describe", TXN_ID)
        assert header[0] == "TRANSACTIONAL-ID" and header[-1] == "PARTITIONS"
        assert row[:6] == [
            TXN_ID,
            str(described.coordinator_id),
            str(pid),
            str(epoch),
            "Ongoing",
            str(TIMEOUT_MS),
        ]
        assert row[-1] == ",".join(f"{TOPIC}-{p}" for p in range(PARTITIONS))

        producer.commit_transaction(60)

        def ended() -> bool:  # the markers, then CompleteCommit
            return admin.describe_transactions([TXN_ID])[TXN_ID].state == "CompleteCommit"

        wait_for(ended, 30, what=f"{TXN_ID} to complete its commit")
        assert admin.describe_transactions([TXN_ID])[TXN_ID].topic_partitions == set()
        assert _listed(admin)[TXN_ID] == (pid, "CompleteCommit")
        for tp, state in admin.describe_producers(partitions).items():
            (mine,) = [s for s in state.active_producers if s.producer_id == pid]
            assert mine.current_transaction_start_offset == -1, tp
        assert _cli(cluster, "describe", TXN_ID)[1][4] == "CompleteCommit"
        missing = cluster.cli(
            "transactions", "describe", "nobody", "--bootstrap", cluster.bootstrap, check=False
        )
        assert missing.returncode == 1 and "does not exist" in missing.stderr
    finally:
        admin.close()


def forge_abort(cluster: Cluster, partition: int, producer_id: int, epoch: int) -> int:
    """A raw WriteTxnMarkers ABORT from a client that is no coordinator, to the partition's
    leader: its error code."""
    leader, _ = cluster.leader(TOPIC, partition)
    with W.KafkaWire(cluster.node(leader).kafka_addr) as conn:
        response = conn.call(
            WRITE_TXN_MARKERS,
            1,
            {
                "markers": [
                    {
                        "producer_id": producer_id,
                        "producer_epoch": epoch,
                        "transaction_result": False,
                        "topics": [{"name": TOPIC, "partition_indexes": [partition]}],
                        "coordinator_epoch": 0,
                    }
                ]
            },
        )
    (marker,) = response.markers
    return W.code(marker.topics[0].partitions[0].error_code)


def test_forged_markers_neither_hide_a_live_transaction_nor_fence_its_id(cluster: Any) -> None:
    """The attacks of issue 42, with no authorizer: an ABORT forged for the producer's open
    transaction hid its committed records from read_committed consumers for good, and a
    marker at epoch 32767 fenced the transactional id on the partition for good (every fresh
    init_transactions() was fenced there). Both are refused or do nothing now."""
    victim = _producer(cluster.bootstrap, "victim")
    victim.begin_transaction()
    for i in range(3):
        victim.produce(TOPIC, b"victim-%d" % i, partition=1)
    victim.flush(30)
    admin = _admin(cluster.bootstrap)
    try:
        described = admin.describe_transactions(["victim"])["victim"]
        pid, epoch = described.producer_id, described.producer_epoch
        assert forge_abort(cluster, 1, pid, epoch) == COORDINATOR_FENCED  # it runs it
        assert forge_abort(cluster, 1, pid, 32767) == COORDINATOR_FENCED
        assert forge_abort(cluster, 2, pid, 32767) == NONE  # nothing open there: nothing done
        with pytest.raises(KE.TransactionCoordinatorFencedError):
            admin.abort_transaction(AbortTransactionSpec(TopicPartition(TOPIC, 1), pid, epoch))
        victim.commit_transaction(60)
        values = _read_committed(cluster.bootstrap, 1)
        assert {b"victim-%d" % i for i in range(3)} <= set(values)
        again = _producer(cluster.bootstrap, "victim")  # not fenced on partition 2
        again.begin_transaction()
        again.produce(TOPIC, b"victim-again", partition=2)
        again.commit_transaction(60)
        assert b"victim-again" in _read_committed(cluster.bootstrap, 2)
    finally:
        admin.close()


def test_the_admin_aborts_a_hanging_transaction_on_its_partition(cluster: Any) -> None:
    """What kafka-transactions.sh abort does for a transaction its coordinator lost track of:
    the producer and epoch DescribeProducers shows, an abort marker on that partition. While
    the coordinator runs the transaction the abort is refused; once every node's
    `__transaction_state` is gone (the coordinator's log lost), it is hanging, and aborted.
    Last in this module: it restarts the cluster."""
    hanging = _producer(cluster.bootstrap, "hanging-writer")
    hanging.begin_transaction()
    hanging.produce(TOPIC, b"hanging", partition=0)
    hanging.flush(30)
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    plain.produce(TOPIC, b"after", partition=0)
    plain.flush(30)
    admin = _admin(cluster.bootstrap)
    tp = TopicPartition(TOPIC, 0)
    try:
        pid = admin.describe_transactions(["hanging-writer"])["hanging-writer"].producer_id
        producers = admin.describe_producers([tp])[tp].active_producers
        (mine,) = [s for s in producers if s.producer_id == pid]
        assert mine.current_transaction_start_offset >= 0
        assert b"after" not in _read_committed(cluster.bootstrap, 0, settle_s=2)  # held back
        spec = AbortTransactionSpec(tp, pid, mine.producer_epoch)
        with pytest.raises(KE.TransactionCoordinatorFencedError):
            admin.abort_transaction(spec)  # its coordinator still runs it
    finally:
        admin.close()

    for node_id in cluster.node_ids:
        cluster.terminate(node_id)
    for node_id in cluster.node_ids:
        data = cluster.node(node_id).data_dir / "data"
        for lost in data.glob("__transaction_state-*"):
            shutil.rmtree(lost)
    for node_id in cluster.node_ids:
        cluster.restart(node_id, wait=False)
    cluster.wait_all_ready()

    admin = _admin(cluster.bootstrap)
    try:

        def aborted() -> bool:  # once the coordinators lead and have loaded (nothing)
            try:
                admin.abort_transaction(spec)
            except (KE.CoordinatorNotAvailableError, KE.NotLeaderForPartitionError):
                return False
            return True

        wait_for(aborted, 60, what="the admin's abort of the hanging transaction")
        producers = admin.describe_producers([tp])[tp].active_producers
        (mine,) = [s for s in producers if s.producer_id == pid]
        assert mine.current_transaction_start_offset == -1
        values = _read_committed(cluster.bootstrap, 0)
        assert b"after" in values and b"hanging" not in values
    finally:
        admin.close()
