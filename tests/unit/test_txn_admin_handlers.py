"""The transaction admin APIs (KIP-664's tooling): DescribeTransactions and ListTransactions
read a real transaction coordinator over an in-memory `__transaction_state`;
DescribeProducers and WriteTxnMarkers read and write fake partitions. Each answer goes
through the server's encoder and kio's decoder, as a client reads it. End to end, with real
clients, in tests/e2e/test_transactions_admin.py."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kafka.protocol.admin.transactions import DescribeTransactionsResponse
from kio.index import load_payload_module
from kio.static.constants import EntityType
from support.answers import client_reads
from support.broker_stub import BrokerStub
from support.clock import ManualClock, settle
from support.txn_log import ListLog

from kafka_api.codec import build, encode_response
from kafka_api.context import RequestContext
from kafka_api.handlers import (
    HANDLERS,
    describe_producers,
    describe_transactions,
    list_transactions,
    write_txn_markers,
)
from raftlog.api.values import PartitionInfo, ProduceResult, TopicInfo
from raftlog.common.errors import ErrorCode as E
from raftlog.common.errors import KafkaError
from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC
from raftlog.partition.producer_state import ActiveProducer
from raftlog.security.acl import AclOperation as Op
from raftlog.security.acl import PatternType as Pat
from raftlog.security.acl import PermissionType as Perm
from raftlog.security.acl import ResourceType as Res
from raftlog.security.acl_index import AclIndex
from raftlog.security.authorizer import Authorizer
from raftlog.txn.coordinator import Held, TxnCoordinator, TxnSettings
from raftlog.txn.metadata import TxnMetadata, TxnState

ANON = "User:ANONYMOUS"
TIMEOUT_MS = 60_000


class Groups:
    def __init__(self) -> None:
        self.ended: list[tuple[int, int, bool]] = []

    def end_transaction(self, index: int, producer_id: int, commit: bool) -> None:
        self.ended.append((index, producer_id, commit))


class Partition:
    def __init__(self, leader: bool = True) -> None:
        self.is_leader = leader
        self.producers: list[ActiveProducer] = []
        self.markers: list[tuple[int, int, bool, int]] = []
        self.answers: list[asyncio.Future[ProduceResult]] = []
        self.open: dict[int, int] = {}  # producer id -> first offset of its transaction

    def transaction_start(self, producer_id: int) -> int | None:
        return self.open.get(producer_id)

    def active_producers(self) -> list[ActiveProducer]:
        if not self.is_leader:
            raise KafkaError(E.not_leader_or_follower)
        return self.producers

    def write_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> asyncio.Future[ProduceResult]:
        self.markers.append((producer_id, producer_epoch, commit, coordinator_epoch))
        self.answers.append(asyncio.get_running_loop().create_future())
        return self.answers[-1]


class Broker(BrokerStub):
    node_id = 1

    def __init__(self, coordinator: TxnCoordinator | None = None) -> None:
        self._coordinator = coordinator
        self._topics: dict[str, TopicInfo] = {}
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.groups = Groups()  # type: ignore[assignment]  # only end_transaction is used
        # what the coordinators say of a producer id; no answer: no id uses it
        self.held: dict[int, tuple[E, Held | None]] = {}
        self.asked: asyncio.Future[None] | None = None  # a slow answer, when set

    async def producer_held(
        self, producer_id: int, topic: str, index: int
    ) -> tuple[E, Held | None]:
        if self.asked is not None:
            await self.asked
        return self.held.get(producer_id, (E.none, None))

    @property
    def transactions(self) -> TxnCoordinator:
        assert self._coordinator is not None
        return self._coordinator

    def add_topic(self, name: str, count: int = 1, leader: bool = True) -> None:
        infos = tuple(PartitionInfo(name, i, (1, 2), 1 if leader else 2) for i in range(count))
        self._topics[name] = TopicInfo(name, uuid.uuid4(), infos)
        for i in range(count):
            self.partitions[name, i] = Partition(leader)

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def local_partition(self, topic: str, index: int) -> Any:
        return self.partitions.get((topic, index))


def secure(broker: Broker, *grants: tuple[Res, str, Op]) -> None:
    """Only these (resource type, name, operation) are allowed to ANONYMOUS."""
    bindings = {
        (kind, name, Pat.LITERAL, ANON, "*", op, Perm.ALLOW): None for kind, name, op in grants
    }
    broker.authorizer = Authorizer((), False, AclIndex(lambda: bindings).synced)


def ctx(broker: Broker, version: int) -> RequestContext:
    return RequestContext(broker=broker, api_version=version, client_id="c", client_host="h")


async def call(module: Any, broker: Broker, version: int, **fields: Any) -> Any:
    """The handler's answer to a request of these fields, as a client decodes it."""
    m = load_payload_module(module.API_KEY, version, EntityType.request)
    request = build(getattr(m, type_name(module)), **fields)
    response = await module.handle(ctx(broker, version), request)
    if module is describe_transactions:
        # kio reads no time before 1970, the -1 of "no transaction": read as kafka-python's
        # admin does (transaction_timeout_ms, transaction_start_time_ms)
        frame = b"".join(encode_response(7, response))
        return DescribeTransactionsResponse.decode(frame, version=version, header=True, framed=True)
    return client_reads(response, module.API_KEY, version)


