"""The window's entries as the Raft core and driver take them, apart from how the journal
(raft/journal.py) stores them: data commands held as their batches or read from the segment
only when sent, and lazy slices of the window."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, overload

from mypy_extensions import mypyc_attr

from raftlog.raft.window_file import Entry

DATA = 0x4B  # b"K": a command carrying Kafka record batches
DATA_PREFIX = bytes([DATA])


class EntryReader(Protocol):
    """What the commands and views read of their journal (raft/journal.py's SegmentJournal)."""

    def read_entry(self, entry: Entry) -> list[bytes | bytearray | memoryview]: ...

    def _tuple(self, position: int) -> RaftEntry: ...


# mypyc: the produce queue's Proposal (partition/produce_queue.py) subclasses it in plain Python.
@mypyc_attr(allow_interpreted_subclasses=True)
class Batches:
    """A data command held as its batches, without the DATA byte in front: the leader's
    proposal (partition/produce_queue.py's Proposal), whose batches reach the segment as
    the requests brought them instead of being copied into one command first."""

    __slots__ = ("batches",)

    def __init__(self, batches: bytes | memoryview) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return 1 + len(self.batches)

    def __bytes__(self) -> bytes:
        """The command as a follower receives it (a copy: only a forwarded proposal needs it)."""
        return b"".join((DATA_PREFIX, self.batches))


class StoredCommand:
    """A data command that reads its batches from the segment only when it is sent: the core
    asks an entry for its length when sizing an append, which needs no data; the driver's
    wire encoding takes its bytes. It holds the window's own Entry, and reads only while the
    window still holds that very object at its index: every cut removes the Entry objects it
    cuts and every add makes a new one, the window and its segments are cut together, and
    compaction and retention stop below the window's first entry. So the bytes read are the
    entry's, never a later entry's written where a cut left off (issue 43)."""

    __slots__ = ("_journal", "_entry", "_size")

    def __init__(self, journal: EntryReader, entry: Entry, size: int) -> None:
        self._journal = journal
        self._entry = entry
        self._size = 1 + size

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, item: slice | int) -> bytes | int:
        if item == slice(None, 1, None):
            return DATA_PREFIX
        return bytes(self)[item]

    def __bytes__(self) -> bytes:
        """One copy: the prefix and the segment's buffers joined (a deferred append's are
        still in memory: Segment.read_parts)."""
        return b"".join([DATA_PREFIX, *self._journal.read_entry(self._entry)])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StoredCommand):
            return self._entry.location == other._entry.location
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._entry.location)


# An entry as the window hands it out: (command, Raft index, term).
RaftEntry = tuple[bytes | StoredCommand, int, int]


class WindowView:
    """A lazy slice of the window: a sender slices the whole tail and then walks it only until
    its byte budget is spent, so materialising the slice would read the whole tail."""

    __slots__ = ("_journal", "_start", "_stop")

    def __init__(self, journal: EntryReader, start: int, stop: int) -> None:
        self._journal = journal
        self._start = start
        self._stop = max(start, stop)

    def __len__(self) -> int:
        return self._stop - self._start

    def __iter__(self) -> Iterator[RaftEntry]:
        for i in range(self._start, self._stop):
            yield self._journal._tuple(i)

    def __reversed__(self) -> Iterator[RaftEntry]:
        """pysyncobj walks the controller's log backwards; compiled, __getitem__ alone does
        not make the class a sequence to reversed()."""
        for i in range(self._stop - 1, self._start - 1, -1):
            yield self._journal._tuple(i)

    @overload
    def __getitem__(self, item: int) -> RaftEntry: ...

    @overload
    def __getitem__(self, item: slice) -> WindowView: ...

    def __getitem__(self, item: int | slice) -> RaftEntry | WindowView:
        return window_item(self._journal, self._start, self._stop, item)

    def entries(self) -> list[RaftEntry]:
        return list(self)


def window_item(
    journal: EntryReader, start: int, stop: int, item: int | slice
) -> RaftEntry | WindowView:
    """`item` of the journal's window positions start to stop - 1, as a sequence takes it: the
    one indexing that SegmentJournal (the whole window) and WindowView (a slice of it) share,
    a plain call so that neither pays for an object per index."""
    length = stop - start
    if isinstance(item, slice):
        first, end, step = item.indices(length)
        if step != 1:
            raise ValueError("stepped slices are not supported")
        return WindowView(journal, start + first, start + end)
    if item < 0:
        item += length
    if not 0 <= item < length:
        raise IndexError(item)
    return journal._tuple(start + item)
