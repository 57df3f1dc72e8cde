"""One share-partition's record states (KIP-932; Kafka's SharePartition): which offsets of a
partition are in flight for one share group, who holds each and until when, how often each
was delivered, and where the group's start offset (SPSO) stands.

Pure: no I/O and no clock. Time comes in as `now` (seconds), so the ShareFetch layer drives
it from its own clock and the tests need none. Nothing here awaits, so a call runs whole:
asyncio needs no lock around it (Kafka's per-partition fetch lock).

The window [SPSO, SPEO] is dense: every offset in it has a small record of its own, in a
dict. Kafka keeps batches and splits them per offset when acks or releases cut them; a
record per offset is simpler and costs at most `max_record_locks` records, a hard cap here.
Just over 500 lines because Kafka's rules for acquiring, acknowledging, releasing, expiring
and restoring all move the same window and must be read together.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from raftlog.common.errors import ErrorCode
from raftlog.share.store import Run, to_runs


class RecordState(enum.IntEnum):
    """Kafka's ids, also those of ShareSnapshot/ShareUpdate state batches (3 is unused)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(enum.IntEnum):
    """The acknowledge types of ShareFetch/ShareAcknowledge (RENEW is v2's, KIP-1222: the
    lock starts over, the record stays with its member)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


_ACK_TYPES = frozenset(int(t) for t in AckType)
# Members of the consume proxy (consume_proxy/member.py). The proxy tier holds what it hands
# out over HTTP as one party: any proxy member may acknowledge a record another one acquired
# (kafka-consume-srv's contract: an acknowledgement need not go to the server that read it).
PROXY_MEMBER_PREFIX = "raftlog-proxy-"


def _may_acknowledge(owner: str | None, member: str) -> bool:
    return owner == member or (
        owner is not None
        and owner.startswith(PROXY_MEMBER_PREFIX)
        and member.startswith(PROXY_MEMBER_PREFIX)
    )


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """A run of offsets acquired by one call, all with the same delivery count: the
    `acquired_records` entries of a ShareFetch answer."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AckBatch:
    """One acknowledgement batch as the client sends it: one type for the whole range, or
    one per offset."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ShareLimits:
    """The group's settings that bound a share-partition."""

    lock_duration_s: float = 30.0  # group.share.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    max_record_locks: int = 2000  # group.share.partition.max.record.locks (in-flight window)


DEFAULT_LIMITS = ShareLimits()


@dataclass(frozen=True, slots=True)
class RecordView:
    """What `record()` shows of one in-flight offset (for describe, the CLI and tests)."""

    state: RecordState
    delivery_count: int
    owner: str | None  # the member holding it, while ACQUIRED
    lock_deadline: float | None  # while ACQUIRED


class _Record:
    __slots__ = ("count", "deadline", "owner", "state")

    def __init__(
        self, state: RecordState, count: int, owner: str | None = None, deadline: float = 0.0
    ) -> None:
        self.state = state
        self.count = count
        self.owner = owner
        self.deadline = deadline


def _terminal(state: RecordState) -> bool:
    return state is RecordState.ACKNOWLEDGED or state is RecordState.ARCHIVED


def _valid_ack_batches(batches: Sequence[AckBatch]) -> bool:
    """Kafka's validateAcknowledgementBatches: any failure makes the partition's whole
    acknowledgement INVALID_REQUEST."""
    previous_last: int | None = None
    for batch in batches:
        size = batch.last_offset - batch.first_offset + 1
        if size <= 0 or not batch.types or len(batch.types) not in (1, size):
            return False
        if any(t not in _ACK_TYPES for t in batch.types):
            return False
        if previous_last is not None and batch.first_offset <= previous_last:
            return False
        previous_last = batch.last_offset
    return True


