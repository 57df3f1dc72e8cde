"""A partition replica: its segment log, its Raft group, and what clients wait on."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pysyncobj.config import FAIL_REASON

from epoch import history
from epoch.cache import EpochCache
from epoch.history import HistoryJournal
from raftlog.broker import ProduceResult, TimestampOffset
from raftlog.errors import ErrorCode, KafkaError
from raftlog.producer_state import ProducerState, Verdict
from raftlog.raft.group import RaftGroup, RaftTimings
from raftlog.raft.journal import DATA_PREFIX, Entry, SegmentJournal
from raftlog.raft.mesh import Mesh
from raftlog.raft.snapshot import RESUME, PartitionSnapshots
from raftlog.raft.ticker import Ticker
from raftlog.storage import codecs
from raftlog.storage.batch import (
    check_records,
    first_record_at,
    iter_batches,
    needs_record_walk,
    offset_stamped,
    parse_header,
    validate_produce,
)
from raftlog.storage.log import Log, LogConfig, TruncateResult
from raftlog.topic_config import cleanup_policies

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# The window pysyncobj sees is cut (a snapshot point) once it references this much data, so a
# restart replays little and memory holds a short index.
WINDOW_BYTES = 32 * 1024 * 1024
# How far a leader's log may run ahead of its commit index. pysyncobj replicates whatever is
# appended with no limit of its own; a leader far ahead of its followers spends its time
# walking that backlog and its followers time out waiting for it.
UNCOMMITTED_BYTES = 4 * 1024 * 1024
# Proposals a leader has in Raft at once; requests arriving meanwhile queue and go as one
# entry. Every entry costs each replica the same Raft work whatever its size, and a
# producer spread over 1,000 partitions sent one- or two-record batches: unbounded, each
# was an entry of its own (30,000 records: 0.4-2 MB/s, some never acknowledged; bounded at
# 2: 3-14 MB/s, all acknowledged). Over six partitions it helped too (~110 -> ~135 MB/s).
PROPOSALS_IN_FLIGHT = 2
HW_SAMPLE_SECONDS = 1.0
REBUILD_CHUNK = 4 * 1024 * 1024
# ListOffsets by timestamp reads records (up to codecs.MAX_DECOMPRESSED_BYTES of them a batch)
# here, one scan at a time, off the event loop and out of the default executor, where produce
# checks its batches: a flood of lookups waits behind itself, not in front of producers.
_SCANS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="record-scan")


def _scan(fn: Callable[..., _T], *args: object) -> asyncio.Future[_T]:
    return asyncio.get_running_loop().run_in_executor(_SCANS, fn, *args)


@dataclass
class NodeContext:
    """What every replica on a node shares."""

    node_id: int
    mesh: Mesh
    ticker: Ticker
    timings: RaftTimings
    history: HistoryJournal


@dataclass(slots=True)
class _Request:
    """One produce request's records for this partition, waiting for their offsets."""

    records: bytes
    batches: int
    offsets: int  # how many offsets its batches take
    acks: int
    future: asyncio.Future | None
    base_offset: int = -1
    term: int = -1  # of the Raft entry that carried it
    verdict: Verdict | None = None  # set when the leader left its batches out of the log
    # compressed or long batches are walked in a thread; the request is proposed once they pass
    checked: asyncio.Future | None = None


