"""Log compaction (cleanup.policy=compact) by Kafka's LogCleaner rules.

A pass maps every key to the greatest offset holding it, then rewrites the cleanable segments
(each entirely below the floor the caller gives, never the active one) keeping a record only
if it is the latest for its key. Tombstones (null values) go once their batch is older than
delete.retention.ms; null-key records and control batches always stay. A surviving batch keeps
its baseOffset, lastOffsetDelta, leader epoch, attributes and producer fields, and each record
its bytes (offset delta, timestamp, headers), so consumers, producer state and the epoch cache
see the same offsets as before. A batch left empty is dropped, except (as empty batches, in
Kafka's empty-header layout) the last batch of its producer, whose sequence the producer state
needs, and the last batch of its segment, so a segment still ends where the next one starts:
the log end offset stays put if truncation later makes that segment the last one.

Which part is clean is remembered in `cleaner-offset-checkpoint`: everything below its offset
holds each key at most once, so a pass only maps keys from there on (the dirty part) and up to
the floor, and runs only when dirty bytes reach min.cleanable.dirty.ratio of the cleanable ones.

Crash safety (Kafka's scheme): a segment's rewrite is written to `<stem>.log.cleaned` and
fsynced; renaming it to `<stem>.log.swap` (then fsyncing the directory) is the commit point;
the stale indexes are then deleted and the swap file renamed over `<stem>.log`. On open,
`finish_swaps` deletes any `.cleaned` file and completes any `.swap`; missing indexes are
rebuilt from the log. Each segment's rewrite is valid alone: what it drops is superseded by a
later record that every version of the later segments keeps.

Memory: the map holds one entry per distinct key of the dirty part (measured: about 190
bytes an entry with 30-byte keys), plus one entry per producer id. Mapping stops before a
batch once `max_keys` entries exist, after the first dirty segment at least, and the pass then
cleans only the segments mapped in full; the next pass continues from there. Data is read a
chunk at a time, so neither the log's size nor its segments' size matter.

Time: a pass is a generator that pauses every STEP_RECORDS records (about 10 ms), so a
single-threaded node can run it between its other work (Log.compact_steps).
"""

from __future__ import annotations

import gzip
import logging
import os
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

from kafka.codec import lz4_encode, zstd_encode

from raftlog.common.errors import KafkaError
from raftlog.storage import codecs
from raftlog.storage.batch import (
    HEADER_SIZE,
    BatchHeader,
    build,
    iter_batches,
    parse_header,
    records_section,
    snappy_encode,
)
from raftlog.storage.offset_file import read_offset, write_offset
from raftlog.storage.records import Record
from raftlog.storage.records import walk as walk_records
from raftlog.storage.segment import Segment, fsync_dir, parse_segment_name

# kafka-python ships no types; its encoders take and return bytes.
_lz4_encode: Callable[[bytes], bytes] = lz4_encode
_zstd_encode: Callable[[bytes], bytes] = zstd_encode

__all__ = [
    "CHECKPOINT",
    "MAX_MAP_KEYS",
    "STEP_RECORDS",
    "SWAP",
    "Aborted",
    "CompactionResult",
    "OffsetMap",
    "SegmentClean",
    "clean_segment",
    "cleaned_path",
    "finish_swaps",
    "install_swap",
    "read_checkpoint",
    "write_checkpoint",
]

log = logging.getLogger(__name__)

