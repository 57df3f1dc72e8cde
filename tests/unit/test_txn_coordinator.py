"""The transaction coordinator's sequencing: memory follows the log, a decision in the log is
finished by whoever loads it, and an expired transaction is aborted with its producer fenced.
The `__transaction_state` partition is an in-memory list here (end to end, in
tests/e2e/test_transactions.py, it is a real replicated partition)."""

from __future__ import annotations

import asyncio

import pytest
from support.clock import ManualClock, settle
from support.txn_log import ListLog

from epoch import history
from raftlog.common.errors import ErrorCode as E
from raftlog.txn.coordinator import Held, TxnCoordinator, TxnSettings
from raftlog.txn.log_records import encode_key, encode_value
from raftlog.txn.markers import MarkerWrite
from raftlog.txn.metadata import TxnMetadata, TxnState

TXN = "tx"


class Markers:
    def __init__(self) -> None:
        self.written: list[tuple[str, int, int, int, bool, int]] = []
        self.decisions: list[tuple[int, int]] = []  # what each marker carries out
        self.gate: asyncio.Future[None] | None = None

    async def write(self, marker: MarkerWrite) -> E:
        if self.gate is not None:
            await self.gate
        self.written.append(marker[:6])
        self.decisions.append((marker.decision_partition, marker.decision_offset))
        return E.none


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def coordinator(
    clock: ManualClock, markers: Markers, log: ListLog, settings: TxnSettings | None = None
) -> TxnCoordinator:
    ids = iter(range(100, 200))

    async def allocate() -> int:
        return next(ids)

    c = TxnCoordinator(1, allocate, markers.write, settings or TxnSettings(), clock)
    c.attach(0, log)
    return c


async def started(c: TxnCoordinator) -> tuple[int, int]:
    await settle()
    error, pid, epoch = await c.init_producer_id(TXN, 60_000, -1, -1)
    assert error == E.none
    assert await c.add_partitions(TXN, pid, epoch, {"t": frozenset({0, 1})}) == E.none
    return pid, epoch


async def test_end_waits_a_while_for_markers_and_the_next_transaction_waits_for_them(clock):
    markers, log = Markers(), ListLog()
    c = coordinator(clock, markers, log)
    pid, epoch = await started(c)
    markers.gate = asyncio.get_running_loop().create_future()
    ending = asyncio.ensure_future(c.end_transaction(TXN, pid, epoch, True))
    await clock.advance(0.9)
    assert not ending.done()  # waits a while for the markers
    await clock.advance(0.1)
    assert ending.result() == E.none  # then answers at the decision
    assert log.states()[-1] == (TXN, TxnState.PREPARE_COMMIT, 0)
    added = await c.add_partitions(TXN, pid, epoch, {"t": frozenset({0})})
    assert added == E.concurrent_transactions
    markers.gate.set_result(None)
    await settle()
    assert sorted(m[:2] for m in markers.written) == [("t", 0), ("t", 1)]
    assert all(m[4] and m[5] == 7 for m in markers.written)  # commit, coordinator epoch
    assert log.states()[-1] == (TXN, TxnState.COMPLETE_COMMIT, 0)
    assert await c.add_partitions(TXN, pid, epoch, {"t": frozenset({0})}) == E.none


async def test_a_decision_found_at_load_is_finished_by_the_new_coordinator(clock):
    """A failover between PrepareCommit and its markers: the partition's next leader loads the
    decision and writes every marker, then CompleteCommit."""
    prepared = TxnMetadata(TXN, 42, 3, 60_000, TxnState.PREPARE_COMMIT, {"t": frozenset({2})}, 1, 1)
    log = ListLog([(encode_key(TXN), encode_value(prepared.to_log()))])
    markers = Markers()
    c = coordinator(clock, markers, log)
    await settle()
    assert markers.written == [("t", 2, 42, 3, True, 7)]
    assert log.states()[-1] == (TXN, TxnState.COMPLETE_COMMIT, 3)
    assert c.describe(TXN)[1].state == TxnState.COMPLETE_COMMIT  # type: ignore[union-attr]


async def test_a_failed_append_changes_nothing(clock):
    markers, log = Markers(), ListLog()
    c = coordinator(clock, markers, log)
    pid, epoch = await started(c)
    log.failing = E.not_leader_or_follower
    assert await c.end_transaction(TXN, pid, epoch, False) == E.not_coordinator
    assert c.describe(TXN)[1].state == TxnState.ONGOING  # type: ignore[union-attr]
    assert markers.written == []


