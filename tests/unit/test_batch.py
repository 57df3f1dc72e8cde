import struct

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from raftlog.common.errors import ErrorCode, KafkaError, RecordErrors
from raftlog.storage import codecs
from raftlog.storage.batch import (
    HEADER_SIZE,
    INLINE_RECORDS,
    assign,
    check_records,
    crc_ok,
    first_record_at,
    iter_batches,
    needs_record_walk,
    offset_stamped,
    parse_header,
    recompress,
    record_timestamps,
    records_in_range,
    records_section,
    stamp_log_append_time,
    timestamp_error,
    validate_produce,
)
from raftlog.storage.records import MAX_KEYLESS, fields

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
LIMIT = 1 << 20


def make_batch(
    timestamps: list[int], compression: int = NONE, producer: tuple[int, int, int] = (-1, -1, -1)
) -> bytearray:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=LIMIT,
    )
    for i, ts in enumerate(timestamps):
        builder.append(i, timestamp=ts, key=b"k%d" % i, value=b"value-" * 30, headers=[])
    return builder.build()


def reseal(buf: bytearray) -> bytearray:
    """Fixes batchLength and CRC after a test edited the batch."""
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return buf


def snappy_batch(timestamps: list[int], xerial: bool) -> bytearray:
    """kafka-python can only build snappy batches with python-snappy, which is not installed."""
    plain = make_batch(timestamps)
    records = bytes(plain[HEADER_SIZE:])
    if xerial:  # snappy-java block framing, as the Java producer sends it
        payload = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
        for i in range(0, len(records), 64):
            block = bytes(cramjam.snappy.compress_raw(records[i : i + 64]))
            payload += struct.pack(">i", len(block)) + block
    else:  # librdkafka sends raw snappy
        payload = bytes(cramjam.snappy.compress_raw(records))
    batch = plain[:HEADER_SIZE] + payload
    struct.pack_into(">h", batch, 21, SNAPPY)
    return reseal(batch)


def code_of(records: object) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        validate_produce(records, LIMIT, False)  # type: ignore[arg-type]
    return info.value.code


def test_parse_header_reads_every_field() -> None:
    batch = make_batch([5_000, 5_007, 5_003], GZIP, producer=(42, 3, 17))
    header = parse_header(batch)
    assert header.base_offset == 0
    assert header.size == len(batch) == header.batch_length + 12
    assert header.partition_leader_epoch == 0
    assert header.magic == 2
    assert header.compression == GZIP
    assert header.last_offset_delta == 2
    assert header.record_count == 3
    assert header.base_timestamp == 5_000
    assert header.max_timestamp == 5_007
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 17)
    assert header.next_offset == 3
    assert not header.is_transactional and not header.is_control


def test_parse_header_at_position_and_flags() -> None:
    batch = make_batch([1])
    struct.pack_into(">h", batch, 21, 0x30)  # transactional + control
    header = parse_header(b"pad" + bytes(batch), 3)
    assert header.is_transactional and header.is_control
    assert header.compression == NONE


def test_crc_detects_a_flipped_byte_but_not_offset_or_epoch_rewrites() -> None:
    batch = make_batch([1, 2])
    header = parse_header(batch)
    assert crc_ok(batch, 0, header)
    assign(batch, 0, 123_456, 9)
    assert crc_ok(batch, 0, header)
    batch[HEADER_SIZE + 5] ^= 0x01
    assert not crc_ok(batch, 0, header)


def test_validate_produce_accepts_concatenated_batches() -> None:
    first, second = make_batch([1, 2, 3]), make_batch([4], ZSTD)
    headers = validate_produce(bytes(first + second), LIMIT, False)
    assert [h.record_count for h in headers] == [3, 1]
    assert [h.compression for h in headers] == [NONE, ZSTD]
    assert validate_produce(memoryview(first), LIMIT, False)[0].size == len(first)


@pytest.mark.parametrize("records", [b"", None])
def test_validate_produce_rejects_missing_records(records: bytes | None) -> None:
    assert code_of(records) == ErrorCode.corrupt_message


