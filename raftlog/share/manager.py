"""The share-partition states this node holds as a partition leader (Kafka's
SharePartitionManager): which records each share group has handed out, to whom, until when.

The live state (locks, owners) is the leader's, in memory. What must outlive it (SPSO, each
offset's state and delivery count) goes into the partition's own Raft log as it changes
(store.py): an acknowledgement is answered once that update is committed, and a new leader
resumes from the committed state, its predecessor's locks treated as expired. A group's first
fetch from a partition starts it at `share.auto.offset.reset`, and that start is committed
before any record is handed out. Records are acquired straight from the log, so a fetch
costs what a Fetch costs plus the bookkeeping of the offsets it hands out."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from raftlog.api.values import Partition
from raftlog.common.clock import LOOP_CLOCK, Clock, Timer
from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.config import group_config as gc
from raftlog.share.partition_state import (
    AckBatch,
    AcquiredRange,
    RecordState,
    ShareLimits,
    SharePartitionState,
)
from raftlog.share.sessions import LEAVE_GRACE_SECONDS, Key, ShareSession, ShareSessions
from raftlog.share.store import ShareUpdate
from raftlog.storage.batch import iter_batches

log = logging.getLogger(__name__)

READ_START_BYTES = 256 * 1024  # a share fetch's first read of the log (_read_for)


@dataclass(frozen=True, slots=True)
class Fetched:
    """What one partition hands a member in one ShareFetch: the log's bytes from the first
    acquired offset, and the ranges it now holds (the client keeps only those)."""

    records: bytes
    acquired: list[AcquiredRange]


@dataclass(frozen=True, slots=True)
class ShareView:
    """What describe shows of one group's state of one partition this node leads."""

    start_offset: int  # SPSO
    end_offset: int  # SPEO: the last offset delivered so far (SPSO - 1: none in flight)
    counts: dict[str, int]  # in-flight records by state name
    live: bool  # the leader's live state (with locks), not only the committed one


class _Held:
    """One group's state of one partition, tied to the leadership (partition, epoch) it was
    built under: another leader's state is not this one's."""

    __slots__ = ("state", "partition", "epoch", "incarnation", "timer", "due")

    def __init__(
        self, state: SharePartitionState, partition: Partition, epoch: int, incarnation: int
    ) -> None:
        self.state = state
        self.partition = partition
        self.epoch = epoch
        self.incarnation = incarnation
        self.timer: Timer | None = None
        self.due: float | None = None


