"""What a partition replica holds, and what every side of it (the produce path in
produce.py, the replication callbacks in replication.py, the facade in partition.py) reads
of it: who leads, its offsets, and its history trail, which follows the disk."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from epoch import history
from epoch.cache import EpochCache
from epoch.history import HistoryJournal
from raftlog.common.counters import PartitionCounters, RaftMetrics
from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.common.heap import HeapFreezer
from raftlog.common.memory_budget import MemoryBudget
from raftlog.partition.ack_batch import AckBatch
from raftlog.partition.produce_queue import ProduceQueue
from raftlog.partition.producer_state import ProducerState, StateWriter
from raftlog.raft.driver import Driver
from raftlog.raft.install import Installs
from raftlog.raft.journal import SegmentJournal
from raftlog.raft.mesh import Mesh
from raftlog.raft.replica import CoreGroup
from raftlog.raft.timings import RaftTimings
from raftlog.raft.window_file import Entry
from raftlog.share.store import ShareStore
from raftlog.share.writer import ShareWriter
from raftlog.storage.log import Log

_T = TypeVar("_T")


def done(result: _T) -> Awaitable[_T]:
    """An answer already known, as the awaitable the facade returns."""
    future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
    future.set_result(result)
    return future


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
    # Every replica's acknowledgements of a loop turn, into the history in one write.
    acks: AckBatch = field(init=False)

    def __post_init__(self) -> None:
        self.acks = AckBatch(self.history)


class ReplicaBase:
    """The replica's parts, set when it is opened (Partition._open), and what reads them."""

    topic: str
    index: int
    replicas: tuple[int, ...]
    settings: dict[str, str]
    counters: PartitionCounters
    log: Log
    journal: SegmentJournal
    group: CoreGroup
    epochs: EpochCache
    produce_queue: ProduceQueue
    max_message_bytes: int
    timestamp_bounds: tuple[int, int]
    log_append_time: bool
    compression: tuple[int, int | None] | None
    compacted: bool  # cleanup.policy has compact: every record produced needs a key
    _ctx: NodeContext
    _on_change: Callable[[Any], None]
    _producers: ProducerState
    _producers_unsaved: bool
    _producer_path: Path
    _producer_writer: StateWriter
    _shares: ShareStore
    _share_path: Path
    _share_pending: deque[tuple[int, bytes]]
    _share_writer: ShareWriter
    _start_pending: deque[tuple[int, int, int]]
    _start_proposed: tuple[int, int] | None
    _conf_pending: deque[Entry]
    _waiters: list[asyncio.Future[None]]
    _unwritten: deque[tuple[int, history.Record]]
    _last_hw_record: float
    _term_was_committed: bool

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

    @property
    def _cleanable_floor(self) -> int:
        """Retention and compaction never touch what the Raft window may still send or cut,
        nor, while a producer-state save is under way, what a restart would rebuild from."""
        floor = min(self.journal.floor_offset, self.high_watermark)
        saving = self._producer_writer.floor
        return floor if saving is None else min(floor, saving)

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
