"""One segment: `{base_offset:020d}-{term}.log` plus its `.index` and `.timeindex`.

A segment holds batches of a single Raft term, so the segment list is the epoch history.
Here: the files' names, and how a segment is made, opened (trusted, checked against its
indexes, or recovered) and made its log's last; its files in use (bookkeeping, residency,
appends, cuts, reads) are segment_files.py's SegmentFiles, Segment's base.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from raftlog.storage import cache
from raftlog.storage.batch import (
    HEADER_SIZE,
    crc_ok,
    iter_batches,
    parse_header,
)
from raftlog.storage.index import OffsetIndex, TimeIndex
from raftlog.storage.segment_files import FLAGS, SegmentFiles

__all__ = ["Segment", "fsync_dir", "parse_segment_name", "segment_stem"]

log = logging.getLogger(__name__)

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


class Segment(SegmentFiles):
    """A segment keeps its own bookkeeping resident (base offset, term, size, next offset, max
    timestamp). The active segment of a Log also keeps its indexes and its descriptor; any other
    loads its indexes and opens its .log only when a read needs them, under the process-wide
    budgets of raftlog.storage.cache, which may release them again between two calls."""

    __slots__ = ()

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, term: int, index_interval_bytes: int
    ) -> Segment:
        """A new, active segment."""
        segment = cls(directory, base_offset, term, index_interval_bytes)
        segment._fd = cache.open_file(segment._file("log"), FLAGS | os.O_CREAT | os.O_EXCL)
        segment._active = True
        # Empty indexes whose files appear with their first entries (flush): a segment per
        # term is a segment per election, and a thousand elections' empty index files cost
        # two file creations each on the event loop (issue 12).
        offsets = OffsetIndex(segment._file("index"), base_offset)
        segment._set_indexes(offsets, TimeIndex(segment._file("timeindex"), base_offset))
        return segment

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        term: int,
        index_interval_bytes: int,
        verify: bool,
        active: bool = True,
    ) -> Segment:
        """With `verify`, a full recover(); otherwise the data is trusted up to a cheap check of
        the indexes against the log tail, and only an inconsistency triggers recover(). An
        active segment loads its indexes for that check; any other reads only their last
        entries and leaves loading them to the first read that needs them."""
        segment = cls(directory, base_offset, term, index_interval_bytes)
        if active:
            segment._fd = cache.open_file(segment._file("log"), FLAGS)
            segment._active = True
        if verify:
            segment.recover()
        elif not (segment._load() if active else segment._check_tail()):
            log.warning("%s: indexes missing or inconsistent, recovering", segment.path)
            segment.recover()
        return segment

    @classmethod
    def trusted(
        cls,
        directory: Path,
        base_offset: int,
        term: int,
        index_interval_bytes: int,
        size: int,
        next_offset: int,
    ) -> Segment:
        """A non-active segment known to be whole (below its log's recovery point, or after a
        clean shutdown): its size is the file's, its next offset the following segment's base.
        Its indexes and max timestamp are read when first needed. Checking every segment's
        tail at open cost a restart after 300 fault cycles (140 segments per log, 46 logs)
        half a second of each node's loop before any of its groups could stand."""
        segment = cls(directory, base_offset, term, index_interval_bytes)
        segment.size = size
        segment.next_offset = next_offset
        segment._trusted = True
        return segment

    @property
    def max_timestamp(self) -> int:
        if self._trusted:
            self._read_tail()
        return self._max_ts

    @property
    def max_timestamp_offset(self) -> int:
        if self._trusted:
            self._read_tail()
        return self._max_ts_offset

    def _read_tail(self) -> None:
        """A trusted segment's max timestamp, from its indexes' last entries and the batches
        after them: the check open() makes of any other non-active segment. Indexes that do
        not match the log are rebuilt from it; its size and next offset stay as trusted."""
        size, next_offset = self.size, self.next_offset
        if self._check_tail() and (self.size, self.next_offset) == (size, next_offset):
            return
        log.warning("%s: indexes missing or inconsistent, rebuilding them", self.path)
        self.size, self.next_offset = size, next_offset
        self._rebuild_indexes()
        self._charge_indexes()

    # -- checks at open ------------------------------------------------------------------------

    def _load(self) -> bool:
        """Loads both indexes and checks them against the log tail (the active segment)."""
        offsets = OffsetIndex(self._file("index"), self.base_offset)
        times = TimeIndex(self._file("timeindex"), self.base_offset)
        if not (offsets.load() and times.load()):
            return False
        self._set_indexes(offsets, times)
        return self._check(offsets.last_entry(), times.last())

    def _check_tail(self) -> bool:
        """_load's check from the indexes' last entries alone (a non-active segment)."""
        ok, last_offset = OffsetIndex.peek_last_entry(self._file("index"), self.base_offset)
        if not ok:
            return False
        ok, last_time = TimeIndex.peek_last_entry(self._file("timeindex"), self.base_offset)
        return ok and self._check(last_offset, last_time)

    def _check(
        self, last_offset: tuple[int, int] | None, last_time: tuple[int, int] | None
    ) -> bool:
        """Restores the bookkeeping from the last index entries plus the batches after them;
        False when the indexes do not match the log."""
        if last_time and (last_offset is None or last_time[1] > last_offset[0]):
            return False
        file_size = os.fstat(self._reader()).st_size
        if last_offset is not None and last_offset[1] >= file_size:
            return False
        offset, position = last_offset if last_offset else (self.base_offset, 0)
        self._restart_at(position, offset, last_time)
        exact = last_offset is not None
        for pos, header in self.headers(position, file_size):
            if not self._fits(header, exact):
                return False
            if last_offset is None and self._since_index > self._interval:
                return False  # an entry was due, and no index file holds one: rebuild them
            exact = False
            self._track(pos, header.base_offset, header)
        return self.size == file_size

    # -- the log's last segment ----------------------------------------------------------------

    def activate(self) -> None:
        """The segment becomes its Log's last: indexes and descriptor pinned, off the budgets."""
        if self._active:
            return
        if self._trusted:
            self._read_tail()
        self._indexes()
        self._reader()
        cache.indexes.discard(self)
        cache.files.discard(self)
        self._active = True

    def deactivate(self) -> None:
        """The Log rolled past it (and handed its unsynced files to the flusher): its
        descriptor closed until a read opens it again (under the file budget), its indexes
        under theirs. Kept open, every past term's segment held a descriptor: repeated
        elections took a node from 37 to 382, past the few per replica that the partition
        budget (raftlog/common/limits.py) counts on."""
        if not self._active:
            return
        self._active = False
        self._charge_indexes()
        if self._fd >= 0:
            self._release_file()

    # -- recovery ------------------------------------------------------------------------------

    def recover(self) -> int:
        """Re-verifies every batch (CRC, offsets, term), cuts at the first bad or torn one and
        rebuilds both indexes. Returns the number of bytes cut."""
        fd = self._reader()
        file_size = os.fstat(fd).st_size
        offsets, times = self._new_indexes()
        self._restart_at(0, self.base_offset)
        want = _RECOVER_CHUNK
        while self.size < file_size:
            start = self.size
            data = os.pread(fd, min(want, file_size - start), start)
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
            os.ftruncate(fd, self.size)
        os.fsync(fd)
        offsets.flush()
        times.flush()
        self._dirty = False
        self._charge_indexes()
        return cut