def type_name(module: Any) -> str:
    words = module.__name__.rsplit(".", 1)[-1].split("_")
    return "".join(w.capitalize() for w in words) + "Request"


async def coordinated(
    clock: ManualClock, partitions: int = 1, log: ListLog | None = None
) -> TxnCoordinator:
    """A coordinator leading `__transaction_state` partition 0 (of `partitions`), loaded."""
    ids = iter(range(100, 200))

    async def allocate() -> int:
        return next(ids)

    async def no_markers(*_: Any) -> E:
        return E.none

    c = TxnCoordinator(partitions, allocate, no_markers, TxnSettings(), clock)
    c.attach(0, log or ListLog())
    await settle()
    return c


async def begin(c: TxnCoordinator, txn_id: str, partitions: dict[str, frozenset[int]]) -> int:
    error, pid, epoch = await c.init_producer_id(txn_id, TIMEOUT_MS, -1, -1)
    assert error == E.none
    if partitions:
        assert await c.add_partitions(txn_id, pid, epoch, partitions) == E.none
    return pid


def test_the_admin_apis_are_served_at_the_versions_kio_models():
    ranges = {key: (h.MIN_VERSION, h.MAX_VERSION) for key, h in HANDLERS.items()}
    assert ranges[27] == (1, 1) and ranges[61] == (0, 0)
    assert ranges[65] == (0, 0) and ranges[66] == (0, 1)


# --------------------------------------------------------------------------- DescribeTransactions


async def test_describe_transactions_answers_kafka_state_names_times_and_partitions():
    clock = ManualClock()
    c = await coordinated(clock)
    empty_pid = await begin(c, "empty", {})
    pid = await begin(c, "busy", {"u": frozenset({2}), "t": frozenset({1, 0})})
    r = await call(
        describe_transactions, Broker(c), 0, transactional_ids=("busy", "empty", "missing")
    )
    busy, empty, missing = r.transaction_states
    assert (busy.error_code, busy.transactional_id, busy.transaction_state) == (
        E.none,
        "busy",
        "Ongoing",
    )
    assert busy.transaction_timeout_ms == TIMEOUT_MS
    assert busy.transaction_start_time_ms == 1_000_000  # the clock's
    assert (busy.producer_id, busy.producer_epoch) == (pid, 0)
    assert [(t.topic, t.partitions) for t in busy.topics] == [("t", [0, 1]), ("u", [2])]
    assert (empty.error_code, empty.transaction_state, empty.producer_id) == (
        E.none,
        "Empty",
        empty_pid,
    )
    assert empty.transaction_start_time_ms == -1  # no transaction
    assert empty.topics == []
    assert (missing.error_code, missing.transactional_id) == (
        E.transactional_id_not_found,
        "missing",
    )


async def test_describe_transactions_shows_the_state_a_write_in_flight_replaces():
    """Kafka never answers CONCURRENT_TRANSACTIONS here: an admin client takes any error for
    a failure, and a busy producer's coordinator is writing often."""
    clock = ManualClock()
    log = ListLog()
    c = await coordinated(clock, log=log)
    pid = await begin(c, "busy", {"t": frozenset({0})})
    log.held = asyncio.get_running_loop().create_future()
    ending = asyncio.ensure_future(c.end_transaction("busy", pid, 0, True))
    await settle()
    r = await call(describe_transactions, Broker(c), 0, transactional_ids=("busy",))
    assert [(s.error_code, s.transaction_state) for s in r.transaction_states] == [
        (E.none, "Ongoing")
    ]
    log.held.set_result(None)
    assert await ending == E.none
    r = await call(describe_transactions, Broker(c), 0, transactional_ids=("busy",))
    assert r.transaction_states[0].transaction_state == "CompleteCommit"  # EndTxn waited


