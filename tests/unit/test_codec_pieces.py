"""codecs.pieces: every codec's batch decoded a piece at a time, as the produce check walks it
and as decompress() joins it. The pieces are the records the codec's own library decodes
whole (as Kafka's clients write them, and cut or mutated: never more than the library
accepts, never an error but KafkaError); the produce check holds what check_bytes admitted,
and a bomb of valid records is refused at the bound holding no more."""

from __future__ import annotations

import random
import struct
import tracemalloc
import zlib
from collections.abc import Callable

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.storage import codecs
from raftlog.storage.batch import (
    INLINE_DECOMPRESSED,
    INLINE_RATIO,
    INLINE_RECORDS,
    check_bytes,
    check_inline,
    check_records,
    validate_produce,
)
from raftlog.storage.records import count as count_records

from .test_batch import GZIP, HEADER_SIZE, LZ4, SNAPPY, ZSTD, make_batch, reseal
from .test_codecs import plain_record, stream_compress


def xerial(records: bytes, block: int = codecs.XERIAL_BLOCK) -> bytes:
    """snappy-java's framing, as the Java producer writes it, in blocks of `block`."""
    out = bytearray(codecs.XERIAL_HEADER)
    for pos in range(0, len(records), block):
        compressed = bytes(cramjam.snappy.compress_raw(records[pos : pos + block]))
        out += len(compressed).to_bytes(4, "big") + compressed
    return bytes(out)


def zstd_frames(records: bytes) -> bytes:
    """Two frames with their content sizes (zstd's one-shot compress), one stream to Kafka."""
    half = len(records) // 2
    one = zstandard.ZstdCompressor(level=1)
    return one.compress(records[:half]) + one.compress(records[half:])


def lz4_linked(records: bytes) -> bytes:
    return bytes(lz4.frame.compress(records, block_size=lz4.frame.BLOCKSIZE_MAX4MB))


# How each client writes its codec: (codec, compress)
WRITERS: dict[str, tuple[int, Callable[[bytes], bytes]]] = {
    "gzip": (GZIP, lambda r: stream_compress(GZIP, [r])),
    "snappy-raw": (SNAPPY, lambda r: bytes(cramjam.snappy.compress_raw(r))),
    "snappy-xerial": (SNAPPY, xerial),
    "lz4": (LZ4, lambda r: stream_compress(LZ4, [r])),
    "lz4-linked": (LZ4, lz4_linked),
    "zstd": (ZSTD, lambda r: stream_compress(ZSTD, [r])),
    "zstd-frames": (ZSTD, zstd_frames),
}


def reference(codec: int, payload: bytes) -> bytes:
    """What the codec's own library decodes of the whole payload (it raises otherwise)."""
    if codec == GZIP:
        d = zlib.decompressobj(wbits=47)
        out = d.decompress(payload)
        assert d.eof
        return out
    if codec == SNAPPY:
        if payload.startswith(codecs.XERIAL_MAGIC):
            blocks, pos = [], len(codecs.XERIAL_HEADER)
            while pos < len(payload):
                size = int.from_bytes(payload[pos : pos + 4], "big")
                assert pos + 4 + size <= len(payload)
                blocks.append(
                    bytes(cramjam.snappy.decompress_raw(payload[pos + 4 : pos + 4 + size]))
                )
                pos += 4 + size
            return b"".join(blocks)
        return bytes(cramjam.snappy.decompress_raw(payload))
    if codec == LZ4:
        d = lz4.frame.LZ4FrameDecompressor()
        out = d.decompress(payload)
        assert d.eof
        return bytes(out)
    frames, data = [], payload
    while data:
        frame = zstandard.ZstdDecompressor().decompressobj()
        frames.append(frame.decompress(data))
        assert frame.eof
        data = frame.unused_data
    assert frames
    return b"".join(frames)


def section(seed: int, count: int, longest: int) -> bytes:
    """`count` records of random lengths up to `longest`, part random and part repeated."""
    rng = random.Random(seed)
    values = [rng.randbytes(rng.randrange(longest)) * rng.randrange(1, 4) for _ in range(8)]
    return b"".join(plain_record(i, rng.choice(values)) for i in range(count))


