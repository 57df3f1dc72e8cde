"""Sparse offset (.index) and time (.timeindex) indexes in Kafka's on-disk layout.

Entries live in compact arrays searched with bisect. The files are derived data that recovery
rebuilds from the .log, so new entries are written out only on flush: the append hot path pays
no extra syscall for them. A file appears with the index's first entry, so a segment that
never got one (a new term's segment, one per election) has none: the open-time check finds
that out by scanning its few batches. Only the active segment's indexes stay loaded; the
others' are loaded on first use and dropped again under the process-wide budget of
raftlog.storage.cache, and opening a segment reads no more of them than their last entry
(peek_last).
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from operator import lt
from pathlib import Path
from typing import ClassVar

__all__ = ["OffsetIndex", "TimeIndex"]

_SWAP = sys.byteorder == "little"  # the files are big-endian
_FIXED_BYTES = 320  # an index object, its path and its two empty arrays


def _increasing(column: array[int]) -> bool:
    """Strictly increasing (no Python bytecode per entry)."""
    return all(map(lt, column, column[1:]))


class _SparseIndex:
    """Two parallel arrays (key, value), both strictly increasing, mirrored to an append-only file."""

    ENTRY: ClassVar[struct.Struct]
    KEY_TYPE: ClassVar[str]

    __slots__ = ("path", "base_offset", "_keys", "_values", "_persisted", "_dirty")

    def __init__(self, path: str | Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._keys = array(self.KEY_TYPE)
        self._values = array("i")
        self._persisted = 0  # entries already in the file
        self._dirty = False

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def nbytes(self) -> int:
        """Memory the loaded index holds, as charged against the index budget."""
        keys, values = self._keys, self._values
        return len(keys) * keys.itemsize + len(values) * values.itemsize + _FIXED_BYTES

    @classmethod
    def _columns(cls, data: bytes) -> tuple[array[int], array[int]]:
        """Both columns of the file's entries, by strided copies rather than per-entry unpacking."""
        keys, values = array(cls.KEY_TYPE), array("i")
        key_size, width = keys.itemsize, cls.ENTRY.size
        count = len(data) // width
        for column, start, size in ((keys, 0, key_size), (values, key_size, 4)):
            raw = bytearray(size * count)
            for byte in range(size):
                raw[byte::size] = data[start + byte :: width]
            column.frombytes(raw)
            if _SWAP:
                column.byteswap()
        return keys, values

    def load(self) -> bool:
        """Reads the file (none: no entries); False when it is malformed, so the caller
        rebuilds it."""
        try:
            with open(self.path, "rb") as file:
                data = file.read()
        except FileNotFoundError:
            data = b""  # no entry was ever written
        if len(data) % self.ENTRY.size:
            return False
        keys, values = self._columns(data)
        if values and values[0] < 0:
            return False
        if not (_increasing(keys) and _increasing(values)):
            return False
        self._keys, self._values = keys, values
        self._persisted = len(keys)
        self._dirty = False
        return True

    @classmethod
    def peek_last(cls, path: str | Path) -> tuple[bool, tuple[int, int] | None]:
        """(well-formed, raw last entry or None) from the file's last bytes only: what opening a
        non-active segment reads instead of the whole index."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return True, None
        try:
            size = os.fstat(fd).st_size
            if size % cls.ENTRY.size:
                return False, None
            if not size:
                return True, None
            data = os.pread(fd, cls.ENTRY.size, size - cls.ENTRY.size)
        finally:
            os.close(fd)
        if len(data) != cls.ENTRY.size:
            return False, None
        return True, cls.ENTRY.unpack(data)

    def reset(self) -> None:
        """Empties the index and its file, if it has one, ahead of a rebuild; a file appears
        with the first entry."""
        self._keys = array(self.KEY_TYPE)
        self._values = array("i")
        with contextlib.suppress(FileNotFoundError):
            os.truncate(self.path, 0)
        self._persisted = 0
        self._dirty = True

    def flush(self) -> None:
        pending = self.take()
        if pending:
            with open(self.path, "ab") as file:
                file.write(pending)
                file.flush()
                os.fsync(file.fileno())

    def take(self) -> bytes:
        """The entries not yet in the file, packed, from here on counted as written: the
        caller appends them (raftlog.storage.flusher, for a rolled segment's, off the loop)."""
        if not self._dirty:
            return b""
        self._dirty = False
        if self._persisted == len(self._keys):  # nothing new (an empty index has no file yet)
            return b""
        pack = self.ENTRY.pack
        pending = b"".join(
            pack(self._keys[i], self._values[i]) for i in range(self._persisted, len(self._keys))
        )
        self._persisted = len(self._keys)
        return pending

    def _add(self, key: int, value: int) -> None:
        self._keys.append(key)
        self._values.append(value)
        self._dirty = True

    def _keep(self, count: int) -> None:
        if count >= len(self._keys):
            return
        del self._keys[count:]
        del self._values[count:]
        if self._persisted > count:
            os.truncate(self.path, count * self.ENTRY.size)
            self._persisted = count
        self._dirty = True


class OffsetIndex(_SparseIndex):
    """Entries: (offset relative to the segment base, byte position of the batch it starts)."""

    ENTRY = struct.Struct(">ii")
    KEY_TYPE = "i"
    __slots__ = ()

    @classmethod
    def _columns(cls, data: bytes) -> tuple[array[int], array[int]]:
        flat = array("i")
        flat.frombytes(data)
        if _SWAP:
            flat.byteswap()
        return flat[0::2], flat[1::2]

    @classmethod
    def peek_last_entry(
        cls, path: str | Path, base_offset: int
    ) -> tuple[bool, tuple[int, int] | None]:
        """(well-formed, (offset, position) of the last entry or None)."""
        ok, raw = cls.peek_last(path)
        if not ok or raw is None:
            return ok, None
        relative, position = raw
        if relative < 0 or position < 0:
            return False, None
        return True, (base_offset + relative, position)

    def append(self, offset: int, position: int) -> None:
        self._add(offset - self.base_offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below `offset`; the segment start if none."""
        return self._entry(bisect_right(self._keys, offset - self.base_offset) - 1)

    def last(self) -> tuple[int, int]:
        return self._entry(len(self._keys) - 1)

    def last_entry(self) -> tuple[int, int] | None:
        """(offset, position) of the last entry, None when there is none."""
        return self._entry(len(self._keys) - 1) if self._keys else None

    def last_before(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry below `position`; the segment start if none."""
        return self._entry(bisect_left(self._values, position) - 1)

    def _entry(self, i: int) -> tuple[int, int]:
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]

    def truncate_to_position(self, position: int) -> None:
        """Drops entries for batches at or after `position`."""
        self._keep(bisect_left(self._values, position))


class TimeIndex(_SparseIndex):
    """Entries: (largest timestamp so far, relative offset of the batch that holds it)."""

    ENTRY = struct.Struct(">qi")
    KEY_TYPE = "q"
    __slots__ = ()

    @classmethod
    def peek_last_entry(
        cls, path: str | Path, base_offset: int
    ) -> tuple[bool, tuple[int, int] | None]:
        """(well-formed, (timestamp, offset) of the last entry or None)."""
        ok, raw = cls.peek_last(path)
        if not ok or raw is None:
            return ok, None
        timestamp, relative = raw
        if relative < 0:
            return False, None
        return True, (timestamp, base_offset + relative)

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Only growth is recorded; -1 (no timestamp) never is, keeping entries non-negative."""
        if timestamp > (self._keys[-1] if self._keys else -1):
            self._add(timestamp, offset - self.base_offset)

    def last(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry."""
        if not self._keys:
            return None
        return self._keys[-1], self.base_offset + self._values[-1]

    def lookup(self, timestamp: int) -> int:
        """Offset to start scanning from for the first record at or after `timestamp`.

        Entries carry the maximum so far, so everything up to the entry before the first one
        reaching `timestamp` is older than it."""
        i = bisect_left(self._keys, timestamp)
        return self.base_offset if i == 0 else self.base_offset + self._values[i - 1]

    def truncate_after(self, offset: int) -> None:
        """Drops entries whose batch lies after `offset`."""
        self._keep(bisect_right(self._values, offset - self.base_offset))
