"""A segment's files in use: the bookkeeping of its batches, its indexes and descriptor under
the process-wide budgets, appends (deferred or not), cuts and reads; how a segment is made,
checked or recovered when opened, and made its log's active one, is segment.py's."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from raftlog.storage import cache
from raftlog.storage.batch import (
    ASSIGNED_BYTES,
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    BatchHeader,
    assign,
    parse_header,
)
from raftlog.storage.index import OffsetIndex, TimeIndex

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
_SCAN_CHUNK = 16 * 1024  # header walks: covers an index interval in one pread
FLAGS = os.O_RDWR | os.O_APPEND
_IOV_MAX = 1024  # buffers per writev (Linux UIO_MAXIOV)


class SegmentFiles:
    """Segment's (segment.py) files and bookkeeping, resident or not: what its reads and writes
    use once it is open."""

    __slots__ = (
        "base_offset",
        "term",
        "size",
        "next_offset",
        "_max_ts",
        "_max_ts_offset",
        "_trusted",
        "_dir",
        "_interval",
        "_since_index",
        "_offsets",
        "_times",
        "_fd",
        "_dirty",
        "_active",
        "_staged",
        "_staged_at",
        "_staged_spans",
    )
    size: int
    next_offset: int
    _max_ts: int
    _max_ts_offset: int

    def __init__(self, directory: Path, base_offset: int, term: int, index_interval_bytes: int):
        self.base_offset = base_offset
        self.term = term
        self._dir = str(directory)  # paths are built on demand: a Path each costs ~0.5 KiB
        self._interval = index_interval_bytes
        self._offsets: OffsetIndex | None = None  # loaded indexes, or None
        self._times: TimeIndex | None = None
        self._fd = -1  # one descriptor serves appends (O_APPEND), preads and ftruncate
        self._dirty = False
        self._active = False  # pinned: indexes and descriptor stay, outside the budgets
        # Appended with `defer`, not yet written: buffers, and the file position they start at.
        self._staged: list[bytearray | memoryview] = []
        self._staged_at = 0
        # Each deferred append's position -> (size, its first and end index in _staged).
        self._staged_spans: dict[int, tuple[int, int, int]] = {}
        self._restart_at(0, base_offset)

    def __repr__(self) -> str:
        return (
            f"Segment(base={self.base_offset}, term={self.term}, "
            f"next={self.next_offset}, size={self.size})"
        )

    @property
    def path(self) -> Path:
        return Path(self._file("log"))

    def _file(self, extension: str) -> str:
        return f"{self._dir}/{self.base_offset:020d}-{self.term}.{extension}"

    @property
    def active(self) -> bool:
        return self._active

    @property
    def resident(self) -> tuple[bool, bool]:
        """(indexes loaded, .log open): what the segment holds right now."""
        return self._offsets is not None, self._fd >= 0

    # -- state ---------------------------------------------------------------------------------

    def _restart_at(
        self, position: int, offset: int, last_time: tuple[int, int] | None = None
    ) -> None:
        """State as it was just before the batch at `position` (an index point or 0) was added;
        `last_time` is the time index's last entry at that point."""
        self.size = position
        self.next_offset = offset
        self._since_index = 0
        last = last_time if position else None
        self._max_ts, self._max_ts_offset = last if last else (-1, -1)
        self._trusted = False

    def _track(self, position: int, base_offset: int, header: BatchHeader) -> None:
        """Account for one stored batch; Kafka's rule: an index entry once more than
        index_interval_bytes were written since the last one. Without loaded indexes (the
        tail check of a non-active segment) only the bookkeeping moves."""
        if header.max_timestamp > self._max_ts:
            self._max_ts = header.max_timestamp
            self._max_ts_offset = base_offset
        if self._since_index > self._interval and base_offset - self.base_offset <= _INT32_MAX:
            if self._offsets is not None and self._times is not None:
                self._offsets.append(base_offset, position)
                self._times.maybe_append(self._max_ts, self._max_ts_offset)
            self._since_index = 0
        size = header.size
        self._since_index += size
        self.size = position + size
        self.next_offset = base_offset + header.last_offset_delta + 1

    def _fits(self, header: BatchHeader, exact: bool = False) -> bool:
        """Stored batches must carry this segment's term and move the offsets forward. A gap
        is legal (compaction removes whole batches, as in Kafka); with `exact` the batch must
        start at next_offset, as the batch an index entry points at does."""
        return (
            header.batch_length >= MIN_BATCH_LENGTH
            and header.magic == 2
            and (
                header.base_offset == self.next_offset
                if exact
                else header.base_offset >= self.next_offset
            )
            and header.partition_leader_epoch == self.term
            and header.last_offset_delta >= 0
        )

    # -- residency -----------------------------------------------------------------------------

    def _new_indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        """Empty indexes and files, ahead of a rebuild or for a new segment."""
        offsets = OffsetIndex(self._file("index"), self.base_offset)
        times = TimeIndex(self._file("timeindex"), self.base_offset)
        offsets.reset()
        times.reset()
        self._set_indexes(offsets, times)
        return offsets, times

    def _set_indexes(self, offsets: OffsetIndex, times: TimeIndex) -> None:
        cache.indexes.discard(self)
        self._offsets, self._times = offsets, times

    def _charge_indexes(self) -> None:
        """Puts loaded indexes of a non-active segment under the budget (again)."""
        if not self._active and self._offsets is not None and self._times is not None:
            cache.indexes.add(self, self._offsets.nbytes + self._times.nbytes)

    def _indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        """Both indexes, loaded if need be (they are loaded and released together)."""
        offsets, times = self._offsets, self._times
        if offsets is None or times is None:
            offsets, times = self._load_indexes()
        elif not self._active:
            cache.indexes.touch(self)
        return offsets, times

    def _load_indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        """First use of a non-active segment's indexes since they were released. The open-time
        check only saw their last entries: a malformed file is rebuilt from the .log here."""
        cache.index_loads += 1
        offsets = OffsetIndex(self._file("index"), self.base_offset)
        times = TimeIndex(self._file("timeindex"), self.base_offset)
        if offsets.load() and times.load() and self._matches(offsets, times):
            self._set_indexes(offsets, times)
        else:
            log.warning("%s: indexes missing or inconsistent, rebuilding them", self.path)
            offsets, times = self._rebuild_indexes()
        self._charge_indexes()
        return offsets, times

    def _matches(self, offsets: OffsetIndex, times: TimeIndex) -> bool:
        last_offset, last_time = offsets.last_entry(), times.last()
        if last_time and (last_offset is None or last_time[1] > last_offset[0]):
            return False
        return last_offset is None or (
            last_offset[0] < self.next_offset and last_offset[1] < self.size
        )

    def _rebuild_indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        """Both indexes from the batch headers, the data trusted as it is: unlike recover(), no
        cut, which would break the log's continuity under its readers."""
        end, next_offset = self.size, self.next_offset
        offsets, times = self._new_indexes()
        self._restart_at(0, self.base_offset)
        for position, header in self.headers(0, end):
            if not self._fits(header):
                break
            self._track(position, header.base_offset, header)
        if (self.size, self.next_offset) != (end, next_offset):
            log.error("%s: batches end at byte %d of %d", self.path, self.size, end)
            self.size, self.next_offset = end, next_offset
        offsets.flush()
        times.flush()
        return offsets, times

    def _release_indexes(self) -> None:
        """Called by the index budget; what a segment wrote to its indexes is flushed first."""
        offsets, times = self._offsets, self._times
        self._offsets = self._times = None
        if offsets is None or times is None:
            return  # not loaded (the budget holds only segments whose indexes are)
        try:
            offsets.flush()
            times.flush()
        except OSError as exc:  # derived data: a missing tail entry only costs a longer scan
            log.warning("%s: index entries not flushed: %s", self.path, exc)

    def _reader(self) -> int:
        """The descriptor, opened if need be, with every deferred append written: whatever
        reads, cuts or syncs the file finds it as the bookkeeping says. Never keep it across a
        pause: the budget may close it as soon as another segment opens its file."""
        fd = self._fd
        if self._active:
            self.write_staged()
            return fd
        if fd < 0:
            cache.file_opens += 1
            fd = self._fd = cache.open_file(self._file("log"), FLAGS)
            cache.files.add(self, 1)
        else:
            cache.files.touch(self)
        return fd

    def _release_file(self) -> None:
        """Called by the file budget."""
        fd, self._fd = self._fd, -1
        try:
            if self._dirty:
                os.fsync(fd)
                self._dirty = False
        finally:
            os.close(fd)

    # -- writes --------------------------------------------------------------------------------

    def append(
        self, data: bytes | bytearray | memoryview, keep_offsets: bool = False, defer: bool = False
    ) -> int:
        """Stores whole batches with their base offsets and leader epochs rewritten. Only each
        batch's first bytes are copied and patched; the rest is written from `data` as it is:
        copying every append into a fresh buffer cost a page fault per 4 KiB. With
        `keep_offsets` the base offsets stay as they are, gaps included: batches copied from a
        compacted log. With `defer` the bytes wait for `write_staged` (or anything that reads,
        cuts or syncs the file), so a Raft group's entries of one loop turn reach the OS in
        one writev: `data` must not change meanwhile. Returns the largest batch max
        timestamp."""
        view = memoryview(data).cast("B")
        total = len(view)
        headers: list[tuple[int, BatchHeader]] = []
        parts: list[bytearray | memoryview] = []
        offset = self.next_offset
        term = self.term
        pos = 0
        while pos < total:
            header = parse_header(view, pos)
            size = header.size
            if header.batch_length < MIN_BATCH_LENGTH or pos + size > total:
                raise ValueError(f"malformed record batch at byte {pos} of an append")
            if keep_offsets:
                if header.base_offset < offset:
                    raise ValueError(f"batch at offset {header.base_offset} is below {offset}")
                offset = header.base_offset
            head = bytearray(view[pos : pos + ASSIGNED_BYTES])
            assign(head, 0, offset, term)
            parts += (head, view[pos + ASSIGNED_BYTES : pos + size])
            headers.append((offset, header))
            offset += header.last_offset_delta + 1
            pos += size
        if defer:
            if not self._staged:
                self._staged_at = self.size
            first = len(self._staged)
            self._staged += parts
            self._staged_spans[self.size] = (total, first, len(self._staged))
        else:
            self.write_staged()
            self._write(parts, self.size)
        position = self.size
        max_timestamp = -1
        for offset, header in headers:
            self._track(position, offset, header)
            max_timestamp = max(max_timestamp, header.max_timestamp)
            position = self.size
        return max_timestamp

    def write_staged(self) -> None:
        """Writes the deferred appends, in order, in one writev (fewer past IOV_MAX buffers)."""
        if not self._staged:
            return
        parts, self._staged = self._staged, []
        self._staged_spans = {}
        try:
            self._write(parts, self._staged_at)
        except OSError:
            self.truncate(self._staged_at)  # the bookkeeping back to what the file holds
            raise

    def _write(self, parts: list[bytearray | memoryview], start: int) -> None:
        """Appends `parts`, which belong at file position `start`."""
        try:
            while parts:
                n = os.writev(self._fd, parts[:_IOV_MAX])
                while parts and n >= len(parts[0]):  # drop what went out, keep a partial rest
                    n -= len(parts.pop(0))
                if n:
                    parts[0] = memoryview(parts[0])[n:]
        except OSError:
            os.ftruncate(self._fd, start)  # no half batch may stay behind
            raise
        self._dirty = True

    def truncate(self, position: int) -> None:
        """Cuts at a batch boundary; the tail from the last index entry below the cut is
        re-read to restore next_offset and the max timestamp."""
        if position == self.size:
            return
        if not 0 <= position < self.size:
            raise ValueError(f"cannot truncate {self} at byte {position}")
        offsets, times = self._indexes()
        last_offset, last_position = offsets.last_before(position)
        kept = list(self.headers(last_position, position))
        end = kept[-1][0] + kept[-1][1].size if kept else last_position
        if end != position:
            raise ValueError(f"byte {position} of {self} is not a batch boundary")
        offsets.truncate_to_position(position)
        times.truncate_after(last_offset if len(offsets) else self.base_offset - 1)
        self._restart_at(last_position, last_offset, times.last())
        for pos, header in kept:
            self._track(pos, header.base_offset, header)
        os.ftruncate(self._reader(), position)
        self._dirty = True
        self._charge_indexes()

    def flush(self) -> None:
        self.write_staged()
        if self._dirty and self._fd >= 0:
            os.fsync(self._fd)
            self._dirty = False
        if self._offsets is not None and self._times is not None:
            self._offsets.flush()
            self._times.flush()

    def hand_off(self) -> list[tuple[str, bytes]]:
        """What of this segment no fsync has covered yet, as (file, bytes to append first):
        the log rolled past it and hands it to the flusher, off the event loop (creating and
        writing the index files there cost a failover 12 % of a node's loop). From here on
        it is the flusher's, and the log drains it before it cuts or replaces the files."""
        self.write_staged()
        writes: list[tuple[str, bytes]] = []
        if self._dirty:
            writes.append((self._file("log"), b""))
            self._dirty = False
        if self._offsets is not None and self._times is not None:
            for index in (self._offsets, self._times):
                pending = index.take()
                if pending:
                    writes.append((str(index.path), pending))
        return writes

    def close(self) -> None:
        """Writes deferred appends, then releases the descriptor and the indexes without
        flushing anything."""
        if self._fd >= 0:
            self.write_staged()
        cache.indexes.discard(self)
        cache.files.discard(self)
        self._offsets = self._times = None
        self._active = False
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def delete(self) -> None:
        """The .log goes first: index files left by a crash are orphans that open() removes."""
        self._staged, self._staged_spans = [], {}
        self.close()
        for extension in ("log", "index", "timeindex"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._file(extension))

    # -- reads ---------------------------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        """`size` bytes at `position`."""
        parts = self.read_parts(position, size)
        return parts[0] if len(parts) == 1 and isinstance(parts[0], bytes) else b"".join(parts)

    def read_parts(self, position: int, size: int) -> list[bytes | bytearray | memoryview]:
        """`size` bytes at `position`, as buffers. A deferred append read whole (a leader
        encoding its new entries for its followers before the turn's write) comes from
        memory, as the buffers append() staged (they do not change: `data` may not, and each
        batch's rewritten head is its own): one pread per follower per entry was a tenth of
        an RF 3 node's system calls on small writes, and joining them a copy per follower."""
        span = self._staged_spans.get(position)
        if span is not None and span[0] == size:
            parts: list[bytes | bytearray | memoryview] = [*self._staged[span[1] : span[2]]]
            return parts
        data = os.pread(self._reader(), size, position)
        if len(data) != size:
            raise ValueError(f"{self} has no {size} bytes at {position}")
        return [data]

    def read_batches(
        self, position: int, max_bytes: int, upper_bound: int, min_one: bool
    ) -> tuple[bytes, bool]:
        """Whole batches from `position` in one pread. The flag says the read stopped on
        `max_bytes` or `upper_bound` rather than at the end of the segment."""
        available = self.size - position
        want = min(available, max(max_bytes, HEADER_SIZE) if min_one else max_bytes)
        data = os.pread(self._reader(), want, position) if want > 0 else b""
        end = 0
        while end + HEADER_SIZE <= len(data):
            header = parse_header(data, end)
            if header.next_offset > upper_bound:
                return data[:end], True
            if end + header.size > len(data):
                if end == 0 and min_one:  # KIP-74: the first batch goes out whatever its size
                    return self.read(position, header.size), True
                break
            end += header.size
        return (data if end == len(data) else data[:end]), end < available

    def headers(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch starting in [start, end), reading headers only."""
        end = self.size if end is None else end
        pos = start
        while pos < end:
            data = os.pread(self._reader(), min(_SCAN_CHUNK, end - pos), pos)
            if len(data) < HEADER_SIZE:
                return
            off = 0
            while off + HEADER_SIZE <= len(data):
                header = parse_header(data, off)
                if header.batch_length < MIN_BATCH_LENGTH:
                    return
                yield pos + off, header
                off += header.size
            pos += off

    def find(self, offset: int) -> tuple[int, BatchHeader]:
        """(position, header) of the batch holding `offset`."""
        _, start = self._indexes()[0].lookup(offset)
        for position, header in self.headers(start):
            if header.next_offset > offset:
                return position, header
        raise ValueError(f"offset {offset} is not in {self}")

    def timestamp_position(self, timestamp: int) -> int:
        """A position at or before the first batch whose max timestamp reaches `timestamp`."""
        offsets, times = self._indexes()
        return offsets.lookup(times.lookup(timestamp))[1]
