"""Record-batch payloads decompressed under a size bound.

A 32 KB zstd batch that held 1 GiB froze a node for 6 s (3.7 GB peak) when ListOffsets by
timestamp opened it. Every codec here stops at `limit` bytes of output, whatever the payload
claims, and a payload that does not decode whole is refused (records.count then checks what
it decoded to). The decompressors release the GIL, so this runs off the event loop.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import cramjam
import lz4.frame
import zstandard

from raftlog.common.errors import ErrorCode, KafkaError

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
# What one produced batch may decompress to. Kafka sets no such bound; a bomb (1 GiB in a
# 32 KB zstd batch) must not be opened, and real batches (librdkafka's batch.size is 1 MB
# compressed) stay far below it.
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
XERIAL_MAGIC = b"\x82SNAPPY\x00"  # snappy-java's block framing; librdkafka sends raw snappy
XERIAL_HEADER = XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"  # version 1, compat 1
XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
# What decompressed_size holds at once while it counts.
MEASURE_CHUNK = 1024 * 1024
# The pieces an lz4 batch is checked in as it decompresses (lz4_pieces): small enough for
# malloc's heap, where a piece of 1 MiB or more is a fresh mmap whose pages fault in.
LZ4_PIECE = 64 * 1024
# An LZ4 frame's block size ids (the BD byte's bits 4-6) and what its decoder buffers.
_LZ4_BLOCK_BYTES = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
_LZ4_LINKED_HISTORY = 128 * 1024


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


def _too_large(limit: int) -> KafkaError:
    return KafkaError(
        ErrorCode.message_too_large, f"record batch decompresses to more than {limit} bytes"
    )


def decompress(codec: int, payload: bytes | memoryview, limit: int) -> bytes:
    """The records of a compressed batch; KafkaError MESSAGE_TOO_LARGE past `limit` bytes,
    CORRUPT_MESSAGE if the payload is not whole and valid."""
    try:
        if codec == GZIP:
            return _gzip(payload, limit)
        if codec == SNAPPY:
            return snappy(bytes(payload), limit)
        if codec == LZ4:
            return _lz4(payload, limit)
        if codec == ZSTD:
            return _zstd(payload, limit)
    except KafkaError:
        raise
    except Exception as exc:  # each library raises its own types for a bad payload
        raise _corrupt(f"codec {codec} payload does not decompress: {exc}") from None
    raise _corrupt(f"unknown codec {codec}")


def decompressed_size(codec: int, payload: bytes | memoryview, limit: int) -> int:
    """What decompress() will return the length of, found holding MEASURE_CHUNK bytes at most
    (snappy's lengths are read, not decoded): a batch is admitted against the node's memory
    by this before it is opened. The same errors as decompress past `limit` or for a payload
    that is not whole (zstd's truncation is found by decompress, not here). For a thread."""
    try:
        if codec == GZIP:
            return _gzip_size(payload, limit)
        if codec == SNAPPY:
            return _snappy_size(bytes(payload), limit)
        if codec == LZ4:
            return _lz4_size(payload, limit)
        if codec == ZSTD:
            return _zstd_size(bytes(payload), limit)
    except KafkaError:
        raise
    except Exception as exc:  # each library raises its own types for a bad payload
        raise _corrupt(f"codec {codec} payload does not decompress: {exc}") from None
    raise _corrupt(f"unknown codec {codec}")


def compress(codec: int, records: bytes, level: int | None) -> bytes:
    """`records` compressed as Kafka's broker compresses a batch it recompresses (its
    compression.type): gzip, snappy in snappy-java's xerial blocks, an LZ4 frame of
    independent 64 KiB blocks, a zstd frame. `level`: the topic's compression.<codec>.level
    (gzip -1: zlib's default, as Java's Deflater). Slow for a large batch: off the loop."""
    if codec == GZIP:
        z = zlib.compressobj(-1 if level is None else level, zlib.DEFLATED, 31)  # gzip header
        return z.compress(records) + z.flush()
    if codec == SNAPPY:
        out = bytearray(XERIAL_HEADER)
        for pos in range(0, len(records), XERIAL_BLOCK):
            block = cramjam.snappy.compress_raw(records[pos : pos + XERIAL_BLOCK])
            out += len(block).to_bytes(4, "big")
            out += block
        return bytes(out)
    if codec == LZ4:
        compressed: bytes = lz4.frame.compress(
            records,
            compression_level=9 if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
        )
        return compressed
    if codec == ZSTD:
        return zstandard.ZstdCompressor(level=3 if level is None else level).compress(records)
    raise ValueError(f"no compressor for codec {codec}")


def _gzip(payload: bytes | memoryview, limit: int) -> bytes:
    d = zlib.decompressobj(wbits=47)  # gzip or zlib header
    out = d.decompress(payload, limit + 1)
    if len(out) > limit:
        raise _too_large(limit)
    if not d.eof:
        raise _corrupt("gzip payload is truncated")
    return out


def _gzip_size(payload: bytes | memoryview, limit: int) -> int:
    d = zlib.decompressobj(wbits=47)
    size, data = 0, payload
    while not d.eof:
        out = d.decompress(data, MEASURE_CHUNK)
        size += len(out)
        if size > limit:
            raise _too_large(limit)
        data = d.unconsumed_tail
        if not out and not data:
            raise _corrupt("gzip payload is truncated")
    return size


def _snappy_block(block: bytes, limit: int) -> bytes:
    """Raw snappy starts with its uncompressed length (a varint): checked before decoding."""
    _snappy_length(block, limit)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_length(block: bytes, limit: int) -> int:
    """A raw snappy block's uncompressed length (its leading varint), at most `limit`."""
    size = shift = 0
    for i, byte in enumerate(block[:5]):
        size |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if i == 4:
            raise _corrupt("snappy length varint too long")
    if size > limit:
        raise _too_large(limit)
    return size


def snappy(payload: bytes, limit: int) -> bytes:
    """Raw snappy (librdkafka) or snappy-java's xerial blocks (the Java producer)."""
    if not payload.startswith(XERIAL_MAGIC):
        return _snappy_block(payload, limit)
    out = bytearray()
    for block in _xerial_blocks(payload):
        out += _snappy_block(block, limit - len(out))
    return bytes(out)


def _snappy_size(payload: bytes, limit: int) -> int:
    if not payload.startswith(XERIAL_MAGIC):
        return _snappy_length(payload, limit)
    size = 0
    for block in _xerial_blocks(payload):
        size += _snappy_length(block, limit - size)
    return size


def _xerial_blocks(payload: bytes) -> Iterator[bytes]:
    pos = len(XERIAL_HEADER)
    while pos < len(payload):
        if pos + 4 > len(payload):
            raise _corrupt("xerial snappy block length is truncated")
        block = int.from_bytes(payload[pos : pos + 4], "big")
        pos += 4
        if block < 0 or pos + block > len(payload):
            raise _corrupt("xerial snappy block runs past the payload")
        yield payload[pos : pos + block]
        pos += block


def lz4_pieces(payload: bytes | memoryview, limit: int) -> Iterator[bytes]:
    """An lz4 batch's records, LZ4_PIECE bytes at a time, read from `payload` in place; the
    errors of decompress() (bytes after the frame are left unread, as decompress leaves
    them). The produce check walks these instead of decompressed_size() then decompress():
    its opening threads went from 1.8-2.6 to 0.2-0.5 ms of CPU per MB of lz4 produce, most
    of it the page faults of the 1 MiB chunks and the 64 MiB buffer those two fill. For a
    thread."""
    context = lz4.frame.create_decompression_context()
    view = memoryview(payload)
    pos = size = 0
    ended = False
    while not ended:
        try:
            piece, read, ended = lz4.frame.decompress_chunk(
                context, view[pos:], max_length=LZ4_PIECE
            )
        except Exception as exc:  # lz4 raises RuntimeError for a bad frame
            raise _corrupt(f"codec {LZ4} payload does not decompress: {exc}") from None
        pos += read
        size += len(piece)
        if size > limit:
            raise _too_large(limit)
        if not piece and not read:
            raise _corrupt("lz4 frame is truncated")
        yield piece


def lz4_check_bytes(payload: bytes | memoryview) -> int:
    """What walking lz4_pieces of `payload` holds at most, from its frame header: the
    decoder's piece, its copy as bytes and a length prefix's carry (a piece each), and the
    frame decoder's input and output buffers of one block (as the frame declares them, 64
    KiB to 4 MiB; 128 KiB more for linked blocks). A header that is not an LZ4 frame's is
    given the largest; the walk refuses it anyway."""
    block, linked = 4 * 1024 * 1024, True
    if len(payload) >= 6 and bytes(payload[:4]) == b"\x04\x22\x4d\x18":
        block = _LZ4_BLOCK_BYTES.get((payload[5] >> 4) & 7, block)
        linked = not payload[4] & 0x20
    return 3 * LZ4_PIECE + 2 * block + (_LZ4_LINKED_HISTORY if linked else 0)


def _lz4(payload: bytes | memoryview, limit: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    out: bytes = d.decompress(bytes(payload), max_length=limit + 1)
    if len(out) > limit:
        raise _too_large(limit)
    if not d.eof:
        raise _corrupt("lz4 frame is truncated")
    return out


def _lz4_size(payload: bytes | memoryview, limit: int) -> int:
    """Counted in pieces: 0.1 ms for a 1 MiB section, where 1 MiB chunks took 0.15-2.4 ms
    (each a fresh mapping whose pages fault in, and the input left over copied per chunk)."""
    return sum(len(piece) for piece in lz4_pieces(payload, limit))


def _zstd(payload: bytes | memoryview, limit: int) -> bytes:
    """The stream reader bounds the output but says nothing of a frame cut short; the
    decompression objects then check each frame is whole, their output now known bounded.
    One frame (what clients send) is returned as decoded, not copied."""
    data = bytes(payload)
    _zstd_size(data, limit)
    frames = []
    while data:
        frame = zstandard.ZstdDecompressor().decompressobj()
        frames.append(frame.decompress(data))
        if not frame.eof:
            raise _corrupt("zstd frame is truncated")
        data = frame.unused_data
    return frames[0] if len(frames) == 1 else b"".join(frames)


def _zstd_size(data: bytes, limit: int) -> int:
    size = 0
    with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
        while chunk := reader.read(MEASURE_CHUNK):
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
    return size
