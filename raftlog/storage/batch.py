"""Kafka RecordBatch (magic 2): header parsing, CRC-32C, offset/epoch rewrite.

Batches are stored exactly as clients produce and fetch them. Produce checks the header and
walks the record lengths (and on a compacted topic the key lengths; in a thread when a batch
is compressed or long); record fields are decoded only for ListOffsets by timestamp and
compaction.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

import cramjam
from crc32c import crc32c

from raftlog.common.errors import ErrorCode, KafkaError, RecordErrors
from raftlog.storage import codecs
from raftlog.storage.records import Counter, keyless
from raftlog.storage.records import count as count_records
from raftlog.storage.records import skip as skip_records
from raftlog.storage.records import walk as walk_records

__all__ = [
    "HEADER_SIZE",
    "LENGTH_OVERHEAD",
    "MIN_BATCH_LENGTH",
    "BatchHeader",
    "assign",
    "build",
    "check_bytes",
    "check_inline",
    "check_records",
    "crc_ok",
    "decompressed_bytes",
    "first_record_at",
    "iter_batches",
    "parse_header",
    "needs_record_walk",
    "offset_stamped",
    "record_timestamps",
    "records_in_batches",
    "records_in_range",
    "records_section",
    "snappy_encode",
    "validate_produce",
]

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_INT32 = struct.Struct(">i")
_CRC = struct.Struct(">I")

HEADER_SIZE = _HEADER.size  # 61
LENGTH_OVERHEAD = 12  # baseOffset + batchLength precede what batchLength counts
MIN_BATCH_LENGTH = HEADER_SIZE - LENGTH_OVERHEAD
_CRC_START = 21
_MAGIC_END = 17  # bytes needed to read batchLength and magic, same place in every format
_MIN_RECORD_SIZE = 7  # length, attributes, timestamp/offset deltas, key/value lengths, header count
_COMPRESSION_MASK = 0x07
_LOG_APPEND_TIME = 0x08
# Records validate_produce walks on the event loop (about 1 ms); a batch with more is walked
# in a thread, like a compressed one. Compiled, 4096 records' lengths and CRC take 0.1-0.22
# ms, and 0.09-0.13 ms with their keys read (a compacted topic; 3.7-4.2 ms pure Python).
INLINE_RECORDS = 4096
# A produce's compressed batches are checked on the event loop (check_inline) while they
# decompress to at most INLINE_DECOMPRESSED bytes and INLINE_RATIO times the request's own
# (so what the loop does stays proportional to what was read), INLINE_RECORDS records at
# most: lz4, snappy and zstd, about 0.12 ms a MB compiled; gzip (2 ms a MB) goes to a thread.
# A thread's hand-off cost more than the check: raftlog1x2's lz4 produce took 1.2 ms of
# server CPU per MB through one, 0.75 on the loop, and 5 context switches per MB, not 0.7.
INLINE_DECOMPRESSED = 2 * 1024 * 1024
INLINE_RATIO = 4


class BatchHeader(NamedTuple):
    """A NamedTuple so parsing is one C-level struct unpack plus a tuple build."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return LENGTH_OVERHEAD + self.batch_length

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & _COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & 0x20)


_unpack_header = _HEADER.unpack_from
_new_header = tuple.__new__  # skips NamedTuple.__new__'s argument handling on the hot path


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    return _new_header(BatchHeader, _unpack_header(buf, pos))


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