async def test_one_write_at_a_time_per_transactional_id(clock):
    markers, log = Markers(), ListLog()
    c = coordinator(clock, markers, log)
    pid, epoch = await started(c)
    log.held = asyncio.get_running_loop().create_future()
    ending = asyncio.ensure_future(c.end_transaction(TXN, pid, epoch, True))
    await settle()
    assert await c.end_transaction(TXN, pid, epoch, True) == E.concurrent_transactions
    log.held.set_result(None)
    assert await ending == E.none


async def test_a_partition_added_is_verified_while_more_are_added_but_not_while_ending(clock):
    """KIP-890 verification of a produce to a partition already in the transaction: answered
    while the producer adds others (kafkajs does both at once), held off (retriable) while
    the transaction's end is being written."""
    markers, log = Markers(), ListLog()
    c = coordinator(clock, markers, log)
    pid, epoch = await started(c)
    log.held = asyncio.get_running_loop().create_future()
    adding = asyncio.ensure_future(c.add_partitions(TXN, pid, epoch, {"t": frozenset({2})}))
    await settle()
    assert c.verify(TXN, pid, epoch, "t", 0) == E.none
    assert c.verify(TXN, pid, epoch, "t", 2) == E.concurrent_transactions  # being added
    assert c.verify(TXN, pid, epoch, "t", 3) == E.concurrent_transactions  # may be, retriably
    log.held.set_result(None)
    assert await adding == E.none
    assert c.verify(TXN, pid, epoch, "t", 2) == E.none
    assert c.verify(TXN, pid, epoch, "t", 3) == E.invalid_txn_state
    log.held = asyncio.get_running_loop().create_future()
    ending = asyncio.ensure_future(c.end_transaction(TXN, pid, epoch, True))
    await settle()
    assert c.verify(TXN, pid, epoch, "t", 0) == E.concurrent_transactions
    log.held.set_result(None)
    assert await ending == E.none


async def test_end_is_answered_once_its_markers_are_written(clock):
    markers, log = Markers(), ListLog()
    c = coordinator(clock, markers, log)
    pid, epoch = await started(c)
    assert await c.end_transaction(TXN, pid, epoch, False) == E.none  # no time passes
    assert log.states()[-1] == (TXN, TxnState.COMPLETE_ABORT, 0)
    assert await c.add_partitions(TXN, pid, epoch, {"t": frozenset({0})}) == E.none


async def test_an_expired_transaction_is_aborted_and_its_producer_fenced(clock):
    markers, log = Markers(), ListLog()
    c = coordinator(clock, markers, log)
    pid, epoch = await started(c)
    await clock.advance(59)
    assert markers.written == []  # not yet: 60 s from its start
    await clock.advance(20)  # the next check after the timeout
    assert {(m[3], m[4]) for m in markers.written} == {(epoch + 1, False)}
    assert log.states()[-2:] == [
        (TXN, TxnState.PREPARE_ABORT, epoch + 1),
        (TXN, TxnState.COMPLETE_ABORT, epoch + 1),
    ]
    assert await c.end_transaction(TXN, pid, epoch, True) == E.producer_fenced


async def test_ids_of_other_partitions_and_a_loading_one_are_refused(clock):
    log = ListLog()
    c = TxnCoordinator(2, lambda: asyncio.sleep(0, 1), Markers().write, TxnSettings(), clock)
    here = next(t for t in (f"id-{i}" for i in range(50)) if c.partition_for(t) == 0)
    there = next(t for t in (f"id-{i}" for i in range(50)) if c.partition_for(t) == 1)
    c.attach(0, log)
    assert (await c.init_producer_id(here, 60_000, -1, -1))[0] == E.coordinator_load_in_progress
    await settle()
    assert (await c.init_producer_id(here, 60_000, -1, -1))[0] == E.none
    assert (await c.init_producer_id(there, 60_000, -1, -1))[0] == E.not_coordinator
    assert (await c.init_producer_id(here, 900_001, -1, -1))[0] == E.invalid_transaction_timeout


