"""The log the Raft core reads and extends: the narrow seam a partition's segment journal
fills (raftlog/raft/journal.py), and an in-memory log for the simulation and the unit tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from raftlog.raft.core.values import Entry


class RaftLog(Protocol):
    """The narrow seam to the log the core reads and extends. Indexes start at 1. Entries
    before `first_index()` were compacted by the caller (only committed, applied ones); the
    entry at `first_index()` stays and is the snapshot point a lagging follower installs."""

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def term_at(self, index: int) -> int | None:
        """The term at `index`; 0 for index 0; None when outside the log."""

    def entries(self, lo: int, hi: int) -> list[Entry]:
        """Entries with lo <= index < hi."""

    def truncate_and_append(self, after: int, entries: Sequence[Entry]) -> None:
        """Drop every entry after `after`, then append `entries` (starting at after + 1)."""


class MemoryLog:
    """An in-memory RaftLog: the simulation's and the unit tests' log. `entries` start at
    index `first` (1 unless the log was compacted)."""

    def __init__(self, entries: Sequence[Entry] = (), first: int = 1) -> None:
        self._entries: list[Entry] = list(entries)
        self._first = first

    def first_index(self) -> int:
        return self._first

    def last_index(self) -> int:
        return self._first + len(self._entries) - 1

    def term_at(self, index: int) -> int | None:
        if index == 0:
            return 0
        if self._first <= index <= self.last_index():
            return self._entries[index - self._first].term
        return None

    def entries(self, lo: int, hi: int) -> list[Entry]:
        first = self._first
        return self._entries[max(lo, first) - first : max(hi, first) - first]

    def truncate_and_append(self, after: int, entries: Sequence[Entry]) -> None:
        if after < self._first - 1:
            raise ValueError(f"cut after {after}, below the compacted log's start {self._first}")
        del self._entries[after + 1 - self._first :]
        for i, e in enumerate(entries):
            if e.index != after + 1 + i:
                raise ValueError(f"entry {e.index} appended at {after + 1 + i}")
        self._entries.extend(entries)

    def compact(self, to: int) -> None:
        """Drops the entries before `to` (a snapshot was taken at `to`)."""
        if to > self._first:
            del self._entries[: to - self._first]
            self._first = to

    def reset(self, snapshot: Entry) -> None:
        """The log after a snapshot install: the snapshot's last entry alone."""
        self._entries = [snapshot]
        self._first = snapshot.index