async def test_describe_transactions_is_answered_by_the_coordinator_only():
    clock = ManualClock()
    c = await coordinated(clock, partitions=2)
    names = (f"id-{i}" for i in range(50))
    there = next(t for t in names if c.partition_for(t) == 1)
    r = await call(describe_transactions, Broker(c), 0, transactional_ids=(there, ""))
    assert [s.error_code for s in r.transaction_states] == [E.not_coordinator, E.invalid_request]
    c.attach(1, ListLog())  # loading until the loop turns
    r = await call(describe_transactions, Broker(c), 0, transactional_ids=(there,))
    assert r.transaction_states[0].error_code == E.coordinator_load_in_progress


async def test_describe_transactions_needs_describe_and_refuses_an_id_named_twice():
    clock = ManualClock()
    c = await coordinated(clock)
    for txn_id in ("open", "secret", "twice"):
        await begin(c, txn_id, {})
    broker = Broker(c)
    secure(
        broker,
        (Res.TRANSACTIONAL_ID, "open", Op.DESCRIBE),
        (Res.TRANSACTIONAL_ID, "twice", Op.DESCRIBE),
    )
    ids = ("twice", "secret", "open", "twice")
    r = await call(describe_transactions, broker, 0, transactional_ids=ids)
    assert [(s.transactional_id, s.error_code) for s in r.transaction_states] == [
        ("twice", E.invalid_request),
        ("secret", E.transactional_id_authorization_failed),
        ("open", E.none),
        ("twice", E.invalid_request),
    ]
    assert r.transaction_states[1].producer_id == -1 and r.transaction_states[1].topics == []


# --------------------------------------------------------------------------- ListTransactions


async def test_list_transactions_filters_by_state_and_producer_and_names_unknown_states():
    clock = ManualClock()
    c = await coordinated(clock)
    empty = await begin(c, "a-empty", {})
    ongoing = await begin(c, "b-ongoing", {"t": frozenset({0})})
    other = await begin(c, "c-ongoing", {"t": frozenset({1})})
    broker = Broker(c)
    r = await call(list_transactions, broker, 0)
    assert r.error_code == E.none and r.unknown_state_filters == ()
    assert [
        (s.transactional_id, s.producer_id, s.transaction_state) for s in r.transaction_states
    ] == [
        ("a-empty", empty, "Empty"),
        ("b-ongoing", ongoing, "Ongoing"),
        ("c-ongoing", other, "Ongoing"),
    ]
    r = await call(
        list_transactions, broker, 0, state_filters=("Ongoing",), producer_id_filters=(other, 9)
    )
    assert [s.transactional_id for s in r.transaction_states] == ["c-ongoing"]
    r = await call(
        list_transactions, broker, 0, state_filters=("Empty", "Bogus", "ongoing", "Bogus")
    )
    assert [s.transactional_id for s in r.transaction_states] == ["a-empty"]
    assert r.unknown_state_filters == ("Bogus", "ongoing")  # once each; names are exact
    r = await call(list_transactions, broker, 0, state_filters=("Bogus",))
    assert r.transaction_states == () and r.unknown_state_filters == ("Bogus",)


async def test_list_transactions_v1_keeps_only_transactions_running_longer_than_asked():
    clock = ManualClock()
    c = await coordinated(clock)
    await begin(c, "empty", {})
    await begin(c, "old", {"t": frozenset({0})})  # started at the manual clock's 1,000 s
    broker = Broker(c)
    r = await call(list_transactions, broker, 1, duration_filter=60_000)
    assert [s.transactional_id for s in r.transaction_states] == ["old"]  # Empty: not running
    r = await call(list_transactions, broker, 1, duration_filter=-1)
    assert [s.transactional_id for s in r.transaction_states] == ["empty", "old"]