def test_validate_produce_rejects_truncation() -> None:
    batch = bytes(make_batch([1, 2]))
    assert code_of(batch[:-1]) == ErrorCode.corrupt_message
    assert code_of(batch + batch[:10]) == ErrorCode.corrupt_message


def test_validate_produce_rejects_impossible_length() -> None:
    batch = make_batch([1])
    struct.pack_into(">i", batch, 8, 20)
    assert code_of(bytes(batch)) == ErrorCode.corrupt_message


def test_validate_produce_rejects_old_magic() -> None:
    batch = make_batch([1])
    batch[16] = 1
    with pytest.raises(KafkaError) as info:
        validate_produce(bytes(batch), LIMIT, False)
    assert info.value.code == ErrorCode.unsupported_for_message_format
    assert "v2" in str(info.value)


def test_validate_produce_rejects_bad_crc() -> None:
    batch = make_batch([1, 2])
    batch[-1] ^= 0xFF
    assert code_of(bytes(batch)) == ErrorCode.corrupt_message


def test_validate_produce_rejects_oversized_batch() -> None:
    batch = bytes(make_batch([1, 2]))
    with pytest.raises(KafkaError) as info:
        validate_produce(batch, len(batch) - 1, False)
    assert info.value.code == ErrorCode.message_too_large
    assert validate_produce(batch, len(batch), False)


@pytest.mark.parametrize(("count", "last_delta"), [(2, 2), (0, -1), (-3, -4)])
def test_validate_produce_rejects_inconsistent_record_count(count: int, last_delta: int) -> None:
    batch = make_batch([1, 2, 3])
    struct.pack_into(">i", batch, 23, last_delta)
    struct.pack_into(">i", batch, 57, count)
    assert code_of(bytes(reseal(batch))) == ErrorCode.corrupt_message


def test_validate_produce_rejects_counts_the_bytes_cannot_hold() -> None:
    batch = make_batch([1])
    struct.pack_into(">i", batch, 23, 999_999)
    struct.pack_into(">i", batch, 57, 1_000_000)
    assert code_of(bytes(reseal(batch))) == ErrorCode.corrupt_message


@pytest.mark.parametrize(
    ("attributes", "code"),
    [
        (5, ErrorCode.corrupt_message),  # codec ids 5-7 do not exist
        (7, ErrorCode.corrupt_message),
        (0x20, ErrorCode.invalid_record),  # control batch: the broker's to write
        (0x10, ErrorCode.invalid_txn_state),  # transactional, with no transaction
    ],
)
def test_validate_produce_rejects_what_a_producer_may_not_write(
    attributes: int, code: ErrorCode
) -> None:
    """Such batches were stored as sent; consumers then looped on _BAD_COMPRESSION or raised
    CorruptRecordError, and nothing after them was readable."""
    batch = make_batch([1, 2])
    struct.pack_into(">h", batch, 21, attributes)
    assert code_of(bytes(reseal(batch))) == code


def test_a_transactional_batch_passes_only_in_a_transaction_and_a_marker_never() -> None:
    """The produce handler says when the coordinator confirmed the partition is in the
    producer's transaction; markers are the coordinator's to write, even then."""
    batch = make_batch([1, 2])
    struct.pack_into(">h", batch, 21, 0x10)
    (header,) = validate_produce(bytes(reseal(batch)), LIMIT, True)
    assert header.is_transactional
    struct.pack_into(">h", batch, 21, 0x30)
    with pytest.raises(KafkaError) as info:
        validate_produce(bytes(reseal(batch)), LIMIT, True)
    assert info.value.code == ErrorCode.invalid_record


def test_assign_rewrites_only_offset_and_epoch() -> None:
    batch = make_batch([1, 2])
    before = bytes(batch)
    assign(batch, 0, 2**40, 77)
    header = parse_header(batch)
    assert (header.base_offset, header.partition_leader_epoch) == (2**40, 77)
    assert header.next_offset == 2**40 + 2
    assert batch[8:12] == before[8:12]
    assert batch[16:] == before[16:]