def decoded(codec: int, payload: bytes, limit: int = 1 << 24) -> bytes | ErrorCode:
    """The pieces joined, or the KafkaError's code (any other exception fails the test)."""
    try:
        pieces = list(codecs.pieces(codec, payload, limit))
    except KafkaError as exc:
        return exc.code
    return b"".join(pieces)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(sorted(WRITERS)),
    st.integers(0, 1 << 30),
    st.integers(1, 300),
    st.sampled_from([16, 1024, 70_000]),
)
def test_the_pieces_are_what_the_codec_decodes_whole(
    writer: str, seed: int, count: int, longest: int
) -> None:
    codec, compress = WRITERS[writer]
    records = section(seed, count, longest)
    payload = compress(records)
    pieces = list(codecs.pieces(codec, payload, len(records)))
    assert b"".join(pieces) == records == reference(codec, payload)
    assert codecs.decompress(codec, payload, len(records)) == records
    assert codecs.decompressed_size(codec, payload, len(records)) == len(records)
    if codec != SNAPPY:  # a snappy piece is a block, of the length it declares
        assert max(map(len, pieces), default=0) <= codecs.PIECE
    if records:
        for limit in (len(records) - 1, len(records) // 2):
            assert decoded(codec, payload, limit) == ErrorCode.message_too_large


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(WRITERS)),
    st.integers(0, 1 << 30),
    st.integers(1, 60),
    st.data(),
)
def test_a_cut_or_mutated_payload_decodes_to_no_more_than_the_library_takes(
    writer: str, seed: int, count: int, data: st.DataObject
) -> None:
    """Refused (CORRUPT_MESSAGE, or MESSAGE_TOO_LARGE for a length past the bound) or, when
    it still decodes, decoded as the codec's library decodes it whole; never another
    exception. The produce check of the batch agrees with counting the joined pieces."""
    codec, compress = WRITERS[writer]
    records = section(seed, count, 3000)
    payload = bytearray(compress(records))
    if data.draw(st.booleans(), "cut"):
        del payload[data.draw(st.integers(0, len(payload) - 1), "at") :]
    else:
        for _ in range(data.draw(st.integers(1, 3), "flips")):
            at = data.draw(st.integers(0, len(payload) - 1), "at")
            payload[at] ^= data.draw(st.integers(1, 255), "xor")
    ours = decoded(codec, bytes(payload))
    if isinstance(ours, ErrorCode):
        assert ours in (ErrorCode.corrupt_message, ErrorCode.message_too_large)
    else:
        assert ours == reference(codec, bytes(payload))
    expected: ErrorCode | None = ours if isinstance(ours, ErrorCode) else None
    if expected is None:
        try:
            count_records(ours, count)
        except KafkaError as exc:
            expected = exc.code
    batch = batch_of(codec, bytes(payload), count)
    assert check_code(batch) == expected
    assert inline_code(batch) in (expected, THREAD)


def batch_of(codec: int, payload: bytes, count: int) -> bytes:
    """A batch of `count` records whose compressed payload is `payload`, CRC made valid."""
    batch = make_batch([1, 2])[:HEADER_SIZE] + payload
    struct.pack_into(">h", batch, 21, codec)
    struct.pack_into(">i", batch, 23, count - 1)  # last offset delta
    struct.pack_into(">i", batch, 57, count)  # record count
    return bytes(reseal(batch))


def check_code(
    batch: bytes, limit: int = 1 << 24, compacted: str | None = None
) -> ErrorCode | None:
    try:
        check_records(batch, limit, compacted)
    except KafkaError as exc:
        return exc.code
    return None


THREAD = "thread"