class Proposal(bytes):
    """The batches of one or more produce requests, proposed as one Raft entry. The journal
    sees this very object in add() on the leader, which is how the offsets it assigns reach
    the producers."""

    requests: list[_Request]


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
    ) -> None:
        self.topic = topic
        self.index = index
        self.replicas = replicas
        self._ctx = ctx
        self._on_change = on_change
        self._waiters: list[asyncio.Future] = []
        self._queue: deque[_Request] = deque()
        self._acks_pending: dict[tuple[int, int], int] = {}
        self._term_was_committed = False
        self._uncommitted = 0
        self._proposals = 0  # proposed, not yet settled
        self._last_hw_record = 0.0
        self._leader_seen: tuple[str | None, int] = (None, 0)
        self.log = Log(directory, LogConfig())
        self.apply_settings(settings)
        self.epochs = EpochCache(directory / "leader-epoch-checkpoint")
        self.epochs.refresh(self.log.epochs())
        self._producer_path = directory / "producer-state"
        self._producers = ProducerState()
        self.journal = SegmentJournal(directory / "raft", self.log, self)
        self._rebuild_producers()
        self.snapshots = PartitionSnapshots(self.journal, self.log, str(ctx.node_id), None, self)
        self.group = RaftGroup(
            group_name,
            str(ctx.node_id),
            [str(r) for r in replicas],
            self.journal,
            ctx.mesh,
            ctx.ticker,
            ctx.timings,
            snapshots=self.snapshots,
            # A proposal is judged (producer sequences, offsets for the answer) by the leader
            # that appends it: forwarded to another, it would be appended unjudged.
            forward_commands=False,
            on_change=self._group_changed,
        )
        self.snapshots.link = self.group.transport
        self.group.transport.side_messages[RESUME] = self._resume_requested

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
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.journal.log_end_offset

    # --- facade: produce -------------------------------------------------------------------------

    def produce(self, records: bytes, acks: int, timeout_ms: int) -> Awaitable[ProduceResult]:
        if not self.is_leader:
            return _done(ProduceResult(ErrorCode.not_leader_or_follower))
        if len(records) >= self._ctx.timings.max_message_bytes:
            return _done(
                ProduceResult(
                    ErrorCode.record_list_too_large,
                    message=f"{len(records)} bytes for one partition in one request",
                )
            )
        try:
            headers = validate_produce(records, self.max_message_bytes)
        except KafkaError as e:
            return _done(ProduceResult(e.code, message=e.message))
        loop = asyncio.get_running_loop()
        future = loop.create_future() if acks != 0 else None
        offsets = sum(h.last_offset_delta + 1 for h in headers)
        request = _Request(records, len(headers), offsets, acks, future)
        if any(needs_record_walk(h) for h in headers):
            # Off the event loop: a bomb stops at MAX_DECOMPRESSED_BYTES, and a real batch
            # does not hold up every other partition while it is opened. The queue keeps
            # the request's place, so a connection's writes still land in order.
            request.checked = loop.run_in_executor(
                None, check_records, records, codecs.MAX_DECOMPRESSED_BYTES
            )
            request.checked.add_done_callback(lambda _f: self._propose_queued())
        self._queue.append(request)
        self._propose_queued()
        if future is None:
            return _done(ProduceResult(base_offset=-1, log_start_offset=self.log_start_offset))
        return self._await_ack(future, timeout_ms)

    def _propose_queued(self) -> None:
        """Proposes queued requests, in arrival order, as few Raft entries as fit, while
        fewer than PROPOSALS_IN_FLIGHT are in Raft and the uncommitted part of the log stays
        within UNCOMMITTED_BYTES."""
        limit = self._ctx.timings.max_message_bytes - 1
        while (
            self._queue
            and self._uncommitted < UNCOMMITTED_BYTES
            and self._proposals < PROPOSALS_IN_FLIGHT
        ):
            requests, size = [], 0
            while self._queue and size + len(self._queue[0].records) <= limit:
                checked = self._queue[0].checked
                if checked is not None and not checked.done():
                    break  # its compressed batches are still being opened
                request = self._queue.popleft()
                error = checked.exception() if checked is not None else None
                if error is not None:
                    self._refuse(request, error)
                    continue
                requests.append(request)
                size += len(request.records)
            if not requests:
                return
            proposal = Proposal(DATA_PREFIX + b"".join(r.records for r in requests))
            proposal.requests = requests
            self._uncommitted += len(proposal)
            self._proposals += 1
            # mypy cannot infer a lambda with a default argument (p binds this proposal)
            self.group.propose(proposal, lambda _r, reason, p=proposal: self._settled(p, reason))  # type: ignore[misc]

    async def _await_ack(self, future: asyncio.Future, timeout_ms: int) -> ProduceResult:
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout_ms / 1000)
        except TimeoutError:
            return ProduceResult(ErrorCode.request_timed_out, message="not committed in time")

    def _settled(self, proposal: Proposal, reason: int) -> None:
        """pysyncobj's verdict on a proposal: committed in its term, or not."""
        self._uncommitted -= len(proposal)
        self._proposals -= 1
        for request in proposal.requests:
            if request.future is None or request.future.done():
                continue
            if reason == FAIL_REASON.SUCCESS:
                result = self._answer(request)
                self._note_ack(request)
            else:
                result = ProduceResult(ErrorCode.not_leader_or_follower)
            request.future.set_result(result)
        self._propose_queued()

    def _note_ack(self, request: _Request) -> None:
        """Acknowledgements go into the history before the answers can leave this node: the
        write is queued on the event loop ahead of the producer's task (call_soon is FIFO),
        and all acks of one loop turn share a record."""
        if request.verdict is not None or request.base_offset < 0:
            return
        key = (request.term, request.acks)
        end = request.base_offset + request.offsets
        if not self._acks_pending:
            asyncio.get_running_loop().call_soon(self._record_acks)
        self._acks_pending[key] = max(end, self._acks_pending.get(key, 0))

    def _record_acks(self) -> None:
        pending, self._acks_pending = self._acks_pending, {}
        for (term, acks), end in sorted(pending.items()):
            self._record(history.Ack, term=term, acks=acks, end_offset=end)

    def _answer(self, request: _Request) -> ProduceResult:
        verdict = request.verdict
        if verdict is None:
            return ProduceResult(
                base_offset=request.base_offset, log_start_offset=self.log_start_offset
            )
        if verdict.error == ErrorCode.none:  # a retried batch: where the first copy landed
            return ProduceResult(
                base_offset=verdict.base_offset, log_start_offset=self.log_start_offset
            )
        return ProduceResult(verdict.error, message=verdict.message)

    @staticmethod
    def _refuse(request: _Request, error: BaseException) -> None:
        if request.future is None or request.future.done():
            return
        if isinstance(error, KafkaError):
            result = ProduceResult(error.code, message=error.message)
        else:
            result = ProduceResult(ErrorCode.corrupt_message, message=f"cannot check: {error}")
        request.future.set_result(result)

    def _fail_queued(self) -> None:
        """Requests not yet proposed when leadership is lost go back to the client."""
        while self._queue:
            request = self._queue.popleft()
            if request.future is not None and not request.future.done():
                request.future.set_result(ProduceResult(ErrorCode.not_leader_or_follower))

    # --- facade: reads ---------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, min_one: bool) -> bytes:
        self._require_leader()
        return self.log.read(offset, max_bytes, self.high_watermark, min_one)

    async def wait_for_data(self, offset: int, timeout: float) -> None:
        if self.high_watermark > offset or not self.is_leader:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            pass
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

    async def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        self._require_leader()
        hw = self.high_watermark
        if timestamp == -1:
            start = self.epochs.start_offset(self.leader_epoch)
            if start is not None and hw < start:
                raise KafkaError(
                    ErrorCode.offset_not_available,
                    "the high watermark has not reached the start of the current epoch",
                )
            return TimestampOffset(-1, hw, self.leader_epoch)
        if timestamp == -2:
            start = self.log_start_offset
            return TimestampOffset(-1, start, self.epoch_for_offset(start))
        batch: bytes | None
        if timestamp == -3:
            newest = self.log.newest_batch(hw)
            if newest is None:
                return None
            ts, batch = newest
            offset = await _scan(offset_stamped, batch, ts)
            self._require_leader()
            return TimestampOffset(ts, offset, self.epoch_for_offset(offset))
        start = self.log_start_offset
        while (batch := self.log.batch_reaching(timestamp, start, hw)) is not None:
            found = await _scan(first_record_at, batch, timestamp, hw)
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
        offset = self.log.log_end_offset
        if not isinstance(command, Proposal):
            for _, header in iter_batches(batches):
                self._producers.record(header, offset)
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
                self._producers.record(header, offset)
                kept.append(batches[pos : pos + header.size])
                offset += header.last_offset_delta + 1
        if all(r.verdict is None for r in command.requests):
            return batches
        return b"".join(kept)

    def appended(self, entry: Entry, command: object) -> None:
        if isinstance(command, Proposal):
            for request in command.requests:
                request.term = entry.term
                if request.acks == 1 and request.future is not None and not request.future.done():
                    self._note_ack(request)
                    request.future.set_result(self._answer(request))
        if entry.location is None:
            if entry.term > 0:
                self.epochs.refresh(self.log.epochs())
            return
        if self.journal.window_bytes > WINDOW_BYTES:
            self.group.force_compaction()

    def compacted(self) -> None:
        self._save_producers()

    def truncated(self, removed: list[Entry], result: TruncateResult | None, reason: str) -> None:
        self.epochs.refresh(self.log.epochs())
        self._rebuild_producers()
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

    @property
    def term_committed(self) -> bool:
        """The leader has committed an entry of its own term, hence everything any earlier
        leader committed: only then does its log show all committed records."""
        entry = self.journal.entry_by_index(self.group.commit_index)
        return self.is_leader and entry is not None and entry.term == self.group.term

    def committed(self, commit_index: int, high_watermark: int) -> None:
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

    # --- SnapshotListener -------------------------------------------------------------------------

    def snapshot_installed(self, resume_offset: int, end_offset: int, source: str) -> None:
        self.epochs.refresh(self.log.epochs())
        self._rebuild_producers()
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
        """Deletes whole segments past retention."""
        if "delete" not in cleanup_policies(self.settings["cleanup.policy"]):
            return
        if self.log.apply_retention(history.now_ms(), self._cleanable_floor):
            self.epochs.refresh(self.log.epochs())

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
        self._fail_queued()  # nothing left for a compressed-batch check to propose into
        self.group.close()
        self._save_producers()
        self.epochs.flush()
        self.log.close()

    def _save_producers(self) -> None:
        self._producers.save(self._producer_path, self.journal.log_end_offset)

    def _rebuild_producers(self) -> None:
        """Producer state = the last snapshot plus every batch after it. A snapshot from past
        the log's end holds batches a truncation cut: it is deleted (a later log could grow
        past its offset again and make it look valid), and all of the log is read."""
        state, offset = ProducerState.load(self._producer_path)
        end = self.journal.log_end_offset
        if offset > end:
            self._producer_path.unlink(missing_ok=True)
        if not self.log.log_start_offset <= offset <= end:
            state, offset = ProducerState(), self.log.log_start_offset
        while offset < end:
            data = self.log.read(offset, REBUILD_CHUNK, end, True)
            if not data:
                break
            for _, header in iter_batches(data):
                state.record(header, header.base_offset)
                offset = header.next_offset
        self._producers = state

    # --- internals -----------------------------------------------------------------------------

    def _group_changed(self, group: RaftGroup) -> None:
        leader, term = group.leader_id, group.term
        if (leader, term) != self._leader_seen:
            self._leader_seen = (leader, term)
            self._term_was_committed = False
            if group.is_leader:
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
            self._fail_queued()
            self.committed(group.commit_index, self.high_watermark)  # wake long polls
        self._on_change(self)

    def _resume_requested(self, node: object, message: dict) -> None:
        self.snapshots.resume_requested(node, message["id"], int(message["offset"]))
        self.group.schedule()

    def _require_leader(self) -> None:
        if not self.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower)

    def _record_hw(self) -> None:
        self._record(
            history.HighWatermark, term=self.group.term, high_watermark=self.high_watermark
        )

    def _record(self, cls: type[history.Record], **fields: object) -> None:
        self._ctx.history.write(
            cls(
                time_ms=history.now_ms(),
                node=self._ctx.node_id,
                topic=self.topic,
                partition=self.index,
                **fields,
            )
        )


def _done(result: ProduceResult) -> Awaitable[ProduceResult]:
    future = asyncio.get_running_loop().create_future()
    future.set_result(result)
    return future