def test_iter_batches_stops_at_a_partial_or_garbage_tail() -> None:
    first, second = bytes(make_batch([1])), bytes(make_batch([2, 3]))
    data = first + second + second[:30]
    assert [(pos, h.record_count) for pos, h in iter_batches(data)] == [
        (0, 1),
        (len(first), 2),
    ]
    assert [pos for pos, _ in iter_batches(data, start=len(first))] == [len(first)]
    assert [pos for pos, _ in iter_batches(data, end=len(first) + 10)] == [0]
    garbage = first + b"\x00" * 70
    assert [pos for pos, _ in iter_batches(garbage)] == [0]


@pytest.mark.parametrize("compression", [NONE, GZIP, LZ4, ZSTD, "snappy-xerial", "snappy-raw"])
def test_record_timestamps_decodes_every_codec(compression: int | str) -> None:
    stamps = [900, 905, 903, 950, 920]
    if isinstance(compression, str):
        batch = snappy_batch(stamps, xerial=compression == "snappy-xerial")
        expected_codec = SNAPPY
    else:
        batch = make_batch(stamps, compression)
        expected_codec = compression
    assert parse_header(batch).compression == expected_codec
    validate_produce(bytes(batch), LIMIT, False)
    assign(batch, 0, 1_000, 4)
    assert list(record_timestamps(bytes(batch))) == [(1_000 + i, ts) for i, ts in enumerate(stamps)]


def test_record_timestamps_uses_max_timestamp_for_log_append_time() -> None:
    batch = make_batch([10, 30, 20])
    struct.pack_into(">h", batch, 21, 0x08)
    struct.pack_into(">q", batch, 35, 99)
    assert list(record_timestamps(bytes(batch))) == [(0, 99), (1, 99), (2, 99)]


@pytest.mark.parametrize("compression", [GZIP, SNAPPY, LZ4, ZSTD])
def test_record_timestamps_reports_undecodable_batches(compression: int) -> None:
    batch = make_batch([1, 2])
    batch[HEADER_SIZE:] = b"\x07" * 40
    struct.pack_into(">h", batch, 21, compression)
    with pytest.raises(KafkaError) as info:
        list(record_timestamps(bytes(reseal(batch))))
    assert info.value.code == ErrorCode.corrupt_message


def tiny_records(count: int) -> bytes:
    """`count` records of 7 bytes each (no key, no value, offset delta i mod 64)."""
    return b"".join(bytes([12, 0, 0, (i % 64) * 2, 1, 1, 0]) for i in range(count))


def plain_batch(records: bytes, count: int) -> bytes:
    """An uncompressed batch claiming `count` records around `records`."""
    batch = make_batch([1])[:HEADER_SIZE] + records
    struct.pack_into(">i", batch, 23, count - 1)
    struct.pack_into(">i", batch, 57, count)
    return bytes(reseal(batch))


@pytest.mark.parametrize(
    "records",
    [
        tiny_records(3) + b"\x00",  # a byte after the last record
        tiny_records(2) + bytes([40, 0, 0, 0, 1, 1, 0]),  # a record running past the batch
        tiny_records(2) + bytes([0, 0, 0, 0, 1, 1, 0]),  # a record of length 0
        bytes([20]) + tiny_records(3)[1:],  # lengths that no longer line up
    ],
)
def test_validate_produce_walks_the_record_lengths_of_a_plain_batch(records: bytes) -> None:
    """The header's count and the CRC are right, the records are not: consumers would stop
    at this batch with CorruptRecordError."""
    assert code_of(plain_batch(records, 3)) == ErrorCode.corrupt_message


def test_each_batch_of_a_request_is_walked_within_its_own_bounds() -> None:
    """The walk reads the request's bytes in place, batch by batch: a batch whose last record
    or count reaches into the next batch is corrupt, though the bytes are there."""
    good = plain_batch(tiny_records(3), 3)
    assert len(validate_produce(good + good, LIMIT, False)) == 2
    runs_on = plain_batch(tiny_records(2) + bytes([40, 0, 0, 0, 1, 1, 0]), 3)
    assert code_of(runs_on + good) == ErrorCode.corrupt_message
    short = plain_batch(tiny_records(3), 4)  # the fourth record would be the next batch's
    assert code_of(short + good) == ErrorCode.corrupt_message