CHECKPOINT = "cleaner-offset-checkpoint"
CLEANED = ".cleaned"
SWAP = ".swap"
MAX_MAP_KEYS = 500_000  # ~100 MB of map with __consumer_offsets-sized keys
STEP_RECORDS = 2_000  # records between pauses: a few milliseconds of work
_READ_CHUNK = 4 * 1024 * 1024
_WRITE_CHUNK = 1024 * 1024
_COMPRESSION_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_GZIP_LEVEL = 6  # Kafka's default for gzip.compression.level


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What one pass did; `cleaned` is False when it found too little dirty data to run or
    was aborted."""

    dirty_ratio: float  # dirty bytes / cleanable bytes, measured before the pass
    cleaned: bool = False
    segments_rewritten: int = 0
    records_removed: int = 0  # superseded or expired
    tombstones_expired: int = 0  # latest for their key, but past delete.retention.ms
    bytes_before: int = 0  # of the rewritten segments
    bytes_after: int = 0
    first_dirty_offset: int = 0  # the checkpoint after the pass
    map_keys: int = 0
    aborted: bool = False  # the log lost a segment mid-pass; what was swapped in stays


@dataclass(frozen=True, slots=True)
class SegmentClean:
    changed: bool
    records_removed: int
    tombstones_expired: int
    size: int


# -- checkpoint --------------------------------------------------------------------------------


def read_checkpoint(directory: Path) -> int:
    """The first dirty offset; 0 (everything dirty, always safe) when missing or unreadable."""
    return read_offset(directory / CHECKPOINT, "treating the whole log as dirty") or 0


def write_checkpoint(directory: Path, offset: int) -> None:
    write_offset(directory / CHECKPOINT, offset)


# -- crash recovery ----------------------------------------------------------------------------


def cleaned_path(segment: Segment) -> Path:
    return segment.path.with_name(segment.path.name + CLEANED)


def install_swap(swap: Path) -> None:
    """The committed half of a swap, also what recovery redoes: the old indexes describe the
    old data, so they go first (open() rebuilds missing ones), then the rename replaces it."""
    live = swap.with_name(swap.name.removesuffix(SWAP))
    live.with_suffix(".index").unlink(missing_ok=True)
    live.with_suffix(".timeindex").unlink(missing_ok=True)
    fsync_dir(swap.parent)  # no crash may pair the new data with the old indexes
    os.rename(swap, live)
    fsync_dir(swap.parent)


def finish_swaps(directory: Path) -> None:
    """Discards rewrites that never reached their commit point and completes those that did."""
    for name in os.listdir(directory):  # listed first: the loop renames entries
        for suffix in (CLEANED, SWAP):
            stem = name.removesuffix(suffix)
            if stem == name or (parsed := parse_segment_name(stem)) is None or parsed[2] != "log":
                continue
            path = directory / name
            if suffix == CLEANED:
                log.warning("%s: discarding an unfinished compaction rewrite", path)
                path.unlink()
            else:
                log.warning("%s: completing an interrupted compaction swap", path)
                install_swap(path)


# -- pauses and the key map --------------------------------------------------------------------


class Aborted(Exception):
    """The log lost a segment a pass was working on (retention, a reset, a snapshot install)."""


Alive = Callable[[], bool]


def pause(alive: Alive) -> Generator[None, None, None]:
    """Lets the caller run other work, then checks the log is still the one being cleaned."""
    yield
    if not alive():
        raise Aborted


class OffsetMap:
    """key -> greatest offset holding it, producer id -> base offset of its last batch; only
    records below the floor count, since anything above it may still be truncated."""

    __slots__ = ("keys", "producers", "floor")

    def __init__(self, floor: int) -> None:
        self.keys: dict[bytes, int] = {}
        self.producers: dict[int, int] = {}
        self.floor = floor

    def add(
        self, segment: Segment, max_keys: int | None, alive: Alive
    ) -> Generator[None, None, bool]:
        """Maps the segment's records, pausing every STEP_RECORDS; returns False when it
        stopped early at `max_keys`."""
        keys, floor = self.keys, self.floor
        work = 0
        for header, batch in stored_batches(segment):
            base = header.base_offset
            if base >= floor:
                return True
            if header.producer_id >= 0:
                self.producers[header.producer_id] = base
            work += header.record_count + 1
            if work >= STEP_RECORDS:
                work = 0
                yield from pause(alive)
            if header.is_control or not header.record_count:
                continue
            if max_keys is not None and len(keys) >= max_keys:
                return False
            records = _decode(header, batch)
            if records is None:
                continue
            for _, _, delta, _, key, _ in records[1]:
                offset = base + delta
                if key is not None and offset < floor:
                    keys[key] = offset
        return True


# -- rewriting ---------------------------------------------------------------------------------


def clean_segment(
    segment: Segment, offsets: OffsetMap, tombstone_horizon_ms: int, alive: Alive
) -> Generator[None, None, SegmentClean]:
    """Writes the compacted copy of `segment` to its .cleaned file and fsyncs it, pausing
    every STEP_RECORDS. Tombstones in batches whose max timestamp is below the horizon are
    dropped. The file is removed again if the pass ends early."""
    out = cleaned_path(segment)
    removed = tombstones = written = work = 0
    changed = False
    dropped: tuple[BatchHeader, bytes] | None = None  # the last batch, if it was dropped
    pending: list[bytes] = []
    pending_size = 0
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for header, batch in stored_batches(segment):
            work += header.record_count + 1
            if work >= STEP_RECORDS:
                work = 0
                yield from pause(alive)
            kept, batch_removed, batch_tombstones = _clean_batch(
                header, batch, offsets, tombstone_horizon_ms
            )
            removed += batch_removed
            tombstones += batch_tombstones
            if dropped is not None:
                changed = True  # it was not the last batch after all
            dropped = (header, batch) if kept is None else None
            if kept is None:
                continue
            changed = changed or kept is not batch
            pending.append(kept)
            pending_size += len(kept)
            if pending_size >= _WRITE_CHUNK:
                written += _write_all(fd, pending)
                pending, pending_size = [], 0
        if dropped is not None:
            empty = _empty(dropped[0])
            changed = changed or empty != dropped[1]
            pending.append(empty)
        written += _write_all(fd, pending)
        os.fsync(fd)
    except BaseException:  # an abort, the caller closing the pass, a failed write
        out.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)
    if not changed:
        out.unlink()
    return SegmentClean(changed, removed, tombstones, written)


def _clean_batch(
    header: BatchHeader, batch: bytes, offsets: OffsetMap, tombstone_horizon_ms: int
) -> tuple[bytes | None, int, int]:
    """(the batch to keep, the very object when unchanged, or None; records removed;
    tombstones removed)."""
    if header.is_control:
        return batch, 0, 0
    if not header.record_count:
        return (batch if _producer_needs(header, offsets) else None), 0, 0
    decoded = _decode(header, batch)
    if decoded is None:
        return batch, 0, 0  # never drop what cannot be read
    data, records = decoded
    base = header.base_offset
    latest = offsets.keys
    expired = header.max_timestamp < tombstone_horizon_ms
    kept = []
    tombstones = 0
    for record in records:
        key = record[4]
        if key is not None:
            offset = base + record[2]
            if latest.get(key, offset) > offset:
                continue
            if record[5] and expired:
                tombstones += 1
                continue
        kept.append(record)
    removed = len(records) - len(kept)
    if not removed:
        return batch, 0, 0
    if not kept:
        return (_empty(header) if _producer_needs(header, offsets) else None), removed, tombstones
    body = b"".join(data[start:end] for start, end, *_ in kept)
    max_timestamp = header.max_timestamp
    if not header.attributes & _LOG_APPEND_TIME:  # CreateTime: the newest surviving record
        max_timestamp = header.base_timestamp + max(record[3] for record in kept)
    rebuilt = header._replace(record_count=len(kept), max_timestamp=max_timestamp)
    payload = _compress(header.compression, body, batch) if header.compression else body
    return build(rebuilt, payload), removed, tombstones


def _producer_needs(header: BatchHeader, offsets: OffsetMap) -> bool:
    """An idempotent producer's last batch carries the sequence it continues from."""
    pid = header.producer_id
    return pid >= 0 and offsets.producers.get(pid, header.base_offset) <= header.base_offset


