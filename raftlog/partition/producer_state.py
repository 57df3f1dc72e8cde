"""Idempotent and transactional producers (KIP-98) on one partition: sequences, and the
transactions open on it.

A producer with enable.idempotence numbers its batches per partition; a retry after a lost
answer resends the same numbers, and the leader must not write it twice. Only the leader
judges a batch, when its proposal is appended; followers get the leader's log with rejected
batches already left out and simply record what they append, so replicas never disagree
over a verdict. The state is rebuilt at start from a snapshot plus the batches after it.

A transactional batch opens its producer's transaction here (its first offset holds the last
stable offset back) until the coordinator's marker closes it; an abort marker adds the
transaction to the aborted list a read_committed Fetch returns (aborted_txns.py). Both are part of the state, so every replica computes the same last
stable offset from the same log.

Each producer also keeps the coordinator epoch of its last marker (Kafka's
ProducerStateEntry.coordinatorEpoch): a marker from an older coordinator (one that lost the
`__transaction_state` partition but still retries a decision already carried out) is refused
TRANSACTION_COORDINATOR_FENCED, else it would end the producer's next transaction here.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict, deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgpack

from raftlog.common.errors import ErrorCode
from raftlog.partition.aborted_txns import AbortedTxn, AbortedTxns
from raftlog.raft.durability import Offload
from raftlog.storage.batch import BatchHeader
from raftlog.storage.control import Marker

log = logging.getLogger(__name__)

# Kafka keeps the last five batches of each producer for duplicate detection; a producer
# never has more than five requests in flight when idempotent.
BATCHES_KEPT = 5
MAX_PRODUCERS = 10_000
SEQUENCE_WRAP = 2**31


@dataclass(slots=True)
class _Producer:
    epoch: int
    # (first sequence, last sequence, base offset) of the newest batches
    batches: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    # the leadership (ProducerState.leadership) in which this replica judged and accepted
    # the producer's newest batch; None if it was copied from another leader's log, rebuilt
    # or loaded: see ProducerState.check on a sequence gap
    judged_in: int | None = None
    # the coordinator epoch of the producer's last marker here, -1 before any
    coordinator_epoch: int = -1


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to answer for a batch that was not appended."""

    error: ErrorCode
    base_offset: int = -1  # for a duplicate: where the original landed
    message: str | None = None


class ActiveProducer(NamedTuple):
    """A producer as DescribeProducers reports it (Kafka keeps its last timestamp too; this
    state has not)."""

    producer_id: int
    producer_epoch: int  # -1: its sequences were forgotten while its transaction stays open
    last_sequence: int  # -1 before its first batch with a sequence in this epoch
    txn_start_offset: int  # first offset of its open transaction here, -1 with none
    coordinator_epoch: int = -1  # of its last marker here (an admin's abort must carry it)


