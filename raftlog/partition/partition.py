"""A partition replica: its segment log, its Raft group, what clients wait on, and the
journal and install listeners that keep them in step. The replica is opened and read here;
its produce path is produce.py's ProduceSide (requests then wait in produce_queue.py's
ProduceQueue), what Raft tells it is replication.py's ReplicationSide, and what both read of
it is base.py's ReplicaBase."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from epoch import history
from epoch.cache import EpochCache
from raftlog.api.values import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    TimestampOffset,
)
from raftlog.common.counters import PartitionCounters
from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.config.topic_config import (
    LOG_APPEND_TIME,
    cleanup_policies,
    compression,
    timestamp_bounds,
)
from raftlog.partition.base import NodeContext, done
from raftlog.partition.produce import ProduceSide
from raftlog.partition.produce_queue import ProduceQueue
from raftlog.partition.producer_state import (
    AbortedTxn,
    ActiveProducer,
    ProducerState,
    StateWriter,
)
from raftlog.partition.replication import ReplicationSide
from raftlog.raft.install import Installer
from raftlog.raft.journal import SegmentJournal
from raftlog.raft.replica import CoreGroup
from raftlog.raft.window_file import Entry
from raftlog.share.store import ShareStore, ShareUpdate, StoredShare
from raftlog.share.writer import ShareWriter
from raftlog.storage.batch import (
    first_record_at,
    offset_stamped,
    parse_header,
)
from raftlog.storage.log import Log, LogConfig

log = logging.getLogger(__name__)
_T = TypeVar("_T")
# ListOffsets by timestamp reads records (up to codecs.MAX_DECOMPRESSED_BYTES of them a batch)
# here, one scan at a time, off the event loop and out of the default executor, where produce
# checks its batches: a flood of lookups waits behind itself, not in front of producers.
_SCANS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="record-scan")


def _scan(fn: Callable[..., _T], *args: object) -> asyncio.Future[_T]:
    return asyncio.get_running_loop().run_in_executor(_SCANS, fn, *args)


class Partition(ProduceSide, ReplicationSide):
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
        files = ctx.driver.durability.files  # blocking file work off the loop
        self._producer_writer = StateWriter(self._producer_path, files)
        self._producers = ProducerState(directory)
        self._producers_unsaved = False  # batches recorded since the file was written or read
        self.journal = SegmentJournal(directory / "raft", self.log, self, files=files)
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
            ctx.acks,
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

    # --- facade: share groups --------------------------------------------------------------------

    def share_state(self, group_id: str) -> StoredShare | None:
        """The group's committed share state of this partition, as every replica holds it."""
        return self._shares.get(group_id)

    def sent(self, size: int, records: int) -> None:
        self.counters.bytes_out += size
        self.counters.records_out += records

    def write_share(self, update: ShareUpdate) -> Awaitable[ErrorCode]:
        if not self.is_leader:
            return done(ErrorCode.not_leader_or_follower)
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
            self._require_caught_up(hw)
            return TimestampOffset(-1, end, self.leader_epoch)
        if timestamp == EARLIEST_TIMESTAMP:
            start = self.log_start_offset
            return TimestampOffset(-1, start, self.epoch_for_offset(start))
        batch: bytes | None
        if timestamp == MAX_TIMESTAMP:
            self._require_caught_up(hw)  # the newest record may lie above it
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
        self._require_caught_up(hw)  # the record may lie above it
        return None

    def _require_caught_up(self, hw: int) -> None:
        """Kafka's OFFSET_NOT_AVAILABLE, which clients retry: a new leader's high watermark
        below the start of its epoch hides records its predecessor committed, so an answer
        that may lie among them waits until the leader's first entry commits."""
        start = self.epochs.start_offset(self.leader_epoch)
        if start is not None and hw < start:
            raise KafkaError(
                ErrorCode.offset_not_available,
                "the high watermark has not reached the start of the current epoch",
            )

    # --- housekeeping ------------------------------------------------------------------------------

    def apply_settings(self, settings: dict[str, str]) -> None:
        """The topic's effective configs; they can change while the partition runs."""
        self.settings = dict(settings)
        self.max_message_bytes = int(settings["max.message.bytes"])
        self.timestamp_bounds = timestamp_bounds(settings)
        self.log_append_time = settings["message.timestamp.type"].strip() == LOG_APPEND_TIME
        self.compression = compression(settings)
        self.compacted = "compact" in cleanup_policies(settings["cleanup.policy"])
        self.log.config = LogConfig(
            segment_bytes=int(settings["segment.bytes"]),
            retention_ms=int(settings["retention.ms"]),
            retention_bytes=int(settings["retention.bytes"]),
        )

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
        self._producer_writer.flush()  # the reopen (a restart after a raise) reads it
        self._save_shares()
        self.epochs.flush()
        self.log.close()

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
