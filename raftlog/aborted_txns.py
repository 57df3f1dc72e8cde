"""The aborted transactions of one partition, as read_committed Fetch lists them.

Kept as columns of 64-bit integers (32 bytes a transaction) rather than a tuple each (176
bytes, measured): a partition that aborts often keeps every abort until retention passes
its marker, and the producer state snapshot writes them all each time the Raft window is
cut. A million aborts took 1.5 s to save and 5.2 s to load as msgpack lists; as columns
they are four byte strings. Kafka keeps them in per-segment `.txnindex` files, with the
same last stable offset per abort that bounds a lookup here.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left, bisect_right
from typing import NamedTuple


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


class AbortedTxns:
    """In marker order, so ordered by last offset."""

    __slots__ = ("_pids", "_firsts", "_lasts", "_stables", "_start")

    def __init__(self) -> None:
        self._pids = _column()
        self._firsts = _column()
        self._lasts = _column()
        # the last stable offset once each abort was written: no transaction opened below it
        # was still open, so no later abort can hold a record below it (never decreasing)
        self._stables = _column()
        self._start = 0  # entries before it are forgotten, cut away in bulk

    def __len__(self) -> int:
        return len(self._lasts) - self._start

    @property
    def _columns(self) -> tuple[array[int], ...]:
        return (self._pids, self._firsts, self._lasts, self._stables)

    def append(self, txn: AbortedTxn, stable: int) -> None:
        """`stable`: the first offset of the oldest transaction still open after it, or the
        marker's next offset with none."""
        self._pids.append(txn.producer_id)
        self._firsts.append(txn.first_offset)
        self._lasts.append(txn.last_offset)
        self._stables.append(stable)

    def overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """Those a read of [start, end) may hold records of (Kafka's
        collectAbortedTransactions: the marker at or after start, the first offset before
        end), oldest first. Kafka's bound too: past the first abort whose last stable offset
        is beyond `end`, every transaction with a record before `end` had ended."""
        i = bisect_left(self._lasts, start, self._start)
        j = min(bisect_right(self._stables, end, i), len(self._lasts) - 1)
        return [
            AbortedTxn(self._pids[k], self._firsts[k], self._lasts[k])
            for k in range(i, j + 1)
            if self._firsts[k] < end
        ]

    def forget_before(self, offset: int) -> None:
        """Those whose markers are below `offset` (the log start) have nothing left to hide."""
        self._start = bisect_left(self._lasts, offset, self._start)
        if self._start > len(self._lasts) // 2:  # cut in bulk, so each entry moves O(1) times
            for column in self._columns:
                del column[: self._start]
            self._start = 0

    def dump(self) -> list[bytes]:
        return [_saved(c[self._start :]) for c in self._columns]

    @classmethod
    def undump(cls, saved: list[bytes] | list[list[int]]) -> AbortedTxns:
        """From dump(), or from the [producer id, first, last] lists snapshots held before
        (their last stable offsets unknown: 0, which bounds no lookup)."""
        aborted = cls()
        if saved and isinstance(saved[0], bytes):
            columns = [_column(b) for b in saved if isinstance(b, bytes)]
            aborted._pids, aborted._firsts, aborted._lasts, aborted._stables = columns
        else:
            for txn in saved:
                if isinstance(txn, list):
                    aborted.append(AbortedTxn(*txn), 0)
        return aborted
