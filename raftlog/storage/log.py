"""A partition's log: its segments in (base offset, term) order.

Offsets are assigned here, at append time, from the log end offset, so every replica applying
the same Raft entries stores byte-identical segments. Compaction (raftlog.storage.compaction)
later removes records below a floor, leaving gaps between batches; a read at an offset in a gap
starts at the next batch, and segment boundaries, hence epochs and the log end, never move.
DeleteRecords moves the log start offset past the first segment's base (even into a batch);
it is kept in `log-start-offset`, and the segments wholly below it go as retention's do.
Here: opening the segments, appends, truncation, retention, compaction; the reads and the
shape of the segment list (offsets, epochs) are log_reads.py's LogReads, Log's base.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

from mypy_extensions import mypyc_attr

from raftlog.storage import compaction
from raftlog.storage.batch import parse_header
from raftlog.storage.compaction import CompactionResult, OffsetMap
from raftlog.storage.flusher import RecoveryPoint
from raftlog.storage.log_reads import Location, LogReads
from raftlog.storage.offset_file import read_offset, write_offset
from raftlog.storage.segment import Segment, fsync_dir, parse_segment_name, segment_stem

__all__ = [
    "AppendResult",
    "CompactionResult",
    "Log",
    "LogConfig",
    "TruncateResult",
    "read_start_checkpoint",
]

log = logging.getLogger(__name__)

CLEAN_MARKER = ".clean"
START_CHECKPOINT = "log-start-offset"
_INT32_MAX = 2**31 - 1  # index entries hold positions and relative offsets as int32


@dataclass
class LogConfig:
    segment_bytes: int = 128 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1 = infinite
    retention_bytes: int = -1  # -1 = infinite

    def __post_init__(self) -> None:
        if not 0 < self.segment_bytes <= _INT32_MAX:
            raise ValueError(f"segment_bytes must be in 1..{_INT32_MAX}, got {self.segment_bytes}")


@dataclass(frozen=True, slots=True, init=False)
class AppendResult:
    """(Frozen, with an __init__ of its own: see docs/architecture.md, "Compiled modules".)"""

    base_offset: int
    next_offset: int
    location: Location
    max_timestamp: int

    def __init__(
        self, base_offset: int, next_offset: int, location: Location, max_timestamp: int
    ) -> None:
        object.__setattr__(self, "base_offset", base_offset)
        object.__setattr__(self, "next_offset", next_offset)
        object.__setattr__(self, "location", location)
        object.__setattr__(self, "max_timestamp", max_timestamp)


@dataclass(frozen=True, slots=True)
class TruncateResult:
    records: int
    batches: int
    bytes: int
    terms_removed: list[int]


# mypyc: the storage simulation's log (tests/support/sim_disk.py) subclasses it in plain Python.
@mypyc_attr(allow_interpreted_subclasses=True)
class Log(LogReads):
    def __init__(self, directory: Path, config: LogConfig) -> None:
        self.directory = Path(directory)
        self.config = config
        self.directory.mkdir(parents=True, exist_ok=True)
        marker = self.directory / CLEAN_MARKER
        self.was_clean = marker.exists()
        if self.was_clean:
            marker.unlink()  # from here on a crash must not pass for a clean shutdown
            fsync_dir(self.directory)
        # Where the log stands when truncation removed every segment (kept in memory only).
        self._empty_at = 0
        self._recovery = RecoveryPoint(self.directory)
        compaction.finish_swaps(self.directory)
        self._segments = self._open_segments()
        self._recovery.lower(self.log_end_offset)  # recovery may have cut the log below it
        # Compaction's first dirty offset: below it every key appears at most once.
        self._clean_offset = compaction.read_checkpoint(self.directory)
        # The start a DeleteRecords set (0: none), which may lie above the first segment's base.
        self._start = read_start_checkpoint(self.directory)

    def _open_segments(self) -> list[Segment]:
        names: dict[tuple[int, int], set[str]] = {}
        sizes: dict[tuple[int, int], int] = {}
        for entry in os.scandir(self.directory):
            parsed = parse_segment_name(entry.name)
            if parsed is not None and entry.is_file():
                names.setdefault(parsed[:2], set()).add(parsed[2])
                if parsed[2] == "log":
                    sizes[parsed[:2]] = entry.stat().st_size
        for (base, term), extensions in list(names.items()):
            if "log" not in extensions:  # a crash interrupted Segment.delete()
                for extension in extensions:
                    (self.directory / f"{segment_stem(base, term)}.{extension}").unlink()
                del names[base, term]
        keys = sorted(names)
        interval = self.config.index_interval_bytes
        # Below the recovery point every segment but the last is on disk (raftlog.storage.
        # flusher); after an unclean shutdown those from it on, and the last, are verified.
        last = keys[-1] if keys else None
        point = -1 if self.was_clean else self._recovery.point
        # Only the last (active) segment loads its indexes; the others below the point are
        # trusted whole if their index files are there (Kafka's check; a segment too small
        # for an index entry has none), and read on first use (raftlog.storage.cache).
        segments = []
        for i, (base, term) in enumerate(keys):
            verify = point >= 0 and (base >= point or (base, term) == last)
            size, end = sizes[base, term], keys[i + 1][0] if i + 1 < len(keys) else -1
            indexed = size <= interval or {"index", "timeindex"} <= names[base, term]
            whole = (size == 0) == (end == base) and indexed
            if not verify and end >= 0 and whole:
                segments.append(Segment.trusted(self.directory, base, term, interval, size, end))
                continue
            segments.append(
                Segment.open(
                    self.directory, base, term, interval, verify, active=(base, term) == last
                )
            )
        for i in range(1, len(segments)):
            previous, segment = segments[i - 1], segments[i]
            if segment.base_offset != previous.next_offset or segment.term < previous.term:
                log.warning("%s: log is discontinuous at %s, dropping the rest", previous, segment)
                for dropped in segments[i:]:
                    dropped.delete()
                del segments[i:]
                segments[-1].activate()
                break
        return segments

    # -- writes --------------------------------------------------------------------------------

    def begin_term(self, term: int) -> None:
        """A term owns a segment from its start, even if its leader never writes a batch."""
        if term == self.active_term:
            return
        if term < self.active_term:
            raise ValueError(f"term {term} is older than the active term {self.active_term}")
        self._roll(term)

    def _roll(self, term: int) -> None:
        # The previous segment is fsynced off the loop (raftlog.storage.flusher), and the
        # recovery point passes the new one once it is. The new one's directory entry is not
        # fsynced: what it will hold is not fsynced either (replication, not fsync, keeps
        # acknowledged data, as in Kafka), and an election storm of a thousand groups spent
        # seconds of its event loop on these directory fsyncs (issue 12).
        previous = self._segments[-1] if self._segments else None
        unsynced = previous.hand_off() if previous is not None else []
        segment = Segment.create(
            self.directory, self.log_end_offset, term, self.config.index_interval_bytes
        )
        self._segments.append(segment)
        if previous is not None:  # its indexes and descriptor go under the budgets
            previous.deactivate()
            self._recovery.hand_off(unsynced, segment.base_offset)

    def append(
        self,
        batches: bytes | bytearray | memoryview,
        term: int,
        keep_offsets: bool = False,
        defer: bool = False,
    ) -> AppendResult:
        """Offsets continue from the log end offset; with `keep_offsets` the batches keep
        theirs, which may leave gaps: how a follower copies a compacted leader's segments.
        With `defer` the bytes reach the OS at `write_staged` (Segment.append)."""
        size = len(batches)
        if not size:
            raise ValueError("nothing to append")
        self.begin_term(term)
        segment = self._segments[-1]
        if segment.size and (
            segment.size + size > self.config.segment_bytes
            or segment.next_offset - segment.base_offset > _INT32_MAX
        ):
            self._roll(term)
            segment = self._segments[-1]
        position = segment.size
        base_offset = segment.next_offset
        max_timestamp = segment.append(batches, keep_offsets, defer)
        if keep_offsets:
            base_offset = parse_header(batches).base_offset
        location = Location(segment.base_offset, term, position, segment.size - position)
        return AppendResult(base_offset, segment.next_offset, location, max_timestamp)

    def write_staged(self) -> None:
        """Writes the deferred appends (only the last segment has any: a roll writes them)."""
        if self._segments:
            self._segments[-1].write_staged()

    def truncate(
        self, segment_base: int, term: int, position: int, drop_segment: bool
    ) -> TruncateResult:
        """Raft truncation: everything from `position` of segment (segment_base, term) on, and
        with drop_segment that whole segment too."""
        if not self._segments:
            return TruncateResult(0, 0, 0, [])
        i = self._index_of(segment_base, term)
        if drop_segment:
            return self._remove(i, 0, whole=True)
        return self._remove(i, position, whole=False)

    def truncate_to_offset(self, offset: int) -> TruncateResult:
        """Removes every batch at or after `offset`, which must start a batch."""
        if offset >= self.log_end_offset:
            return TruncateResult(0, 0, 0, [])
        if offset <= self.segment_start:
            return self._remove(0, 0, whole=True)
        i = self._holding(offset)
        segment = self._segments[i]
        position, header = segment.find(offset)
        if header.base_offset != offset:
            raise ValueError(f"offset {offset} is inside the batch at {header.base_offset}")
        if offset > segment.base_offset and segment.find(offset - 1)[1].base_offset == offset:
            # offset - 1 was compacted away: the cut log would end below `offset`
            raise ValueError(f"offset {offset} follows a gap compaction left in {segment}")
        return self._remove(i, position, whole=position == 0)

    def reset(self, offset: int) -> None:
        """Empties the log so it continues at `offset`: a follower whose whole log lies below
        the leader's log start. Held in memory until the next segment is created."""
        if self._segments:
            self._remove(0, 0, whole=True)
        self._empty_at = offset

    def _remove(self, i: int, position: int, whole: bool) -> TruncateResult:
        """Cuts segment i at `position` (or removes it when `whole`) and removes all later ones."""
        self._recovery.drain()  # no write of the flusher's lands in a cut or deleted file
        target = self._segments[i]
        doomed = self._segments[i if whole else i + 1 :]
        records = batches = removed_bytes = 0
        for segment, start in [(target, position), *((s, 0) for s in doomed if s is not target)]:
            removed_bytes += segment.size - start
            for _, header in segment.headers(start):
                records += header.record_count
                batches += 1
        if not whole:
            target.truncate(position)  # first: it rejects a position inside a batch
        if whole and i == 0:
            self._empty_at = target.base_offset
        for segment in reversed(doomed):
            segment.delete()
        del self._segments[len(self._segments) - len(doomed) :]
        if self._segments:
            self._segments[-1].activate()
        if self._clean_offset > self.log_end_offset:  # data from here on may be rewritten
            self._clean_offset = self.log_end_offset
            compaction.write_checkpoint(self.directory, self._clean_offset)
        self._recovery.lower(self.log_end_offset)
        remaining = {segment.term for segment in self._segments}
        terms = list(dict.fromkeys(s.term for s in doomed if s.term not in remaining))
        return TruncateResult(records, batches, removed_bytes, terms)

    def advance_start(self, offset: int) -> bool:
        """DeleteRecords: the log starts at `offset` from now on (never moving back, never
        past the log end), made durable before it is told. False if nothing moved."""
        offset = min(offset, self.log_end_offset)
        if offset <= self.log_start_offset:
            return False
        self._start = offset
        write_offset(self.directory / START_CHECKPOINT, offset)
        return True

    def delete_below_start(self, floor_offset: int) -> int:
        """Deletes whole segments below the log start, as retention does: never the active
        one, never past `floor_offset` (what Raft still needs)."""
        deleted = 0
        while len(self._segments) > 1:
            segment = self._segments[0]
            if segment.next_offset > min(floor_offset, self._start):
                break
            self._recovery.drain()  # the flusher would write its index files again
            segment.delete()
            del self._segments[0]
            deleted += 1
        return deleted

    def apply_retention(self, now_ms: int, floor_offset: int) -> int:
        """Deletes whole segments from the start; never the active one, never past
        `floor_offset` (what Raft still needs)."""
        retention_ms = self.config.retention_ms
        retention_bytes = self.config.retention_bytes
        total = sum(segment.size for segment in self._segments)
        deleted = 0
        while len(self._segments) > 1:
            segment = self._segments[0]
            if segment.next_offset > floor_offset:
                break
            expired = retention_ms >= 0 and segment.max_timestamp < now_ms - retention_ms
            oversized = retention_bytes >= 0 and total - segment.size >= retention_bytes
            if not (expired or oversized):
                break
            total -= segment.size
            self._recovery.drain()  # the flusher would write its index files again
            segment.delete()
            del self._segments[0]
            deleted += 1
        return deleted

    def compact(
        self,
        now_ms: int,
        floor_offset: int,
        delete_retention_ms: int,
        min_cleanable_dirty_ratio: float,
        max_map_keys: int = compaction.MAX_MAP_KEYS,
    ) -> CompactionResult:
        """A whole compact_steps() pass in one call."""
        steps = self.compact_steps(
            now_ms, floor_offset, delete_retention_ms, min_cleanable_dirty_ratio, max_map_keys
        )
        while True:
            try:
                next(steps)
            except StopIteration as done:
                result: CompactionResult = done.value
                return result

    def compact_steps(
        self,
        now_ms: int,
        floor_offset: int,
        delete_retention_ms: int,
        min_cleanable_dirty_ratio: float,
        max_map_keys: int = compaction.MAX_MAP_KEYS,
    ) -> Generator[None, None, CompactionResult]:
        """One compaction pass (rules in raftlog.storage.compaction) over the segments entirely
        below `floor_offset` (what Raft may still truncate, or send as stored, starts there),
        never the active one; it runs only once dirty bytes / cleanable bytes reach
        `min_cleanable_dirty_ratio`. Offsets, epochs and segment names do not change.

        The pass yields every few milliseconds of work so that an event loop can serve others:
        call next() until StopIteration, whose value is the CompactionResult. Between steps
        the log may be appended to, read and truncated above the floor; if it loses a segment
        the pass reads (retention, reset), the pass ends with `aborted`, the log consistent."""
        cleanable = [s for s in self._segments[:-1] if s.next_offset <= floor_offset]
        first_dirty = max(self._clean_offset, self.log_start_offset)
        dirty = [s for s in cleanable if s.next_offset > first_dirty]
        total = sum(s.size for s in cleanable)
        dirty_bytes = sum(s.size for s in dirty)
        ratio = dirty_bytes / total if total else 0.0
        if not dirty_bytes or ratio < min_cleanable_dirty_ratio:
            return CompactionResult(ratio, first_dirty_offset=first_dirty)
        involved = [s for s in self._segments if s.base_offset < floor_offset]  # a prefix

        def alive() -> bool:
            return len(self._segments) >= len(involved) and all(
                a is b for a, b in zip(involved, self._segments, strict=False)
            )

        offsets = OffsetMap(floor_offset)
        mapped_to = first_dirty
        rewritten = removed = tombstones = before = after = 0
        try:
            for n, segment in enumerate(dirty):
                if not (yield from offsets.add(segment, max_map_keys if n else None, alive)):
                    break
                mapped_to = segment.next_offset
            else:  # later data below the floor also supersedes, though it is not rewritten yet
                for segment in involved[len(cleanable) :]:
                    if not (yield from offsets.add(segment, max_map_keys, alive)):
                        break
            horizon = now_ms - delete_retention_ms
            for i, segment in enumerate(cleanable):
                if segment.next_offset > mapped_to:
                    break
                if not segment.size:
                    continue
                outcome = yield from compaction.clean_segment(segment, offsets, horizon, alive)
                if not outcome.changed:
                    continue
                removed += outcome.records_removed
                tombstones += outcome.tombstones_expired
                before += segment.size
                after += outcome.size
                involved[i] = self._swap_in(i)
                rewritten += 1
        except compaction.Aborted:
            log.warning("%s: compaction stopped, the log lost a segment it read", self.directory)
            return CompactionResult(
                ratio, False, rewritten, removed, tombstones, before, after, first_dirty, 0, True
            )
        self._clean_offset = mapped_to
        compaction.write_checkpoint(self.directory, mapped_to)
        return CompactionResult(
            ratio, True, rewritten, removed, tombstones, before, after, mapped_to, len(offsets.keys)
        )

    def _swap_in(self, i: int) -> Segment:
        """Replaces segment i by its fsynced rewrite; the rename to .swap is the commit point.
        Until the reopen the old descriptor keeps serving the old, equally valid, data."""
        self._recovery.drain()  # the flusher appends to index files by name
        segment = self._segments[i]
        cleaned = compaction.cleaned_path(segment)
        swap = cleaned.with_name(segment.path.name + compaction.SWAP)
        os.rename(cleaned, swap)
        fsync_dir(self.directory)
        compaction.install_swap(swap)
        segment.close()
        self._segments[i] = Segment.open(
            self.directory,
            segment.base_offset,
            segment.term,
            self.config.index_interval_bytes,
            verify=True,
            active=False,  # compaction never rewrites the active segment
        )
        return self._segments[i]

    def flush(self) -> None:
        """The active segment's data and index entries to disk (rolled ones are the
        flusher's)."""
        if self._segments:
            self._segments[-1].flush()

    def close(self) -> None:
        self._recovery.drain(closing=True)  # rolled segments the flusher had not synced yet
        self.flush()
        for segment in self._segments:
            segment.close()
        marker = self.directory / CLEAN_MARKER
        with open(marker, "wb") as file:
            os.fsync(file.fileno())
        fsync_dir(self.directory)


def read_start_checkpoint(directory: Path) -> int:
    """The log start DeleteRecords set; 0 when none was (or, with a warning, unreadable: the
    Raft window, or the leader's snapshot, brings a recent one back)."""
    return read_offset(directory / START_CHECKPOINT, "ignoring it") or 0
