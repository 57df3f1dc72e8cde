"""Handlers whose work grows with the request (issue 42): each is linear in what it is asked,
and none holds the event loop while it works: the checks that read the loop's state run a
slice at a time (kafka_api/entry_work.py), the answer is built and encoded in a thread.

Each request names 100,000 entries nobody has (unknown topics, ids, directories), as the
issue's client sent them; the answer is read back as a client reads it, every entry's error
checked. "Held" is the longest a watcher task on the loop waited for its turn, with the
test's long-lived objects frozen as a node freezes its own (raftlog/common/heap.py). Before the fix:
DescribeTopicPartitions took 465 s for 100,000 names (quadratic), the others held the loop
for 0.17-2.2 s."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from kafka.protocol.admin.transactions import DescribeTransactionsResponse
from kio.index import load_payload_module
from kio.static.constants import EntityType
from support.answers import client_reads
from support.broker_stub import BrokerStub
from support.clock import ManualClock, settle
from support.loop_holds import LoopHolds
from support.txn_log import ListLog

from kafka_api import entry_work
from kafka_api.codec import Encoded, build, encode_response
from kafka_api.context import RequestContext
from kafka_api.entry_work import LARGE, answer, off_loop, sliced
from kafka_api.handlers import (
    add_partitions_to_txn,
    alter_partition_reassignments,
    alter_replica_log_dirs,
    delete_records,
    describe_producers,
    describe_quorum,
    describe_topic_partitions,
    describe_transactions,
    elect_leaders,
    list_offsets,
    offset_for_leader_epoch,
    txn_offset_commit,
    write_txn_markers,
)
from raftlog.api.values import BrokerInfo, LogDirInfo, TopicInfo
from raftlog.common.errors import ErrorCode as E
from raftlog.security.acl_index import AclIndex
from raftlog.security.authorizer import Authorizer
from raftlog.txn.coordinator import TxnCoordinator, TxnSettings

ENTRIES = 100_000
# Every handler here held the loop for 0.17 s (AlterReplicaLogDirs) to 2.2 s at this size before
# (DescribeTopicPartitions for minutes), and holds it for 15-45 ms now (the collector's passes
# over the request's objects, mostly); a quarter of the shortest election timeout.
MOST_HELD_S = 0.12


class Cluster(BrokerStub):
    """No topics, no replicas, one log directory; a coordinator of `__transaction_state`'s
    one partition, holding no transactional id."""

    node_id = 1

    def __init__(self, txns: TxnCoordinator | None = None, deny: bool = False) -> None:
        self._txns = txns
        if deny:  # no ACL at all: every principal is denied everything
            self.authorizer = Authorizer((), False, AclIndex(lambda: {}).synced)

    def topics(self) -> dict[str, TopicInfo]:
        return {}

    def topic(self, name: str) -> TopicInfo | None:
        return None

    def local_partition(self, topic: str, index: int) -> Any:
        return None

    def log_dirs(self) -> list[LogDirInfo]:
        return [LogDirInfo("/data", ())]

    def live_brokers(self) -> list[BrokerInfo]:
        return [BrokerInfo(1, "h1", 9092)]

    async def elect_preferred_leader(
        self, topic: str, index: int, timeout_ms: int
    ) -> tuple[E, str | None]:
        return E.unknown_topic_or_partition, None  # as the node answers an unknown topic

    @property
    def transactions(self) -> TxnCoordinator:
        assert self._txns is not None
        return self._txns


async def coordinator() -> TxnCoordinator:
    async def allocate() -> int:
        return 1

    async def no_markers(*_: Any) -> E:
        return E.none

    txns = TxnCoordinator(1, allocate, no_markers, TxnSettings(), ManualClock())
    txns.attach(0, ListLog())
    await settle()
    return txns


def request(module: Any, version: int, n: int) -> Any:
    """A request of n entries nobody has, each named once."""
    m = load_payload_module(module.API_KEY, version, EntityType.request)
    if module is describe_topic_partitions:
        return build(
            m.DescribeTopicPartitionsRequest,
            topics=tuple(m.TopicRequest(name=f"topic-{i}") for i in range(n)),
            response_partition_limit=2000,
            cursor=None,
        )
    if module is describe_transactions:
        return build(
            m.DescribeTransactionsRequest, transactional_ids=tuple(f"txn-{i}" for i in range(n))
        )
    if module is describe_quorum:
        partition = (m.PartitionData(partition_index=0),)
        return build(
            m.DescribeQuorumRequest,
            topics=tuple(m.TopicData(topic_name=f"t-{i}", partitions=partition) for i in range(n)),
        )
    if module is alter_replica_log_dirs:
        return build(
            m.AlterReplicaLogDirsRequest,
            dirs=tuple(
                m.AlterReplicaLogDir(
                    path=f"/dir-{i}", topics=(m.AlterReplicaLogDirTopic(name="t", partitions=(i,)),)
                )
                for i in range(n)
            ),
        )
    if module is delete_records:
        partition = (m.DeleteRecordsPartition(partition_index=0, offset=1),)
        return build(
            m.DeleteRecordsRequest,
            topics=tuple(
                m.DeleteRecordsTopic(name=f"t-{i}", partitions=partition) for i in range(n)
            ),
            timeout=timedelta(seconds=5),
        )
    if module is txn_offset_commit:
        partition = (
            m.TxnOffsetCommitRequestPartition(
                partition_index=0,
                committed_offset=1,
                committed_leader_epoch=-1,
                committed_metadata=None,
            ),
        )
        return build(
            m.TxnOffsetCommitRequest,
            transactional_id="tx",
            group_id="g",
            producer_id=1,
            producer_epoch=0,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            topics=tuple(
                m.TxnOffsetCommitRequestTopic(name=f"t-{i}", partitions=partition) for i in range(n)
            ),
        )
    if module is elect_leaders:
        return build(
            m.ElectLeadersRequest,
            election_type=0,
            timeout=timedelta(seconds=5),
            topic_partitions=tuple(
                m.TopicPartitions(topic=f"t-{i}", partitions=(0,)) for i in range(n)
            ),
        )
    if module is alter_partition_reassignments:
        moved = (m.ReassignablePartition(partition_index=0, replicas=(1,)),)
        return build(
            m.AlterPartitionReassignmentsRequest,
            timeout=timedelta(seconds=5),
            allow_replication_factor_change=True,
            topics=tuple(m.ReassignableTopic(name=f"t-{i}", partitions=moved) for i in range(n)),
        )
    if module is list_offsets:
        latest = (m.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1),)
        return build(
            m.ListOffsetsRequest,
            replica_id=-1,
            isolation_level=0,
            timeout=timedelta(0),
            topics=tuple(m.ListOffsetsTopic(name=f"t-{i}", partitions=latest) for i in range(n)),
        )
    if module is offset_for_leader_epoch:
        epoch = (m.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0),)
        return build(
            m.OffsetForLeaderEpochRequest,
            replica_id=-1,
            topics=tuple(
                m.OffsetForLeaderTopic(topic=f"t-{i}", partitions=epoch) for i in range(n)
            ),
        )
    if module is describe_producers:
        return build(
            m.DescribeProducersRequest,
            topics=tuple(m.TopicRequest(name=f"t-{i}", partition_indexes=(0,)) for i in range(n)),
        )
    if module is write_txn_markers:
        return build(
            m.WriteTxnMarkersRequest,
            markers=tuple(
                m.WritableTxnMarker(
                    producer_id=1,
                    producer_epoch=0,
                    transaction_result=False,
                    coordinator_epoch=0,
                    topics=(m.WritableTxnMarkerTopic(name=f"t-{i}", partition_indexes=(0,)),),
                )
                for i in range(n)
            ),
        )
    assert module is add_partitions_to_txn
    return build(
        m.AddPartitionsToTxnRequest,
        transactions=(),
        v3_and_below_transactional_id="tx",
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=tuple(
            m.AddPartitionsToTxnTopic(name=f"t-{i}", partitions=(0,)) for i in range(n)
        ),
    )


def codes(module: Any, version: int, response: Any) -> list[int]:
    """Every entry's error code, in the answer's order, as a client reads the answer."""
    if module is describe_transactions:
        # kio reads no time before 1970 (the -1 of "no transaction"): kafka-python does
        frame = b"".join(encode_response(7, response))
        read = DescribeTransactionsResponse.decode(frame, version=version, header=True, framed=True)
        return [s.error_code for s in read.transaction_states]
    read = client_reads(response, module.API_KEY, version)
    if module is describe_topic_partitions:
        return [t.error_code for t in read.topics]
    if module is describe_quorum:
        return [p.error_code for t in read.topics for p in t.partitions]
    if module is alter_replica_log_dirs:
        return [p.error_code for r in read.results for p in r.partitions]
    if module is delete_records:
        return [p.error_code for t in read.topics for p in t.partitions]
    if module is write_txn_markers:
        return [p.error_code for r in read.markers for t in r.topics for p in t.partitions]
    if module is elect_leaders:
        return [p.error_code for r in read.replica_election_results for p in r.partition_result]
    if module is alter_partition_reassignments:
        return [p.error_code for r in read.responses for p in r.partitions]
    if module in (txn_offset_commit, list_offsets, offset_for_leader_epoch, describe_producers):
        return [p.error_code for t in read.topics for p in t.partitions]
    return [
        p.partition_error_code
        for t in read.results_by_topic_v3_and_below
        for p in t.results_by_partition
    ]


async def handled(
    module: Any, version: int, req: Any, cluster: Cluster
) -> tuple[Any, float, float]:
    """(answer, process CPU seconds, longest the loop was held) of one request, the answer
    encoded as the server encodes one on the loop when the handler did not."""
    ctx = RequestContext(cluster, version, "c", "10.0.0.1", principal="User:alice")
    async with LoopHolds() as holds:
        cpu = time.process_time()
        response = await module.handle(ctx, req)
        b"".join(encode_response(7, response))
        cpu = time.process_time() - cpu
    return response, cpu, holds.longest


async def steady(module: Any, version: int, req: Any, cluster: Cluster) -> tuple[Any, float, float]:
    """handled(), asked again once if the loop was held past MOST_HELD_S: on a shared machine
    another process may have had the CPU the first time (the old handlers were past it every
    time)."""
    first = await handled(module, version, req, cluster)
    if first[2] < MOST_HELD_S:
        return first
    return await handled(module, version, req, cluster)


async def test_describe_topic_partitions_of_100000_unknown_names_is_linear() -> None:
    """The issue's 1.1 MB request: a set of the allowed names was built again for each name
    (1,000 / 2,000 / 4,000 / 8,000 names: 0.05 / 0.13 / 0.33 / 1.68 s; 100,000: 465 s here, 533 s
    on a node). Linear, 100,000 names cost ten times what 10,000 do; the bound allows 30 times
    (CPU time, so other processes do not count), where quadratic cost is 100 times and more."""
    module, cluster = describe_topic_partitions, Cluster()
    _, small, _ = await handled(module, 0, request(module, 0, ENTRIES // 10), cluster)
    response, large, held = await steady(module, 0, request(module, 0, ENTRIES), cluster)
    assert large < max(30 * small, 1.0) and large < 20.0, (small, large)
    assert held < MOST_HELD_S, f"the loop was held {held:.3f} s"
    assert codes(module, 0, response) == [E.unknown_topic_or_partition] * ENTRIES


CASES = [
    (describe_topic_partitions, 0, True, E.topic_authorization_failed),  # open: above
    (describe_transactions, 0, False, E.transactional_id_not_found),
    (describe_transactions, 0, True, E.transactional_id_authorization_failed),
    (describe_quorum, 2, False, E.unknown_topic_or_partition),
    (alter_replica_log_dirs, 2, False, E.log_dir_not_found),
    (delete_records, 2, False, E.unknown_topic_or_partition),
    (txn_offset_commit, 3, False, E.unknown_topic_or_partition),
    (add_partitions_to_txn, 3, False, E.unknown_topic_or_partition),
    (elect_leaders, 2, False, E.unknown_topic_or_partition),
    (alter_partition_reassignments, 1, False, E.unknown_topic_or_partition),
    (list_offsets, 8, False, E.unknown_topic_or_partition),
    (offset_for_leader_epoch, 4, False, E.unknown_topic_or_partition),
    (describe_producers, 0, False, E.unknown_topic_or_partition),
    (write_txn_markers, 1, False, E.unknown_topic_or_partition),
]


@pytest.mark.parametrize(
    ("module", "version", "deny", "error"),
    CASES,
    ids=[f"{m.__name__.rsplit('.', 1)[-1]}{'-denied' if d else ''}" for m, _, d, _ in CASES],
)
async def test_100000_entries_never_hold_the_loop(
    module: Any, version: int, deny: bool, error: E
) -> None:
    txns = await coordinator() if module is describe_transactions else None
    cluster = Cluster(txns, deny)
    response, _, held = await steady(module, version, request(module, version, ENTRIES), cluster)
    assert held < MOST_HELD_S, f"the loop was held {held:.3f} s"
    assert codes(module, version, response) == [error] * ENTRIES


async def test_a_slice_hands_the_loop_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past SLICE_S, the consumer's work is interrupted for the loop's other tasks, between
    entries; the entries all come, in order."""
    monkeypatch.setattr(entry_work, "SLICE_S", 0.0)
    turns = 0
    done = False

    async def other() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    seen = [i async for i in sliced(range(64 * 10))]
    done = True
    await task
    assert seen == list(range(640))
    assert turns >= 640  # one after each entry


async def test_a_large_requests_own_work_and_answer_are_done_in_a_thread() -> None:
    here = threading.get_ident()
    assert await off_loop(LARGE, threading.get_ident) == here
    assert await off_loop(LARGE + 1, threading.get_ident) != here
    m = load_payload_module(describe_quorum.API_KEY, 2, EntityType.response)

    def quorum_answer() -> Any:
        assert (threading.get_ident() == here) is small
        return build(
            m.DescribeQuorumResponse, error_code=E.none, error_message=None, topics=(), nodes=()
        )

    small = True
    assert not isinstance(await answer(LARGE, quorum_answer), Encoded)
    small = False
    encoded = await answer(LARGE + 1, quorum_answer)
    assert isinstance(encoded, Encoded)
    assert client_reads(encoded, describe_quorum.API_KEY, 2).error_code == 0
