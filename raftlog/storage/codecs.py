"""Record-batch payloads decompressed under a size bound.

A 32 KB zstd batch that held 1 GiB froze a node for 6 s (3.7 GB peak) when ListOffsets by
timestamp opened it. Every codec here stops at `limit` bytes of output, whatever the payload
claims, and a payload that does not decode whole is refused (records.count then checks what
it decoded to). The decompressors release the GIL, so this runs off the event loop.
"""

from __future__ import annotations

import zlib

import cramjam
import lz4.frame
import zstandard

from raftlog.errors import ErrorCode, KafkaError

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
# What one produced batch may decompress to. Kafka sets no such bound; a bomb (1 GiB in a
# 32 KB zstd batch) must not be opened, and real batches (librdkafka's batch.size is 1 MB
# compressed) stay far below it.
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
XERIAL_MAGIC = b"\x82SNAPPY\x00"  # snappy-java's block framing; librdkafka sends raw snappy
XERIAL_HEADER = XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"  # version 1, compat 1
XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size


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


def _snappy_block(block: bytes, limit: int) -> bytes:
    """Raw snappy starts with its uncompressed length (a varint): checked before decoding."""
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
    return bytes(cramjam.snappy.decompress_raw(block))


def snappy(payload: bytes, limit: int) -> bytes:
    """Raw snappy (librdkafka) or snappy-java's xerial blocks (the Java producer)."""
    if not payload.startswith(XERIAL_MAGIC):
        return _snappy_block(payload, limit)
    out = bytearray()
    pos = len(XERIAL_HEADER)
    while pos < len(payload):
        if pos + 4 > len(payload):
            raise _corrupt("xerial snappy block length is truncated")
        block = int.from_bytes(payload[pos : pos + 4], "big")
        pos += 4
        if block < 0 or pos + block > len(payload):
            raise _corrupt("xerial snappy block runs past the payload")
        out += _snappy_block(payload[pos : pos + block], limit - len(out))
        pos += block
    return bytes(out)


def _lz4(payload: bytes | memoryview, limit: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    out: bytes = d.decompress(bytes(payload), max_length=limit + 1)
    if len(out) > limit:
        raise _too_large(limit)
    if not d.eof:
        raise _corrupt("lz4 frame is truncated")
    return out


def _zstd(payload: bytes | memoryview, limit: int) -> bytes:
    """The stream reader bounds the output but says nothing of a frame cut short; the
    decompression objects then check each frame is whole, their output now known bounded."""
    data = bytes(payload)
    with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
        if len(reader.read(limit + 1)) > limit:
            raise _too_large(limit)
    out = bytearray()
    while data:
        frame = zstandard.ZstdDecompressor().decompressobj()
        out += frame.decompress(data)
        if not frame.eof:
            raise _corrupt("zstd frame is truncated")
        data = frame.unused_data
    return bytes(out)