def test_the_duration_filter_counts_from_the_start_and_a_dead_id_is_never_listed():
    def txn(txn_id: str, state: TxnState, start: int) -> TxnMetadata:
        return TxnMetadata(txn_id, 7, 0, TIMEOUT_MS, state, {}, start, start)

    txns = [
        txn("young", TxnState.ONGOING, 9_500),
        txn("exactly", TxnState.ONGOING, 9_000),
        txn("old", TxnState.PREPARE_COMMIT, 8_999),
        txn("done", TxnState.COMPLETE_ABORT, 1_000),
        txn("dead", TxnState.DEAD, 1_000),
        txn("idle", TxnState.EMPTY, -1),
    ]
    picked = list_transactions.select(txns, None, set(), 1_000, 10_000)
    assert picked == [("done", 7, "CompleteAbort"), ("old", 7, "PrepareCommit")]
    assert [t[0] for t in list_transactions.select(txns, None, set(), -1, 10_000)] == [
        "done",
        "exactly",
        "idle",
        "old",
        "young",
    ]
    assert list_transactions.select(txns, set(), set(), -1, 10_000) == []


async def test_list_transactions_waits_for_loading_and_lists_only_what_may_be_described():
    clock = ManualClock()
    c = await coordinated(clock, partitions=2)
    shown, hidden = [t for t in (f"id-{i}" for i in range(50)) if c.partition_for(t) == 0][:2]
    await begin(c, shown, {})
    await begin(c, hidden, {})
    broker = Broker(c)
    secure(broker, (Res.TRANSACTIONAL_ID, shown, Op.DESCRIBE))
    r = await call(list_transactions, broker, 1)
    assert [s.transactional_id for s in r.transaction_states] == [shown]
    c.attach(1, ListLog())
    r = await call(list_transactions, broker, 1)
    assert (r.error_code, r.transaction_states) == (E.coordinator_load_in_progress, ())
    await settle()
    assert (await call(list_transactions, broker, 1)).error_code == E.none


# --------------------------------------------------------------------------- DescribeProducers


def producers_request(*partitions: tuple[str, tuple[int, ...]]) -> dict[str, Any]:
    m = load_payload_module(describe_producers.API_KEY, 0, EntityType.request)
    return {
        "topics": tuple(
            m.TopicRequest(name=name, partition_indexes=indexes) for name, indexes in partitions
        )
    }


def answered(r: Any) -> list[tuple[str, int, E]]:
    return [(t.name, p.partition_index, p.error_code) for t in r.topics for p in t.partitions]


async def test_describe_producers_lists_the_leaders_producers():
    broker = Broker()
    broker.add_topic("t", 2)
    broker.partitions["t", 0].producers = [
        ActiveProducer(1000, 3, 41, 120, 14),
        ActiveProducer(1001, 0, -1, -1),
    ]
    r = await call(describe_producers, broker, 0, **producers_request(("t", (0, 1))))
    assert answered(r) == [("t", 0, E.none), ("t", 1, E.none)]
    first, second = r.topics[0].partitions[0].active_producers
    assert (first.producer_id, first.producer_epoch, first.last_sequence) == (1000, 3, 41)
    assert first.current_txn_start_offset == 120
    assert first.last_timestamp == -1  # not kept here
    assert first.coordinator_epoch == 14  # what an admin's abort must carry
    assert (second.producer_id, second.current_txn_start_offset) == (1001, -1)
    assert r.topics[0].partitions[1].active_producers == ()


async def test_describe_producers_errors_in_kafkas_order():
    broker = Broker()
    broker.add_topic("t", 2)
    broker.add_topic("followed", 1, leader=False)
    broker.add_topic("hidden", 1)
    secure(broker, (Res.TOPIC, "t", Op.READ), (Res.TOPIC, "followed", Op.READ))
    request = producers_request(
        ("t", (0, 5, 0, 1)),
        ("followed", (0,)),
        ("hidden", (0,)),
        ("nope", (0,)),  # not READ-able: whether it exists is not told
        ("bad name!", (0,)),
    )
    r = await call(describe_producers, broker, 0, **request)
    assert answered(r) == [
        ("t", 0, E.invalid_request),
        ("t", 5, E.unknown_topic_or_partition),
        ("t", 0, E.invalid_request),
        ("t", 1, E.none),
        ("followed", 0, E.not_leader_or_follower),
        ("hidden", 0, E.topic_authorization_failed),
        ("nope", 0, E.topic_authorization_failed),
        ("bad name!", 0, E.invalid_topic_exception),
    ]
    secure(broker, (Res.TOPIC, "nope", Op.READ))
    r = await call(describe_producers, broker, 0, **producers_request(("nope", (0,))))
    assert answered(r) == [("nope", 0, E.unknown_topic_or_partition)]


