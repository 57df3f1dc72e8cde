"""raftlog/storage/codecs.py on real codec output: every codec's batch passes, a bomb stops at
the bound without being opened, and garbage or a wrong record count is refused."""

from __future__ import annotations

import struct
import tracemalloc
import zlib
from collections.abc import Iterable

import lz4.frame
import pytest
import zstandard
from support.wire import zstd_bomb

from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.storage import codecs
from raftlog.storage.batch import check_bytes, check_records, decompressed_bytes, validate_produce
from raftlog.storage.records import varint

from .test_batch import (
    GZIP,
    HEADER_SIZE,
    LZ4,
    SNAPPY,
    ZSTD,
    make_batch,
    reseal,
    snappy_batch,
)


def code_of(records: bytes, limit: int = 1 << 20) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        check_records(records, limit)
    return info.value.code


def with_payload(codec: int, payload: bytes) -> bytes:
    """A batch of two records whose compressed payload is `payload`, CRC made valid."""
    batch = make_batch([1, 2])[:HEADER_SIZE] + payload
    struct.pack_into(">h", batch, 21, codec)
    return bytes(reseal(batch))


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD])
def test_batches_of_every_codec_pass(codec: int) -> None:
    check_records(bytes(make_batch([1, 2, 3], codec)), 1 << 20)


@pytest.mark.parametrize("xerial", [False, True])
def test_snappy_batches_raw_and_xerial_pass(xerial: bool) -> None:
    check_records(bytes(snappy_batch([1, 2, 3], xerial)), 1 << 20)


def test_a_bomb_stops_at_the_bound_unopened() -> None:
    """The issue's case: a few KB of zstd that holds 1 GiB. Refused after reading a piece
    (its zeros are no records) or just past the bound, not after inflating it all; opened
    whole (a read), it stops at the bound too."""
    bomb = zstd_bomb(1 << 30)
    assert len(bomb) < 64 * 1024
    batch = with_payload(ZSTD, bomb)
    tracemalloc.start()
    try:
        assert code_of(batch, limit=1 << 20) == ErrorCode.corrupt_message
        with pytest.raises(KafkaError) as info:
            codecs.decompress(ZSTD, bomb, 1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.code == ErrorCode.message_too_large
    assert peak < 4 << 20  # what was inflated: about the bound, not the 1 GiB inside


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_garbage_payloads_are_corrupt(codec: int) -> None:
    assert code_of(with_payload(codec, b"\x13garbage that no codec wrote" * 4)) == (
        ErrorCode.corrupt_message
    )


def test_a_truncated_payload_is_corrupt() -> None:
    whole = make_batch([1, 2, 3], LZ4)
    payload = bytes(whole[HEADER_SIZE:])
    assert code_of(with_payload(LZ4, payload[:-8])) == ErrorCode.corrupt_message


def test_a_record_count_that_does_not_match_the_records_is_corrupt() -> None:
    """Two records inside, a header that says three: offsets would be handed out for a
    record no consumer can read."""
    two = make_batch([1, 2], LZ4)
    batch = bytearray(two)
    struct.pack_into(">i", batch, 23, 2)  # last offset delta
    struct.pack_into(">i", batch, 57, 3)  # record count
    assert code_of(bytes(reseal(batch))) == ErrorCode.corrupt_message
    records = lz4.frame.decompress(bytes(two[HEADER_SIZE:]))
    assert code_of(with_payload(LZ4, lz4.frame.compress(records + b"\x01"))) == (
        ErrorCode.corrupt_message
    )


def test_a_zstd_frame_cut_at_a_record_boundary_is_corrupt() -> None:
    """The stream reader hands back what a cut frame held without complaint: cut between
    records under a header that counts only those, the payload passed, yet no consumer can
    decompress it."""
    records = bytes(make_batch([1, 2])[HEADER_SIZE:])
    compressor = zstandard.ZstdCompressor().compressobj()
    cut = compressor.compress(records) + compressor.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    assert zstandard.ZstdDecompressor().decompressobj().decompress(cut) == records
    assert code_of(with_payload(ZSTD, cut)) == ErrorCode.corrupt_message
    whole = zstandard.ZstdCompressor().compress(records)
    check_records(with_payload(ZSTD, whole), 1 << 20)
    assert code_of(with_payload(ZSTD, whole + b"\x00garbage")) == ErrorCode.corrupt_message
    # Frames one after another are one stream to Kafka's consumers, and to the check.
    length, body = varint(records, 0)
    first, second = records[: body + length], records[body + length :]
    split = zstandard.ZstdCompressor().compress(first) + zstandard.ZstdCompressor().compress(second)
    check_records(with_payload(ZSTD, split), 1 << 20)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_decompressed_size_is_what_decompress_returns(codec: int) -> None:
    """A batch is admitted against the node's memory by this size before it is opened."""
    batch = bytes(snappy_batch([1, 2, 3], False) if codec == SNAPPY else make_batch([1, 2], codec))
    payload = batch[HEADER_SIZE:]
    opened = codecs.decompress(codec, payload, 1 << 20)
    assert codecs.decompressed_size(codec, payload, 1 << 20) == len(opened) > 0
    assert decompressed_bytes(batch + batch, 1 << 20) == 2 * len(opened)
    xerial = bytes(snappy_batch([1, 2, 3], True))[HEADER_SIZE:]
    assert codecs.decompressed_size(SNAPPY, xerial, 1 << 20) == len(
        codecs.decompress(SNAPPY, xerial, 1 << 20)
    )


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD])
def test_decompressed_size_counts_a_bomb_holding_a_few_pieces(codec: int) -> None:
    """64 MiB inside: counted exactly, or refused past the limit, with a few pieces held,
    never the 64 MiB (which is what the admission is for)."""
    size = 64 << 20
    payload = zero_bomb(codec, size)
    tracemalloc.start()
    try:
        assert codecs.decompressed_size(codec, payload, size) == size
        with pytest.raises(KafkaError) as info:
            codecs.decompressed_size(codec, payload, size - 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.code == ErrorCode.message_too_large
    assert peak < 8 * codecs.PIECE, peak


def zero_bomb(codec: int, size: int) -> bytes:
    """`size` zero bytes (a multiple of 1 MiB) in `codec`, made without holding them."""
    return stream_compress(codec, (bytes(1 << 20) for _ in range(size >> 20)))


def stream_compress(codec: int, chunks: Iterable[bytes]) -> bytes:
    """The chunks compressed as one stream, as a producer writes it: no content size."""
    if codec == ZSTD:
        z = zstandard.ZstdCompressor(level=3).compressobj()
        return b"".join(z.compress(c) for c in chunks) + z.flush()
    if codec == GZIP:
        g = zlib.compressobj(9, zlib.DEFLATED, 31)
        return b"".join(g.compress(c) for c in chunks) + g.flush()
    lz = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False)
    return lz.begin() + b"".join(lz.compress(c) for c in chunks) + lz.flush()