def inline_code(batch: bytes) -> ErrorCode | str | None:
    """check_inline's verdict: its error, None, or THREAD when it leaves the check to one."""
    headers = validate_produce(batch, 64 << 20, False)
    try:
        return None if check_inline(batch, headers, 1 << 24) else THREAD
    except KafkaError as exc:
        return exc.code


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_the_check_runs_on_the_event_loop_only_while_it_is_short(writer: str) -> None:
    """check_inline decides a batch that decompresses to little (as check_records does), and
    leaves to a thread, undecided, gzip (2 ms a MB), more than INLINE_RECORDS records, more
    than INLINE_DECOMPRESSED bytes, or more than INLINE_RATIO times the batch's size."""
    codec, compress = WRITERS[writer]
    rng = random.Random(13)
    short = b"".join(plain_record(i, rng.randbytes(500) + bytes(500)) for i in range(200))
    assert len(short) < INLINE_RATIO * len(compress(short))
    assert inline_code(batch_of(codec, compress(short), 200)) == (THREAD if codec == GZIP else None)
    assert inline_code(batch_of(codec, compress(short), 201)) == (
        THREAD if codec == GZIP else ErrorCode.corrupt_message
    )
    many = section(17, INLINE_RECORDS + 1, 16)
    assert inline_code(batch_of(codec, compress(many), INLINE_RECORDS + 1)) == THREAD
    assert inline_code(batch_of(codec, compress(many), 100)) == THREAD  # its header lies
    large = section(7, 1000, 8000)
    assert len(large) > INLINE_DECOMPRESSED
    assert inline_code(batch_of(codec, compress(large), 1000)) == THREAD
    alike = plain_record(0, bytes(1000)) * 100
    assert len(alike) > INLINE_RATIO * len(compress(alike))
    assert inline_code(batch_of(codec, compress(alike), 100)) == THREAD
    assert check_code(batch_of(codec, compress(alike), 100)) is None


def checked(
    batch: bytes, limit: int, compacted: str | None = None
) -> tuple[ErrorCode | None, int, int]:
    """(check_records' error, what check_bytes admitted, tracemalloc's peak in the check)."""
    admitted = check_bytes(batch, validate_produce(batch, 64 << 20, False), limit)
    tracemalloc.start()
    try:
        code = check_code(batch, limit, compacted)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return code, admitted, peak


@pytest.mark.parametrize("compacted", [None, "t-0"])
@pytest.mark.parametrize("writer", ["gzip", "snappy-xerial", "lz4", "zstd"])
def test_a_large_batch_is_checked_holding_what_was_admitted(
    writer: str, compacted: str | None
) -> None:
    """4 MiB of records pass holding a few pieces, as check_bytes said they would (zstd's
    window, which check_bytes counts too, is its library's, which tracemalloc does not see);
    on a compacted topic their keys are read too (they have none: INVALID_RECORD)."""
    codec, compress = WRITERS[writer]
    records = section(7, 1000, 8000)
    assert len(records) > 4 << 20
    batch = batch_of(codec, compress(records), 1000)
    code, admitted, peak = checked(batch, 64 << 20, compacted)
    assert code == (None if compacted is None else ErrorCode.invalid_record)
    assert peak <= admitted < 3 << 20, (peak, admitted)


