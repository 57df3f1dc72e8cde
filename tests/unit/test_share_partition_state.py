"""The share-partition state machine (raftlog/share/partition_state.py), driven through its
methods with time passed in: what a share consumer relies on. Records are delivered once at a
time to one member, come back after a release or an expired lock with a higher delivery
count, stop coming back at the delivery limit, and the group's start offset (SPSO) moves only
over records that are done."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftlog.common.errors import ErrorCode
from raftlog.share.partition_state import (
    PROXY_MEMBER_PREFIX,
    AckBatch,
    AckType,
    AcquiredRange,
    RecordState,
    RecordView,
    ShareLimits,
    SharePartitionState,
)
from raftlog.share.store import ShareStore, ShareUpdate, encode

E = ErrorCode
ACCEPT, RELEASE, REJECT, GAP = AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.GAP
LOCK = 30.0


def ack(first: int, last: int, *types: int) -> AckBatch:
    return AckBatch(first, last, tuple(types))


def window(sp: SharePartitionState) -> list[RecordView | None]:
    """Everything a failed call must leave as it was, locks and owners included."""
    return [sp.record(o) for o in range(sp.start_offset, sp.end_offset + 1)]


def test_first_delivery_counts_one_and_contiguous_batches_merge() -> None:
    sp = SharePartitionState(0)
    got = sp.acquire("a", [(0, 2), (3, 4)], 500, now=100.0)
    assert got == [AcquiredRange(0, 4, 1)]
    assert (sp.start_offset, sp.end_offset) == (0, 4)
    assert sp.record(3) == RecordView(RecordState.ACQUIRED, 1, "a", 100.0 + LOCK)
    assert sp.next_fetch_offset() == 5
    assert sp.next_lock_deadline() == 100.0 + LOCK


def test_fetch_from_a_batch_that_starts_below_spso_takes_only_offsets_from_spso() -> None:
    sp = SharePartitionState(7)  # e.g. share.auto.offset.reset=latest inside a batch
    assert sp.next_fetch_offset() == 7
    assert sp.acquire("a", [(5, 9)], 500, now=0.0) == [AcquiredRange(7, 9, 1)]
    assert sp.record(5) is None and sp.start_offset == 7


def test_released_records_come_back_first_with_count_two_to_another_member() -> None:
    sp = SharePartitionState(0)
    sp.acquire("a", [(0, 4)], 500, now=0.0)
    assert sp.acknowledge("a", [ack(0, 1, ACCEPT), ack(2, 3, RELEASE), ack(4, 4, ACCEPT)]) == E.none
    assert sp.next_fetch_offset() == 2
    # The log is read from offset 2: the batch holding it comes back whole, and 5-6 are new.
    got = sp.acquire("b", [(0, 4), (5, 6)], 500, now=1.0)
    assert got == [AcquiredRange(2, 3, 2), AcquiredRange(5, 6, 1)]
    assert sp.record(2) == RecordView(RecordState.ACQUIRED, 2, "b", 1.0 + LOCK)
    assert sp.next_fetch_offset() == 7


def test_an_accepted_prefix_moves_spso() -> None:
    sp = SharePartitionState(0)
    sp.acquire("a", [(0, 9)], 500, now=0.0)
    assert sp.acknowledge("a", [ack(0, 3, ACCEPT)]) == E.none
    assert sp.start_offset == 4 and sp.record(3) is None
    assert sp.acknowledge("a", [ack(4, 9, ACCEPT)]) == E.none
    assert (sp.start_offset, sp.end_offset) == (10, 9)  # nothing in flight: SPSO = SPEO + 1
    assert sp.next_fetch_offset() == 10 and sp.next_lock_deadline() is None


def test_a_middle_ack_holds_spso_until_the_gap_before_it_closes() -> None:
    sp = SharePartitionState(0)
    sp.acquire("a", [(0, 9)], 500, now=0.0)
    assert sp.acknowledge("a", [ack(3, 9, ACCEPT)]) == E.none
    assert sp.start_offset == 0
    assert sp.counts() == {
        RecordState.AVAILABLE: 0,
        RecordState.ACQUIRED: 3,
        RecordState.ACKNOWLEDGED: 7,
        RecordState.ARCHIVED: 0,
    }
    assert sp.acknowledge("a", [ack(0, 2, REJECT)]) == E.none
    assert sp.start_offset == 10
    assert sp.counts()[RecordState.ACKNOWLEDGED] == 0  # done records are forgotten


def test_a_record_released_at_the_delivery_limit_is_archived_and_never_offered_again() -> None:
    sp = SharePartitionState(0)  # limit 5
    for delivery in range(1, 6):
        assert sp.next_fetch_offset() == 0
        assert sp.acquire("a", [(0, 0), (1, 1)], 1, now=float(delivery)) == [
            AcquiredRange(0, 0, delivery)
        ]
        assert sp.acknowledge("a", [ack(0, 0, RELEASE)]) == E.none
    # The fifth release archives it: SPSO passes it, the next fetch starts after it.
    assert sp.start_offset == 1 and sp.record(0) is None
    assert sp.next_fetch_offset() == 1
    assert sp.acquire("b", [(0, 0), (1, 1)], 500, now=9.0) == [AcquiredRange(1, 1, 1)]


def test_an_expired_lock_redelivers_and_archives_at_the_delivery_limit() -> None:
    sp = SharePartitionState(0, ShareLimits(lock_duration_s=10.0, delivery_count_limit=2))
    sp.acquire("a", [(0, 1)], 500, now=0.0)
    assert not sp.expire_locks(9.999)
    assert sp.record(0) == RecordView(RecordState.ACQUIRED, 1, "a", 10.0)
    assert sp.expire_locks(10.0)  # a deadline at `now` has passed
    assert sp.record(0) == RecordView(RecordState.AVAILABLE, 1, None, None)
    assert sp.next_fetch_offset() == 0 and sp.next_lock_deadline() is None
    assert sp.acquire("b", [(0, 1)], 500, now=20.0) == [AcquiredRange(0, 1, 2)]
    assert sp.expire_locks(30.0)
    assert (sp.start_offset, sp.end_offset) == (2, 1)  # the second expiry archived both
    assert sp.next_fetch_offset() == 2


def test_a_late_ack_after_the_lock_expired_fails_and_changes_nothing() -> None:
    sp = SharePartitionState(0, ShareLimits(lock_duration_s=10.0))
    sp.acquire("a", [(0, 4)], 500, now=0.0)
    sp.expire_locks(10.0)
    before = window(sp)
    assert sp.acknowledge("a", [ack(0, 4, ACCEPT)]) == E.invalid_record_state
    assert window(sp) == before and sp.start_offset == 0


def test_an_ack_of_records_another_member_holds_fails_whole() -> None:
    sp = SharePartitionState(0, ShareLimits(lock_duration_s=10.0))
    sp.acquire("a", [(0, 4)], 500, now=0.0)
    sp.expire_locks(10.0)
    sp.acquire("b", [(0, 4)], 500, now=11.0)
    sp.acquire("a", [(5, 9)], 500, now=12.0)
    before = window(sp)
    # The first batch is a's own and valid, the second b's: neither is applied.
    assert sp.acknowledge("a", [ack(5, 9, ACCEPT), ack(10, 10, ACCEPT)]) == E.invalid_request
    assert sp.acknowledge("a", [ack(0, 0, ACCEPT)]) == E.invalid_record_state
    assert sp.acknowledge("a", [ack(4, 4, RELEASE), ack(5, 9, ACCEPT)]) == E.invalid_record_state
    assert window(sp) == before
    assert sp.acknowledge("b", [ack(0, 4, ACCEPT)]) == E.none
    assert sp.start_offset == 5


def test_gap_and_reject_archive() -> None:
    sp = SharePartitionState(0)
    sp.acquire("a", [(0, 3)], 500, now=0.0)
    assert sp.acknowledge("a", [ack(1, 1, GAP), ack(2, 2, REJECT)]) == E.none
    assert sp.record(1) == RecordView(RecordState.ARCHIVED, 1, None, None)
    assert sp.record(2) == RecordView(RecordState.ARCHIVED, 1, None, None)
    assert sp.acknowledge("a", [ack(0, 0, GAP)]) == E.none
    assert sp.start_offset == 3


def test_one_type_per_offset() -> None:
    sp = SharePartitionState(0)
    sp.acquire("a", [(0, 3)], 500, now=0.0)
    assert sp.acknowledge("a", [ack(0, 3, ACCEPT, RELEASE, GAP, REJECT)]) == E.none
    assert sp.start_offset == 1
    assert [sp.record(o) for o in (1, 2, 3)] == [
        RecordView(RecordState.AVAILABLE, 1, None, None),
        RecordView(RecordState.ARCHIVED, 1, None, None),
        RecordView(RecordState.ARCHIVED, 1, None, None),
    ]
    assert sp.next_fetch_offset() == 1


@pytest.mark.parametrize(
    "batches",
    [
        [ack(3, 2, ACCEPT)],  # first > last
        [ack(0, 1)],  # no types
        [ack(0, 2, ACCEPT, ACCEPT)],  # neither one type nor one per offset
        [ack(0, 0, 5)],  # no such type
        [ack(0, 0, -1)],
        [ack(2, 3, ACCEPT), ack(0, 1, ACCEPT)],  # not ascending
        [ack(0, 2, ACCEPT), ack(2, 3, ACCEPT)],  # overlapping
    ],
)
def test_malformed_acks_are_invalid_request_and_change_nothing(batches: list[AckBatch]) -> None:
    sp = SharePartitionState(0)
    sp.acquire("a", [(0, 3)], 500, now=0.0)
    before = window(sp)
    assert sp.acknowledge("a", batches) == E.invalid_request
    assert window(sp) == before


def test_acks_below_spso_are_skipped_and_past_speo_are_invalid_request() -> None:
    sp = SharePartitionState(0)
    sp.acquire("a", [(0, 5)], 500, now=0.0)
    assert sp.acknowledge("a", [ack(0, 2, ACCEPT)]) == E.none
    # 0-2 are done (a retried commit, say): skipped; 3 is still a's.
    assert sp.acknowledge("a", [ack(0, 3, ACCEPT)]) == E.none
    assert sp.start_offset == 4
    assert sp.acknowledge("a", [ack(4, 6, ACCEPT)]) == E.invalid_request
    assert sp.acknowledge("a", []) == E.none


def test_the_window_cap_stops_acquisition_until_records_are_done() -> None:
    sp = SharePartitionState(0, ShareLimits(max_record_locks=10))
    assert sp.acquire("a", [(0, 4), (5, 9), (10, 14)], 500, now=0.0) == [AcquiredRange(0, 9, 1)]
    assert not sp.can_acquire()
    assert sp.acquire("b", [(10, 14)], 500, now=0.0) == []
    # A released record inside the full window can still be redelivered.
    assert sp.acknowledge("a", [ack(9, 9, RELEASE)]) == E.none
    assert sp.can_acquire()
    assert sp.acquire("b", [(5, 9), (10, 14)], 500, now=1.0) == [AcquiredRange(9, 9, 2)]
    assert not sp.can_acquire()
    assert sp.acknowledge("a", [ack(0, 4, ACCEPT)]) == E.none
    assert sp.can_acquire()
    assert sp.acquire("b", [(10, 14)], 500, now=2.0) == [AcquiredRange(10, 14, 1)]
    assert not sp.can_acquire()


def test_the_window_cap_is_hard_even_inside_a_batch() -> None:
    sp = SharePartitionState(0, ShareLimits(max_record_locks=7))
    assert sp.acquire("a", [(0, 9)], 500, now=0.0) == [AcquiredRange(0, 6, 1)]
    assert sp.acknowledge("a", [ack(0, 6, ACCEPT)]) == E.none
    assert sp.next_fetch_offset() == 7
    # The same batch is read again for offset 7; only the rest of it is new.
    assert sp.acquire("a", [(0, 9)], 500, now=1.0) == [AcquiredRange(7, 9, 1)]


def test_max_records_is_a_soft_limit_by_whole_batches() -> None:
    batches = [(0, 2), (3, 5), (6, 8)]
    sp = SharePartitionState(0)
    assert sp.acquire("a", batches, 4, now=0.0) == [AcquiredRange(0, 5, 1)]
    sp = SharePartitionState(0)
    assert sp.acquire("a", batches, 3, now=0.0) == [AcquiredRange(0, 2, 1)]
    sp = SharePartitionState(0)
    assert sp.acquire("a", batches, 1, now=0.0) == [AcquiredRange(0, 2, 1)]
    assert sp.acquire("a", batches, 0, now=0.0) == []


def test_releasing_a_member_makes_its_records_available_to_others() -> None:
    sp = SharePartitionState(0, ShareLimits(delivery_count_limit=2))
    sp.acquire("a", [(0, 1)], 500, now=0.0)
    sp.acquire("b", [(2, 3)], 500, now=0.0)
    assert sp.release_member("a")
    assert not sp.release_member("a") and not sp.release_member("nobody")
    assert sp.record(0) == RecordView(RecordState.AVAILABLE, 1, None, None)
    assert sp.record(2) == RecordView(RecordState.ACQUIRED, 1, "b", LOCK)
    assert sp.acquire("c", [(0, 1)], 500, now=1.0) == [AcquiredRange(0, 1, 2)]
    assert sp.release_member("c")  # second delivery of two: archived
    assert sp.start_offset == 2


def test_log_start_moving_archives_what_it_passes() -> None:
    sp = SharePartitionState(0)
    sp.acquire("a", [(0, 9)], 500, now=0.0)
    sp.acknowledge("a", [ack(2, 3, RELEASE)])
    sp.log_start_moved(5)
    assert (sp.start_offset, sp.end_offset) == (5, 9)
    assert sp.next_fetch_offset() == 10  # 2-3 are gone from the log
    assert sp.acknowledge("a", [ack(0, 6, ACCEPT)]) == E.none  # the gone part is skipped
    assert sp.start_offset == 7
    sp.log_start_moved(3)  # behind SPSO: nothing to do
    assert sp.start_offset == 7
    sp.log_start_moved(20)  # past everything in flight
    assert (sp.start_offset, sp.end_offset) == (20, 19)
    assert sp.next_fetch_offset() == 20 and sp.next_lock_deadline() is None
    assert sp.acquire("a", [(18, 22)], 500, now=1.0) == [AcquiredRange(20, 22, 1)]


def persisted(sp: SharePartitionState, store: ShareStore) -> object:
    """Takes the state's update into the store, as the leader's Raft log does; returns it."""
    update = sp.take_update()
    if update is not None:
        start, runs = update
        store.apply(store.applied + 1, encode([ShareUpdate("g", start, tuple(runs))]))
    return update


def test_updates_carry_what_changed_and_a_new_leader_restores_them() -> None:
    limits = ShareLimits(delivery_count_limit=3)
    sp, store = SharePartitionState(0, limits), ShareStore()
    sp.acquire("a", [(0, 9)], 500, now=0.0)
    assert persisted(sp, store) is None  # acquisitions alone are not written (as in Kafka)
    sp.acknowledge("a", [ack(0, 0, ACCEPT), ack(2, 3, ACCEPT), ack(4, 5, RELEASE), ack(8, 8, GAP)])
    A, K, X = RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
    assert persisted(sp, store) == (1, [(2, 3, K, 1), (4, 5, A, 1), (8, 8, X, 1)])
    sp.acquire("b", [(0, 9)], 500, now=1.0)  # 4-5 again: a holds the rest
    assert persisted(sp, store) is None
    sp.release_member("b")  # 4-5 now delivered twice
    assert persisted(sp, store) == (1, [(4, 5, A, 2)])
    stored = store.get("g")
    assert stored is not None
    assert stored.runs() == [(2, 3, K, 1), (4, 5, A, 2), (8, 8, X, 1)]
    # a new leader: a's locks and first deliveries were never written
    back = SharePartitionState.restore(stored.start_offset, stored.runs(), limits)
    assert (back.start_offset, back.end_offset) == (1, 8)
    assert back.next_fetch_offset() == 1 and back.next_lock_deadline() is None
    assert back.acquire("c", [(0, 9), (10, 10)], 500, now=2.0) == [
        AcquiredRange(1, 1, 1),
        AcquiredRange(4, 5, 3),
        AcquiredRange(6, 7, 1),
        AcquiredRange(9, 10, 1),
    ]
    assert sp.acknowledge("a", [ack(1, 1, ACCEPT)]) == ErrorCode.none
    assert persisted(sp, store) == (4, [])  # the head is done: only SPSO moves
    assert store.get("g") is not None and store.get("g").start_offset == 4  # type: ignore[union-attr]


def test_restore_treats_offsets_between_batches_as_never_delivered() -> None:
    back = SharePartitionState.restore(
        5, [(0, 6, RecordState.ACKNOWLEDGED, 1), (9, 9, RecordState.ACQUIRED, 2)], ShareLimits()
    )
    assert (back.start_offset, back.end_offset) == (7, 9)
    assert back.record(7) == RecordView(RecordState.AVAILABLE, 0, None, None)
    assert back.acquire("a", [(7, 9)], 500, now=0.0) == [
        AcquiredRange(7, 8, 1),
        AcquiredRange(9, 9, 3),
    ]
    with pytest.raises(ValueError):
        SharePartitionState.restore(
            0, [(3, 4, RecordState.AVAILABLE, 1), (4, 5, RecordState.AVAILABLE, 1)], ShareLimits()
        )
    empty = SharePartitionState.restore(4, [], ShareLimits())
    assert (empty.start_offset, empty.end_offset) == (4, 3)


def test_next_lock_deadline_follows_the_earliest_live_lock() -> None:
    sp = SharePartitionState(0)
    assert sp.next_lock_deadline() is None
    sp.acquire("a", [(0, 4)], 500, now=0.0)
    sp.acquire("b", [(5, 9)], 500, now=5.0)
    assert sp.next_lock_deadline() == LOCK
    sp.acknowledge("a", [ack(0, 3, ACCEPT)])
    assert sp.next_lock_deadline() == LOCK  # 4 is still locked
    sp.acknowledge("a", [ack(4, 4, ACCEPT)])
    assert sp.next_lock_deadline() == 5.0 + LOCK
    assert not sp.expire_locks(LOCK + 1.0)
    assert sp.expire_locks(5.0 + LOCK)
    assert sp.next_lock_deadline() is None


def test_many_redeliveries_keep_the_timer_right_and_its_bookkeeping_bounded() -> None:
    sp = SharePartitionState(0, ShareLimits(delivery_count_limit=1000))
    sp.acquire("a", [(0, 1)], 500, now=0.0)
    for now in range(1, 301):
        assert sp.acknowledge("a", [ack(1, 1, RELEASE)]) == E.none
        assert sp.acquire("a", [(1, 1)], 500, now=float(now)) == [AcquiredRange(1, 1, now + 1)]
    # 301 locks were taken on a window of two records: the stale ones are not all kept.
    assert len(sp._locks) < 100 and len(sp._available) < 100
    assert sp.next_lock_deadline() == LOCK
    assert sp.acknowledge("a", [ack(0, 0, ACCEPT)]) == E.none
    assert sp.next_lock_deadline() == 300.0 + LOCK
    assert not sp.expire_locks(299.0 + LOCK)
    assert sp.expire_locks(300.0 + LOCK)
    assert sp.record(1) == RecordView(RecordState.AVAILABLE, 301, None, None)
    assert sp.next_fetch_offset() == 1


def test_a_new_lock_duration_applies_to_later_acquisitions() -> None:
    sp = SharePartitionState(0)
    sp.acquire("a", [(0, 0)], 500, now=0.0)
    sp.limits = replace(sp.limits, lock_duration_s=5.0)
    sp.acquire("a", [(1, 1)], 500, now=0.0)
    assert sp.record(0) == RecordView(RecordState.ACQUIRED, 1, "a", LOCK)
    assert sp.next_lock_deadline() == 5.0


def test_a_lowered_delivery_limit_archives_available_records_already_at_it() -> None:
    sp = SharePartitionState(0)
    for now in (0.0, 1.0, 2.0):
        sp.acquire("a", [(0, 1)], 500, now=now)
        sp.acknowledge("a", [ack(0, 1, RELEASE)])
    sp.limits = replace(sp.limits, delivery_count_limit=3)
    assert sp.acquire("a", [(0, 1), (2, 2)], 500, now=3.0) == [AcquiredRange(2, 2, 1)]
    assert sp.start_offset == 2


def test_offsets_between_fetched_batches_are_archived_not_delivered() -> None:
    sp = SharePartitionState(0)
    sp.acquire("a", [(0, 1)], 500, now=0.0)
    # Compaction removed 2-4 and 8-9 whole; 10's batch holds 10-12.
    got = sp.acquire("a", [(5, 7), (10, 12)], 500, now=1.0)
    assert got == [AcquiredRange(5, 7, 1), AcquiredRange(10, 12, 1)]
    assert sp.record(3) == RecordView(RecordState.ARCHIVED, 0, None, None)
    assert sp.acknowledge("a", [ack(0, 1, ACCEPT)]) == E.none
    assert sp.start_offset == 5


def test_a_hole_after_everything_done_is_jumped_not_filled() -> None:
    sp = SharePartitionState(0, ShareLimits(max_record_locks=10))
    sp.acquire("a", [(0, 1)], 500, now=0.0)
    sp.acknowledge("a", [ack(0, 1, ACCEPT)])
    # 2..999 compacted away: one fetch gets past them, whatever the window cap.
    assert sp.acquire("a", [(1000, 1004)], 500, now=1.0) == [AcquiredRange(1000, 1004, 1)]
    assert (sp.start_offset, sp.end_offset) == (1000, 1004)


def test_a_hole_behind_a_held_record_fills_the_window_up_to_the_cap() -> None:
    sp = SharePartitionState(0, ShareLimits(max_record_locks=10))
    sp.acquire("a", [(0, 0)], 500, now=0.0)
    assert sp.acquire("a", [(100, 104)], 500, now=1.0) == []
    assert (sp.start_offset, sp.end_offset) == (0, 9)
    assert not sp.can_acquire()
    sp.acknowledge("a", [ack(0, 0, ACCEPT)])
    assert sp.start_offset == 10 and sp.next_fetch_offset() == 10
    assert sp.acquire("a", [(100, 104)], 500, now=2.0) == [AcquiredRange(100, 104, 1)]


def test_a_lowered_window_cap_stops_new_offsets_but_keeps_what_is_in_flight() -> None:
    sp = SharePartitionState(0)
    sp.acquire("a", [(0, 9)], 500, now=0.0)
    sp.limits = replace(sp.limits, max_record_locks=4)
    assert not sp.can_acquire()
    assert sp.acquire("a", [(20, 24)], 500, now=1.0) == []  # 10-19 compacted away
    assert (sp.start_offset, sp.end_offset) == (0, 9)
    # Inside the window, released records are still redelivered, past the lowered cap too.
    assert sp.acknowledge("a", [ack(3, 3, RELEASE), ack(8, 8, RELEASE)]) == E.none
    got = sp.acquire("b", [(0, 4), (5, 9), (20, 24)], 500, now=2.0)
    assert got == [AcquiredRange(3, 3, 2), AcquiredRange(8, 8, 2)]
    assert sp.acknowledge("a", [ack(0, 2, ACCEPT), ack(4, 7, ACCEPT), ack(9, 9, ACCEPT)]) == E.none
    assert sp.acknowledge("b", [ack(3, 3, ACCEPT), ack(8, 8, ACCEPT)]) == E.none
    assert sp.acquire("a", [(20, 24)], 500, now=3.0) == [AcquiredRange(20, 23, 1)]


def test_a_redelivered_batch_compacted_away_whole_is_archived_with_the_fetch_offset() -> None:
    sp = SharePartitionState(0, ShareLimits(lock_duration_s=10.0))
    sp.acquire("a", [(0, 2), (3, 5)], 500, now=0.0)
    sp.acknowledge("a", [ack(3, 5, ACCEPT)])
    sp.expire_locks(10.0)
    assert sp.next_fetch_offset() == 0
    # Read from 0, the log now starts its batches at 3 (0-2 compacted away) and 6 is new.
    fetched = [(3, 5), (6, 6)]
    assert sp.acquire("b", fetched, 500, now=11.0, fetch_offset=0) == [AcquiredRange(6, 6, 1)]
    assert sp.start_offset == 6


def test_acquire_rejects_unordered_batches() -> None:
    sp = SharePartitionState(0)
    with pytest.raises(ValueError):
        sp.acquire("a", [(3, 4), (0, 2)], 500, now=0.0)
    with pytest.raises(ValueError):
        sp.acquire("a", [(4, 3)], 500, now=0.0)


# -- the property test ---------------------------------------------------------------------

MEMBERS = ("a", "b", "c")
PLIMITS = ShareLimits(lock_duration_s=10.0, delivery_count_limit=3, max_record_locks=8)


class Model:
    """What the test knows from the answers alone: who holds what until when, what was
    delivered how often, and which offsets are done."""

    def __init__(self) -> None:
        self.held: dict[int, tuple[str, float]] = {}
        self.count: dict[int, int] = {}
        self.done: set[int] = set()
        self.written: dict[int, int] = {}  # delivery counts a release wrote to the store

    def release(self, offset: int) -> None:
        del self.held[offset]
        self.written[offset] = self.count[offset]
        if self.count[offset] >= PLIMITS.delivery_count_limit:
            self.done.add(offset)


def layout(sizes: list[int]) -> list[tuple[int, int]]:
    batches, base = [], 0
    for size in sizes:
        batches.append((base, base + size - 1))
        base += size
    return batches


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=15), data=st.data())
def test_random_operations_keep_the_share_partition_promises(
    sizes: list[int], data: st.DataObject
) -> None:
    log = layout(sizes)
    hwm = log[-1][1] + 1
    sp = SharePartitionState(0, PLIMITS)
    m = Model()
    store = ShareStore()  # what the partition's replicas hold of it, from its start on
    store.apply(1, encode([ShareUpdate("g", 0)]))
    now = 0.0
    spso = 0
    for _ in range(data.draw(st.integers(1, 40), label="steps")):
        op = data.draw(st.sampled_from(["fetch", "ack", "renew", "release", "expire", "restore"]))
        member = data.draw(st.sampled_from(MEMBERS))
        if op == "fetch":
            start = sp.next_fetch_offset()
            fetched = [b for b in log if b[1] >= start][: data.draw(st.integers(1, 4))]
            before = {o: sp.record(o) for o in range(hwm)}
            max_records = data.draw(st.integers(1, 6))
            got = sp.acquire(member, fetched, max_records, now)
            # soft: no batch (of at most 4 here) is started once max_records is reached
            assert sum(r.last_offset - r.first_offset + 1 for r in got) < max_records + 4
            for r in got:
                for o in range(r.first_offset, r.last_offset + 1):
                    assert o not in m.done, f"{o} delivered again after it was done"
                    assert o not in m.held, f"{o} acquired by {member} while {m.held[o]} holds it"
                    view = before[o]
                    assert view is None or view.state is RecordState.AVAILABLE
                    assert r.delivery_count == m.count.get(o, 0) + 1
                    m.count[o] = r.delivery_count
                    m.held[o] = (member, now + PLIMITS.lock_duration_s)
            assert sp.end_offset - sp.start_offset + 1 <= PLIMITS.max_record_locks
        elif op == "ack":
            own = sorted(o for o, (h, _) in m.held.items() if h == member)
            pool = own if own and data.draw(st.booleans()) else list(range(hwm))
            chosen = sorted(data.draw(st.sets(st.sampled_from(pool), min_size=1, max_size=5)))
            runs: list[list[int]] = []
            for o in chosen:
                if runs and runs[-1][-1] == o - 1:
                    runs[-1].append(o)
                else:
                    runs.append([o])
            types = st.sampled_from([int(t) for t in AckType if t is not AckType.RENEW])
            batches, applied = [], {}
            for run in runs:
                if len(run) > 1 and data.draw(st.booleans()):
                    per = tuple(data.draw(types) for _ in run)
                else:
                    per = (data.draw(types),)
                batches.append(AckBatch(run[0], run[-1], per))
                for i, o in enumerate(run):
                    applied[o] = per[0] if len(per) == 1 else per[i]
            live = [o for o in applied if o >= sp.start_offset]
            ok = all(m.held.get(o, ("", 0.0))[0] == member for o in live)
            before_window = window(sp)
            result = sp.acknowledge(member, batches)
            if ok:
                assert result == E.none
                for o in live:
                    if applied[o] == RELEASE:
                        m.release(o)
                    else:
                        del m.held[o]
                        m.done.add(o)
            else:
                assert result in (E.invalid_record_state, E.invalid_request)
                assert window(sp) == before_window
        elif op == "renew":
            own = sorted(o for o, (h, _) in m.held.items() if h == member)
            if own:
                chosen = data.draw(st.sets(st.sampled_from(own), min_size=1))
                batches = [AckBatch(o, o, (AckType.RENEW,)) for o in sorted(chosen)]
                assert sp.acknowledge(member, batches, now=now) == E.none
                for o in chosen:
                    m.held[o] = (member, now + PLIMITS.lock_duration_s)
        elif op == "release":
            mine = [o for o, (h, _) in m.held.items() if h == member]
            assert sp.release_member(member) == bool(mine)
            for o in mine:
                m.release(o)
        elif op == "expire":
            now += data.draw(st.sampled_from([0.5, 5.0, 10.0]))
            expired = [o for o, (_, d) in m.held.items() if d <= now]
            assert sp.expire_locks(now) == bool(expired)
            for o in expired:
                m.release(o)
        else:  # a new leader, from what was written: locks are lost, and with them the
            # deliveries nothing was written for since (acquisitions are not written)
            stored = store.get("g")
            assert stored is not None
            sp = SharePartitionState.restore(stored.start_offset, stored.runs(), PLIMITS)
            for o in list(m.held):
                del m.held[o]
                m.count[o] = m.written.get(o, 0)
        persisted(sp, store)

        assert sp.start_offset >= spso, "SPSO went back"
        spso = sp.start_offset
        assert all(o in m.done for o in range(spso)), "an offset below SPSO is not done"
        for o in range(spso, sp.end_offset + 1):
            view = sp.record(o)
            assert view is not None
            holder = m.held.get(o)
            assert view.owner == (holder[0] if holder else None)
            assert (view.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)) == (o in m.done)
        deadlines = [d for _, d in m.held.values()]
        assert sp.next_lock_deadline() == (min(deadlines) if deadlines else None)


def test_proxy_members_acknowledge_each_others_records_and_no_one_elses() -> None:
    sp = SharePartitionState(0)
    proxy_a, proxy_b = PROXY_MEMBER_PREFIX + "a", PROXY_MEMBER_PREFIX + "b"
    sp.acquire(proxy_a, [(0, 1)], 500, now=0.0)
    sp.acquire("native", [(2, 3)], 500, now=0.0)
    assert sp.acknowledge("native", [ack(0, 0, ACCEPT)]) == E.invalid_record_state
    assert sp.acknowledge(proxy_b, [ack(2, 2, ACCEPT)]) == E.invalid_record_state
    assert sp.acknowledge(proxy_b, [ack(0, 0, ACCEPT), ack(1, 1, RELEASE)]) == E.none
    assert sp.start_offset == 1 and sp.record(1) == RecordView(RecordState.AVAILABLE, 1, None, None)


def test_record_limit_acquires_exactly_max_records_and_the_rest_of_the_batch_later() -> None:
    sp = SharePartitionState(0)
    assert sp.acquire("a", [(0, 9)], 3, now=0.0, record_limit=True) == [AcquiredRange(0, 2, 1)]
    assert sp.next_fetch_offset() == 3  # mid-batch: the next read starts in the same batch
    assert sp.acquire("b", [(0, 9)], 4, now=0.0, record_limit=True) == [AcquiredRange(3, 6, 1)]
    assert sp.acknowledge("a", [ack(0, 2, RELEASE)]) == E.none
    got = sp.acquire("c", [(0, 9)], 5, now=0.0, record_limit=True)
    assert got == [AcquiredRange(0, 2, 2), AcquiredRange(7, 8, 1)]  # redelivery first
    assert sp.acquire("c", [(0, 9)], 5, now=0.0) == [AcquiredRange(9, 9, 1)]


def test_renew_restarts_the_lock_and_changes_nothing_durable() -> None:
    sp = SharePartitionState(0, ShareLimits(lock_duration_s=10.0))
    sp.acquire("a", [(0, 1)], 500, now=0.0)
    assert sp.take_update() is None
    assert sp.acknowledge("a", [ack(0, 1, AckType.RENEW)], now=8.0) == E.none
    assert sp.take_update() is None
    assert not sp.expire_locks(10.0)  # the old deadline passed: still held
    assert sp.record(0) == RecordView(RecordState.ACQUIRED, 1, "a", 18.0)
    assert sp.next_lock_deadline() == 18.0
    assert sp.expire_locks(18.0) and sp.record(1) == RecordView(
        RecordState.AVAILABLE, 1, None, None
    )
    assert sp.acknowledge("b", [ack(0, 0, AckType.RENEW)], now=20.0) == E.invalid_record_state
