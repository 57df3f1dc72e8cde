"""A partition's log as its readers see it: the shape of its segment list (offsets, epochs)
and the reads over it, the half of Log (log.py) that never changes the segments; Log opens
them, appends, truncates, deletes and compacts."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from mypy_extensions import mypyc_attr

from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.storage.batch import BatchHeader
from raftlog.storage.segment import Segment


@dataclass(frozen=True, slots=True, init=False)
class Location:
    """Where one appended entry's bytes live. (Frozen, with an __init__ of its own: see
    docs/architecture.md, "Compiled modules", for why.)"""

    segment_base: int
    term: int
    position: int
    size: int

    def __init__(self, segment_base: int, term: int, position: int, size: int) -> None:
        object.__setattr__(self, "segment_base", segment_base)
        object.__setattr__(self, "term", term)
        object.__setattr__(self, "position", position)
        object.__setattr__(self, "size", size)


def _segment_key(segment: Segment) -> tuple[int, int]:
    return segment.base_offset, segment.term


def _base_key(segment: Segment) -> int:
    return segment.base_offset


# mypyc: Log, which the storage simulation's log (tests/support/sim_disk.py) subclasses in
# plain Python, is built on it.
@mypyc_attr(allow_interpreted_subclasses=True)
class LogReads:
    """Log's (log.py) reads, over the segments its __init__ opens and sets here."""

    directory: Path
    _segments: list[Segment]
    _empty_at: int
    _start: int

    # -- shape ---------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        """The first offset a client may read: the first segment's base, or past it where
        DeleteRecords moved the start (the segments below wait for retention's turn)."""
        return max(self.segment_start, self._start)

    @property
    def segment_start(self) -> int:
        """The first offset the segments hold: what Raft's truncation and a snapshot install
        (which copies whole batches) work from."""
        return self._segments[0].base_offset if self._segments else self._empty_at

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset if self._segments else self._empty_at

    @property
    def active_term(self) -> int:
        return self._segments[-1].term if self._segments else -1

    def segments(self) -> list[Segment]:
        return list(self._segments)

    def epochs(self) -> list[tuple[int, int]]:
        """(term, start offset) per term: the epoch cache is the segment list."""
        epochs: list[tuple[int, int]] = []
        for segment in self._segments:
            if not epochs or epochs[-1][0] != segment.term:
                epochs.append((segment.term, segment.base_offset))
        return epochs

    def epoch_for_offset(self, offset: int) -> int:
        if not self.log_start_offset <= offset < self.log_end_offset:
            return -1
        return self._segments[self._holding(offset)].term

    def _holding(self, offset: int) -> int:
        """Index of the segment holding `offset`, which must be in the log. Empty segments share
        their base with the next one and sort before it, so the last base <= offset is it."""
        return bisect_right(self._segments, offset, key=_base_key) - 1

    def _index_of(self, segment_base: int, term: int) -> int:
        i = bisect_right(self._segments, (segment_base, term), key=_segment_key) - 1
        if i < 0 or _segment_key(self._segments[i]) != (segment_base, term):
            raise ValueError(f"no segment {segment_base}-{term} in {self.directory}")
        return i

    # -- reads ---------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, upper_bound: int, min_one: bool) -> bytes:
        """Whole batches from the one holding `offset`, none past `upper_bound` (the high
        watermark), at most `max_bytes` unless `min_one` lets a larger first batch through.
        Anything the segments hold is readable here: refusing offsets below a log start that
        DeleteRecords moved is the partition's (a snapshot install copies from the segments)."""
        start, end = self.segment_start, self.log_end_offset
        if not start <= offset <= end:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} is outside the log [{start}, {end})",
            )
        if offset >= min(upper_bound, end):
            return b""
        i = self._holding(offset)
        position, _ = self._segments[i].find(offset)
        parts: list[bytes] = []
        total = 0
        for segment in self._segments[i:]:
            data, stopped = segment.read_batches(
                position, max_bytes - total, upper_bound, min_one and not total
            )
            parts.append(data)
            total += len(data)
            if stopped or total >= max_bytes:
                break
            position = 0
        return b"".join(parts)

    def bytes_from(self, offset: int) -> int:
        """Bytes of the batches from the one holding `offset` to the log end: what a replica
        whose log ends at `offset` still lacks of this one (a move's copy, issue 44)."""
        if offset >= self.log_end_offset:
            return 0
        if offset <= self.segment_start:
            return sum(s.size for s in self._segments)
        i = self._holding(offset)
        segment = self._segments[i]
        try:
            position, _ = segment.find(offset)
        except ValueError:  # past its last batch (compaction left a gap): nothing of it
            position = segment.size
        return segment.size - position + sum(s.size for s in self._segments[i + 1 :])

    def locate(self, offset: int, next_offset: int) -> Location:
        """The Location of the batches holding exactly [offset, next_offset), which must lie in
        one segment: how an installed snapshot finds the entries it anchors on."""
        if not self.segment_start <= offset < next_offset <= self.log_end_offset:
            raise ValueError(f"offsets [{offset}, {next_offset}) are not in the log")
        segment = self._segments[self._holding(offset)]
        start, first = segment.find(offset)
        if first.base_offset != offset:
            raise ValueError(f"offset {offset} is inside the batch at {first.base_offset}")
        for position, header in segment.headers(start):
            if header.next_offset == next_offset:
                end = position + header.size
                return Location(segment.base_offset, segment.term, start, end - start)
            if header.next_offset > next_offset:
                break
        raise ValueError(f"no batch of {segment} ends at offset {next_offset}")

    def read_location(self, location: Location) -> bytes:
        segment = self._segments[self._index_of(location.segment_base, location.term)]
        return segment.read(location.position, location.size)

    def read_location_parts(self, location: Location) -> list[bytes | bytearray | memoryview]:
        """read_location's bytes as the buffers that hold them (Segment.read_parts)."""
        segment = self._segments[self._index_of(location.segment_base, location.term)]
        return segment.read_parts(location.position, location.size)

    def batch_reaching(self, timestamp: int, start_offset: int, upper_bound: int) -> bytes | None:
        """The first batch below `upper_bound` ending after `start_offset` whose max timestamp
        reaches `timestamp`: time index to a position, then batch headers. Its records are
        the caller's to read, off the event loop (batch.first_record_at)."""
        for segment in self._segments:
            if segment.base_offset >= upper_bound:
                break
            if segment.next_offset <= start_offset or segment.max_timestamp < timestamp:
                continue
            start = segment.timestamp_position(timestamp)
            if start_offset > segment.base_offset:
                start = max(start, segment.find(start_offset)[0])
            for position, header in segment.headers(start):
                if header.base_offset >= upper_bound:
                    return None
                if header.next_offset > start_offset and header.max_timestamp >= timestamp:
                    return segment.read(position, header.size)
        return None

    def newest_batch(self, upper_bound: int) -> tuple[int, bytes] | None:
        """(max timestamp, the batch holding it) below `upper_bound`, the earliest batch on ties;
        which record holds it is the caller's to read (batch.offset_stamped)."""
        best: tuple[int, Segment, int] | None = None  # (timestamp, segment, batch base offset)
        for segment in self._segments:
            if segment.base_offset >= upper_bound:
                break
            if not segment.size:
                continue
            if segment.next_offset <= upper_bound:
                found = segment.max_timestamp, segment.max_timestamp_offset
            else:
                found = _max_below(segment, upper_bound)
            if found[1] >= 0 and (best is None or found[0] > best[0]):
                best = found[0], segment, found[1]
        if best is None:
            return None
        timestamp, segment, base_offset = best
        position, header = segment.find(base_offset)
        return timestamp, segment.read(position, header.size)


def _max_below(segment: Segment, upper_bound: int) -> tuple[int, int]:
    """(max timestamp, base offset of its batch) over the segment's batches below the bound."""
    best: BatchHeader | None = None
    for _, header in segment.headers():
        if header.base_offset >= upper_bound:
            break
        if best is None or header.max_timestamp > best.max_timestamp:
            best = header
    return (best.max_timestamp, best.base_offset) if best else (-1, -1)