# --------------------------------------------------------------------------- WriteTxnMarkers


def markers_request(*markers: tuple[int, int, bool, list[tuple[str, tuple[int, ...]]]]) -> Any:
    m = load_payload_module(write_txn_markers.API_KEY, 1, EntityType.request)
    return m.WriteTxnMarkersRequest(
        markers=tuple(
            m.WritableTxnMarker(
                producer_id=pid,
                producer_epoch=epoch,
                transaction_result=commit,
                topics=tuple(
                    m.WritableTxnMarkerTopic(name=name, partition_indexes=indexes)
                    for name, indexes in topics
                ),
                coordinator_epoch=-1,
            )
            for pid, epoch, commit, topics in markers
        )
    )


def marker_results(r: Any) -> list[tuple[int, str, int, E]]:
    return [
        (marker.producer_id, t.name, p.partition_index, p.error_code)
        for marker in r.markers
        for t in marker.topics
        for p in t.partitions
    ]


async def test_write_txn_markers_answers_each_partition_once_its_marker_is_committed():
    broker = Broker()
    broker.add_topic("t", 2)
    broker.add_topic("followed", 1, leader=False)
    broker.add_topic(OFFSETS_TOPIC, 3)
    for p in ((7, "t", 0), (7, "t", 1), (8, "t", 0), (8, OFFSETS_TOPIC, 2)):
        broker.partitions[p[1:]].open[p[0]] = 10  # hanging: no coordinator holds 7 or 8
    request = markers_request(
        (7, 2, False, [("t", (0, 1, 9)), ("followed", (0,)), ("nope", (0,))]),
        (8, 0, False, [(OFFSETS_TOPIC, (2,)), ("t", (0,))]),
    )
    answer = asyncio.ensure_future(write_txn_markers.handle(ctx(broker, 1), request))
    await settle()
    assert not answer.done()  # nothing is answered before its marker commits
    assert broker.partitions["t", 0].markers == [(7, 2, False, -1), (8, 0, False, -1)]
    assert broker.partitions["t", 1].markers == [(7, 2, False, -1)]
    assert broker.partitions[OFFSETS_TOPIC, 2].markers == [(8, 0, False, -1)]
    assert broker.partitions["followed", 0].markers == []
    broker.partitions["t", 0].answers[0].set_result(ProduceResult())
    broker.partitions["t", 0].answers[1].set_result(ProduceResult(E.invalid_producer_epoch))
    broker.partitions["t", 1].answers[0].set_result(ProduceResult())
    broker.partitions[OFFSETS_TOPIC, 2].answers[0].set_result(ProduceResult())
    r = client_reads(await answer, write_txn_markers.API_KEY, 1)
    assert marker_results(r) == [
        (7, "t", 0, E.none),
        (7, "t", 1, E.none),
        (7, "t", 9, E.unknown_topic_or_partition),
        (7, "followed", 0, E.not_leader_or_follower),
        (7, "nope", 0, E.unknown_topic_or_partition),
        (8, OFFSETS_TOPIC, 2, E.none),
        (8, "t", 0, E.invalid_producer_epoch),
    ]
    # a committed marker on __consumer_offsets settles the transaction's offsets
    assert broker.groups.ended == [(2, 8, False)]  # type: ignore[attr-defined]