def validate_produce(
    records: bytes | bytearray | memoryview | None,
    max_batch_bytes: int,
    transactional: bool,
    compacted: str | None = None,
) -> list[BatchHeader]:
    """Checks producer data batch by batch without decoding records (the produce hot path).
    `transactional`: the producer's transaction is known to include the partition (only then
    may its batches be transactional). `compacted`: the topic partition, when its topic is
    compacted (the records this walks must have keys, see _walk)."""
    if not records:
        raise _corrupt("produce request carries no record batch")
    view = memoryview(records)
    total = len(view)
    headers: list[BatchHeader] = []
    pos = 0
    while pos < total:
        if total - pos < _MAGIC_END:
            raise _corrupt(f"truncated record batch at byte {pos}")
        (batch_length,) = _INT32.unpack_from(view, pos + 8)
        if pos + LENGTH_OVERHEAD + batch_length > total:
            raise _corrupt(f"record batch at byte {pos} is truncated")
        if view[pos + 16] != 2:
            raise KafkaError(
                ErrorCode.unsupported_for_message_format,
                f"only record batch magic v2 is accepted, got magic {view[pos + 16]}",
            )
        if batch_length < MIN_BATCH_LENGTH:
            raise _corrupt(f"record batch length {batch_length} is below the header size")
        header = parse_header(view, pos)
        size = header.size
        if size > max_batch_bytes:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"record batch of {size} bytes exceeds the limit of {max_batch_bytes}",
            )
        if crc32c(view[pos + _CRC_START : pos + size]) != header.crc:
            raise _corrupt(f"record batch at byte {pos} fails its CRC-32C check")
        if header.compression > codecs.ZSTD:  # the highest codec id Kafka defines
            raise _corrupt(f"record batch at byte {pos} names unknown codec {header.compression}")
        if header.is_control:
            raise KafkaError(
                ErrorCode.invalid_record, "Clients are not allowed to write control records"
            )
        if header.is_transactional and not transactional:
            # Kafka's answer to a transactional batch outside a transaction (KIP-890): one
            # written here would hold the last stable offset back with no marker to come.
            raise KafkaError(
                ErrorCode.invalid_txn_state,
                "a transactional batch outside a transaction that includes this partition",
            )
        count = header.record_count
        if count <= 0 or count != header.last_offset_delta + 1:
            raise _corrupt(
                f"record count {count} does not match last offset delta {header.last_offset_delta}"
            )
        # Offsets come from the claimed count, so an absurd one would inflate the log end offset.
        if not header.compression and count * _MIN_RECORD_SIZE > batch_length - MIN_BATCH_LENGTH:
            raise _corrupt(f"record count {count} cannot fit in {batch_length} bytes")
        if not needs_record_walk(header):
            if compacted is None:  # the hot path: walked in place in bytes, no view made
                _count(records, pos + HEADER_SIZE, pos + size, count)
            else:
                _walk(records, pos + HEADER_SIZE, pos + size, count, compacted)
        headers.append(header)
        pos += size
    return headers


NO_TIMESTAMP = -1
_ATTRIBUTES = struct.Struct(">h")
_INT64 = struct.Struct(">q")
_ATTRIBUTES_AT = _CRC_START  # the CRC covers the batch from its attributes on
_MAX_TIMESTAMP_AT = 35


def stamp_log_append_time(records: bytes, headers: list[BatchHeader], now_ms: int) -> bytes:
    """Kafka's LogAppendTime, as its LogValidator sets it: each batch's timestamp type
    becomes LOG_APPEND_TIME and its max timestamp the leader's `now_ms` (consumers read
    every record's timestamp as that), CRC recomputed. `headers`: validate_produce's."""
    buf = bytearray(records)
    view = memoryview(buf)
    pos = 0
    for header in headers:
        _ATTRIBUTES.pack_into(buf, pos + _ATTRIBUTES_AT, header.attributes | _LOG_APPEND_TIME)
        _INT64.pack_into(buf, pos + _MAX_TIMESTAMP_AT, now_ms)
        _CRC.pack_into(
            buf, pos + _CRC_START - 4, crc32c(view[pos + _CRC_START : pos + header.size])
        )
        pos += header.size
    view.release()
    return bytes(buf)


def timestamp_error(
    headers: list[BatchHeader], now_ms: int, before_ms: int, after_ms: int
) -> KafkaError | None:
    """INVALID_TIMESTAMP for a batch whose first or max timestamp lies more than `before_ms`
    behind or `after_ms` ahead of `now_ms` (a CreateTime topic's message.timestamp.before/
    after.max.ms). Kafka checks every record; the header's two timestamps bound all but a
    record stamped earlier than the batch's first, which is read only when the batch is."""
    low, high = now_ms - before_ms, now_ms + after_ms
    for index, header in enumerate(headers):
        for stamp in (header.base_timestamp, header.max_timestamp):
            if stamp != NO_TIMESTAMP and not low <= stamp <= high:
                return KafkaError(
                    ErrorCode.invalid_timestamp,
                    f"Timestamp {stamp} of a record in batch {index} is out of range. The "
                    f"timestamp should be within [{low}, {high}]",
                )
    return None