class ShareManager:
    def __init__(
        self,
        group_config: Callable[[str], Mapping[str, str]],
        is_member: Callable[[str, str], Awaitable[ErrorCode]],
        clock: Clock = LOOP_CLOCK,
        incarnation: Callable[[str], int] = lambda _group: 0,
    ) -> None:
        """group_config(group id) -> every group setting's effective value
        (raftlog.config.group_config.values); is_member(group id, member id) -> NONE if the group's
        coordinator knows the member, else the error that refuses it a share session
        (members.ShareMembers.check); incarnation(group id) -> how often it was deleted
        (the controller's count): a state of an older incarnation is not taken up."""
        self._group_config = group_config
        self.is_member = is_member
        self._clock = clock
        self._incarnation = incarnation
        self.sessions = ShareSessions(
            clock=clock.now, on_evict=lambda s: self.release(s.group_id, s.member_id)
        )
        self._held: dict[tuple[str, Key], _Held] = {}
        self._members: defaultdict[tuple[str, str], set[Key]] = defaultdict(set)
        self._waiters: list[asyncio.Future[None]] = []
        self._starting: dict[tuple[str, Key], asyncio.Future[None]] = {}
        self._leaving: dict[tuple[str, str], Timer] = {}  # (group, member) -> its grace

    # --- configuration ---------------------------------------------------------------------

    def limits(self, group_id: str) -> ShareLimits:
        settings = self._group_config(group_id)
        return ShareLimits(
            lock_duration_s=int(settings[gc.RECORD_LOCK_DURATION_MS]) / 1000,
            delivery_count_limit=int(settings[gc.DELIVERY_COUNT_LIMIT]),
            max_record_locks=int(settings[gc.PARTITION_MAX_RECORD_LOCKS]),
        )

    def lock_duration_ms(self, group_id: str) -> int:
        return int(self._group_config(group_id)[gc.RECORD_LOCK_DURATION_MS])

    # --- states ----------------------------------------------------------------------------

    def _current(self, group_id: str, key: Key, partition: Partition) -> _Held | None:
        """The group's state of the partition under this leadership, if it has one."""
        held = self._held.get((group_id, key))
        if held is None:
            return None
        if (
            held.partition is partition
            and held.epoch == partition.leader_epoch
            and held.incarnation == self._incarnation(group_id)
        ):
            held.state.limits = self.limits(group_id)
            return held
        self._drop(group_id, key, held)
        return None

    async def _started(self, group_id: str, key: Key, partition: Partition) -> None:
        """One start at a time per group and partition: two members' first fetches must not
        start it at two different high watermarks."""
        starting = self._starting.get((group_id, key))
        if starting is None:
            starting = asyncio.ensure_future(self._start(group_id, key, partition))
            self._starting[(group_id, key)] = starting
            starting.add_done_callback(lambda _f: self._starting.pop((group_id, key), None))
        await asyncio.shield(starting)

    async def _start(self, group_id: str, key: Key, partition: Partition) -> None:
        """Takes up the group's committed state of the partition, or starts it where
        share.auto.offset.reset says: the high watermark (latest, Kafka's default), the log
        start (earliest), or the first record of the last so many seconds (by_duration). Not
        before this leader has committed in its own term: until then the state it has applied
        may lack its predecessor's last updates."""
        if not partition.term_committed:
            return
        epoch = partition.leader_epoch
        incarnation = self._incarnation(group_id)
        stored = partition.share_state(group_id)
        if stored is not None and stored.incarnation > incarnation:
            return  # this node has not yet heard of the deletion another leader acted on
        if stored is not None and stored.incarnation == incarnation:
            state = SharePartitionState.restore(
                stored.start_offset, stored.runs(), self.limits(group_id)
            )
            self._held[(group_id, key)] = _Held(state, partition, epoch, incarnation)
            log.info(
                "share group %s resumes %s-%d at offset %d", group_id, *key, state.start_offset
            )
            return
        reset = self._group_config(group_id)[gc.AUTO_OFFSET_RESET]
        latest = _readable_end(partition, self._read_committed(group_id))
        strategy, seconds = gc.parse_auto_offset_reset(reset) or (gc.LATEST, None)
        if strategy == gc.EARLIEST:
            start = partition.log_start_offset
        elif strategy == gc.BY_DURATION and seconds is not None:
            since = int((self._clock.now() - seconds) * 1000)
            try:
                found = await partition.offset_for_timestamp(since)
            except KafkaError:
                return  # no longer the leader: the fetch finds nothing to acquire here
            start = found.offset if found is not None else latest
        else:
            start = latest
        # Committed first: a new leader must not start again from a later high watermark
        # and skip what this one handed out.
        begun = ShareUpdate(group_id, start, incarnation=incarnation)
        if await partition.write_share(begun) is not ErrorCode.none:
            return
        if partition.leader_epoch != epoch or self._current(group_id, key, partition):
            return  # leadership moved, or another fetch started it meanwhile
        state = SharePartitionState(start, self.limits(group_id))
        self._held[(group_id, key)] = _Held(state, partition, epoch, incarnation)
        log.info("share group %s starts %s-%d at offset %d (%s)", group_id, *key, start, reset)

    def _read_committed(self, group_id: str) -> bool:
        return self._group_config(group_id)[gc.ISOLATION_LEVEL] == gc.READ_COMMITTED

    def _drop(self, group_id: str, key: Key, held: _Held) -> None:
        if held.timer is not None:
            held.timer.cancel()
        del self._held[(group_id, key)]

    def _relock(self, group_id: str, held: _Held) -> None:
        """One timer per state, at its earliest lock deadline: expired records come back."""
        due = held.state.next_lock_deadline()
        if due == held.due:
            return
        if held.timer is not None:
            held.timer.cancel()
        held.due, held.timer = due, None
        if due is not None:
            delay = max(0.0, due - self._clock.now())
            held.timer = self._clock.call_later(delay, self._expire, group_id, held)

    def _expire(self, group_id: str, held: _Held) -> None:
        held.due = held.timer = None
        if held.state.expire_locks(self._clock.now()):
            self._persist(group_id, held)
            self._wake()
        self._relock(group_id, held)

    def _persist(self, group_id: str, held: _Held) -> Awaitable[ErrorCode]:
        """Replicates what changed in the state; resolves once committed."""
        update = held.state.take_update()
        if update is None:
            return _done(ErrorCode.none)
        start, runs = update
        return held.partition.write_share(
            ShareUpdate(group_id, start, tuple(runs), incarnation=held.incarnation)
        )

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # --- acknowledge -----------------------------------------------------------------------

    def acknowledge(
        self,
        group_id: str,
        member_id: str,
        key: Key,
        partition: Partition,
        batches: Sequence[AckBatch],
    ) -> Awaitable[ErrorCode]:
        """Applies the acknowledgements at once (a release is fetchable by others from now
        on); resolves once they are committed, or to the error that refused them all."""
        held = self._current(group_id, key, partition)
        if held is None:
            return _done(ErrorCode.invalid_record_state)  # nothing this leadership handed out
        error = held.state.acknowledge(member_id, batches, self._clock.now())
        if error is not ErrorCode.none:
            return _done(error)
        self._relock(group_id, held)
        self._wake()  # a release makes records available to the others
        return self._persist(group_id, held)

    def member_left(self, group_id: str, member_id: str) -> None:
        """The member left its group or was fenced. Without a session here, what it held goes
        back to the group at once. With one, its last acknowledgements may still be on their
        way (a closing client sends them to each leader and its leave to the coordinator at
        the same time): the session takes only acknowledgements now, and what is left
        unacknowledged goes back at its final request (epoch -1) or after
        LEAVE_GRACE_SECONDS or its connection's close, whichever comes first. Kafka's leaders
        never hear of the leave and wait for the final request, the connection's close or the
        locks."""
        session = self.sessions.leave(group_id, member_id)
        if session is None:
            self.release(group_id, member_id)
            return
        key = (group_id, member_id)
        previous = self._leaving.pop(key, None)
        if previous is not None:
            previous.cancel()
        self._leaving[key] = self._clock.call_later(LEAVE_GRACE_SECONDS, self._left, session)

    def _left(self, session: ShareSession) -> None:
        """The grace of a member that left ran out without its final request."""
        key = (session.group_id, session.member_id)
        self._leaving.pop(key, None)
        if self.sessions.end(session):
            log.info(
                "share group %s: member %s left without closing its session; "
                "releasing what it held",
                *key,
            )
            self.release(*key)

    def connection_closed(self, connection: object) -> None:
        """A client connection closed: the share sessions it opened end and what their members
        hold goes back to the group at once, not when its locks run out (Kafka's disconnect
        listener; a consumer killed with kill -9 sends no final request). Its requests that
        started before the close applied their acknowledgements first: a handler applies
        them before it first waits, and it started before the close was seen."""
        for session in self.sessions.disconnected(connection):
            key = (session.group_id, session.member_id)
            grace = self._leaving.pop(key, None)
            if grace is not None:
                grace.cancel()
            log.debug("share group %s: member %s's connection closed; releasing what it held", *key)
            self.release(*key)

    def release(self, group_id: str, member_id: str) -> None:
        """The member's session ended: what it still holds goes back to the group."""
        changed = False
        for key in self._members.pop((group_id, member_id), ()):
            held = self._held.get((group_id, key))
            if held is not None and held.state.release_member(member_id):
                self._persist(group_id, held)
                self._relock(group_id, held)
                changed = True
        if changed:
            self._wake()

    # --- fetch -----------------------------------------------------------------------------

    async def fetch(
        self,
        group_id: str,
        member_id: str,
        targets: Sequence[tuple[Key, Partition]],
        max_wait_s: float,
        max_bytes: int,
        max_records: int,
        record_limit: bool = False,
    ) -> dict[Key, Fetched]:
        """Acquires records for the member from the partitions it fetches, waiting up to
        max_wait_s for some to become available (new data, a release, an expired lock).
        `record_limit`: max_records is exact, not whole batches (ShareFetch v2). A fetch
        still waiting when its member's session ends or learns the member left takes
        nothing: what the close released must not go back to the member that closed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_s
        session = self.sessions.get(group_id, member_id)
        while True:
            if session is not None and (
                session.left or self.sessions.get(group_id, member_id) is not session
            ):
                return {}
            for key, partition in targets:
                if partition.is_leader and self._current(group_id, key, partition) is None:
                    await self._started(group_id, key, partition)
            fetched = self._acquire(
                group_id, member_id, targets, max_bytes, max_records, record_limit
            )
            remaining = deadline - loop.time()
            if fetched or remaining <= 0 or not targets:
                return fetched
            await self._wait(group_id, targets, remaining)

    def _acquire(
        self,
        group_id: str,
        member_id: str,
        targets: Sequence[tuple[Key, Partition]],
        max_bytes: int,
        max_records: int,
        record_limit: bool,
    ) -> dict[Key, Fetched]:
        fetched: dict[Key, Fetched] = {}
        now = self._clock.now()
        committed = self._read_committed(group_id)
        for key, partition in targets:
            if max_records <= 0 or max_bytes <= 0:
                break
            held = self._current(group_id, key, partition) if partition.is_leader else None
            if held is None:
                continue
            state = held.state
            if state.next_fetch_offset() < partition.log_start_offset:
                state.log_start_moved(partition.log_start_offset)  # retention took them
            offset = state.next_fetch_offset()
            if offset >= _readable_end(partition, committed) or not state.can_acquire():
                continue
            data, batches = _read_for(partition, offset, max_bytes, max_records, committed)
            ranges = state.acquire(
                member_id,
                [(b.base, b.last) for b in batches],
                max_records,
                now,
                fetch_offset=offset,  # batches compaction emptied between here and the first
                record_limit=record_limit,
            )
            hidden = _aborted(partition, batches) if committed and ranges else []
            if hidden:
                ranges = state.archive_acquired(ranges, hidden)
                self._persist(group_id, held)
            if not ranges:
                continue
            last = ranges[-1].last_offset
            end = next(b.stop for b in batches if b.last >= last)
            fetched[key] = Fetched(bytes(data[:end]), ranges)
            acquired = sum(r.last_offset - r.first_offset + 1 for r in ranges)
            partition.sent(end, acquired)
            self._members[(group_id, member_id)].add(key)
            self._relock(group_id, held)
            self._persist(group_id, held)  # offsets archived on the way (delivery limit, gaps)
            max_records -= acquired
            max_bytes -= end
        return fetched

    async def _wait(
        self, group_id: str, targets: Iterable[tuple[Key, Partition]], timeout: float
    ) -> None:
        """Until any partition has data past what this group would fetch next, or a record
        comes back (release, expiry), or the timeout."""
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()
        self._waiters.append(woken)
        waits: list[asyncio.Future[None]] = [woken]
        committed = self._read_committed(group_id)
        for key, partition in targets:
            if not partition.is_leader:
                continue
            held = self._held.get((group_id, key))
            # not started yet: the next commit (this leader's first in its term) may allow it
            offset = held.state.next_fetch_offset() if held else partition.high_watermark
            waits.append(asyncio.ensure_future(partition.wait_for_data(offset, timeout, committed)))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(woken)

    # --- describe --------------------------------------------------------------------------

    def view(self, group_id: str, key: Key, partition: Partition) -> ShareView | None:
        """The group's state of a partition this node leads: live if a fetch took it up under
        this leadership, else as committed (in flight shows what was written: no locks)."""
        held = self._held.get((group_id, key))
        if (
            held is not None
            and held.partition is partition
            and held.epoch == partition.leader_epoch
        ):
            counts = {s.name: n for s, n in held.state.counts().items()}
            return ShareView(held.state.start_offset, held.state.end_offset, counts, True)
        stored = partition.share_state(group_id)
        if stored is None or stored.incarnation != self._incarnation(group_id):
            return None
        counts = dict.fromkeys((s.name for s in RecordState), 0)
        for state, _count in stored.records.values():
            counts[RecordState(state).name] += 1
        end = max(stored.records, default=stored.start_offset - 1)
        return ShareView(stored.start_offset, end, counts, False)

    def held(self) -> list[tuple[str, Key]]:
        """(group, partition) of every state a fetch took up on this node's leaders."""
        return list(self._held)

    # --- leadership ------------------------------------------------------------------------

    def forget_partition(self, key: Key) -> None:
        """This node no longer leads the partition: its states go with the leadership."""
        for group_id, held_key in [k for k in self._held if k[1] == key]:
            self._drop(group_id, held_key, self._held[(group_id, held_key)])

    def close(self) -> None:
        for timer in self._leaving.values():
            timer.cancel()
        self._leaving.clear()
        for (group_id, key), held in list(self._held.items()):
            self._drop(group_id, key, held)
        self._wake()


