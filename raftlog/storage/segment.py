"""One segment: `{base_offset:020d}-{term}.log` plus its `.index` and `.timeindex`.

A segment holds batches of a single Raft term, so the segment list is the epoch history.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

from raftlog.storage.batch import (
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    BatchHeader,
    assign,
    crc_ok,
    iter_batches,
    parse_header,
)
from raftlog.storage.index import OffsetIndex, TimeIndex

__all__ = ["Segment", "fsync_dir", "parse_segment_name", "segment_stem"]

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
_SCAN_CHUNK = 16 * 1024  # header walks: covers an index interval in one pread
_RECOVER_CHUNK = 4 * 1024 * 1024  # CRC checks need whole batches
_NAME = re.compile(r"^(\d{20})-(\d+)\.(log|index|timeindex)$")


def segment_stem(base_offset: int, term: int) -> str:
    return f"{base_offset:020d}-{term}"


def fsync_dir(path: Path) -> None:
    """Makes renames, creations and deletions in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def parse_segment_name(name: str) -> tuple[int, int, str] | None:
    """(base offset, term, extension) for a file this module owns, else None."""
    match = _NAME.match(name)
    if match is None:
        return None
    return int(match[1]), int(match[2]), match[3]


class Segment:
    __slots__ = (
        "base_offset",
        "term",
        "size",
        "next_offset",
        "max_timestamp",
        "max_timestamp_offset",
        "path",
        "_interval",
        "_since_index",
        "_offsets",
        "_times",
        "_fd",
        "_dirty",
    )

    def __init__(
        self, directory: Path, base_offset: int, term: int, index_interval_bytes: int, flags: int
    ) -> None:
        stem = segment_stem(base_offset, term)
        self.base_offset = base_offset
        self.term = term
        self.path = directory / f"{stem}.log"
        self._interval = index_interval_bytes
        self._offsets = OffsetIndex(directory / f"{stem}.index", base_offset)
        self._times = TimeIndex(directory / f"{stem}.timeindex", base_offset)
        # One descriptor serves appends (O_APPEND), preads and ftruncate.
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | flags, 0o644)
        self._dirty = False
        self._restart_at(0, base_offset)

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, term: int, index_interval_bytes: int
    ) -> Segment:
        segment = cls(directory, base_offset, term, index_interval_bytes, os.O_CREAT | os.O_EXCL)
        segment._offsets.reset()
        segment._times.reset()
        return segment

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, term: int, index_interval_bytes: int, verify: bool
    ) -> Segment:
        """With `verify`, a full recover(); otherwise the data is trusted up to a cheap check of
        the indexes against the log tail, and only an inconsistency triggers recover()."""
        segment = cls(directory, base_offset, term, index_interval_bytes, 0)
        if verify:
            segment.recover()
        elif not segment._load():
            log.warning("%s: indexes missing or inconsistent, recovering", segment.path)
            segment.recover()
        return segment

    def __repr__(self) -> str:
        return (
            f"Segment(base={self.base_offset}, term={self.term}, "
            f"next={self.next_offset}, size={self.size})"
        )

    # -- state ---------------------------------------------------------------------------------

    def _restart_at(self, position: int, offset: int) -> None:
        """State as it was just before the batch at `position` (an index point or 0) was added."""
        self.size = position
        self.next_offset = offset
        self._since_index = 0
        last = self._times.last() if position else None
        self.max_timestamp, self.max_timestamp_offset = last if last else (-1, -1)

    def _track(self, position: int, base_offset: int, header: BatchHeader) -> None:
        """Account for one stored batch; Kafka's rule: an index entry once more than
        index_interval_bytes were written since the last one."""
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.max_timestamp_offset = base_offset
        if self._since_index > self._interval and base_offset - self.base_offset <= _INT32_MAX:
            self._offsets.append(base_offset, position)
            self._times.maybe_append(self.max_timestamp, self.max_timestamp_offset)
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

    def _load(self) -> bool:
        if not (self._offsets.load() and self._times.load()):
            return False
        last_offset, last_position = self._offsets.last()
        last_time = self._times.last()
        if last_time and (not len(self._offsets) or last_time[1] > last_offset):
            return False
        file_size = os.fstat(self._fd).st_size
        if len(self._offsets) and last_position >= file_size:
            return False
        self._restart_at(last_position, last_offset)
        exact = bool(len(self._offsets))
        for position, header in self.headers(last_position, file_size):
            if not self._fits(header, exact):
                return False
            exact = False
            self._track(position, header.base_offset, header)
        return self.size == file_size

    # -- writes --------------------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, keep_offsets: bool = False) -> int:
        """Stores whole batches, rewriting their base offsets and leader epochs in one copy.
        With `keep_offsets` the base offsets stay as they are, gaps included: batches copied
        from a compacted log. Returns the largest batch max timestamp."""
        buf = bytearray(data)
        total = len(buf)
        headers: list[tuple[int, BatchHeader]] = []
        offset = self.next_offset
        term = self.term
        pos = 0
        while pos < total:
            header = parse_header(buf, pos)
            size = header.size
            if header.batch_length < MIN_BATCH_LENGTH or pos + size > total:
                raise ValueError(f"malformed record batch at byte {pos} of an append")
            if keep_offsets:
                if header.base_offset < offset:
                    raise ValueError(f"batch at offset {header.base_offset} is below {offset}")
                offset = header.base_offset
            assign(buf, pos, offset, term)
            headers.append((offset, header))
            offset += header.last_offset_delta + 1
            pos += size
        self._write(buf)
        position = self.size
        max_timestamp = -1
        for offset, header in headers:
            self._track(position, offset, header)
            max_timestamp = max(max_timestamp, header.max_timestamp)
            position = self.size
        return max_timestamp

    def _write(self, buf: bytearray) -> None:
        view = memoryview(buf)
        written = 0
        try:
            while written < len(view):
                written += os.write(self._fd, view[written:])
        except OSError:
            os.ftruncate(self._fd, self.size)  # no half batch may stay behind the tracked size
            raise
        self._dirty = True

    def truncate(self, position: int) -> None:
        """Cuts at a batch boundary; the tail from the last index entry below the cut is
        re-read to restore next_offset and the max timestamp."""
        if position == self.size:
            return
        if not 0 <= position < self.size:
            raise ValueError(f"cannot truncate {self} at byte {position}")
        last_offset, last_position = self._offsets.last_before(position)
        kept = list(self.headers(last_position, position))
        end = kept[-1][0] + kept[-1][1].size if kept else last_position
        if end != position:
            raise ValueError(f"byte {position} of {self} is not a batch boundary")
        self._offsets.truncate_to_position(position)
        self._times.truncate_after(last_offset if len(self._offsets) else self.base_offset - 1)
        self._restart_at(last_position, last_offset)
        for pos, header in kept:
            self._track(pos, header.base_offset, header)
        os.ftruncate(self._fd, position)
        self._dirty = True

    def recover(self) -> int:
        """Re-verifies every batch (CRC, offsets, term), cuts at the first bad or torn one and
        rebuilds both indexes. Returns the number of bytes cut."""
        file_size = os.fstat(self._fd).st_size
        self._offsets.reset()
        self._times.reset()
        self._restart_at(0, self.base_offset)
        want = _RECOVER_CHUNK
        while self.size < file_size:
            start = self.size
            data = os.pread(self._fd, min(want, file_size - start), start)
            for pos, header in iter_batches(data):
                if not (self._fits(header) and crc_ok(data, pos, header)):
                    break
                self._track(start + pos, header.base_offset, header)
            if self.size > start:
                want = _RECOVER_CHUNK
                continue
            # Nothing whole in this chunk: either one batch is larger than it, or the data ends.
            if len(data) >= HEADER_SIZE and want < (first := parse_header(data)).size:
                want = first.size
                continue
            break
        cut = file_size - self.size
        if cut:
            log.warning("%s: cut %d bytes of torn or invalid data", self.path, cut)
            os.ftruncate(self._fd, self.size)
        os.fsync(self._fd)
        self._offsets.flush()
        self._times.flush()
        self._dirty = False
        return cut

    def flush(self) -> None:
        if self._dirty:
            os.fsync(self._fd)
            self._dirty = False
        self._offsets.flush()
        self._times.flush()

    def close(self) -> None:
        os.close(self._fd)

    def delete(self) -> None:
        """The .log goes first: index files left by a crash are orphans that open() removes."""
        self.close()
        self.path.unlink(missing_ok=True)
        self._offsets.path.unlink(missing_ok=True)
        self._times.path.unlink(missing_ok=True)

    # -- reads ---------------------------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        data = os.pread(self._fd, size, position)
        if len(data) != size:
            raise ValueError(f"{self} has no {size} bytes at {position}")
        return data

    def read_batches(
        self, position: int, max_bytes: int, upper_bound: int, min_one: bool
    ) -> tuple[bytes, bool]:
        """Whole batches from `position` in one pread. The flag says the read stopped on
        `max_bytes` or `upper_bound` rather than at the end of the segment."""
        available = self.size - position
        want = min(available, max(max_bytes, HEADER_SIZE) if min_one else max_bytes)
        data = os.pread(self._fd, want, position) if want > 0 else b""
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
            data = os.pread(self._fd, min(_SCAN_CHUNK, end - pos), pos)
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
        _, start = self._offsets.lookup(offset)
        for position, header in self.headers(start):
            if header.next_offset > offset:
                return position, header
        raise ValueError(f"offset {offset} is not in {self}")

    def timestamp_position(self, timestamp: int) -> int:
        """A position at or before the first batch whose max timestamp reaches `timestamp`."""
        return self._offsets.lookup(self._times.lookup(timestamp))[1]