async def test_an_expiry_found_while_the_producer_ends_its_transaction_decides_nothing(clock):
    """The timeout check finds the transaction expired and queues its abort; the producer's
    EndTxn, queued just before, runs first and starts writing its commit. The abort must then
    write nothing: two decisions would put markers of both kinds on the partitions."""
    markers, log = Markers(), ListLog()
    c = coordinator(clock, markers, log)
    pid, epoch = await started(c)
    log.held = asyncio.get_running_loop().create_future()
    clock.hold(70)  # past its 60 s timeout
    ending = asyncio.ensure_future(c.end_transaction(TXN, pid, epoch, True))
    c._abort_timed_out(c._shards[0])  # the check, as its timer runs it
    await settle()
    log.held.set_result(None)
    assert await ending == E.none
    await settle()
    assert [s for _, s, _ in log.states()].count(TxnState.PREPARE_ABORT) == 0
    assert {m[4] for m in markers.written} == {True}


async def test_decisions_and_completions_go_to_the_history_with_where_they_are(clock):
    """The epoch audit matches each marker to its decision by the decision's place in
    `__transaction_state`: the history says where it is, and which partitions it covers."""
    markers, log = Markers(), ListLog()
    journal: list[history.Record] = []
    ids = iter(range(100, 200))

    async def allocate() -> int:
        return next(ids)

    c = TxnCoordinator(
        1, allocate, markers.write, TxnSettings(), clock, node_id=3, journal=journal.append
    )
    c.attach(0, log)
    pid, epoch = await started(c)
    assert await c.end_transaction(TXN, pid, epoch, True) == E.none
    decided_at = [k for k, (_, s, _) in enumerate(log.states()) if s == TxnState.PREPARE_COMMIT]
    decision, complete = journal
    assert isinstance(decision, history.TxnDecision) and isinstance(complete, history.TxnComplete)
    assert (decision.node, decision.partition, decision.term, decision.commit) == (3, 0, 7, 1)
    assert decision.decision_offset == complete.decision_offset == decided_at[0]
    assert decision.partitions == ["t:0", "t:1"]
    assert set(markers.decisions) == {(0, decision.decision_offset)}


async def test_a_marker_given_up_goes_to_the_history_with_its_coordinator_epoch(clock):
    """t-1 was deleted before its marker: the coordinator records the marker given up
    (offset -1, in its own term, with the coordinator epoch it was sent with) and completes."""
    markers, log = Markers(), ListLog()
    journal: list[history.Record] = []
    ids = iter(range(100, 200))

    async def allocate() -> int:
        return next(ids)

    async def write(marker: MarkerWrite) -> E:
        if marker.partition == 1:
            return E.unknown_topic_or_partition
        return await markers.write(marker)

    c = TxnCoordinator(1, allocate, write, TxnSettings(), clock, node_id=3, journal=journal.append)
    c.attach(0, log)
    pid, epoch = await started(c)
    assert await c.end_transaction(TXN, pid, epoch, False) == E.none
    decision, given_up, complete = journal
    assert isinstance(given_up, history.TxnMarker)
    assert (given_up.topic, given_up.partition, given_up.term, given_up.marker_offset) == (
        "t",
        1,
        7,
        -1,
    )
    assert (given_up.coordinator_epoch, given_up.commit, given_up.producer_id) == (7, 0, pid)
    assert given_up.decision_offset == decision.decision_offset == complete.decision_offset


async def test_an_idle_id_expires_and_its_producer_must_initialise_again(clock):
    """transactional.id.expiration.ms: an id unused that long, with no transaction open, is
    forgotten with a tombstone (so a later leader forgets it too); one in a transaction is
    kept however old."""
    markers, log = Markers(), ListLog()
    settings = TxnSettings(id_expiration_ms=60_000, cleanup_interval_ms=10_000)
    c = coordinator(clock, markers, log, settings)
    pid, epoch = await started(c)
    assert await c.end_transaction(TXN, pid, epoch, True) == E.none
    error, busy_pid, busy_epoch = await c.init_producer_id("busy", 900_000, -1, -1)
    assert error == E.none
    assert await c.add_partitions("busy", busy_pid, busy_epoch, {"t": frozenset({2})}) == E.none
    await clock.advance(55)
    assert c.describe(TXN)[0] == E.none  # not yet
    await clock.advance(10)
    assert log.states()[-1] == (TXN, TxnState.DEAD, -1)
    assert c.describe(TXN)[0] == E.transactional_id_not_found
    assert c.describe("busy")[1].state == TxnState.ONGOING
    assert (
        await c.add_partitions(TXN, pid, epoch, {"t": frozenset({0})})
        == E.invalid_producer_id_mapping
    )
    reloaded = coordinator(clock, Markers(), ListLog(log.records), settings)
    await settle()
    assert reloaded.describe(TXN)[0] == E.transactional_id_not_found
    assert (await c.init_producer_id(TXN, 60_000, -1, -1))[0] == E.none  # starts afresh