def iter_batches(
    buf: bytes | bytearray | memoryview, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, BatchHeader]]:
    """Yields complete batches; stops at a torn tail or an impossible length instead of raising,
    because stored data ends wherever a crash left it."""
    end = len(buf) if end is None else end
    pos = start
    while pos + HEADER_SIZE <= end:
        header = parse_header(buf, pos)
        if header.batch_length < MIN_BATCH_LENGTH or pos + header.size > end:
            return
        yield pos, header
        pos += header.size


_BATCH_LENGTH_AT = 8
_RECORD_COUNT_AT = HEADER_SIZE - 4


def records_in_batches(buf: bytes | bytearray | memoryview) -> int:
    """Records in a run of whole batches (a Fetch answer's data), from the headers' record
    counts: two fields read per batch and nothing per record, for the records-out metric."""
    total, pos, last = 0, 0, len(buf) - HEADER_SIZE
    unpack = _INT32.unpack_from
    while pos <= last:
        total += unpack(buf, pos + _RECORD_COUNT_AT)[0]
        pos += LENGTH_OVERHEAD + max(MIN_BATCH_LENGTH, unpack(buf, pos + _BATCH_LENGTH_AT)[0])
    return total


ASSIGNED_BYTES = 16  # a batch's bytes up to the end of the fields assign() rewrites


def assign(buf: bytearray, pos: int, base_offset: int, leader_epoch: int) -> None:
    """Both fields sit outside the CRC, so rewriting them needs no re-checksum."""
    _BASE_OFFSET.pack_into(buf, pos, base_offset)
    _LEADER_EPOCH.pack_into(buf, pos + 12, leader_epoch)


def build(header: BatchHeader, records: bytes) -> bytes:
    """A batch with `header`'s fields around `records` (already compressed as its attributes
    say); batchLength and CRC-32C are recomputed, as a rewritten batch needs them."""
    head = bytearray(_HEADER.pack(*header._replace(batch_length=MIN_BATCH_LENGTH + len(records))))
    head += records
    _CRC.pack_into(head, _CRC_START - 4, crc32c(memoryview(head)[_CRC_START:]))
    return bytes(head)


def crc_ok(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    return crc32c(memoryview(buf)[pos + _CRC_START : pos + header.size]) == header.crc


def records_section(batch: bytes | bytearray | memoryview, header: BatchHeader) -> bytes:
    """The batch's records, decompressed within codecs.MAX_DECOMPRESSED_BYTES."""
    payload = memoryview(batch)[HEADER_SIZE : header.size]
    if not header.compression:
        return bytes(payload)
    return codecs.decompress(header.compression, payload, codecs.MAX_DECOMPRESSED_BYTES)


def record_timestamps(batch: bytes | bytearray | memoryview) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) per record, in order; LOG_APPEND_TIME batches report their max
    timestamp. KafkaError CORRUPT_MESSAGE (or MESSAGE_TOO_LARGE) for a batch that cannot be
    read, raised when the walk reaches it."""
    header = parse_header(batch)
    data = records_section(batch, header)
    base_offset, base_timestamp = header.base_offset, header.base_timestamp
    log_append = header.attributes & _LOG_APPEND_TIME
    for _, _, offset_delta, timestamp_delta, _, _ in walk_records(data, header.record_count):
        stamp = header.max_timestamp if log_append else base_timestamp + timestamp_delta
        yield base_offset + offset_delta, stamp


def records_in_range(
    buf: bytes | bytearray | memoryview, first: int, last: int
) -> Iterator[tuple[int, int, bytes, int, int]]:
    """(offset, timestamp, records section, start, end) of each data record of a run of whole
    batches with an offset in [first, last]. A ShareFetch answer holds whole batches of which
    a member acquired a few: batches outside the range are neither decompressed nor walked,
    and the walk stops past `last`."""
    for pos, header in iter_batches(buf):
        if header.next_offset <= first or header.is_control:
            continue
        if header.base_offset > last:
            return
        section = records_section(memoryview(buf)[pos:], header)
        base_offset, base_timestamp = header.base_offset, header.base_timestamp
        log_append = header.attributes & _LOG_APPEND_TIME
        passed, start_at = 0, 0
        if header.last_offset_delta == header.record_count - 1 and first > base_offset:
            # offset deltas rise from 0, so here they are 0, 1, 2, ...: the records before
            # `first` are passed by their lengths alone (a few times faster than walking)
            passed = min(first - base_offset, header.record_count)
            start_at = skip_records(section, passed)
        for start, end, offset_delta, timestamp_delta, _, _ in walk_records(
            section, header.record_count - passed, start_at
        ):
            offset = base_offset + offset_delta
            if offset > last:
                return
            if offset >= first:
                stamp = header.max_timestamp if log_append else base_timestamp + timestamp_delta
                yield offset, stamp, section, start, end


def first_record_at(batch: bytes, timestamp: int, upper_bound: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the batch's first record below `upper_bound` stamped at or after
    `timestamp`; None if the batch's max timestamp promised one it does not hold."""
    for offset, stamp in record_timestamps(batch):
        if stamp >= timestamp and offset < upper_bound:
            return offset, stamp
    return None