class SharePartitionState:
    """The in-flight records of one (share group, topic partition).

    SPSO (`start_offset`) is the first offset not yet ACKNOWLEDGED or ARCHIVED; SPEO
    (`end_offset`) the last offset acquired so far, SPSO - 1 when nothing is in flight.
    Offsets below SPSO are done; offsets past SPEO were never delivered.
    """

    def __init__(self, start_offset: int, limits: ShareLimits = DEFAULT_LIMITS) -> None:
        self._start = start_offset
        self._end = start_offset - 1
        self._limits = limits
        self._records: dict[int, _Record] = {}
        # Min-heaps with lazy deletion, so that a fetch and the lock timer need not walk the
        # window: offsets that became AVAILABLE, and (deadline, first, last, delivery count)
        # of each acquired range. An entry is stale once its offset left that state (or that
        # delivery: a count is only reached once), and is dropped when it reaches the top.
        self._available: list[int] = []
        self._locks: list[tuple[float, int, int, int]] = []
        # For the durable store (store.py): offsets whose state or count changed since the
        # last take_update, and the SPSO it last reported.
        self._dirty: set[int] = set()
        self._reported_start = start_offset

    # -- reading ------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        """SPSO: the first offset not yet ACKNOWLEDGED or ARCHIVED."""
        return self._start

    @property
    def end_offset(self) -> int:
        """SPEO: the last offset acquired so far (SPSO - 1 when nothing is in flight)."""
        return self._end

    @property
    def limits(self) -> ShareLimits:
        return self._limits

    @limits.setter
    def limits(self, limits: ShareLimits) -> None:
        """A group config change: applies to later acquisitions, releases and locks; locks
        already taken keep their deadlines, a smaller window cap only stops new offsets."""
        self._limits = limits

    def next_fetch_offset(self) -> int:
        """Where the next fetch reads from: the lowest AVAILABLE offset in the window
        (redelivery first), else SPEO + 1."""
        heap, records = self._available, self._records
        while heap:
            record = records.get(heap[0])
            if record is not None and record.state is RecordState.AVAILABLE:
                return heap[0]
            heapq.heappop(heap)
        return self._end + 1

    def can_acquire(self) -> bool:
        """False when the window is full and nothing in it is AVAILABLE: fetching then would
        acquire nothing (Kafka's canAcquireRecords)."""
        if self.next_fetch_offset() <= self._end:
            return True
        return self._end - self._start + 1 < self._limits.max_record_locks

    def next_lock_deadline(self) -> float | None:
        """The earliest deadline of a record still ACQUIRED, for the caller's timer."""
        heap = self._locks
        while heap:
            deadline, first, last, count = heap[0]
            offset = first
            while offset <= last and not self._locked(offset, count, deadline):
                offset += 1
            if offset > last:
                heapq.heappop(heap)
            else:
                if offset != first:  # trimmed, so the next call starts at a live offset
                    heapq.heapreplace(heap, (deadline, offset, last, count))
                return deadline
        return None

    def record(self, offset: int) -> RecordView | None:
        """One in-flight offset's state; None outside [SPSO, SPEO]."""
        record = self._records.get(offset)
        if record is None:
            return None
        acquired = record.state is RecordState.ACQUIRED
        return RecordView(
            record.state,
            record.count,
            record.owner if acquired else None,
            record.deadline if acquired else None,
        )

    def counts(self) -> dict[RecordState, int]:
        """In-flight records by state (for describe and the CLI). Walks the window."""
        counts = dict.fromkeys(RecordState, 0)
        for record in self._records.values():
            counts[record.state] += 1
        return counts

    def take_update(self) -> tuple[int, list[Run]] | None:
        """What the durable store lacks since the last call: SPSO and the changed offsets'
        (first, last, state, delivery count) runs; None when nothing changed. A lock does not
        outlive its leader, so ACQUIRED shows as AVAILABLE, its delivery count kept: the
        delivery may have happened, and a record that keeps killing its consumers still
        reaches the delivery limit. Acquisitions alone are not reported, as in Kafka: a new
        leader hands those records out again (at least once) and, if they were new, counts
        from 0."""
        dirty = sorted(o for o in self._dirty if o >= self._start)
        self._dirty.clear()
        if not dirty and self._start == self._reported_start:
            return None
        self._reported_start = self._start
        records = self._records

        def written(offset: int) -> tuple[int, int, int]:
            record = records[offset]
            acquired = record.state is RecordState.ACQUIRED
            return offset, RecordState.AVAILABLE if acquired else record.state, record.count

        runs = to_runs(written(o) for o in dirty)
        return self._start, runs

    @classmethod
    def restore(
        cls,
        start_offset: int,
        batches: Sequence[tuple[int, int, int, int]],
        limits: ShareLimits,
    ) -> SharePartitionState:
        """A new leader's state from the stored one (store.py). A lost lock is treated as an
        expired one: ACQUIRED (which `take_update` shows as AVAILABLE) comes back AVAILABLE, or ARCHIVED
        if its delivery count has reached the limit. Offsets between batches were never
        delivered (Kafka persists only what changed): AVAILABLE, count 0. Parts of batches
        below `start_offset` are dropped."""
        state = cls(start_offset, limits)
        records = state._records
        end = start_offset - 1
        previous_last: int | None = None
        for first, last, batch_state, count in batches:
            if first > last or (previous_last is not None and first <= previous_last):
                raise ValueError(f"state batches not ascending and disjoint at {first}-{last}")
            previous_last = last
            kind = RecordState(batch_state)
            if kind is RecordState.ACQUIRED:
                kind = RecordState.AVAILABLE
            if kind is RecordState.AVAILABLE and count >= limits.delivery_count_limit:
                kind = RecordState.ARCHIVED
            if last < start_offset:
                continue
            for offset in range(end + 1, first):
                records[offset] = _Record(RecordState.AVAILABLE, 0)
                state._available.append(offset)
            for offset in range(max(first, start_offset), last + 1):
                records[offset] = _Record(kind, count)
                if kind is RecordState.AVAILABLE:
                    state._available.append(offset)
            end = last
        state._end = end
        heapq.heapify(state._available)
        state._advance_start()
        state._reported_start = start_offset
        return state

    # -- changing ------------------------------------------------------------------------

    def acquire(
        self,
        member: str,
        batches: Sequence[tuple[int, int]],
        max_records: int,
        now: float,
        *,
        fetch_offset: int | None = None,
        record_limit: bool = False,
    ) -> list[AcquiredRange]:
        """Acquires for `member` what the fetched `batches` hold: their AVAILABLE in-flight
        offsets, and new offsets past SPEO. Returns the acquired ranges, ascending, one per
        run of contiguous offsets with the same delivery count.

        `batches` are the (base_offset, last_offset) of the record batches read from the log,
        ascending and disjoint, from a read that started at or below SPEO + 1 (at
        `next_fetch_offset()`). Offsets inside a batch are acquired even where compaction
        emptied them: the client acks those as GAP. Offsets the read covered that no batch
        holds are gone from the log: ARCHIVED without a delivery, new ones and AVAILABLE
        in-flight ones alike, so SPSO can pass them. Pass `fetch_offset` (where the read
        started) so that AVAILABLE offsets before the first batch count as covered too:
        otherwise a batch compacted away whole after its first delivery would hold SPSO.

        `max_records` is soft, as in Kafka's batch-optimized mode: batches are taken whole,
        and no batch is started once it is reached; with `record_limit` (ShareFetch v2's
        record-limit mode) it is exact, and the rest of a batch stays for later fetches. The window is a hard cap: SPEO never
        passes SPSO + max_record_locks - 1, even in the middle of a batch (the rest of it is
        fetched again later); Kafka lets its last batch overshoot the window instead.

        Each acquired offset: delivery count + 1 (first delivery 1), owner `member`, lock
        deadline `now + lock_duration_s`. An AVAILABLE offset already at the delivery limit
        (the limit was lowered since) is ARCHIVED instead, as librdkafka's mock broker does.
        """
        if max_records <= 0 or not batches:
            return []
        previous_last: int | None = None
        for base, last in batches:
            if base > last or (previous_last is not None and base <= previous_last):
                raise ValueError(f"fetched batches not ascending and disjoint at {base}-{last}")
            previous_last = last
        limits = self._limits
        records = self._records
        deadline = now + limits.lock_duration_s
        taken: list[tuple[int, int]] = []  # (offset, delivery count)
        covered = batches[0][0] if fetch_offset is None else min(fetch_offset, batches[0][0])
        for base, last in batches:
            if len(taken) >= max_records:
                break
            # The read covered [covered, base) and found nothing there.
            self._archive_available(max(covered, self._start), min(base - 1, self._end))
            self._advance_start()
            cap = self._start + limits.max_record_locks - 1  # the last offset SPEO may reach
            if base > self._end + 1:
                if self._start > self._end:  # nothing in flight: the window jumps the hole
                    self._start, self._end = base, base - 1
                    cap = self._start + limits.max_record_locks - 1
                else:
                    stop = min(base - 1, cap)
                    for offset in range(self._end + 1, stop + 1):
                        records[offset] = _Record(RecordState.ARCHIVED, 0)
                    self._end = max(self._end, stop)  # a lowered cap may be behind SPEO
                    if stop < base - 1:
                        break
            # In flight: redeliver what is AVAILABLE.
            for offset in range(max(base, self._start), min(last, self._end) + 1):
                if record_limit and len(taken) >= max_records:
                    break
                record = records[offset]
                if record.state is not RecordState.AVAILABLE:
                    continue
                if record.count >= limits.delivery_count_limit:
                    record.state = RecordState.ARCHIVED
                    self._dirty.add(offset)
                    continue
                record.state = RecordState.ACQUIRED
                record.count += 1
                record.owner = member
                record.deadline = deadline
                taken.append((offset, record.count))
            # New: past SPEO, up to the window cap.
            first_new = max(base, self._end + 1)
            last_new = min(last, cap)
            if record_limit:
                last_new = min(last_new, first_new + max_records - len(taken) - 1)
            for offset in range(first_new, last_new + 1):
                records[offset] = _Record(RecordState.ACQUIRED, 1, member, deadline)
                taken.append((offset, 1))
            if last_new >= first_new:
                self._end = last_new
            if last > max(cap, self._end):  # the window or the limit is reached mid-batch
                break
            covered = last + 1
        self._advance_start()
        ranges = _merge(taken)
        for acquired in ranges:
            heapq.heappush(
                self._locks,
                (deadline, acquired.first_offset, acquired.last_offset, acquired.delivery_count),
            )
        self._maybe_rebuild_heaps()
        return ranges

    def archive_acquired(
        self, acquired: list[AcquiredRange], hidden: Sequence[tuple[int, int]]
    ) -> list[AcquiredRange]:
        """Of what acquire() just returned, the offsets inside the ascending (first, last)
        spans of `hidden` (an aborted transaction's batches, for a read_committed group)
        become ARCHIVED, never delivered; returns the ranges that stay acquired."""
        records, kept, spans = self._records, [], iter(hidden)
        span = next(spans, None)
        for acquired_range in acquired:
            for offset in range(acquired_range.first_offset, acquired_range.last_offset + 1):
                while span is not None and span[1] < offset:
                    span = next(spans, None)
                if span is not None and span[0] <= offset:
                    record = records[offset]
                    record.state, record.owner = RecordState.ARCHIVED, None
                    self._dirty.add(offset)
                else:
                    kept.append((offset, acquired_range.delivery_count))
        self._advance_start()
        return _merge(kept)

    def acknowledge(
        self, member: str, batches: Sequence[AckBatch], now: float | None = None
    ) -> ErrorCode:
        """Applies a member's acknowledgements for this partition, all or nothing (Kafka's
        rollbackOrProcessStateUpdates): on any error nothing changes.

        INVALID_REQUEST: malformed batches (first > last, not ascending and disjoint, no
        types, a types list neither 1 nor one per offset long, a type outside 0..4), or
        offsets past SPEO (never acquired). INVALID_RECORD_STATE: an offset in the window not
        ACQUIRED by `member` (a late ack after the lock expired, or one re-acquired by
        another member; proxy members count as one, see PROXY_MEMBER_PREFIX). Offsets below
        SPSO are skipped: they are done already.

        ACCEPT -> ACKNOWLEDGED; REJECT and GAP -> ARCHIVED; RELEASE -> AVAILABLE, or
        ARCHIVED once the delivery count has reached the limit; RENEW keeps the record
        ACQUIRED with a lock until `now` + the lock duration. Then SPSO moves."""
        if not _valid_ack_batches(batches):
            return ErrorCode.invalid_request
        start, end, records = self._start, self._end, self._records
        plan: list[tuple[int, _Record, int]] = []
        for batch in batches:
            if batch.last_offset < start:
                continue
            if batch.last_offset > end:
                return ErrorCode.invalid_request
            single = len(batch.types) == 1
            for offset in range(max(batch.first_offset, start), batch.last_offset + 1):
                record = records[offset]
                if record.state is not RecordState.ACQUIRED or not _may_acknowledge(
                    record.owner, member
                ):
                    return ErrorCode.invalid_record_state
                kind = batch.types[0] if single else batch.types[offset - batch.first_offset]
                plan.append((offset, record, kind))
        for offset, record, kind in plan:
            if kind == AckType.RENEW:  # nothing durable changes: locks die with the leader
                if now is None:
                    raise ValueError("a RENEW needs the time it is renewed at")
                record.deadline = now + self._limits.lock_duration_s
                heapq.heappush(self._locks, (record.deadline, offset, offset, record.count))
                continue
            self._dirty.add(offset)
            if kind == AckType.ACCEPT:
                record.state = RecordState.ACKNOWLEDGED
                record.owner = None
            elif kind == AckType.RELEASE:
                self._release(offset, record)
            else:  # REJECT, GAP
                record.state = RecordState.ARCHIVED
                record.owner = None
        self._advance_start()
        return ErrorCode.none

    def release_member(self, member: str) -> bool:
        """The member's session ended (or its connection closed): its ACQUIRED records
        become AVAILABLE, or ARCHIVED at the delivery limit. Walks the window. True if
        anything changed."""
        changed = False
        for offset, record in self._records.items():
            if record.state is RecordState.ACQUIRED and record.owner == member:
                self._release(offset, record)
                changed = True
        if changed:
            self._advance_start()
        return changed

    def expire_locks(self, now: float) -> bool:
        """ACQUIRED records whose lock deadline is at or before `now` become AVAILABLE, or
        ARCHIVED at the delivery limit. Costs the expired ranges, not the window. True if
        anything changed."""
        heap, records = self._locks, self._records
        changed = False
        while heap and heap[0][0] <= now:
            deadline, first, last, count = heapq.heappop(heap)
            for offset in range(max(first, self._start), min(last, self._end) + 1):
                if self._locked(offset, count, deadline):
                    self._release(offset, records[offset])
                    changed = True
        if changed:
            self._advance_start()
        return changed

    def log_start_moved(self, log_start_offset: int) -> None:
        """Retention or DeleteRecords removed the log below `log_start_offset`: its records
        are gone, so whatever state they had they are ARCHIVED, and SPSO moves up to it.
        Kafka leaves ACQUIRED ones acquired until their lock expires; either way the
        client's late ack of them is skipped (below SPSO) and they are never redelivered."""
        if log_start_offset <= self._start:
            return
        for offset in range(self._start, min(log_start_offset, self._end + 1)):
            del self._records[offset]
        self._start = log_start_offset
        self._end = max(self._end, log_start_offset - 1)
        self._advance_start()

    # -- inside --------------------------------------------------------------------------

    def _locked(self, offset: int, count: int, deadline: float) -> bool:
        """Whether `offset` is still held by the acquisition that gave it `count`, under the
        lock that ends at `deadline` (a RENEW gives it a later one)."""
        record = self._records.get(offset)
        return (
            record is not None
            and record.state is RecordState.ACQUIRED
            and record.count == count
            and record.deadline == deadline
        )

    def _release(self, offset: int, record: _Record) -> None:
        """ACQUIRED -> AVAILABLE, or ARCHIVED once delivered `delivery_count_limit` times."""
        record.owner = None
        self._dirty.add(offset)
        if record.count >= self._limits.delivery_count_limit:
            record.state = RecordState.ARCHIVED
        else:
            record.state = RecordState.AVAILABLE
            heapq.heappush(self._available, offset)

    def _archive_available(self, first: int, last: int) -> None:
        """AVAILABLE records in [first, last] whose offsets the log no longer has."""
        records = self._records
        for offset in range(first, last + 1):
            record = records[offset]
            if record.state is RecordState.AVAILABLE:
                record.state = RecordState.ARCHIVED

    def _advance_start(self) -> None:
        """SPSO passes the done (ACKNOWLEDGED/ARCHIVED) records at the head of the window,
        which are then forgotten; if all are done, SPSO = SPEO + 1."""
        start, end, records = self._start, self._end, self._records
        while start <= end and _terminal(records[start].state):
            del records[start]
            start += 1
        self._start = start

    def _maybe_rebuild_heaps(self) -> None:
        """Stale heap entries are dropped only when they reach the top; rebuilt from the
        records once a heap holds more than twice the window, so both stay bounded by it."""
        bound = 2 * (self._end - self._start + 1) + 64
        if len(self._available) > bound:
            self._available = [
                o for o, r in self._records.items() if r.state is RecordState.AVAILABLE
            ]
            heapq.heapify(self._available)
        if len(self._locks) > bound:
            locks: list[tuple[float, int, int, int]] = []
            for offset in range(self._start, self._end + 1):
                r = self._records[offset]
                if r.state is not RecordState.ACQUIRED:
                    continue
                if locks:
                    d, first, last, count = locks[-1]
                    if last == offset - 1 and d == r.deadline and count == r.count:
                        locks[-1] = (d, first, offset, count)
                        continue
                locks.append((r.deadline, offset, offset, r.count))
            heapq.heapify(locks)
            self._locks = locks


def _merge(taken: list[tuple[int, int]]) -> list[AcquiredRange]:
    """Ascending (offset, count) pairs -> ranges of contiguous offsets with one count."""
    runs: list[list[int]] = []  # [first, last, count]
    for offset, count in taken:
        if runs and runs[-1][1] == offset - 1 and runs[-1][2] == count:
            runs[-1][1] = offset
        else:
            runs.append([offset, offset, count])
    return [AcquiredRange(first, last, count) for first, last, count in runs]