def test_long_plain_batches_are_walked_in_the_thread_not_inline() -> None:
    """Past INLINE_RECORDS the walk (0.3 us a record) leaves the event loop: validate_produce
    passes it on, check_records does it."""
    count = INLINE_RECORDS + 1
    good = plain_batch(tiny_records(count), count)
    bad = plain_batch(tiny_records(count - 1) + bytes([16, 0, 0, 0, 1, 1, 0]), count)
    for batch in (good, bad):
        (header,) = validate_produce(batch, LIMIT, False)
        assert needs_record_walk(header)
    check_records(good, LIMIT)
    with pytest.raises(KafkaError) as info:
        check_records(bad, LIMIT)
    assert info.value.code == ErrorCode.corrupt_message
    assert not needs_record_walk(validate_produce(plain_batch(tiny_records(3), 3), LIMIT, False)[0])


def test_first_record_at_skips_a_batch_whose_max_timestamp_lies() -> None:
    """A producer sets the header's max timestamp; the records decide."""
    batch = make_batch([5, 9, 7])
    assert first_record_at(bytes(batch), 8, 10) == (1, 9)
    assert first_record_at(bytes(batch), 8, 1) is None  # below the bound there is none
    struct.pack_into(">q", batch, 35, 100)  # max timestamp
    assert first_record_at(bytes(reseal(batch)), 50, 10) is None
    assert offset_stamped(bytes(batch), 100) == 2  # no record holds it: the last offset
    assert offset_stamped(bytes(batch), 9) == 1


_header_key = st.text(max_size=8)
_field = st.none() | st.binary(max_size=40)
_record = st.tuples(_field, _field, st.lists(st.tuples(_header_key, _field), max_size=3))


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(
        st.tuples(
            st.lists(_record, min_size=1, max_size=12),
            st.sampled_from([NONE, GZIP, LZ4]),
            st.integers(1, 3),  # offset step: above 1, a compacted batch's gaps
        ),
        min_size=1,
        max_size=4,
    ),
    window=st.tuples(st.integers(-2, 100), st.integers(-2, 100)),
)
def test_records_in_range_decodes_as_kafka_python_does(
    batches: list[tuple[list[tuple[bytes | None, bytes | None, list]], int, int]],
    window: tuple[int, int],
) -> None:
    """The consume proxy's reader against kafka-python's on whole runs of batches: every
    record whose offset is in the window, with its timestamp, key, value and headers."""
    data, expected, base = b"", [], 0
    for records, codec, step in batches:
        builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, LIMIT)
        for i, (key, value, headers) in enumerate(records):
            builder.append(i * step, timestamp=1_000 + i, key=key, value=value, headers=headers)
        batch = builder.build()
        assign(batch, 0, base, 1)
        data += bytes(batch)
        base += (len(records) - 1) * step + 1
    first, last = window
    reader = MemoryRecords(data)
    while (batch := reader.next_batch()) is not None:
        expected += [
            (r.offset, r.timestamp, r.key, r.value, list(r.headers))
            for r in batch
            if first <= r.offset <= last
        ]
    got = [
        (offset, stamp, *fields(section, start, end))
        for offset, stamp, section, start, end in records_in_range(data, first, last)
    ]
    assert got == [(o, t, k, v, [(n, hv) for n, hv in h]) for o, t, k, v, h in expected]


def test_records_in_range_leaves_out_control_batches() -> None:
    data = make_batch([5, 6])
    marker = make_batch([7])
    struct.pack_into(">h", marker, 21, 0x20)  # control
    assign(marker, 0, 2, 1)
    reseal(marker)
    both = bytes(data) + bytes(reseal(marker))
    assert [o for o, *_ in records_in_range(both, 0, 10)] == [0, 1]


def test_a_record_field_past_its_end_is_corrupt() -> None:
    batch = make_batch([5])
    section = bytes(batch[HEADER_SIZE:])
    _, _, _, start, end = next(records_in_range(bytes(batch), 0, 0))
    with pytest.raises(KafkaError) as raised:
        fields(section[: end - 3], start, end - 3)
    assert raised.value.code == ErrorCode.corrupt_message