def offset_stamped(batch: bytes, timestamp: int) -> int:
    """The first record stamped `timestamp`, or (a producer's max timestamp matching no record)
    the batch's last offset, as Kafka answers."""
    for offset, stamp in record_timestamps(batch):
        if stamp == timestamp:
            return offset
    return parse_header(batch).next_offset - 1


def snappy_encode(records: bytes, like: bytes) -> bytes:
    """Snappy in the framing of `like`, a payload of the same producer: xerial blocks for the
    Java client's batches, raw snappy for librdkafka's, so each reads back what it wrote."""
    if not like.startswith(codecs.XERIAL_MAGIC):
        return bytes(cramjam.snappy.compress_raw(records))
    return codecs.compress(codecs.SNAPPY, records, None)


def needs_record_walk(header: BatchHeader) -> bool:
    """Whether check_records has work for this batch that is too slow for the event loop:
    opening a compressed payload, or walking more records than validate_produce does."""
    return bool(header.compression) or header.record_count > INLINE_RECORDS


def recompress(
    records: bytes,
    codec: int,
    level: int | None,
    limit: int,
    max_batch_bytes: int,
    compacted: str | None = None,
) -> bytes:
    """A topic's compression.type applied as Kafka's LogValidator applies it: each batch not
    in `codec` (0: uncompressed) is opened (within `limit` bytes), its records counted (and
    on a compacted topic their keys checked) as check_records does, and rebuilt in `codec`
    with its header's fields kept; the others are checked as check_records checks them.
    MESSAGE_TOO_LARGE for a rebuilt batch past `max_batch_bytes` (the topic's
    max.message.bytes). For a thread."""
    out = bytearray()
    for pos, header in iter_batches(records):
        batch = memoryview(records)[pos : pos + header.size]
        if header.compression == codec:
            if needs_record_walk(header):
                check_records(bytes(batch), limit, compacted)
            out += batch
            continue
        plain = records_section(batch, header) if header.compression else bytes(batch[HEADER_SIZE:])
        _walk(plain, 0, len(plain), header.record_count, compacted)
        payload = codecs.compress(codec, plain, level) if codec else plain
        attributes = (header.attributes & ~_COMPRESSION_MASK) | codec
        rebuilt = build(header._replace(attributes=attributes), payload)
        if len(rebuilt) > max_batch_bytes:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"record batch of {len(rebuilt)} bytes once recompressed exceeds the limit of "
                f"{max_batch_bytes}",
            )
        out += rebuilt
    return bytes(out)


def decompressed_bytes(records: bytes, limit: int) -> int:
    """What recompress or check_records will hold of `records` opened: the decompressed size
    of every compressed batch (each within `limit`), counted without holding it, so the node's
    memory admits it before any is opened. For a thread."""
    total = 0
    for pos, header in iter_batches(records):
        if header.compression:
            payload = memoryview(records)[pos + HEADER_SIZE : pos + header.size]
            total += codecs.decompressed_size(header.compression, payload, limit)
    return total


def check_bytes(records: bytes, headers: list[BatchHeader], limit: int) -> int:
    """What check_records holds of these batches (validate_produce's `headers`) opened: a
    compressed batch is walked as it decompresses (what its headers say that walk holds,
    codecs.check_bytes; one batch after the other), a plain one in place. Read from the
    codecs' headers, not decoded, so the check is the batch's one pass."""
    held, pos = 0, 0
    for header in headers:
        if header.compression and needs_record_walk(header):
            payload = memoryview(records)[pos + HEADER_SIZE : pos + header.size]
            held = max(held, codecs.check_bytes(header.compression, payload, limit))
        pos += header.size
    return held


