"""The aborted transactions of one partition, as read_committed Fetch lists them.

The newest are kept in memory, in the producer state and its snapshot; past SPILL_AT, the
oldest SPILL_CHUNK go to a file of their own in the partition's directory when the snapshot
is saved (Redpanda's abort indexes; Kafka keeps them in per-segment `.txnindex` files), so
memory and each snapshot stay bounded however many aborts retention keeps. A spilled file
is immutable and named in the snapshot that holds it: a file no snapshot names is left
over from a crash and removed; a named file that is missing makes the snapshot unusable,
and the state is rebuilt from the log.

Each abort is kept as columns of 64-bit integers (32 bytes, against 176 as a tuple: a
million took 1.5 s to save and 5.2 s to load as msgpack lists), with the last stable offset
once it was written, which bounds a lookup as Kafka's `.txnindex` search is bounded.
"""

from __future__ import annotations

import logging
import os
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from pathlib import Path
from typing import NamedTuple

from raftlog.storage.segment import fsync_dir

log = logging.getLogger(__name__)

SPILL_AT = 200_000  # aborts in memory (6.4 MB) before the oldest are spilled
SPILL_CHUNK = 100_000  # aborts per spilled file (3.2 MB)
CACHED_FILES = 2  # spilled files kept loaded for reads that go back that far
_PREFIX, _SUFFIX = "aborted-", ".txns"
_COLUMNS = 4


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's


def _column(data: bytes = b"") -> array[int]:
    column = array("q")
    column.frombytes(data)
    if sys.byteorder != "little":  # saved little-endian, whatever the machine
        column.byteswap()
    return column


def _saved(column: array[int]) -> bytes:
    if sys.byteorder == "little":
        return column.tobytes()
    swapped = array("q", column)
    swapped.byteswap()
    return swapped.tobytes()


class _Columns:
    """Aborts in marker order (so by last offset), from `start` on."""

    __slots__ = ("pids", "firsts", "lasts", "stables", "start")

    def __init__(self, saved: list[bytes] | None = None) -> None:
        columns = [_column(b) for b in saved] if saved else [_column() for _ in range(_COLUMNS)]
        self.pids, self.firsts, self.lasts, self.stables = columns
        self.start = 0

    def __len__(self) -> int:
        return len(self.lasts) - self.start

    @property
    def all(self) -> tuple[array[int], ...]:
        return (self.pids, self.firsts, self.lasts, self.stables)

    def scan(self, start: int, end: int, found: list[AbortedTxn]) -> bool:
        """Adds those a read of [start, end) may hold records of (Kafka's
        collectAbortedTransactions: the marker at or after start, the first offset before
        end); True once an abort's last stable offset is past `end`: every transaction with
        a record before `end` had ended by then, so no later abort can matter."""
        i = bisect_left(self.lasts, start, self.start)
        j = bisect_right(self.stables, end, i)
        for k in range(i, min(j + 1, len(self.lasts))):
            if self.firsts[k] < end:
                found.append(AbortedTxn(self.pids[k], self.firsts[k], self.lasts[k]))
        return j < len(self.lasts)

    def dump(self, first: int = -1, stop: int | None = None) -> list[bytes]:
        start = self.start if first < 0 else first
        return [_saved(c[start:stop]) for c in self.all]

    def drop_front(self, count: int) -> None:
        for column in self.all:
            del column[:count]
        self.start = max(0, self.start - count)


class _Spill(NamedTuple):
    name: str
    last_offset: int  # of its newest abort


