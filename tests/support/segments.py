"""Read a node's partition directory straight from disk (docs/architecture.md layout).

Segments are `{base_offset:020d}-{term}.log`: plain concatenated magic-2 RecordBatches
(baseOffset int64 @0, batchLength int32 @8, partitionLeaderEpoch int32 @12, magic @16,
crc @17, attributes int16 @21, lastOffsetDelta int32 @23; a batch is 12 + batchLength
bytes). `leader-epoch-checkpoint` is Kafka's: a version line, a count line, then
`epoch startOffset` lines.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SEGMENT_RE = re.compile(r"^(\d{20})-(\d+)\.log$")
BATCH_OVERHEAD = 12  # baseOffset + batchLength
MIN_BATCH = 61  # a RecordBatch header with no records


@dataclass(frozen=True)
class Segment:
    base_offset: int
    term: int
    path: Path


@dataclass(frozen=True)
class DiskBatch:
    segment: Path
    term: int  # the term in the segment's file name
    position: int  # byte position in the segment
    base_offset: int
    last_offset: int
    epoch: int  # partitionLeaderEpoch
    magic: int
    data: bytes

    @property
    def record_count(self) -> int:
        return self.last_offset - self.base_offset + 1


def segments(partition_dir: Path) -> list[Segment]:
    out = []
    for p in Path(partition_dir).iterdir():
        m = SEGMENT_RE.match(p.name)
        if m:
            out.append(Segment(int(m.group(1)), int(m.group(2)), p))
    out.sort(key=lambda s: (s.base_offset, s.term))
    return out


def parse_batches(data: bytes, segment: Path = Path("-"), term: int = -1) -> Iterator[DiskBatch]:
    """Batches in `data`; stops silently at a torn tail (a partial last batch)."""
    pos = 0
    n = len(data)
    while pos + BATCH_OVERHEAD <= n:
        base_offset, length = struct.unpack_from(">qi", data, pos)
        end = pos + BATCH_OVERHEAD + length
        if length < MIN_BATCH - BATCH_OVERHEAD or end > n:
            return
        epoch, magic = struct.unpack_from(">ib", data, pos + 12)
        (last_delta,) = struct.unpack_from(">i", data, pos + 23)
        yield DiskBatch(
            segment=segment,
            term=term,
            position=pos,
            base_offset=base_offset,
            last_offset=base_offset + last_delta,
            epoch=epoch,
            magic=magic,
            data=data[pos:end],
        )
        pos = end


def iter_batches(partition_dir: Path, below: int | None = None) -> Iterator[DiskBatch]:
    """Every batch of the partition in offset order; with `below`, only batches whose last
    offset is < below (e.g. the high watermark)."""
    for seg in segments(partition_dir):
        data = seg.path.read_bytes()
        for b in parse_batches(data, seg.path, seg.term):
            if below is not None and b.last_offset >= below:
                return
            yield b


def read_checkpoint(partition_dir: Path) -> list[tuple[int, int]]:
    """[(epoch, start_offset)] from leader-epoch-checkpoint ([] if absent)."""
    path = Path(partition_dir) / "leader-epoch-checkpoint"
    if not path.exists():
        return []
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    if len(lines) < 2:
        raise ValueError(f"{path}: truncated checkpoint {lines!r}")
    if lines[0] != "0":
        raise ValueError(f"{path}: unknown checkpoint version {lines[0]!r}")
    count = int(lines[1])
    entries = [tuple(int(x) for x in ln.split()) for ln in lines[2:]]
    if len(entries) != count or any(len(e) != 2 for e in entries):
        raise ValueError(f"{path}: count {count} but entries {entries!r}")
    return [(e[0], e[1]) for e in entries]


def check_partition_dir(partition_dir: Path, below: int | None = None) -> list[str]:
    """Layout invariants of one replica's partition directory; returns the problems found.

    - each segment holds batches of its term only, magic 2, starting at its base offset;
    - offsets are contiguous across batches and segments;
    - terms/epochs never decrease along the log;
    - leader-epoch-checkpoint (if present) is consistent with the segments it covers.
    """
    problems: list[str] = []
    segs = segments(partition_dir)
    prev_term = -1
    next_offset: int | None = None
    for seg in segs:
        if seg.term < prev_term:
            problems.append(f"{seg.path.name}: term {seg.term} after term {prev_term}")
        prev_term = seg.term
        first = True
        for b in parse_batches(seg.path.read_bytes(), seg.path, seg.term):
            if below is not None and b.last_offset >= below:
                break
            where = f"{seg.path.name}@{b.position} (offset {b.base_offset})"
            if b.magic != 2:
                problems.append(f"{where}: magic {b.magic}")
            if b.epoch != seg.term:
                problems.append(
                    f"{where}: partitionLeaderEpoch {b.epoch} in a term-{seg.term} segment"
                )
            if first and b.base_offset != seg.base_offset:
                problems.append(f"{where}: first batch offset != segment base {seg.base_offset}")
            if next_offset is not None and b.base_offset != next_offset:
                problems.append(f"{where}: expected base offset {next_offset}")
            if b.last_offset < b.base_offset:
                problems.append(f"{where}: last offset {b.last_offset} < base offset")
            next_offset = b.last_offset + 1
            first = False
    ckpt = read_checkpoint(partition_dir)
    epochs = [e for e, _ in ckpt]
    if epochs != sorted(set(epochs)):
        problems.append(f"leader-epoch-checkpoint epochs not strictly increasing: {ckpt}")
    starts = [s for _, s in ckpt]
    if starts != sorted(starts):
        problems.append(f"leader-epoch-checkpoint start offsets decrease: {ckpt}")
    return problems


def epochs_on_disk(partition_dir: Path) -> list[tuple[int, int]]:
    """[(term, base offset)] of the segment list — the epoch cache the design derives."""
    out: list[tuple[int, int]] = []
    for seg in segments(partition_dir):
        if not out or out[-1][0] != seg.term:
            out.append((seg.term, seg.base_offset))
    return out


def compare_replicas(dir_a: Path, dir_b: Path, below: int) -> list[str]:
    """Batches with last offset < `below` must be byte-identical in both replicas."""
    problems: list[str] = []
    it_a = iter_batches(dir_a, below)
    it_b = iter_batches(dir_b, below)
    count = 0
    while True:
        a = next(it_a, None)
        b = next(it_b, None)
        if a is None and b is None:
            break
        if a is None or b is None:
            have, missing = (b, dir_a) if a is None else (a, dir_b)
            problems.append(
                f"{missing} has no batch at offset {have.base_offset} (< {below}); "
                f"the other replica does ({count} batches matched before)"
            )
            break
        if a.data != b.data:
            diff = next(
                (i for i, (x, y) in enumerate(zip(a.data, b.data, strict=False)) if x != y), None
            )
            problems.append(
                f"batch {count}: {a.segment.name}@{a.position} (offset {a.base_offset}, epoch {a.epoch}, "
                f"{len(a.data)} B) != {b.segment.name}@{b.position} (offset {b.base_offset}, "
                f"epoch {b.epoch}, {len(b.data)} B); first differing byte {diff}"
            )
            if len(problems) >= 10:
                break
        count += 1
    return problems


def batch_count_below(partition_dir: Path, below: int) -> tuple[int, int]:
    """(batches, bytes) with last offset < below."""
    n = size = 0
    for b in iter_batches(partition_dir, below):
        n += 1
        size += len(b.data)
    return n, size