@pytest.mark.parametrize("writer", ["gzip", "snappy-xerial", "lz4", "zstd"])
def test_a_bomb_of_valid_records_is_refused_at_the_bound_holding_what_was_admitted(
    writer: str,
) -> None:
    """64 MiB of real records (the walk passes them all) in a few hundred KB: refused as
    too large at the bound, holding no more than check_bytes admitted, and opened whole
    (a read) refused holding about the bound."""
    codec, _ = WRITERS[writer]
    record = plain_record(0, bytes(60_000))
    chunk = record * ((1 << 20) // len(record))
    chunks = 64
    if codec == SNAPPY:
        blocks = xerial(chunk)[len(codecs.XERIAL_HEADER) :]
        payload = codecs.XERIAL_HEADER + blocks * chunks
    else:
        payload = stream_compress(codec, (chunk for _ in range(chunks)))
    assert len(payload) < 4 << 20
    limit = 8 << 20
    count = chunks * (len(chunk) // len(record))
    code, admitted, peak = checked(batch_of(codec, payload, count), limit)
    assert code == ErrorCode.message_too_large
    assert peak <= admitted < 3 << 20, (peak, admitted)
    tracemalloc.start()
    try:
        assert decoded(codec, payload, limit) == ErrorCode.message_too_large
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * limit + (1 << 20)


def test_a_raw_snappy_block_is_admitted_and_refused_by_its_declared_length() -> None:
    records = section(3, 200, 3000)
    payload = bytes(cramjam.snappy.compress_raw(records))
    code, admitted, _ = checked(batch_of(SNAPPY, payload, 200), 64 << 20)
    assert code is None
    assert admitted == len(records) + 2 * codecs.PIECE
    code, admitted, peak = checked(batch_of(SNAPPY, payload, 200), len(records) - 1)
    assert code == ErrorCode.message_too_large
    assert peak < codecs.PIECE  # refused by the length it declares, unread


def test_a_xerial_block_larger_than_the_first_is_refused() -> None:
    """check_bytes reads the first block's length only (it runs on the event loop); the
    walk holds the others to it, or to snappy-java's 32 KiB block."""
    records = section(5, 400, 2000)
    small = xerial(records[:20_000], 20_000)
    mixed = small + xerial(records[20_000:], 100_000)[len(codecs.XERIAL_HEADER) :]
    assert decoded(SNAPPY, mixed) == ErrorCode.message_too_large
    assert reference(SNAPPY, mixed) == records
    large_first = xerial(records, 100_000)
    assert decoded(SNAPPY, large_first) == records
    batch = batch_of(SNAPPY, large_first, 400)
    held = check_bytes(batch, validate_produce(batch, 64 << 20, False), 64 << 20)
    assert held == 100_000 + 2 * codecs.PIECE


def test_a_zstd_frame_needing_a_larger_window_than_the_first_is_refused() -> None:
    """check_bytes admits the first frame's window; a later frame may not need more."""
    records = section(9, 400, 2000)
    small = zstandard.ZstdCompressor(level=1).compress(records[:1000])  # a 128 KiB window
    large = zstandard.ZstdCompressor(
        compression_params=zstandard.ZstdCompressionParameters.from_level(19, window_log=23)
    ).compressobj()
    stream = large.compress(records[1000:]) + large.flush()
    assert zstandard.get_frame_parameters(stream).window_size == 8 << 20
    assert reference(ZSTD, small + stream) == records
    assert decoded(ZSTD, small + stream) == ErrorCode.corrupt_message
    assert decoded(ZSTD, stream + small) == records[1000:] + records[:1000]
    batch = batch_of(ZSTD, stream + small, 400)
    held = check_bytes(batch, validate_produce(batch, 64 << 20, False), 64 << 20)
    assert held == 3 * codecs.PIECE + (8 << 20) + (256 << 10)


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_batch_opened_whole_is_held_about_once(writer: str) -> None:
    """decompress() (a read, or recompression, admitted by the records' size) holds the
    records about once: its pieces joined held them twice, and a leader recompressing 60 MB
    zstd bombs one at a time grew by 277 MB."""
    codec, compress = WRITERS[writer]
    records = section(11, 1000, 8000)
    payload = compress(records)
    tracemalloc.start()
    try:
        opened = codecs.decompress(codec, payload, 64 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert opened == records
    assert peak < 1.25 * len(records) + (1 << 20), peak / len(records)


def test_a_zstd_bomb_of_tiny_blocks_stops_at_the_bound_before_its_blocks_are_walked() -> None:
    """A frame of 4-byte RLE blocks of 128 KiB each, cut short: decoded first, it stops at
    the bound after a few hundred blocks (MESSAGE_TOO_LARGE); walked first, all of a
    megabyte's 250,000 block headers were read in Python before (CORRUPT_MESSAGE)."""
    header = (0xFD2FB528).to_bytes(4, "little") + b"\x00\x38"  # no content size, 128 KiB window
    rle = ((128 << 10) << 3 | 1 << 1).to_bytes(3, "little") + b"\x00"  # not the last block
    bomb = header + rle * 250_000
    assert decoded(ZSTD, bomb, 64 << 20) == ErrorCode.message_too_large
    assert decoded(ZSTD, header + rle * 3, 64 << 20) == ErrorCode.corrupt_message