class _Batch(NamedTuple):
    base: int
    last: int
    stop: int  # where it ends in the read
    producer_id: int  # of a transactional batch; -1 for any other
    control: bool


def _readable_end(partition: Partition, committed: bool) -> int:
    """A read_committed group (share.isolation.level) reads below the last stable offset."""
    return partition.last_stable_offset if committed else partition.high_watermark


def _read_for(
    partition: Partition, offset: int, max_bytes: int, max_records: int, committed: bool
) -> tuple[bytes, list[_Batch]]:
    """The log from `offset`, enough of it for `max_records`, and its batches. A fetch
    acquires at most max_records, so reading its whole byte budget (8 MiB for each of the
    proxy's reads of 10 records) was wasted: the read starts at READ_START_BYTES and grows
    fourfold until its batches span max_records offsets, reach the readable end or fill
    max_bytes."""
    size = min(max_bytes, READ_START_BYTES)
    while True:
        data = partition.read(offset, size, True, committed)
        batches = [
            _Batch(
                h.base_offset,
                h.base_offset + h.last_offset_delta,
                pos + h.size,
                h.producer_id if h.is_transactional else -1,
                h.is_control,
            )
            for pos, h in iter_batches(data)
        ]
        reached = batches[-1].last + 1 if batches else offset
        if (
            size >= max_bytes
            or reached - offset >= max_records
            or reached >= _readable_end(partition, committed)
        ):
            return data, batches
        size = min(max_bytes, size * 4)


def _aborted(partition: Partition, batches: list[_Batch]) -> list[tuple[int, int]]:
    """(base, last) of the batches of aborted transactions among `batches`: a read_committed
    share group archives them instead of handing them out (Kafka's
    filterAbortedTransactionalAcquiredRecords)."""
    aborted = partition.aborted_transactions(batches[0].base, batches[-1].last + 1)
    if not aborted:
        return []
    return [
        (b.base, b.last)
        for b in batches
        if not b.control
        and any(
            a.producer_id == b.producer_id and a.first_offset <= b.base <= a.last_offset
            for a in aborted
        )
    ]


def _done(code: ErrorCode) -> Awaitable[ErrorCode]:
    future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
    future.set_result(code)
    return future
