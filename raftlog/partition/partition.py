"""A partition replica: its segment log, its Raft group, what clients wait on, and the
journal and install listeners that keep them in step. Produce requests wait in its
ProduceQueue (produce_queue.py)."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from epoch import history
from epoch.cache import EpochCache
from epoch.history import HistoryJournal
from raftlog.api.values import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    ProduceResult,
    TimestampOffset,
)
from raftlog.common.counters import PartitionCounters, RaftMetrics
from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.common.heap import HeapFreezer
from raftlog.common.memory_budget import MemoryBudget, run_opened
from raftlog.config.topic_config import (
    LOG_APPEND_TIME,
    cleanup_policies,
    compression,
    timestamp_bounds,
)
from raftlog.partition.produce_queue import ProduceQueue, ProduceRequest, Proposal, answer_within
from raftlog.partition.producer_state import AbortedTxn, ActiveProducer, ProducerState
from raftlog.raft import membership
from raftlog.raft.driver import Driver
from raftlog.raft.install import Installer, Installs
from raftlog.raft.journal import Entry, SegmentJournal
from raftlog.raft.mesh import Mesh
from raftlog.raft.replica import CoreGroup, Outcome
from raftlog.raft.timings import RaftTimings
from raftlog.share.store import SHARE, ShareStore, ShareUpdate, StoredShare
from raftlog.share.writer import ShareWriter
from raftlog.storage import codecs
from raftlog.storage.batch import (
    BatchHeader,
    check_records,
    decompressed_bytes,
    first_record_at,
    iter_batches,
    needs_record_walk,
    offset_stamped,
    parse_header,
    recompress,
    stamp_log_append_time,
    timestamp_error,
    validate_produce,
)
from raftlog.storage.control import Marker, marker_batch, read_marker
from raftlog.storage.log import Log, LogConfig, TruncateResult

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# The Raft window is cut (a snapshot point) once it references this much data, so a
# restart replays little and memory holds a short index.
WINDOW_BYTES = 32 * 1024 * 1024
HW_SAMPLE_SECONDS = 1.0
REBUILD_CHUNK = 4 * 1024 * 1024
# DeleteRecords' Raft command: the new log start offset, applied by every replica at commit.
LOG_START = 0x44  # b"D"
_LOG_START = struct.Struct(">Bq")
# ListOffsets by timestamp reads records (up to codecs.MAX_DECOMPRESSED_BYTES of them a batch)
# here, one scan at a time, off the event loop and out of the default executor, where produce
# checks its batches: a flood of lookups waits behind itself, not in front of producers.
_SCANS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="record-scan")


# Produce opens compressed batches (to check or recompress them) here, each admitted against
# the node's request memory by its decompressed size first (raftlog.common.memory_budget); a pool of
# its own, so a flood of them does not hold up other threads' work (large requests decoded).
_OPENING = ThreadPoolExecutor(
    max_workers=min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="batch-open"
)


def _scan(fn: Callable[..., _T], *args: object) -> asyncio.Future[_T]:
    return asyncio.get_running_loop().run_in_executor(_SCANS, fn, *args)


@dataclass
class NodeContext:
    """What every replica on a node shares."""

    node_id: int
    mesh: Mesh
    timings: RaftTimings
    history: HistoryJournal
    driver: Driver
    installs: Installs
    metrics: RaftMetrics = field(default_factory=RaftMetrics)
    # The node's request memory (its Kafka listeners' too): opened batches are admitted here.
    memory: MemoryBudget = field(default_factory=MemoryBudget)
    # Keeps the replicas' objects out of full GC passes (the node freezes each opened batch;
    # None: a process that freezes nothing, as tests' replicas).
    heap: HeapFreezer | None = None


class Partition:
    def __init__(
        self,
        ctx: NodeContext,
        topic: str,
        index: int,
        group_name: str,
        directory: Path,
        replicas: tuple[int, ...],
        settings: dict[str, str],
        on_change: Callable[[Partition], None],
        voters: tuple[int, ...] | None = None,
    ) -> None:
        """`voters`: the replicas the group's Raft configuration starts with when its log says
        nothing yet (None: `replicas`); a replica opened for a node being added to the
        partition starts outside them, and learns its configuration from the leader's log."""
        self.topic = topic
        self.index = index
        self.replicas = replicas
        self._voters = voters or replicas
        self._ctx = ctx
        self._on_change = on_change
        self._group_name = group_name
        self._directory = directory
        self.settings = dict(settings)
        self._waiters: list[asyncio.Future] = []
        # history records waiting for the Raft state save (its number) their term is in
        self._unwritten: deque[tuple[int, history.Record]] = deque()
        self._last_hw_record = 0.0
        self._leader_seen: tuple[str | None, int] = (None, 0)
        self.counters = PartitionCounters()
        self._open()

    def _open(self) -> None:
        """Opens the replica from its files: at the node's start, and again after its Raft
        group raised (`restart`)."""
        ctx, directory, group_name = self._ctx, self._directory, self._group_name
        self._term_was_committed = False
        self.log = Log(directory, LogConfig())
        self.apply_settings(self.settings)
        self.epochs = EpochCache(directory / "leader-epoch-checkpoint")
        self.epochs.refresh(self.log.epochs())
        self._producer_path = directory / "producer-state"
        self._producers = ProducerState(directory)
        self._producers_unsaved = False  # batches recorded since the file was written or read
        self.journal = SegmentJournal(directory / "raft", self.log, self)
        # configuration entries appended and not yet committed, for the history (the epoch
        # audit's configuration invariant); at open, those the window holds past the commit
        self._conf_pending: deque[Entry] = deque(
            e
            for idx, _ in self.journal.conf_commands()
            if idx > self.journal.commit_index and (e := self.journal.entry_by_index(idx))
        )
        self._rebuild_producers()
        self._share_path = directory / "share-state"
        self._shares = ShareStore.load(self._share_path)
        self._share_pending: deque[tuple[int, bytes]] = deque()  # appended, not committed
        self._rescan_shares()
        self._start_pending: deque[tuple[int, int, int]] = deque()  # (idx, offset, entry offset)
        # (term, offset) of a start this leader proposed and has not seen committed yet
        self._start_proposed: tuple[int, int] | None = None
        self.group = CoreGroup(
            group_name,
            str(ctx.node_id),
            [str(r) for r in self._voters],
            self.journal,
            ctx.driver,
            election_seconds=ctx.timings.election_min,
            heartbeat_seconds=ctx.timings.heartbeat,
            checkpoint_seconds=ctx.timings.compaction_seconds,
            learner_bytes_per_second=ctx.timings.learner_bytes_per_second,
            on_change=self._group_changed,
            restart=self.restart,
        )
        self.group.installer = Installer(
            group_name,
            self.journal,
            self.log,
            self,
            ctx.installs,
            self.group.install_done,
            self.group.install_failed,
            self.group.raft,  # a learner's install draws on its throttle (the core's budget)
        )
        self.produce_queue = ProduceQueue(
            self.group,
            lambda: self._ctx.timings.max_message_bytes,
            lambda: self.log_start_offset,
            lambda term, acks, end: self._write(
                self._stamped(history.Ack, term=term, acks=acks, end_offset=end)
            ),
            ctx.metrics.commit_latency,
            self._refusal,
        )
        self._share_writer = ShareWriter(self.group.propose, lambda: self.is_leader)
        self._rescan_starts()

    def restart(self) -> None:
        """The node's Raft driver stopped this replica's group after it raised (raft/driver.py):
        the replica is closed as at a node's stop and opened again from its files as at its
        start, in one step, so nothing sees it half open. What was in flight is answered as
        when a leader steps down; the group then goes on with its peers."""
        try:
            self.close()
        except Exception:
            # Its files are opened again whatever the close left; what it could not save
            # (producer or share state) is rebuilt from the log, as after a kill -9.
            log.exception("%s-%d: close before the restart failed", self.topic, self.index)
        self._open()
        if self._ctx.heap is not None:  # its old objects collected, its new ones frozen
            self._ctx.heap.reopened()
        log.warning("%s-%d: reopened from its files", self.topic, self.index)
        self.committed(self.journal.commit_index, self.high_watermark)  # wake long polls
        self._on_change(self)  # no longer leading: its coordinators and share state go

    # --- facade: state -------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.group.is_leader

    @property
    def leader_epoch(self) -> int:
        return self.group.term

    @property
    def high_watermark(self) -> int:
        return self.journal.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """What a read_committed consumer may read below: the high watermark, held back by the
        first offset of the oldest transaction still open here."""
        hw = self.journal.high_watermark
        first = self._producers.first_unstable(hw)
        if first is None or first > hw:
            return hw
        return max(first, self.log_start_offset)  # as Kafka: never below the log start

    def transaction_open(self, producer_id: int, epoch: int) -> bool:
        """The producer has a transaction open here, in this epoch, not yet ended by a marker."""
        return self._producers.transaction_open(producer_id, epoch)

    def transaction_start(self, producer_id: int) -> int | None:
        return self._producers.transaction_start(producer_id)

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        return self._producers.aborted(start, end)

    def active_producers(self) -> list[ActiveProducer]:
        """DescribeProducers: the leader's, the replica that judges every batch."""
        self._require_leader()
        return self._producers.active()

    @property
    def log_start_offset(self) -> int:
        """The committed log start, or past it one this leader proposed in its term: as
        Kafka's leader moves its start before its followers do, a request the client pipelined
        after its DeleteRecords (ListOffsets earliest, Fetch) sees the new start."""
        start = self.log.log_start_offset
        proposed = self._start_proposed
        if proposed is not None and proposed[0] == self.group.term and self.is_leader:
            return max(start, proposed[1])
        return start

    @property
    def log_end_offset(self) -> int:
        return self.journal.log_end_offset

    def bytes_lacking(self, replicas: Iterable[int]) -> dict[int, int]:
        """On the leader, the bytes of its log each of `replicas` does not hold yet (a move's
        copy still to make, issue 44): from what its Raft group confirmed, or its snapshot
        install from here has pulled; all of it for a replica it knows nothing of."""
        matches = self.group.match_indexes()
        installer = self.group.installer
        lacking = {}
        for replica in replicas:
            held = self.log.segment_start
            entry = self.journal.entry_by_index(matches.get(str(replica), 0))
            if entry is not None:
                held = max(held, entry.next_offset)
            installed = None if installer is None else installer.install_offset(str(replica))
            if installed is not None:
                held = max(held, installed)
            lacking[replica] = self.log.bytes_from(held)
        return lacking

    # --- facade: produce -------------------------------------------------------------------------

    def produce(
        self, records: bytes, acks: int, timeout_ms: int, transactional: bool = False
    ) -> Awaitable[ProduceResult]:
        if not self.is_leader:
            return _done(self._refusal(records))
        if len(records) >= self._ctx.timings.max_message_bytes:
            return _done(
                ProduceResult(
                    ErrorCode.record_list_too_large,
                    message=f"{len(records)} bytes for one partition in one request",
                )
            )
        try:
            headers = validate_produce(records, self.max_message_bytes, transactional)
        except KafkaError as e:
            return _done(ProduceResult(e.code, message=e.message))
        now = history.now_ms()
        appended_at = -1
        if self.log_append_time:  # Kafka ignores the timestamp bounds then
            # (a rewrite and CRC of what validate_produce has just checked the CRC of)
            appended_at, records = now, stamp_log_append_time(records, headers, now)
        else:
            refused = timestamp_error(headers, now, *self.timestamp_bounds)
            if refused is not None:
                return _done(ProduceResult(refused.code, message=refused.message))
        loop = asyncio.get_running_loop()
        future = loop.create_future() if acks != 0 else None
        offsets = sum(h.last_offset_delta + 1 for h in headers)
        request = ProduceRequest(records, len(headers), offsets, acks, future)
        request.log_append_time = appended_at
        target = self.compression
        limit = codecs.MAX_DECOMPRESSED_BYTES
        if target is not None and any(h.compression != target[0] for h in headers):
            # compression.type: Kafka's broker-side recompression, in a thread; the
            # rebuilt batches replace the request's before its queue can propose it
            request.checked = asyncio.ensure_future(
                self._opened(
                    headers,
                    records,
                    timeout_ms,
                    recompress,
                    records,
                    *target,
                    limit,
                    self.max_message_bytes,
                )
            )
            request.checked.add_done_callback(functools.partial(_take_records, request))
        elif any(needs_record_walk(h) for h in headers):
            # Off the event loop: a bomb stops at MAX_DECOMPRESSED_BYTES, and a real batch
            # does not hold up every other partition while it is opened. The queue keeps
            # the request's place, so a connection's writes still land in order.
            request.checked = asyncio.ensure_future(
                self._opened(headers, records, timeout_ms, check_records, records, limit)
            )
        self.produce_queue.submit(request)
        if future is None:
            return _done(ProduceResult(base_offset=-1, log_start_offset=self.log_start_offset))
        return answer_within(request, timeout_ms)

    async def _opened(
        self,
        headers: list[BatchHeader],
        records: bytes,
        timeout_ms: int,
        fn: Callable[..., _T],
        *args: object,
    ) -> _T:
        """`fn(*args)` in a thread once the node's request memory admits what `records`
        decompress to (counted in a thread first, holding a chunk): past the budget a produce
        waits up to its timeout (REQUEST_TIMED_OUT), as Kafka's and Redpanda's stop reading
        requests while their memory is taken; a request larger than the whole budget is
        MESSAGE_TOO_LARGE. Either way nothing is stored."""
        size = 0
        if any(h.compression for h in headers):
            size = await asyncio.get_running_loop().run_in_executor(
                _OPENING, decompressed_bytes, records, codecs.MAX_DECOMPRESSED_BYTES
            )
        return await run_opened(self._ctx.memory, size, timeout_ms / 1000, _OPENING, fn, *args)

    def write_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> Awaitable[ProduceResult]:
        """Ends the producer's transaction on this partition (the coordinator's
        WriteTxnMarkers); answered once committed, like an acks=all produce."""
        if not self.is_leader:
            return _done(ProduceResult(ErrorCode.not_leader_or_follower))
        batch = marker_batch(
            producer_id, producer_epoch, commit, coordinator_epoch, history.now_ms()
        )
        future = asyncio.get_running_loop().create_future()
        self.produce_queue.submit(ProduceRequest(batch, 1, 1, -1, future))
        return future

    def delete_records(self, offset: int, timeout_ms: int) -> Awaitable[tuple[ErrorCode, int]]:
        """DeleteRecords: moves the log start to `offset` (-1: the high watermark) through the
        Raft log, so every replica moves it and none forgets it; answered with the low
        watermark once committed, REQUEST_TIMED_OUT after `timeout_ms` (the move may still
        commit, as Kafka's may still reach every replica)."""
        if not self.is_leader:
            return _done((ErrorCode.not_leader_or_follower, -1))
        hw = self.high_watermark
        target = hw if offset == -1 else offset
        if not 0 <= target <= hw:
            return _done((ErrorCode.offset_out_of_range, -1))
        policies = cleanup_policies(self.settings["cleanup.policy"])
        if "compact" in policies and "delete" not in policies:  # keys' latest values stay
            return _done((ErrorCode.policy_violation, -1))
        if target <= self.log.log_start_offset:
            return _done((ErrorCode.none, self.log.log_start_offset))
        future: asyncio.Future[tuple[ErrorCode, int]] = asyncio.get_running_loop().create_future()
        term = self.group.term

        def settled(outcome: Outcome) -> None:
            if self._start_proposed is not None and (
                outcome != Outcome.COMMITTED or self._start_proposed[1] <= self.log.log_start_offset
            ):
                self._start_proposed = None  # committed, or it may never be
            if future.done():
                return
            if outcome == Outcome.COMMITTED:
                future.set_result((ErrorCode.none, self.log.log_start_offset))
            else:
                future.set_result((ErrorCode.not_leader_or_follower, -1))

        def timed_out() -> None:
            if not future.done():
                future.set_result((ErrorCode.request_timed_out, -1))

        timer = future.get_loop().call_later(timeout_ms / 1000, timed_out)
        future.add_done_callback(lambda _f: timer.cancel())
        self.group.propose(_LOG_START.pack(LOG_START, target), settled)
        if self._start_proposed is None or self._start_proposed[0] != term:
            self._start_proposed = (term, target)
        else:
            self._start_proposed = (term, max(target, self._start_proposed[1]))
        return future

    def _refusal(self, records: bytes) -> ProduceResult:
        """What a produce request this replica will not propose is answered (it is not the
        leader, or lost leadership while the request waited in its queue):
        NOT_LEADER_OR_FOLLOWER, unless this replica's log already holds one of the request's
        idempotent batches (an earlier attempt that a leader wrote, committed or not): then
        REQUEST_TIMED_OUT, "possibly persisted". librdkafka takes NOT_LEADER for "not written",
        and when its next batch then succeeded at the new leader, which held the first, it saw
        skipped sequence numbers, bumped its producer epoch and wrote its batches again
        (fault suite on the core engine: 3 bumps in 155 cycles)."""
        refused = ProduceResult(ErrorCode.not_leader_or_follower)
        try:
            headers = [h for _, h in iter_batches(memoryview(records))]
        except Exception:  # malformed: the leader would refuse it anyway
            return refused
        for header in headers:
            verdict = self._producers.check(header)
            if verdict is not None and verdict.error == ErrorCode.none:
                return ProduceResult(
                    ErrorCode.request_timed_out,
                    message="not the leader, but this batch is in the log: it may be committed",
                )
        return refused

    # --- facade: share groups --------------------------------------------------------------------

    def share_state(self, group_id: str) -> StoredShare | None:
        """The group's committed share state of this partition, as every replica holds it."""
        return self._shares.get(group_id)

    def sent(self, size: int, records: int) -> None:
        self.counters.bytes_out += size
        self.counters.records_out += records

    def write_share(self, update: ShareUpdate) -> Awaitable[ErrorCode]:
        if not self.is_leader:
            return _done(ErrorCode.not_leader_or_follower)
        return self._share_writer.write(update)

    # --- facade: reads ---------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, min_one: bool, committed: bool = False) -> bytes:
        """Up to the high watermark, or (`committed`: read_committed) the last stable offset."""
        self._require_leader()
        if offset < self.log_start_offset:  # DeleteRecords moved it past what segments hold
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} is below the log start offset {self.log_start_offset}",
            )
        end = self.last_stable_offset if committed else self.high_watermark
        return self.log.read(offset, max_bytes, end, min_one)

    async def wait_for_data(self, offset: int, timeout: float, committed: bool = False) -> None:
        """Until the readable end passes `offset` or the timeout: every commit wakes the
        waiters, and a read_committed one goes on waiting while a transaction holds the last
        stable offset where it was (answering it at once would have it fetch in a loop)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.is_leader:
            end = self.last_stable_offset if committed else self.high_watermark
            left = deadline - loop.time()
            if end > offset or left <= 0:
                return
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, left)
            except TimeoutError:
                return
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        self._require_leader()
        answer = self.epochs.end_offset_for(epoch, self.log_end_offset)
        self._record(
            history.EpochAnswer,
            term=self.leader_epoch,
            requested_epoch=epoch,
            answer_epoch=answer[0],
            end_offset=answer[1],
        )
        return answer

    def epoch_for_offset(self, offset: int) -> int:
        return self.epochs.epoch_for_offset(offset)

    async def offset_for_timestamp(
        self, timestamp: int, committed: bool = False
    ) -> TimestampOffset | None:
        """ListOffsets: below the high watermark, or (`committed`) the last stable offset."""
        self._require_leader()
        hw = self.high_watermark
        end = self.last_stable_offset if committed else hw
        if timestamp == LATEST_TIMESTAMP:
            start = self.epochs.start_offset(self.leader_epoch)
            if start is not None and hw < start:
                raise KafkaError(
                    ErrorCode.offset_not_available,
                    "the high watermark has not reached the start of the current epoch",
                )
            return TimestampOffset(-1, end, self.leader_epoch)
        if timestamp == EARLIEST_TIMESTAMP:
            start = self.log_start_offset
            return TimestampOffset(-1, start, self.epoch_for_offset(start))
        batch: bytes | None
        if timestamp == MAX_TIMESTAMP:
            newest = self.log.newest_batch(end)
            if newest is None:
                return None
            ts, batch = newest
            offset = await _scan(offset_stamped, batch, ts)
            self._require_leader()
            return TimestampOffset(ts, offset, self.epoch_for_offset(offset))
        start = self.log_start_offset
        while (batch := self.log.batch_reaching(timestamp, start, end)) is not None:
            found = await _scan(first_record_at, batch, timestamp, end)
            self._require_leader()
            if found is not None:
                offset, ts = found
                return TimestampOffset(ts, offset, self.epoch_for_offset(offset))
            start = parse_header(batch).next_offset  # its max timestamp promised a record
        return None

    # --- JournalListener ---------------------------------------------------------------------------

    def admit(self, batches: memoryview, command: object) -> bytes | memoryview:
        """Producer sequences are judged here, by the leader only, as its own proposal is
        appended; batches a follower appends were already judged by the leader."""
        self._producers_unsaved = True
        offset = self.log.log_end_offset
        if not isinstance(command, Proposal):
            for pos, header in iter_batches(batches):
                self._producers.record(header, offset, _marker(batches, pos, header))
                offset += header.last_offset_delta + 1
            return batches
        kept: list[memoryview] = []
        found = iter_batches(batches)
        for request in command.requests:
            for i in range(request.batches):
                pos, header = next(found)
                verdict = self._producers.check(header)
                if verdict is not None:
                    request.verdict = request.verdict or verdict
                    continue
                if i == 0:
                    request.base_offset = offset
                self._producers.record(header, offset, _marker(batches, pos, header))
                kept.append(batches[pos : pos + header.size])
                offset += header.last_offset_delta + 1
        if all(r.verdict is None for r in command.requests):
            return batches
        return b"".join(kept)

    def appended(self, entry: Entry, command: object) -> None:
        if isinstance(command, Proposal):
            self.produce_queue.appended(command, entry.term)
            self.counters.records_in += entry.next_offset - entry.offset
            if entry.location is not None:
                self.counters.bytes_in += entry.location.size
        if entry.inline is not None and entry.inline[0] == SHARE:
            self._share_pending.append((entry.idx, entry.inline))
            return
        if entry.inline is not None and entry.inline[0] == LOG_START:
            self._start_pending.append(_start_command(entry.idx, entry.inline, entry.offset))
            return
        if entry.inline is not None and entry.inline[0] == membership.CONF:
            self._conf_pending.append(entry)
            self._record_conf(history.ConfAppended, entry)
            return
        if entry.location is None:
            if entry.term > 0:
                self.epochs.refresh(self.log.epochs())
            return
        if self.journal.window_bytes > WINDOW_BYTES:
            self.group.force_compaction()

    def compacting(self) -> None:
        self._save_producers()
        self._save_shares()  # as of the commit index, past the cut

    def truncated(self, removed: list[Entry], result: TruncateResult | None, reason: str) -> None:
        self._ctx.metrics.truncations += 1
        self._ctx.metrics.truncated_entries += len(removed)
        self.epochs.refresh(self.log.epochs())
        self._rebuild_producers()
        self._rescan_shares()
        self._rescan_starts()
        self._record(
            history.Truncation,
            term=self.group.term,
            reason=reason,
            from_index=removed[0].idx,
            to_index=removed[-1].idx,
            from_offset=removed[0].offset,
            to_offset=removed[-1].next_offset,
            entry_terms=sorted({e.term for e in removed}),
            records=result.records if result else 0,
            batches=result.batches if result else 0,
            bytes=result.bytes if result else 0,
        )
        cut = removed[0].idx
        while self._conf_pending and self._conf_pending[-1].idx >= cut:
            self._conf_pending.pop()
        for entry in removed:
            if entry.inline is not None and entry.inline[0] == membership.CONF:
                self._record_conf(history.ConfTruncated, entry)

    @property
    def term_committed(self) -> bool:
        """The leader has committed an entry of its own term, hence everything any earlier
        leader committed: only then does its log show all committed records."""
        entry = self.journal.entry_by_index(self.group.commit_index)
        return self.is_leader and entry is not None and entry.term == self.group.term

    def committed(self, commit_index: int, high_watermark: int) -> None:
        self._apply_shares(commit_index)
        self._apply_starts(commit_index)
        while self._conf_pending and self._conf_pending[0].idx <= commit_index:
            self._record_conf(history.ConfCommitted, self._conf_pending.popleft())
        if not self._term_was_committed and self.is_leader and self.term_committed:
            self._term_was_committed = True
            self._on_change(self)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        now = time.monotonic()
        if now - self._last_hw_record >= HW_SAMPLE_SECONDS:
            self._last_hw_record = now
            self._record_hw()

    # --- InstallListener --------------------------------------------------------------------------

    def snapshot_state(self) -> object:
        """Share state, and the log start DeleteRecords set (the window that held its
        command may be cut, and the install copies whole segments from below it)."""
        return {"shares": self._shares.dump(), "log_start": self.log.log_start_offset}

    def snapshot_installed(
        self, resume_offset: int, end_offset: int, source: str, state: object
    ) -> None:
        shares = state.get("shares") if isinstance(state, dict) else state
        if isinstance(state, dict) and isinstance(state.get("log_start"), int):
            self._move_start(state["log_start"], "install")
        self.epochs.refresh(self.log.epochs())
        self._rebuild_producers()
        if isinstance(shares, list) and self._shares.adopt(ShareStore.undump(shares)):
            self._save_shares()  # the window may no longer hold its commands
        self._rescan_shares()
        self._rescan_starts()
        self._record(
            history.SnapshotInstall,
            term=self.group.term,
            leader=int(source),
            resume_offset=resume_offset,
            end_offset=end_offset,
        )

    # --- housekeeping ------------------------------------------------------------------------------

    def apply_settings(self, settings: dict[str, str]) -> None:
        """The topic's effective configs; they can change while the partition runs."""
        self.settings = dict(settings)
        self.max_message_bytes = int(settings["max.message.bytes"])
        self.timestamp_bounds = timestamp_bounds(settings)
        self.log_append_time = settings["message.timestamp.type"].strip() == LOG_APPEND_TIME
        self.compression = compression(settings)
        self.log.config = LogConfig(
            segment_bytes=int(settings["segment.bytes"]),
            retention_ms=int(settings["retention.ms"]),
            retention_bytes=int(settings["retention.bytes"]),
        )

    @property
    def _cleanable_floor(self) -> int:
        """Retention and compaction never touch what the Raft window may still send or cut."""
        return min(self.journal.entry(0).offset, self.high_watermark)

    def apply_retention(self) -> None:
        """Deletes whole segments below the log start DeleteRecords set, and (cleanup.policy
        delete) those past retention."""
        start = self.log.log_start_offset
        deleted = self.log.delete_below_start(self._cleanable_floor)
        if "delete" in cleanup_policies(self.settings["cleanup.policy"]):
            deleted += self.log.apply_retention(history.now_ms(), self._cleanable_floor)
        if deleted:
            self.epochs.refresh(self.log.epochs())
            self._producers.forget_aborted_before(self.log.log_start_offset)
        if self.log.log_start_offset != start:  # the epoch audit tells deleted from lost
            self._record_start("retention")

    async def compact(self) -> None:
        """Keeps the latest record per key (cleanup.policy=compact), a slice at a time so
        the event loop every group shares is never held for long."""
        if "compact" not in cleanup_policies(self.settings["cleanup.policy"]):
            return
        steps = self.log.compact_steps(
            history.now_ms(),
            self._cleanable_floor,
            int(self.settings["delete.retention.ms"]),
            float(self.settings["min.cleanable.dirty.ratio"]),
        )
        for _ in steps:
            await asyncio.sleep(0)

    def close(self) -> None:
        self.produce_queue.fail_all()  # nothing left for a compressed-batch check to propose into
        self._share_writer.fail_all()
        self.group.close()
        while self._unwritten:  # a clean stop writes every pending save (Durability.close)
            self._write(self._unwritten.popleft()[1])
        self._save_producers()
        self._save_shares()
        self.epochs.flush()
        self.log.close()

    def _save_producers(self) -> None:
        """Only when batches were recorded since the state was last saved or read: every
        checkpoint (one a minute a partition) fsynced it on the event loop, unchanged or not:
        half of an idle node's samples in a new 3,000-partition topic's first checkpoint wave
        (py-spy)."""
        if self._producers_unsaved:
            self._producers.save(self._producer_path, self.journal.log_end_offset)
            self._producers_unsaved = False

    def _rebuild_producers(self) -> None:
        """Producer state = the last snapshot plus every batch after it. A snapshot from past
        the log's end holds batches a truncation cut: it is deleted (a later log could grow
        past its offset again and make it look valid), and all of the log is read: all the
        segments hold, below a start DeleteRecords moved too, as a replica that did not
        restart still remembers those producers."""
        state, offset = ProducerState.load(self._producer_path)
        end = self.journal.log_end_offset
        if offset > end:
            self._producer_path.unlink(missing_ok=True)
        if not self.log.segment_start <= offset <= end:
            state, offset = ProducerState(self._producer_path.parent), self.log.segment_start
        state.remove_unnamed_files()
        self._producers_unsaved = offset < end
        while offset < end:
            data = self.log.read(offset, REBUILD_CHUNK, end, True)
            if not data:
                break
            for pos, header in iter_batches(data):
                state.record(header, header.base_offset, _marker(data, pos, header))
                offset = header.next_offset
        state.forget_aborted_before(self.log.log_start_offset)
        self._producers = state

    def _save_shares(self) -> None:
        """Only a partition that share groups read has a file (an fsync each time): the
        thousands that none read cost nothing at compaction or shutdown."""
        if len(self._shares) or self._share_path.exists():
            self._shares.save(self._share_path)

    def _rescan_shares(self) -> None:
        """The share commands the store still lacks, from the window (at start, or after a
        truncation or snapshot install changed it); those already committed are applied."""
        self._share_pending = deque(self.journal.inline_commands(SHARE, self._shares.applied))
        self._apply_shares(self.journal.commit_index)

    def _apply_shares(self, commit_index: int) -> None:
        pending = self._share_pending
        while pending and pending[0][0] <= commit_index:
            idx, command = pending.popleft()
            self._shares.apply(idx, command)

    def _rescan_starts(self) -> None:
        """The DeleteRecords commands of the window (at start, or after a truncation or install
        changed it); those committed are applied again, which moves nothing twice."""
        self._start_pending = deque()
        for idx, command in self.journal.inline_commands(LOG_START, 0):
            entry = self.journal.entry_by_index(idx)
            assert entry is not None  # the window just named it
            self._start_pending.append(_start_command(idx, command, entry.offset))
        self._apply_starts(self.journal.commit_index)

    def _apply_starts(self, commit_index: int) -> None:
        pending = self._start_pending
        while pending and pending[0][0] <= commit_index:
            _, offset, entry_offset = pending.popleft()
            # never past where the command itself sits: everything below it is committed
            self._move_start(min(offset, entry_offset), "delete_records")

    def _move_start(self, offset: int, reason: str) -> None:
        """Every replica's half of DeleteRecords: the new start, durable, then what it frees."""
        if not self.log.advance_start(offset):
            return
        self._producers.forget_aborted_before(self.log.log_start_offset)
        if self.log.delete_below_start(self._cleanable_floor):
            self.epochs.refresh(self.log.epochs())
        self._record_start(reason)

    def _record_start(self, reason: str) -> None:
        self._record(
            history.LogStart,
            term=self.group.term,
            log_start_offset=self.log.log_start_offset,
            reason=reason,
        )

    def _record_conf(self, cls: type[history.Record], entry: Entry) -> None:
        assert entry.inline is not None  # a configuration entry is inline
        conf = membership.parse(entry.inline)
        self._record(
            cls,
            term=self.group.term,
            index=entry.idx,
            entry_term=entry.term,
            offset=entry.offset,
            voters=sorted(conf.voters),
            outgoing=sorted(conf.outgoing),
            learners=sorted(conf.learners),
        )

    # --- internals -----------------------------------------------------------------------------

    def _group_changed(self, group: CoreGroup) -> None:
        leader, term = group.leader_id, group.term
        if (leader, term) != self._leader_seen:
            self._leader_seen = (leader, term)
            self._start_proposed = None  # a next leader's start is what its log commits
            self._term_was_committed = False
            self._ctx.metrics.leader_changes += 1
            if group.is_leader:
                self._producers.new_leadership()
                self._ctx.metrics.elections += 1
                self._record(
                    history.Election,
                    term=term,
                    log_end_offset=self.log_end_offset,
                    high_watermark=self.high_watermark,
                )
            else:
                self._record(history.LeaderSeen, term=term, leader=int(leader or -1))
            self._record_hw()
        if not group.is_leader:
            self.produce_queue.fail_all()
            self._share_writer.fail_all()
            self.committed(group.commit_index, self.high_watermark)  # wake long polls
        self._on_change(self)

    def _require_leader(self) -> None:
        if not self.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower)

    def _record_hw(self) -> None:
        self._record(
            history.HighWatermark, term=self.group.term, high_watermark=self.high_watermark
        )

    def _record(self, cls: type[history.Record], **fields: object) -> None:
        """History follows the disk: a record waits until the Raft state its term comes from
        is durable. Term saves are written in batches when a message needs them, and a node
        that steps down on a newer term may send nothing for a while; killed then, it comes
        back in the older term, and its history would show its term going back (a fault run
        caught exactly that). Acknowledgements are not held (_write): their term is that of
        records already committed, and they must be written before the answers leave."""
        record = self._stamped(cls, **fields)
        durability = self._ctx.driver.durability
        need = self.journal.state_seq
        if not self._unwritten and need <= durability.durable:
            self._write(record)
            return
        if not self._unwritten:
            durability.wait(need, self._write_durable)
        self._unwritten.append((need, record))

    def _write_durable(self) -> None:
        durability = self._ctx.driver.durability
        while self._unwritten and self._unwritten[0][0] <= durability.durable:
            self._write(self._unwritten.popleft()[1])
        if self._unwritten:
            durability.wait(self._unwritten[0][0], self._write_durable)

    def _stamped(self, cls: type[history.Record], **fields: object) -> history.Record:
        return cls(
            time_ms=history.now_ms(),
            node=self._ctx.node_id,
            topic=self.topic,
            partition=self.index,
            **fields,
        )

    def _write(self, record: history.Record) -> None:
        self.journal.persist_commit()  # what the record says must hold after a kill -9
        self._ctx.history.write(record)


def _marker(data: bytes | memoryview, pos: int, header: BatchHeader) -> Marker | None:
    """The transaction marker of a control batch in the log (written by a coordinator, so
    readable; an unreadable one ends nothing rather than stopping the replica)."""
    if not header.is_control:
        return None
    try:
        return read_marker(memoryview(data)[pos : pos + header.size], header)
    except KafkaError:
        log.error("unreadable control batch at offset %d", header.base_offset)
        return None


def _start_command(idx: int, command: bytes, entry_offset: int) -> tuple[int, int, int]:
    """(Raft index, requested start, offset of the entry) of a LOG_START command."""
    return idx, _LOG_START.unpack(command)[1], entry_offset


def _done(result: _T) -> Awaitable[_T]:
    future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
    future.set_result(result)
    return future


def _take_records(request: ProduceRequest, rebuilt: asyncio.Future[bytes]) -> None:
    """A recompressed request carries the rebuilt batches (a failure is the queue's to
    answer, from the same future)."""
    if not rebuilt.cancelled() and rebuilt.exception() is None:
        request.records = rebuilt.result()