def test_timestamps_outside_the_topics_bounds_are_invalid_timestamp() -> None:
    now = 1_700_000_000_000
    headers = validate_produce(bytes(make_batch([now - 100, now + 50])), LIMIT, False)
    assert timestamp_error(headers, now, 100, 50) is None
    late = timestamp_error(headers, now, 99, 50)
    assert late is not None and late.code == ErrorCode.invalid_timestamp  # first record's
    assert late.message == (
        f"Timestamp {now - 100} of a record in batch 0 is out of range. The timestamp should "
        f"be within [{now - 99}, {now + 50}]"
    )
    early = timestamp_error(headers, now, 100, 49)
    assert early is not None and str(now + 50) in (early.message or "")  # the max timestamp
    assert timestamp_error(headers, now, 2**63 - 1, 2**63 - 1) is None  # Kafka's unbounded
    unstamped = validate_produce(bytes(make_batch([-1])), LIMIT, False)
    assert timestamp_error(unstamped, now, 0, 0) is None  # NO_TIMESTAMP is not checked


def test_log_append_time_stamps_each_batch_with_the_leaders_clock() -> None:
    now = 1_800_000_000_000
    records = bytes(make_batch([5, 6]) + make_batch([7], compression=GZIP))
    headers = validate_produce(records, LIMIT, False)
    stamped = stamp_log_append_time(records, headers, now)
    assert len(stamped) == len(records)
    again = validate_produce(stamped, LIMIT, False)  # the CRCs hold
    assert [h.max_timestamp for h in again] == [now, now]
    assert [h.attributes & 0x08 for h in again] == [0x08, 0x08]  # LOG_APPEND_TIME
    assert [h.compression for h in again] == [NONE, GZIP]
    assert [h.base_timestamp for h in again] == [5, 7]  # as Kafka: only the max is set
    first = stamped[: headers[0].size]
    assert [ts for _, ts in record_timestamps(first)] == [now, now]