def _empty(header: BatchHeader) -> bytes:
    """Kafka's empty batch header: no records, no compression, the last offset kept."""
    return build(
        header._replace(
            attributes=header.attributes & ~_COMPRESSION_MASK,
            base_timestamp=header.max_timestamp,
            record_count=0,
        ),
        b"",
    )


def _write_all(fd: int, parts: list[bytes]) -> int:
    data = memoryview(b"".join(parts))
    done = 0
    while done < len(data):
        done += os.write(fd, data[done:])
    return done


# -- reading -----------------------------------------------------------------------------------


def stored_batches(segment: Segment) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every batch of a segment, read a chunk at a time so memory stays bounded."""
    position, end = 0, segment.size
    while position < end:
        data = segment.read(position, min(_READ_CHUNK, end - position))
        used = 0
        for pos, header in iter_batches(data):
            used = pos + header.size
            yield header, data[pos:used]
        if not used:  # a batch larger than the chunk
            header = parse_header(data)
            yield header, segment.read(position, header.size)
            used = header.size
        position += used


def _decode(header: BatchHeader, batch: bytes) -> tuple[bytes, list[Record]] | None:
    """The uncompressed records section and its records; None (logged) if it cannot be read,
    including a payload past codecs.MAX_DECOMPRESSED_BYTES."""
    try:
        data = records_section(batch, header)
        return data, list(walk_records(data, header.record_count))
    except KafkaError as exc:
        log.warning(
            "cannot decode the batch at offset %d (%s); compaction keeps it",
            header.base_offset,
            exc.message,
        )
        return None


def _compress(codec: int, data: bytes, original: bytes) -> bytes:
    """Same codec as the original batch (and for snappy, the same framing)."""
    if codec == codecs.GZIP:
        return gzip.compress(data, compresslevel=_GZIP_LEVEL, mtime=0)
    if codec == codecs.SNAPPY:
        return snappy_encode(data, original[HEADER_SIZE:])
    if codec == codecs.LZ4:
        return _lz4_encode(data)
    return _zstd_encode(data)