class AbortedTxns:
    __slots__ = ("_dir", "_spilled", "_memory", "_forgotten", "_cache", "_floor")

    def __init__(self, directory: Path | None = None) -> None:
        """`directory`: where spilled files go; None keeps every abort in memory."""
        self._dir = directory
        self._spilled: list[_Spill] = []
        self._memory = _Columns()
        self._forgotten: list[str] = []  # spilled files to delete once a snapshot drops them
        self._cache: OrderedDict[str, _Columns] = OrderedDict()
        self._floor = 0  # the log start: aborts below it are forgotten

    def __len__(self) -> int:
        return len(self._memory)

    def append(self, txn: AbortedTxn, stable: int) -> None:
        """`stable`: the first offset of the oldest transaction still open after it, or the
        marker's next offset with none."""
        memory = self._memory
        memory.pids.append(txn.producer_id)
        memory.firsts.append(txn.first_offset)
        memory.lasts.append(txn.last_offset)
        memory.stables.append(stable)

    def overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """Those a read of [start, end) may hold records of, oldest first."""
        found: list[AbortedTxn] = []
        start = max(start, self._floor)
        first = bisect_left([s.last_offset for s in self._spilled], start)
        for spill in self._spilled[first:]:
            if self._load(spill.name).scan(start, end, found):
                return found
        self._memory.scan(start, end, found)
        return found

    def forget_before(self, offset: int) -> None:
        """Those whose markers are below `offset` (the log start) have nothing left to hide."""
        self._floor = max(self._floor, offset)
        while self._spilled and self._spilled[0].last_offset < offset:
            name = self._spilled.pop(0).name
            self._forgotten.append(name)
            self._cache.pop(name, None)
        memory = self._memory
        memory.start = bisect_left(memory.lasts, offset, memory.start)
        if memory.start > len(memory.lasts) // 2:  # cut in bulk: each entry moves O(1) times
            memory.drop_front(memory.start)

    # --- the snapshot ------------------------------------------------------------------------

    def dump(self) -> dict[str, object]:
        """For the snapshot, after spilling the oldest in memory past SPILL_AT to files."""
        memory = self._memory
        while self._dir is not None and len(memory) > SPILL_AT:
            stop = memory.start + SPILL_CHUNK
            last = memory.lasts[stop - 1]
            name = f"{_PREFIX}{memory.lasts[memory.start]:020d}-{last:020d}{_SUFFIX}"
            _write(self._dir / name, memory.dump(stop=stop))
            self._spilled.append(_Spill(name, last))
            memory.drop_front(stop)
        return {"spilled": [list(s) for s in self._spilled], "memory": memory.dump()}

    def take_forgotten(self) -> list[str]:
        """The spilled files the snapshot being taken no longer names: its writer deletes them
        once it is on disk (producer_state.write_image)."""
        names, self._forgotten = self._forgotten, []
        return names

    @classmethod
    def undump(cls, saved: object, directory: Path | None) -> AbortedTxns | None:
        """From dump(), or from the [producer id, first, last] lists snapshots held before
        (their last stable offsets unknown: 0, which bounds no lookup). None when a spilled
        file it names is missing: the state must be rebuilt from the log."""
        aborted = cls(directory)
        if isinstance(saved, dict):
            aborted._spilled = [_Spill(str(n), int(o)) for n, o in saved["spilled"]]
            aborted._memory = _Columns(saved["memory"])
            if directory is not None:
                missing = [s.name for s in aborted._spilled if not (directory / s.name).exists()]
                if missing:
                    log.error("%s: %s missing; rebuilding from the log", directory, missing)
                    return None
        elif isinstance(saved, list):
            for txn in saved:
                aborted.append(AbortedTxn(*txn), 0)
        return aborted

    def remove_unnamed(self) -> None:
        """Deletes the spilled files in the directory this state does not name (a crash
        between writing one and the snapshot that names it, or a snapshot given up)."""
        if self._dir is None:
            return
        named = {s.name for s in self._spilled} | set(self._forgotten)
        for entry in os.scandir(self._dir):
            if entry.name.startswith(_PREFIX) and entry.name not in named:
                os.unlink(entry.path)

    def _load(self, name: str) -> _Columns:
        """A spilled file's aborts, kept among the CACHED_FILES read last."""
        columns = self._cache.pop(name, None)
        if columns is None:
            assert self._dir is not None
            data = (self._dir / name).read_bytes()
            width = len(data) // _COLUMNS
            columns = _Columns([data[i * width : (i + 1) * width] for i in range(_COLUMNS)])
        self._cache[name] = columns
        while len(self._cache) > CACHED_FILES:
            self._cache.popitem(last=False)
        return columns


def _write(path: Path, columns: list[bytes]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as file:
        for column in columns:
            file.write(column)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