def test_decompressed_size_refuses_a_snappy_length_past_the_limit_unread() -> None:
    claims = varint_bytes(1 << 30) + b"\x00" * 16  # a raw snappy block claiming 1 GiB
    with pytest.raises(KafkaError) as info:
        codecs.decompressed_size(SNAPPY, claims, 1 << 20)
    assert info.value.code == ErrorCode.message_too_large


@pytest.mark.parametrize("codec", [GZIP, LZ4])
def test_decompressed_size_refuses_garbage_and_truncation(codec: int) -> None:
    payload = bytes(make_batch([1, 2, 3], codec)[HEADER_SIZE:])
    for bad in (b"\x13garbage that no codec wrote" * 4, payload[:-8]):
        with pytest.raises(KafkaError) as info:
            codecs.decompressed_size(codec, bad, 1 << 20)
        assert info.value.code == ErrorCode.corrupt_message


def plain_record(offset_delta: int, value: bytes) -> bytes:
    """One record (no key, no headers), length-prefixed as in a records section."""
    body = b"\x00\x00" + varint_bytes(2 * offset_delta) + b"\x01" + varint_bytes(2 * len(value))
    body += value + b"\x00"
    return varint_bytes(2 * len(body)) + body


def varint_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_an_lz4_batch_is_checked_a_piece_at_a_time() -> None:
    """The produce check of an lz4 batch (librdkafka's frames: independent 64 KiB blocks)
    never holds its records section: 4 MiB of records pass holding a few pieces, a record
    short or a byte cut is refused, and the admission (check_bytes) is what the frame says
    the walk holds, not the section's size."""
    value = bytes(range(256)) * 16
    records = b"".join(plain_record(i, value) for i in range(1024))
    payload = lz4.frame.compress(
        records, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False
    )
    batch = bytearray(make_batch([1, 2])[:HEADER_SIZE] + payload)
    struct.pack_into(">h", batch, 21, LZ4)
    struct.pack_into(">i", batch, 23, 1023)  # last offset delta
    struct.pack_into(">i", batch, 57, 1024)  # record count
    whole = bytes(reseal(batch))
    tracemalloc.start()
    try:
        check_records(whole, 64 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(records) > 4 << 20
    assert peak < 8 * codecs.PIECE, peak
    held = check_bytes(whole, validate_produce(whole, 16 << 20, False), 64 << 20)
    assert held == 5 * codecs.PIECE
    linked = lz4.frame.compress(records, block_size=lz4.frame.BLOCKSIZE_MAX4MB)
    assert codecs.lz4_check_bytes(linked) == 3 * codecs.PIECE + (8 << 20) + (128 << 10)
    assert code_of(bytes(reseal(bytearray(whole[:-1]))), 64 << 20) == ErrorCode.corrupt_message
    with pytest.raises(KafkaError) as info:
        check_records(whole, len(records) - 1)
    assert info.value.code == ErrorCode.message_too_large
    short = bytearray(whole)
    struct.pack_into(">i", short, 23, 1024)
    struct.pack_into(">i", short, 57, 1025)
    assert code_of(bytes(reseal(short)), 64 << 20) == ErrorCode.corrupt_message