async def test_a_full_partition_forgets_its_longest_idle_id_for_a_new_one(clock):
    """transactional.id.max.per.partition bounds what a partition keeps; a new id forgets the
    idle one used longest ago, never one with a transaction open: with every id busy it is
    refused with a retriable error."""
    markers, log = Markers(), ListLog()
    c = coordinator(clock, markers, log, TxnSettings(max_ids=2))
    await settle()
    assert (await c.init_producer_id("old", 60_000, -1, -1))[0] == E.none
    await clock.advance(1)
    _, pid, epoch = await c.init_producer_id("busy", 900_000, -1, -1)
    assert await c.add_partitions("busy", pid, epoch, {"t": frozenset({0})}) == E.none
    await clock.advance(1)
    assert (await c.init_producer_id("new", 60_000, -1, -1))[0] == E.none
    assert c.describe("old")[0] == E.transactional_id_not_found
    assert {t.transactional_id for t in c.transactions()} == {"busy", "new"}
    _, pid, epoch = await c.init_producer_id("new", 60_000, -1, -1)
    assert await c.add_partitions("new", pid, epoch, {"t": frozenset({1})}) == E.none
    assert (await c.init_producer_id("newer", 60_000, -1, -1))[0] == E.coordinator_not_available
    assert {t.transactional_id for t in c.transactions()} == {"busy", "new"}


async def test_what_it_holds_of_a_producer_id_for_a_client_marker(clock):
    """producer_held, which a partition leader asks before writing a client's abort marker:
    the epoch it holds for the producer id, and whether the transaction on the partition asked
    about is still its own to end (ongoing there, decided and its markers going out, or a
    write of the id in flight). Forgotten ids and replaced producer ids are no one's."""
    markers, log = Markers(), ListLog()
    c = coordinator(clock, markers, log)
    assert c.producer_held(1, [0, 1], "t", 0) == (False, None)  # loading; 1 is not led here
    pid, epoch = await started(c)
    assert c.producer_held(pid, [0], "t", 0) == (True, Held(epoch, True))
    assert c.producer_held(pid, [0], "t", 5) == (True, Held(epoch, False))  # not in it
    assert c.producer_held(pid, [0, 1], "t", 0) == (False, None)
    assert c.producer_held(pid + 1, [0], "t", 0) == (True, None)
    markers.gate = asyncio.get_running_loop().create_future()
    ending = asyncio.ensure_future(c.end_transaction(TXN, pid, epoch, False))
    await settle()
    assert c.producer_held(pid, [0], "t", 1) == (True, Held(epoch, True))  # PrepareAbort
    markers.gate.set_result(None)
    assert await ending == E.none
    assert c.producer_held(pid, [0], "t", 1) == (True, Held(epoch, False))  # CompleteAbort
    log.held = asyncio.get_running_loop().create_future()
    adding = asyncio.ensure_future(c.add_partitions(TXN, pid, epoch, {"t": frozenset({7})}))
    await settle()
    assert c.producer_held(pid, [0], "t", 1) == (True, Held(epoch, True))  # being written
    log.held.set_result(None)
    assert await adding == E.none
    reloaded = coordinator(clock, Markers(), ListLog(log.records))
    await settle()
    assert reloaded.producer_held(pid, [0], "t", 7) == (True, Held(epoch, True))
    # the id's epoch exhausted: a fresh producer id, and the old one is no one's
    exhausted = TxnMetadata(TXN, 42, 32766, 60_000, TxnState.COMPLETE_ABORT, {}, -1, 1)
    c2 = coordinator(
        clock, Markers(), ListLog([(encode_key(TXN), encode_value(exhausted.to_log()))])
    )
    await settle()
    assert c2.producer_held(42, [0], "t", 0) == (True, Held(32766, False))
    error, fresh, _ = await c2.init_producer_id(TXN, 60_000, -1, -1)
    assert error == E.none and fresh != 42
    assert c2.producer_held(42, [0], "t", 0) == (True, None)
    assert c2.producer_held(fresh, [0], "t", 0) == (True, Held(0, False))