def check_records(records: bytes, limit: int, compacted: str | None = None) -> None:
    """What validate_produce leaves to a thread: every batch that needs_record_walk holds
    exactly the records its header counts (with keys, on a compacted topic: see _walk), a
    compressed one within `limit` bytes once decompressed (Kafka's LogValidator looks inside
    too). A compressed batch is counted a piece at a time as it decompresses (what
    check_bytes admits), never held whole."""
    _check_walks(records, limit, compacted, -1)


def check_inline(
    records: bytes, headers: list[BatchHeader], limit: int, compacted: str | None = None
) -> bool:
    """check_records on the event loop when its walk is short: True once checked (its
    KafkaError otherwise), False as soon as it is not, nothing decided: a plain batch past
    INLINE_RECORDS, a gzip one, or compressed batches that decompress to more than
    INLINE_DECOMPRESSED bytes or INLINE_RATIO times len(records), or to more than
    INLINE_RECORDS records (their headers' count or what the walk found). check_records then
    runs in a thread, from the start; what the loop did is bounded by the budget."""
    count = 0
    for header in headers:
        if needs_record_walk(header):
            if header.compression in (0, codecs.GZIP):
                return False
            count += header.record_count
    if count > INLINE_RECORDS:
        return False
    return _check_walks(
        records, limit, compacted, min(INLINE_DECOMPRESSED, INLINE_RATIO * len(records))
    )


def _check_walks(records: bytes, limit: int, compacted: str | None, budget: int) -> bool:
    """check_records; `budget` >= 0: False once the compressed batches walked decompress to
    more than `budget` bytes or INLINE_RECORDS records, before any verdict on them."""
    walked = found = 0
    for pos, header in iter_batches(records):
        if not needs_record_walk(header):
            continue
        if not header.compression:
            _walk(records, pos + HEADER_SIZE, pos + header.size, header.record_count, compacted)
            continue
        payload = memoryview(records)[pos + HEADER_SIZE : pos + header.size]
        counter = Counter(compacted is not None)
        for piece in codecs.pieces(header.compression, payload, limit):
            counter.feed(piece)
            walked += len(piece)
            if budget >= 0 and (walked > budget or found + counter.found > INLINE_RECORDS):
                return False
        counter.check(header.record_count)
        found += counter.found
        if counter.missing and compacted is not None:
            raise _keyless(counter.keyless, counter.missing, compacted)
    return True


def _count(data: bytes | bytearray | memoryview, start: int, end: int, count: int) -> None:
    """count_records of data[start:end], read in place when `data` is bytes (a produce
    request's records are), else from a copy of the section."""
    if isinstance(data, bytes):
        count_records(data, count, start, end)
    else:
        count_records(bytes(memoryview(data)[start:end]), count)


def _walk(
    data: bytes | bytearray | memoryview, start: int, end: int, count: int, compacted: str | None
) -> None:
    """Checks that a batch's records section, data[start:end], holds `count` records; on a
    compacted topic (`compacted`: the topic partition) also that each has a key, as Kafka's
    LogValidator does: INVALID_RECORD naming the records without one, so nothing of the
    request is stored (the cleaner could never remove such a record). The keys are read in
    bytes: a produce request's records are, so validate_produce copies nothing."""
    if compacted is None:
        _count(data, start, end, count)
        return
    if isinstance(data, bytes):
        indexes, missing = keyless(data, count, start, end)
    else:
        indexes, missing = keyless(bytes(memoryview(data)[start:end]), count)
    if missing:
        raise _keyless(indexes, missing, compacted)


def _keyless(indexes: list[int], missing: int, compacted: str) -> RecordErrors:
    """Kafka's answer to a batch with `missing` records without a key (its record errors,
    and the error message that shows three of them)."""
    why = f"Compacted topic cannot accept message without key in topic partition {compacted}"
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{why}')" for i in indexes[:3])
    return RecordErrors(
        ErrorCode.invalid_record,
        f"One or more records have been rejected due to {missing} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]",
        tuple((i, why) for i in indexes),
    )