class ProducerState:
    def __init__(self, directory: Path | None = None) -> None:
        """`directory`: the partition's, where aborted transactions past what memory keeps
        are spilled (aborted_txns.py); None keeps them all in memory."""
        # least recently written first, so the state stays bounded whatever the traffic
        self._producers: OrderedDict[int, _Producer] = OrderedDict()
        # first offset of each open transaction, by producer id: never evicted with the
        # producer's sequences, since it holds the last stable offset
        self._open: dict[int, int] = {}
        self._aborted = AbortedTxns(directory)
        # (marker offset, first offset) of transactions whose marker may not be committed yet:
        # they hold the last stable offset until it is, as in Kafka (a marker a new leader's
        # log lacks must not have let a consumer read its transaction meanwhile)
        self._ending: deque[tuple[int, int]] = deque()
        # the last data batch check() let through: the leader records exactly that header
        # next, which is how record() tells a batch judged here from one copied or rebuilt
        self._accepted: BatchHeader | None = None
        # counts this replica's leaderships: a batch judged in an earlier one says nothing of
        # the requests other leaders answered since
        self.leadership = 0

    def new_leadership(self) -> None:
        self.leadership += 1

    def __len__(self) -> int:
        return len(self._producers)

    def check(self, header: BatchHeader, marker: Marker | None = None) -> Verdict | None:
        """None if the batch may be appended, else why not (a duplicate is not an error);
        `marker` is what a control batch holds."""
        pid = header.producer_id
        if pid < 0:
            return None
        known = self._producers.get(pid)
        if header.is_control:
            if known is not None and header.producer_epoch < known.epoch:
                return Verdict(
                    ErrorCode.invalid_producer_epoch,
                    message=f"marker of producer {pid} epoch {header.producer_epoch} is older "
                    f"than {known.epoch}",
                )
            if (
                known is not None
                and marker is not None
                and marker.coordinator_epoch < known.coordinator_epoch
            ):
                return Verdict(
                    ErrorCode.transaction_coordinator_fenced,
                    message=f"marker of producer {pid} from coordinator epoch "
                    f"{marker.coordinator_epoch}, older than {known.coordinator_epoch}",
                )
            return None
        if pid in self._open and not header.is_transactional:
            return Verdict(
                ErrorCode.invalid_txn_state,
                message=f"producer {pid} has a transaction open here: it must write "
                "transactional batches until it ends",
            )
        if known is None:
            self._accepted = header
            return None  # a producer we never saw, or forgot: accept, as Kafka does
        epoch, first = header.producer_epoch, header.base_sequence
        last = (first + header.last_offset_delta) % SEQUENCE_WRAP
        if epoch < known.epoch:
            return Verdict(
                ErrorCode.invalid_producer_epoch,
                message=f"producer {pid} epoch {epoch} is older than {known.epoch}",
            )
        if first < 0:  # no sequence: the group coordinator's transactional offsets
            return None
        if epoch > known.epoch:
            if first != 0:
                return Verdict(
                    ErrorCode.out_of_order_sequence_number,
                    message=f"producer {pid} new epoch {epoch} must start at sequence 0",
                )
            self._accepted = header
            return None
        for seen_first, seen_last, base_offset in known.batches:
            if (seen_first, seen_last) == (first, last):
                return Verdict(ErrorCode.none, base_offset=base_offset)
        expected = (known.batches[-1][1] + 1) % SEQUENCE_WRAP if known.batches else first
        if first != expected and known.judged_in != self.leadership:
            # The producer's newest batch came from another leader's log: the batches before
            # this one may be requests to that leader whose answers the client has not
            # handled yet. librdkafka re-queues such a batch only after it let the next
            # request go to the new leader, and answered OUT_OF_ORDER_SEQUENCE there it bumps
            # its epoch and sends everything unacknowledged again under new sequences,
            # duplicating what the old leader had written. Retriable and "not written", the
            # client retries in order under the same epoch and the duplicates are found.
            return Verdict(
                ErrorCode.not_enough_replicas,
                message=f"producer {pid} sent sequence {first}, expected {expected}; the "
                "batches between may still be retried from an earlier leader",
            )
        if first != expected:
            return Verdict(
                ErrorCode.out_of_order_sequence_number,
                message=f"producer {pid} sent sequence {first}, expected {expected}",
            )
        self._accepted = header
        return None

    def record(self, header: BatchHeader, base_offset: int, marker: Marker | None = None) -> None:
        """Notes a batch that went into the log (on every replica); `marker` is what a control
        batch holds."""
        pid = header.producer_id
        if pid < 0:
            return
        if header.is_control:
            self._end(header, base_offset, marker)
            return
        if header.is_transactional and pid not in self._open:
            self._open[pid] = base_offset
        entry = self._producers.pop(pid, None)
        if entry is None:
            entry = _Producer(header.producer_epoch)
        elif header.producer_epoch != entry.epoch:  # a new epoch: only the sequences restart
            entry = _Producer(header.producer_epoch, coordinator_epoch=entry.coordinator_epoch)
        entry.judged_in = self.leadership if header is self._accepted else None
        self._accepted = None
        if header.base_sequence < 0:  # nothing to judge its retries by
            self._producers[pid] = entry
            return
        last = (header.base_sequence + header.last_offset_delta) % SEQUENCE_WRAP
        entry.batches.append((header.base_sequence, last, base_offset))
        self._producers[pid] = entry
        self._bound()

    def _bound(self) -> None:
        while len(self._producers) > MAX_PRODUCERS:
            self._producers.popitem(last=False)

    def _end(self, header: BatchHeader, offset: int, marker: Marker | None) -> None:
        """A marker closes the producer's open transaction here (one it did not write to is
        closed by doing nothing); a marker's epoch can be newer than the producer's batches
        (the coordinator bumped it to fence), and its sequences then start again. The marker's
        coordinator epoch is kept, to fence an older coordinator's (check), so a producer not
        known here becomes known."""
        pid = header.producer_id
        first = self._open.pop(pid, None)
        if first is not None:
            self._ending.append((offset, first))
        if marker is not None and not marker.commit and first is not None:
            stable = min(self._open.values(), default=offset + 1)
            self._aborted.append(AbortedTxn(pid, first, offset), stable)
        entry = self._producers.get(pid)
        if entry is None:
            entry = self._producers[pid] = _Producer(header.producer_epoch)
            self._bound()
        elif header.producer_epoch > entry.epoch:
            entry = self._producers[pid] = _Producer(
                header.producer_epoch, coordinator_epoch=entry.coordinator_epoch
            )
        if marker is not None:
            entry.coordinator_epoch = marker.coordinator_epoch

    def transaction_open(self, producer_id: int, epoch: int) -> bool:
        entry = self._producers.get(producer_id)
        return producer_id in self._open and entry is not None and entry.epoch == epoch

    def transaction_start(self, producer_id: int) -> int | None:
        """The first offset of the producer's open transaction, None with none."""
        return self._open.get(producer_id)

    def active(self) -> list[ActiveProducer]:
        """Every producer known here, those with a transaction open first (oldest first: a
        hanging transaction is what an operator asks DescribeProducers for), then the most
        recently written. At most MAX_PRODUCERS, so an answer stays bounded even though open
        transactions are never evicted."""
        found: list[ActiveProducer] = []
        for pid, first in sorted(self._open.items(), key=lambda item: item[1]):
            if len(found) == MAX_PRODUCERS:
                return found
            found.append(_active(pid, self._producers.get(pid), first))
        for pid in reversed(self._producers):
            if len(found) == MAX_PRODUCERS:
                break
            if pid not in self._open:
                found.append(_active(pid, self._producers[pid], -1))
        return found

    def first_unstable(self, high_watermark: int) -> int | None:
        """The first offset of the oldest transaction open, or ended by a marker not yet below
        the high watermark: the last stable offset, when it is below the high watermark."""
        ending = self._ending
        while ending and ending[0][0] < high_watermark:
            ending.popleft()
        first = min(self._open.values(), default=None)
        for _, start in ending:
            first = start if first is None else min(first, start)
        return first

    def aborted(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions a read of [start, end) may hold records of (Kafka's
        collectAbortedTransactions: the abort marker at or after start, the first offset
        before end)."""
        return self._aborted.overlapping(start, end)

    def remove_unnamed_files(self) -> None:
        """Spilled files this state does not name are left over: removed (aborted_txns.py)."""
        self._aborted.remove_unnamed()

    def forget_aborted_before(self, offset: int) -> None:
        """Aborts whose markers are below the log start offset have nothing left to hide."""
        self._aborted.forget_before(offset)

    # --- persistence ---------------------------------------------------------------------------

    def image(self, offset: int) -> StateImage:
        """The state as of `offset` (every batch before it recorded) in plain lists and
        tuples the state never changes afterwards, for a writer in another thread."""
        fields = [
            offset,
            [[pid, p.epoch, list(p.batches)] for pid, p in self._producers.items()],
            list(self._open.items()),
            self._aborted.dump(),
            [list(e) for e in self._ending],
            # added later, last, so files without it load (every epoch unknown, -1), and a
            # reader that predates it ignores it; only the producers a marker ended
            [
                [pid, p.coordinator_epoch]
                for pid, p in self._producers.items()
                if p.coordinator_epoch >= 0
            ],
        ]
        return StateImage(fields, self._aborted.take_forgotten())

    def save(self, path: Path, offset: int) -> None:
        """The state as of `offset`, written here (StateWriter writes it off the loop)."""
        write_image(path, self.image(offset))

    @classmethod
    def load(cls, path: Path) -> tuple[ProducerState, int]:
        """The saved state and the offset it is valid at; an empty state at 0 if none (or if
        a spilled file it names is gone). Its aborted transactions spill beside `path`."""
        state = cls(path.parent)
        if not path.exists():
            return state, 0
        offset, producers, *txns = msgpack.unpackb(path.read_bytes())
        for pid, epoch, batches in producers:
            entry = _Producer(epoch)
            entry.batches.extend(tuple(b) for b in batches)
            state._producers[pid] = entry
        if txns:  # files written before transactions hold only the sequences
            state._open = {pid: first for pid, first in txns[0]}
            aborted = AbortedTxns.undump(txns[1], path.parent)
            if aborted is None:
                return cls(path.parent), 0
            state._aborted = aborted
            state._ending.extend((marker, first) for marker, first in txns[2])
        for pid, coordinator_epoch in txns[3] if len(txns) > 3 else ():
            if (known := state._producers.get(pid)) is not None:
                known.coordinator_epoch = coordinator_epoch
        return state, offset


@dataclass(slots=True)
class StateImage:
    """A snapshot of the state to write (`ProducerState.image`)."""

    fields: list[Any]
    forgotten: list[str]  # spilled files it no longer names: deleted once it is on disk


def write_image(path: Path, image: StateImage) -> None:
    """Encodes and writes `image` as `path`: to a temporary file, fsynced, renamed over (a
    crash leaves the old file or the new one, each a whole state as of its offset); then
    the spilled files it no longer names go."""
    os.replace(_write_aside(path, image), path)
    _unlink(path.parent, image.forgotten)


def _write_aside(path: Path, image: StateImage) -> Path:
    """`image` in the temporary file beside `path`, fsynced."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(msgpack.packb(image.fields))
        f.flush()
        os.fsync(f.fileno())
    return tmp


def _unlink(directory: Path, names: list[str]) -> None:
    for name in names:
        (directory / name).unlink(missing_ok=True)


class StateWriter:
    """Writes a partition's producer-state file off the event loop (durability.Offload): at
    each checkpoint the loop takes only the image; encoding it, the write, the fsync and
    the rename (several ms on a busy disk, every partition of the node waiting) run in a
    thread. One write at a time; a save asked for meanwhile replaces any not yet started
    (the latest wins, each is a whole state). `drop` (a truncation or an install changed
    the log) makes sure no image taken before it lands; `flush` (a close) writes the latest
    here. Without `files` (no loop) a save writes at once."""

    def __init__(self, path: Path, files: Offload | None) -> None:
        self._path = path
        self._files = files
        self._pending: StateImage | None = None
        self._step: Future[int | None] | None = None
        self._lock = threading.Lock()  # the thread renames only under it, if still wanted
        self._generation = 0
        self._landed = 0  # the offset of the last image known on disk (0: none known)

    def save(self, image: StateImage) -> None:
        if self._files is None:
            write_image(self._path, image)
            return
        if self._pending is not None:  # replaced before it started: its files go with this
            image.forgotten = self._pending.forgotten + image.forgotten
        self._pending = image
        if self._step is None:
            self._start()

    @property
    def floor(self) -> int | None:
        """While a save is under way, the offset of the file on disk: a crash then rebuilds
        from there, so retention stays below it (the partition's _cleanable_floor)."""
        return None if self._step is None and self._pending is None else self._landed

    def drop(self) -> None:
        """No image taken so far reaches the file (the one being written is not renamed)."""
        with self._lock:
            self._generation += 1
        self._pending = None
        self._landed = 0

    def flush(self) -> None:
        """Waits for the write under way and writes the latest image here (a close)."""
        step, self._step = self._step, None
        if step is not None and self._files is not None:
            self._files.wait(step)
        image, self._pending = self._pending, None
        if image is not None:
            write_image(self._path, image)
            self._landed = image.fields[0]

    def _start(self) -> None:
        assert self._files is not None and self._pending is not None
        image, self._pending = self._pending, None
        generation = self._generation
        self._step = self._files.run(lambda: self._write(image, generation), self._written)

    def _write(self, image: StateImage, generation: int) -> int | None:
        """In the thread: as write_image, unless `drop` came since the image was taken;
        the offset of the image now on disk, if it landed."""
        path = self._path
        tmp = _write_aside(path, image)
        with self._lock:
            if generation != self._generation:
                return None
            os.replace(tmp, path)
        _unlink(path.parent, image.forgotten)
        offset: int = image.fields[0]
        return offset

    def _written(self, done: Future[int | None]) -> None:
        if done is not self._step:
            return  # flush took it
        self._step = None
        error = done.exception()
        if error is not None:  # the older file stays, valid at its offset: the log replays
            log.warning("%s: producer state not saved: %s", self._path, error)
        elif (offset := done.result()) is not None:
            self._landed = offset
        if self._pending is not None:
            self._start()


def _active(pid: int, entry: _Producer | None, txn_start: int) -> ActiveProducer:
    if entry is None:  # evicted from the sequences, kept for its open transaction
        return ActiveProducer(pid, -1, -1, txn_start)
    last = entry.batches[-1][1] if entry.batches else -1
    return ActiveProducer(pid, entry.epoch, last, txn_start, entry.coordinator_epoch)