async def test_write_txn_markers_needs_alter_or_cluster_action_and_writes_a_repeat_never():
    broker = Broker()
    broker.add_topic("t", 1)
    broker.partitions["t", 0].open[7] = 0
    secure(broker, (Res.TOPIC, "t", Op.WRITE))
    request = markers_request((7, 0, False, [("t", (0,))]), (8, 0, False, [("t", (0, 0))]))
    r = await call_markers(broker, request)
    assert [e for *_, e in marker_results(r)] == [E.cluster_authorization_failed] * 3
    assert broker.partitions["t", 0].markers == []
    secure(broker, (Res.CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION))
    answer = asyncio.ensure_future(call_markers(broker, request))
    await settle()
    assert broker.partitions["t", 0].markers == [(7, 0, False, -1)]
    broker.partitions["t", 0].answers[0].set_result(ProduceResult())
    assert marker_results(await answer) == [
        (7, "t", 0, E.none),
        (8, "t", 0, E.invalid_request),
        (8, "t", 0, E.invalid_request),
    ]
    secure(broker, (Res.CLUSTER, "kafka-cluster", Op.ALTER))
    answer = asyncio.ensure_future(
        call_markers(broker, markers_request((-1, 0, False, [("t", (0,))])))
    )
    assert marker_results(await answer) == [(-1, "t", 0, E.invalid_request)]


async def test_write_txn_markers_times_out_a_marker_not_committed(monkeypatch):
    monkeypatch.setattr(write_txn_markers, "MARKER_TIMEOUT_S", 0.01)
    broker = Broker()
    broker.add_topic("t", 1)
    broker.partitions["t", 0].open[7] = 0
    r = await call_markers(broker, markers_request((7, 0, False, [("t", (0,))])))
    assert marker_results(r) == [(7, "t", 0, E.request_timed_out)]


async def call_markers(broker: Broker, request: Any) -> Any:
    response = await write_txn_markers.handle(ctx(broker, 1), request)
    return client_reads(response, write_txn_markers.API_KEY, 1)


async def test_a_client_marker_ends_only_a_hanging_transaction_and_fences_no_one():
    """Beyond Kafka: a client's marker may abort a transaction no coordinator runs on the
    partition, at an epoch no higher than the one its coordinator holds; a commit, a
    transaction its coordinator still runs, or an epoch above what it holds (the forged
    ABORT at 32767 that fenced an id for good) is refused and nothing is written."""
    broker = Broker()
    broker.add_topic("t", 1)
    partition = broker.partitions["t", 0]
    partition.open = {7: 5, 8: 6, 9: 7}
    broker.held = {
        7: (E.none, Held(3, True)),  # a live transaction on "t"
        8: (E.none, Held(3, False)),  # hanging: its coordinator moved on
        9: (E.coordinator_not_available, None),  # its coordinator cannot say now
    }
    request = markers_request(
        (7, 3, False, [("t", (0,))]),
        (8, 32767, False, [("t", (0,))]),
        (9, 0, False, [("t", (0,))]),
        (10, 0, False, [("t", (0,))]),  # nothing open here: nothing to do
        (11, 0, True, [("t", (0,))]),  # a commit
    )
    assert marker_results(await call_markers(broker, request)) == [
        (7, "t", 0, E.transaction_coordinator_fenced),
        (8, "t", 0, E.invalid_producer_epoch),
        (9, "t", 0, E.coordinator_not_available),
        (10, "t", 0, E.none),
        (11, "t", 0, E.invalid_request),
    ]
    assert partition.markers == []
    partition.open[12] = 8  # a producer id no transactional id uses any more
    answer = asyncio.ensure_future(
        call_markers(
            broker, markers_request((8, 3, False, [("t", (0,))]), (12, 40, False, [("t", (0,))]))
        )
    )
    await settle()
    assert partition.markers == [(8, 3, False, -1), (12, 40, False, -1)]
    for future in partition.answers:
        future.set_result(ProduceResult())
    assert [e for *_, e in marker_results(await answer)] == [E.none, E.none]


async def test_a_transaction_begun_while_the_coordinators_were_asked_is_not_aborted():
    broker = Broker()
    broker.add_topic("t", 1)
    partition = broker.partitions["t", 0]
    partition.open[8] = 5
    broker.asked = asyncio.get_running_loop().create_future()
    request = markers_request((8, 0, False, [("t", (0,))]))
    answer = asyncio.ensure_future(call_markers(broker, request))
    await settle()
    partition.open[8] = 9  # the hanging one ended, and a new one began
    broker.asked.set_result(None)
    assert marker_results(await answer) == [(8, "t", 0, E.concurrent_transactions)]
    broker.asked = asyncio.get_running_loop().create_future()
    answer = asyncio.ensure_future(call_markers(broker, request))
    await settle()
    del partition.open[8]  # ended, and nothing began
    broker.asked.set_result(None)
    assert marker_results(await answer) == [(8, "t", 0, E.none)]
    assert partition.markers == []