@pytest.mark.parametrize("target", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
@pytest.mark.parametrize("produced", [NONE, GZIP, ZSTD])
def test_recompress_rebuilds_each_batch_in_the_topics_codec(produced: int, target: int) -> None:
    first = make_batch([10, 11, 12], compression=produced, producer=(7, 1, 40))
    second = make_batch([13], compression=GZIP)
    records = bytes(first + second)
    out = recompress(records, target, None, LIMIT, LIMIT)
    before = [h for _, h in iter_batches(records)]
    after = validate_produce(out, LIMIT, False)  # CRCs and counts hold
    assert [h.compression for h in after] == [target, target]
    for old, new in zip(before, after, strict=True):
        keep = ("producer_id", "producer_epoch", "base_sequence", "record_count", "max_timestamp")
        assert [getattr(new, f) for f in keep] == [getattr(old, f) for f in keep]
    for (pos_old, old), (pos_new, new) in zip(
        iter_batches(records), iter_batches(out), strict=True
    ):
        assert records_section(out[pos_new : pos_new + new.size], new) == records_section(
            records[pos_old : pos_old + old.size], old
        )
    if target == produced == GZIP:  # nothing to rebuild: the bytes are the producer's
        assert out == records


def test_a_kafka_client_reads_what_recompress_wrote() -> None:
    records = bytes(make_batch([1, 2]))
    for target in (GZIP, LZ4, ZSTD):
        batch = MemoryRecords(recompress(records, target, 5, LIMIT, LIMIT)).next_batch()
        assert [r.value for r in batch] == [b"value-" * 30] * 2


def test_recompress_refuses_a_rebuilt_batch_past_max_message_bytes() -> None:
    records = bytes(make_batch([1, 2, 3], compression=GZIP))
    with pytest.raises(KafkaError) as caught:
        recompress(records, NONE, None, LIMIT, len(records))  # plain, it no longer fits
    assert caught.value.code == ErrorCode.message_too_large


WHY = "Compacted topic cannot accept message without key in topic partition t-0"


def keyed_batch(keys: list[bytes | None], codec: int = NONE) -> bytes:
    """A batch of records with these keys, its payload compressed with `codec`."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=NONE,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=LIMIT,
    )
    for i, key in enumerate(keys):
        builder.append(i, timestamp=1, key=key, value=b"value-" * 30, headers=[])
    plain = builder.build()
    if not codec:
        return bytes(plain)
    batch = plain[:HEADER_SIZE] + codecs.compress(codec, bytes(plain[HEADER_SIZE:]), None)
    struct.pack_into(">h", batch, 21, codec)
    return bytes(reseal(batch))


def produced(batch: bytes, compacted: str | None) -> None:
    """What the leader checks of a produce: inline, then (a batch that needs it) in a thread."""
    (header,) = validate_produce(batch, LIMIT, False, compacted)
    if needs_record_walk(header):
        check_records(batch, LIMIT, compacted)


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
def test_a_compacted_topic_refuses_a_batch_with_records_without_a_key(codec: int) -> None:
    """Kafka's LogValidator: INVALID_RECORD, each keyless record named by its index in the
    batch, and an error message showing the first three; compressed batches are opened for
    it. An empty key is a key; a topic that is not compacted takes keyless records."""
    batch = keyed_batch([b"a", None, b"", None, b"e"], codec)
    assert parse_header(batch).compression == codec
    with pytest.raises(RecordErrors) as info:
        produced(batch, "t-0")
    assert info.value.code == ErrorCode.invalid_record
    assert info.value.record_errors == ((1, WHY), (3, WHY))
    assert info.value.message == (
        "One or more records have been rejected due to 2 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{WHY}'), "
        f"RecordError(batchIndex=3, message='{WHY}')]"
    )
    produced(batch, None)
    produced(keyed_batch([b"a", b"", b"c"], codec), "t-0")


def test_a_compacted_topics_long_plain_batch_has_its_keys_read_in_the_thread() -> None:
    """Past INLINE_RECORDS validate_produce walks nothing on the event loop, key or not;
    check_records reads the keys. A batch of keyless records names MAX_KEYLESS of them and
    counts the rest in its message."""
    count = INLINE_RECORDS + 1
    keyed = b"".join(bytes([14, 0, 0, (i % 64) * 2, 2, 107, 1, 0]) for i in range(count - 1))
    last_keyless = plain_batch(keyed + bytes([12, 0, 0, 0, 1, 1, 0]), count)
    (header,) = validate_produce(last_keyless, LIMIT, False, "t-0")
    assert needs_record_walk(header)
    with pytest.raises(RecordErrors) as info:
        check_records(last_keyless, LIMIT, "t-0")
    assert info.value.record_errors == ((INLINE_RECORDS, WHY),)
    check_records(plain_batch(keyed + bytes([14, 0, 0, 0, 2, 107, 1, 0]), count), LIMIT, "t-0")
    with pytest.raises(RecordErrors) as info:
        check_records(plain_batch(tiny_records(count), count), LIMIT, "t-0")
    assert [i for i, _ in info.value.record_errors] == list(range(MAX_KEYLESS))
    assert info.value.message is not None
    assert info.value.message.startswith(
        f"One or more records have been rejected due to {count} record errors in total"
    )


@pytest.mark.parametrize("target", [NONE, LZ4])
@pytest.mark.parametrize("codec", [NONE, GZIP, LZ4])
def test_recompress_reads_the_keys_of_a_compacted_topics_batches(codec: int, target: int) -> None:
    """compression.type: a batch rebuilt in the topic's codec, or one already in it and
    walked in the thread, has its keys read as check_records reads them."""
    keyless = keyed_batch([b"a", None], codec)
    with pytest.raises(RecordErrors) as info:
        if needs_record_walk(parse_header(keyless)) or codec != target:
            recompress(keyless, target, None, LIMIT, LIMIT, "t-0")
        else:  # left as it is: validate_produce read its keys on the loop
            validate_produce(keyless, LIMIT, False, "t-0")
    assert info.value.record_errors == ((1, WHY),)
    keyed = keyed_batch([b"a", b"b"], codec)
    rebuilt = recompress(keyed, target, None, LIMIT, LIMIT, "t-0")
    assert [h.compression for _, h in iter_batches(rebuilt)] == [target]
