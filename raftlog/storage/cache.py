"""Per-process budgets for what non-active segments hold: index arrays and open .log files.

As in Kafka (lazy index mmaps, idle segment files closed), a Log's non-active segments load
their .index and .timeindex on first use and open their .log on first read. Two LRUs shared by
every Log of the process then release them, least recently used first, once the process is over
budget: `max_index_bytes` of index arrays and `max_open_files` descriptors. The active segment
of each Log is pinned outside both budgets: it keeps its descriptor for appends and its indexes
(bounded by segment.bytes) for the tail reads that most fetches are. What a segment keeps
resident whatever the budgets is its own bookkeeping: base offset, term, size, next offset and
max timestamp, a few hundred bytes.

The node is single-threaded, so a released resource can only be in use across a pause: readers
never hold a descriptor or an index across a yield (Segment.headers() asks for the descriptor
again for every chunk), and the one just loaded is never the one released.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "DEFAULT_MAX_INDEX_BYTES",
    "DEFAULT_MAX_OPEN_FILES",
    "CacheStats",
    "configure",
    "files",
    "indexes",
    "open_file",
    "stats",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_INDEX_BYTES = 64 * 1024 * 1024
# Descriptors of past segments opened for reads: part of the node's RESERVED_FDS
# (raftlog/common/limits.py), not of the few each replica is budgeted.
DEFAULT_MAX_OPEN_FILES = 256


class Lru:
    """Owners (segments) in least-recently-used order, each charged some amount; over the limit,
    the oldest are handed to `release` until the total fits again or only the newest is left."""

    __slots__ = ("name", "limit", "used", "evictions", "_entries", "_release")

    def __init__(self, name: str, limit: int, release: Callable[[Any], None]) -> None:
        self.name = name
        self.limit = limit
        self.used = 0
        self.evictions = 0
        self._entries: OrderedDict[Any, int] = OrderedDict()
        self._release = release

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, owner: object) -> bool:
        return owner in self._entries

    def touch(self, owner: object) -> None:
        self._entries.move_to_end(owner)

    def add(self, owner: object, charge: int) -> None:
        """Charges `owner` (again) as the most recently used, then releases others if needed."""
        self.discard(owner)
        self._entries[owner] = charge
        self.used += charge
        self.trim(self.limit)

    def discard(self, owner: object) -> None:
        """Forgets `owner` without releasing it (it was closed, deleted or pinned)."""
        charge = self._entries.pop(owner, None)
        if charge is not None:
            self.used -= charge

    def trim(self, limit: int) -> None:
        entries = self._entries
        while self.used > limit and len(entries) > 1:
            owner, charge = entries.popitem(last=False)
            self.used -= charge
            self.evictions += 1
            self._release(owner)


def _release_indexes(segment: Any) -> None:
    segment._release_indexes()


def _release_file(segment: Any) -> None:
    segment._release_file()


def _default_max_open_files() -> int:
    """DEFAULT_MAX_OPEN_FILES, or half the soft RLIMIT_NOFILE when that is lower: the active
    segments, sockets and index files opened for loading need descriptors too."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return DEFAULT_MAX_OPEN_FILES
    return max(16, min(DEFAULT_MAX_OPEN_FILES, soft // 2))


indexes = Lru("index bytes", DEFAULT_MAX_INDEX_BYTES, _release_indexes)
files = Lru("open segment files", _default_max_open_files(), _release_file)
index_loads = 0  # lazy loads of a non-active segment's indexes, for stats()
file_opens = 0  # lazy opens of a non-active segment's .log, for stats()


class CacheStats(NamedTuple):
    resident_indexes: int  # non-active segments whose index arrays are in memory
    index_bytes: int
    max_index_bytes: int
    open_files: int  # non-active segments whose .log is open
    max_open_files: int
    index_loads: int
    index_evictions: int
    file_opens: int
    file_evictions: int


def stats() -> CacheStats:
    return CacheStats(
        len(indexes),
        indexes.used,
        indexes.limit,
        len(files),
        files.limit,
        index_loads,
        indexes.evictions,
        file_opens,
        files.evictions,
    )


def configure(max_index_bytes: int | None = None, max_open_files: int | None = None) -> None:
    """Sets the process-wide budgets (the defaults: 64 MiB, 256 files); takes effect at once."""
    if max_index_bytes is not None:
        if max_index_bytes < 0:
            raise ValueError(f"max_index_bytes must be >= 0, got {max_index_bytes}")
        indexes.limit = max_index_bytes
        indexes.trim(max_index_bytes)
    if max_open_files is not None:
        if max_open_files < 1:
            raise ValueError(f"max_open_files must be >= 1, got {max_open_files}")
        files.limit = max_open_files
        files.trim(max_open_files)


def open_file(path: str | Path, flags: int) -> int:
    """os.open for a segment's .log; out of descriptors, the idle half of those the LRU holds
    are closed and the open is tried once more."""
    try:
        return os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno not in (errno.EMFILE, errno.ENFILE) or not len(files):
            raise
        log.warning("out of file descriptors, closing %d idle segment files", (len(files) + 1) // 2)
        files.trim(len(files) // 2)
        return os.open(path, flags, 0o644)
