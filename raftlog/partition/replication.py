"""What Raft tells a partition replica, and the state it rebuilds from its log: batches
admitted (producer sequences judged), appended, truncated, committed and installed; the
producer and share state saved and rebuilt; and DeleteRecords, a Raft command every
replica applies at commit."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import deque
from collections.abc import Awaitable

from epoch import history
from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.config.topic_config import (
    cleanup_policies,
)
from raftlog.partition.base import ReplicaBase, done
from raftlog.partition.produce_queue import Proposal
from raftlog.partition.producer_state import ProducerState
from raftlog.raft import membership
from raftlog.raft.replica import Outcome
from raftlog.raft.window_file import Entry
from raftlog.share.store import SHARE, ShareStore
from raftlog.storage.batch import (
    BatchHeader,
    iter_batches,
)
from raftlog.storage.control import Marker, read_marker
from raftlog.storage.log import TruncateResult

log = logging.getLogger(__name__)

# The Raft window is cut (a snapshot point) once it references this much data, so a
# restart replays little and memory holds a short index.
WINDOW_BYTES = 32 * 1024 * 1024
HW_SAMPLE_SECONDS = 1.0
REBUILD_CHUNK = 4 * 1024 * 1024
# DeleteRecords' Raft command: the new log start offset, applied by every replica at commit.
LOG_START = 0x44  # b"D"
_LOG_START = struct.Struct(">Bq")


class ReplicationSide(ReplicaBase):
    def delete_records(self, offset: int, timeout_ms: int) -> Awaitable[tuple[ErrorCode, int]]:
        """DeleteRecords: moves the log start to `offset` (-1: the high watermark) through the
        Raft log, so every replica moves it and none forgets it; answered with the low
        watermark once committed, REQUEST_TIMED_OUT after `timeout_ms` (the move may still
        commit, as Kafka's may still reach every replica)."""
        if not self.is_leader:
            return done((ErrorCode.not_leader_or_follower, -1))
        hw = self.high_watermark
        target = hw if offset == -1 else offset
        if not 0 <= target <= hw:
            return done((ErrorCode.offset_out_of_range, -1))
        policies = cleanup_policies(self.settings["cleanup.policy"])
        if "compact" in policies and "delete" not in policies:  # keys' latest values stay
            return done((ErrorCode.policy_violation, -1))
        if target <= self.log.log_start_offset:
            return done((ErrorCode.none, self.log.log_start_offset))
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
                marker = _marker(batches, pos, header)
                verdict = self._producers.check(header, marker)
                if verdict is not None:
                    request.verdict = request.verdict or verdict
                    continue
                if i == 0:
                    request.base_offset = offset
                self._producers.record(header, offset, marker)
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

    def _save_producers(self) -> None:
        """Only when batches were recorded since the state was last saved or read: every
        checkpoint (one a minute a partition) fsynced it on the event loop, unchanged or not:
        half of an idle node's samples in a new 3,000-partition topic's first checkpoint wave
        (py-spy)."""
        if self._producers_unsaved:
            image = self._producers.image(self.journal.log_end_offset)
            self._producer_writer.save(image)  # encoded, written and synced off the loop
            self._producers_unsaved = False

    def _rebuild_producers(self) -> None:
        """Producer state = the last snapshot plus every batch after it. A snapshot from past
        the log's end holds batches a truncation cut: it is deleted (a later log could grow
        past its offset again and make it look valid), and all of the log is read: all the
        segments hold, below a start DeleteRecords moved too, as a replica that did not
        restart still remembers those producers."""
        self._producer_writer.drop()  # a save under way is of the log before the change
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
