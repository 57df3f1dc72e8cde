"""Record-batch payloads decompressed under a size bound.

A 32 KB zstd batch that held 1 GiB froze a node for 6 s (3.7 GB peak) when ListOffsets by
timestamp opened it. Every codec here stops at `limit` bytes of output, whatever the payload
claims, and a payload that does not decode whole is refused (records.count then checks what
it decoded to). The decompressors release the GIL, so this runs off the event loop.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable, Iterator
from typing import TypeVar

import cramjam
import lz4.frame
import zstandard

from raftlog.common.errors import ErrorCode, KafkaError

_T = TypeVar("_T")

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
# What one produced batch may decompress to. Kafka sets no such bound; a bomb (1 GiB in a
# 32 KB zstd batch) must not be opened, and real batches (librdkafka's batch.size is 1 MB
# compressed) stay far below it.
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
XERIAL_MAGIC = b"\x82SNAPPY\x00"  # snappy-java's block framing; librdkafka sends raw snappy
XERIAL_HEADER = XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"  # version 1, compat 1
XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
_XERIAL_FIRST = len(XERIAL_HEADER) + 4 + 5  # to the end of the first block's length varint
# The pieces a batch is decoded in (pieces()): small enough for malloc's heap, where a piece
# of 1 MiB or more is a fresh mmap whose pages fault in.
PIECE = 64 * 1024
# What zlib holds decoding (its 32 KiB window and its state) and the input it is handed at
# once (so what it leaves unread, which it copies, stays small).
_GZIP_WINDOW = 48 * 1024
_GZIP_INPUT = 32 * 1024
# What a zstd decoder holds besides its window: a block (128 KiB at most) and its tables.
_ZSTD_BLOCK = 256 * 1024
# The windows a zstd decoder here takes: a block at least, zstd's own default bound at most.
_ZSTD_MIN_WINDOW = 128 * 1024
_ZSTD_MAX_WINDOW = 128 * 1024 * 1024
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE = 0x184D2A50  # any of the 16 magics 0x184D2A50-0x184D2A5F
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
    CORRUPT_MESSAGE if the payload is not whole and valid. Decoded in pieces (see pieces())
    written into one buffer as they come, so what it costs follows the records, not `limit`
    (an lz4 batch decoded into a `limit`-sized buffer took twice the CPU, a zstd one counted
    then decoded twice), and it holds the records about once: the buffer grows in place and
    is handed out as the bytes (BytesIO.getvalue), where the pieces joined held them twice
    (a leader's RSS grew 277 MB recompressing 60 MB zstd bombs one at a time)."""
    if codec == SNAPPY and not _xerial(payload):  # one block, of the length it declares
        return _guarded(codec, lambda: bytes(_snappy_block(payload, limit)))
    out = io.BytesIO()
    for piece in pieces(codec, payload, limit):
        out.write(piece)
    return out.getvalue()


def decompressed_size(codec: int, payload: bytes | memoryview, limit: int) -> int:
    """What decompress() will return the length of, found holding a few pieces at most
    (snappy's lengths are read, not decoded): recompression is admitted against the node's
    memory by this before the batch is opened. The same errors as decompress. For a
    thread."""
    if codec == SNAPPY:
        return _guarded(codec, lambda: _snappy_size(payload, limit))
    return sum(len(piece) for piece in pieces(codec, payload, limit))


def pieces(codec: int, payload: bytes | memoryview, limit: int) -> Iterator[bytes | memoryview]:
    """A compressed batch's records in order, read from `payload` in place, at most PIECE
    bytes at a time (snappy: a block at a time, raw snappy's one block of the length it
    declares); the errors of decompress(), raised as the walk reaches them. What walking
    them holds is check_bytes(). For a thread."""
    if codec == LZ4:
        return _guarded_pieces(codec, lz4_pieces(payload, limit))
    if codec == GZIP:
        return _guarded_pieces(codec, _gzip_pieces(payload, limit))
    if codec == ZSTD:
        return _guarded_pieces(codec, _zstd_pieces(payload, limit))
    if codec == SNAPPY:
        return _guarded_pieces(codec, _snappy_pieces(payload, limit))
    raise _corrupt(f"unknown codec {codec}")


def check_bytes(codec: int, payload: bytes | memoryview, limit: int) -> int:
    """What walking pieces() of `payload` holds at most, read from its first header (this
    runs on the event loop: a payload of many small blocks or frames is not walked here):
    three pieces (the decoder's, its copy, a carry) and the decoder's own buffers. lz4: its
    blocks, as the frame declares them; gzip: zlib's window and an input slice; zstd: the
    window its first frame declares (the walk refuses a later frame needing more); snappy:
    the length its first block declares (xerial: at least snappy-java's 32 KiB block; the
    walk refuses a later block declaring more), within `limit`. A header that is not the
    codec's is given what the walk may hold before it refuses it."""
    if codec == LZ4:
        return lz4_check_bytes(payload)
    if codec == GZIP:
        return 4 * PIECE + _GZIP_WINDOW + _GZIP_INPUT
    if codec == ZSTD:
        return 3 * PIECE + min(_zstd_window(payload), limit) + _ZSTD_BLOCK
    if codec == SNAPPY:
        return min(_snappy_block_limit(payload[:_XERIAL_FIRST]), limit) + 2 * PIECE
    return 0


def _guarded(codec: int, fn: Callable[[], _T]) -> _T:
    """fn() with each library's own errors for a bad payload as CORRUPT_MESSAGE."""
    try:
        return fn()
    except KafkaError:
        raise
    except Exception as exc:  # each library raises its own types for a bad payload
        raise _corrupt(f"codec {codec} payload does not decompress: {exc}") from None


def _guarded_pieces(codec: int, walk: Iterator[bytes | memoryview]) -> Iterator[bytes | memoryview]:
    """The pieces of `walk`, its library's errors raised as CORRUPT_MESSAGE."""
    while True:
        try:
            piece = next(walk)
        except StopIteration:
            return
        except KafkaError:
            raise
        except Exception as exc:  # each library raises its own types for a bad payload
            raise _corrupt(f"codec {codec} payload does not decompress: {exc}") from None
        yield piece


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


def _gzip_pieces(payload: bytes | memoryview, limit: int) -> Iterator[bytes]:
    """zlib fed _GZIP_INPUT bytes at a time: what a call leaves unread past PIECE bytes of
    output (unconsumed_tail, a copy) is then that slice's rest, not the payload's."""
    d = zlib.decompressobj(wbits=47)  # gzip or zlib header
    view = memoryview(payload)
    pos = size = 0
    data: bytes | memoryview = b""
    while not d.eof:
        if not data:
            data = view[pos : pos + _GZIP_INPUT]
            pos += len(data)
        piece = d.decompress(data, PIECE)
        size += len(piece)
        if size > limit:
            raise _too_large(limit)
        if not piece and not data:  # all read, nothing pending, no end
            raise _corrupt("gzip payload is truncated")
        data = d.unconsumed_tail
        if piece:
            yield piece


def _snappy_block(block: bytes | memoryview, limit: int) -> memoryview:
    """Raw snappy starts with its uncompressed length (a varint): checked before decoding.
    The decoded block is handed out as it is, not copied (raw snappy is one block)."""
    _snappy_length(block, limit)
    return memoryview(cramjam.snappy.decompress_raw(block))


def _snappy_length(block: bytes | memoryview, limit: int) -> int:
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


def _xerial(payload: bytes | memoryview) -> bool:
    return bytes(payload[: len(XERIAL_MAGIC)]) == XERIAL_MAGIC


def _snappy_pieces(payload: bytes | memoryview, limit: int) -> Iterator[memoryview]:
    """A block at a time; a xerial block declaring more than check_bytes admitted (its
    first, or 32 KiB) is MESSAGE_TOO_LARGE (snappy-java writes blocks of one size)."""
    if not _xerial(payload):
        yield _snappy_block(payload, limit)
        return
    size, block_limit = 0, _snappy_block_limit(payload[:_XERIAL_FIRST])
    for block in _xerial_blocks(payload):
        piece = _snappy_block(block, min(limit - size, block_limit))
        size += len(piece)
        yield piece


def _snappy_block_limit(head: bytes | memoryview) -> int:
    """The most a block of the payload starting with `head` may declare in a walk of its
    pieces: raw snappy's one block, its declared length; xerial, its first block's and at
    least XERIAL_BLOCK. Not snappy: 0 (the walk refuses it)."""
    try:
        if not _xerial(head):
            return _snappy_length(head, 1 << 32)
        first = next(_xerial_blocks(head, whole=False), None)
        return max(_snappy_length(first, 1 << 32) if first is not None else 0, XERIAL_BLOCK)
    except KafkaError:
        return 0


def _snappy_size(payload: bytes | memoryview, limit: int) -> int:
    if not _xerial(payload):
        return _snappy_length(payload, limit)
    size = 0
    for block in _xerial_blocks(payload):
        size += _snappy_length(block, limit - size)
    return size


def _xerial_blocks(payload: bytes | memoryview, whole: bool = True) -> Iterator[memoryview]:
    """The blocks; `whole` False: a last block the payload cuts is given as far as it goes
    (check_bytes reads a first block's length from the payload's head)."""
    view, pos = memoryview(payload), len(XERIAL_HEADER)
    while pos < len(view):
        if pos + 4 > len(payload):
            raise _corrupt("xerial snappy block length is truncated")
        block = int.from_bytes(view[pos : pos + 4], "big")
        pos += 4
        if block < 0 or (whole and pos + block > len(payload)):
            raise _corrupt("xerial snappy block runs past the payload")
        yield view[pos : pos + block]
        pos += block


def lz4_pieces(payload: bytes | memoryview, limit: int) -> Iterator[bytes]:
    """An lz4 batch's records, PIECE bytes at a time, read from `payload` in place; the
    bound's and a cut frame's errors (bytes after the frame are left unread), and lz4's own
    for a bad frame, which pieces() turns into CORRUPT_MESSAGE as for the other codecs. The produce check walks these instead of decompressed_size() then decompress():
    its opening threads went from 1.8-2.6 to 0.2-0.5 ms of CPU per MB of lz4 produce, most
    of it the page faults of the 1 MiB chunks and the 64 MiB buffer those two fill. For a
    thread."""
    context = lz4.frame.create_decompression_context()
    view = memoryview(payload)
    pos = size = 0
    ended = False
    while not ended:
        piece, read, ended = lz4.frame.decompress_chunk(context, view[pos:], max_length=PIECE)
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
    return 3 * PIECE + 2 * block + (_LZ4_LINKED_HISTORY if linked else 0)


def _zstd_pieces(payload: bytes | memoryview, limit: int) -> Iterator[bytes]:
    """The stream reader decodes across frames, refusing a frame whose window is larger
    than the first's (what check_bytes admitted), and bounds the output, but says nothing of
    a frame cut short (it ends where the input does): _zstd_frames then walks the frames'
    block headers, which a cut or trailing bytes break. After, not before: a bomb of a
    million tiny blocks stops at the bound, a few hundred blocks in."""
    window = min(max(_zstd_window(payload), _ZSTD_MIN_WINDOW), _ZSTD_MAX_WINDOW)
    decoder = zstandard.ZstdDecompressor(max_window_size=window)
    size = 0
    with decoder.stream_reader(payload, read_across_frames=True) as reader:
        while piece := reader.read(PIECE):
            size += len(piece)
            if size > limit:
                raise _too_large(limit)
            yield piece
    _zstd_frames(payload)


def _zstd_window(payload: bytes | memoryview) -> int:
    """The window the first frame declares, as zstd's decoder bounds it (a power of two, 128
    KiB to 128 MiB); 0 when the payload does not start with a frame's header."""
    view = memoryview(payload)
    if len(view) < 6 or int.from_bytes(view[:4], "little") != _ZSTD_MAGIC:
        return 0
    try:
        window = _zstd_header(view, 0)[1]
    except KafkaError:
        return 0
    return min(max(1 << (window - 1).bit_length(), _ZSTD_MIN_WINDOW), _ZSTD_MAX_WINDOW)


def _zstd_header(view: memoryview, pos: int) -> tuple[int, int, bool]:
    """(end, window size, has a content checksum) of the header of the frame at `pos`."""
    flags = view[pos + 4]
    single = flags & 0x20
    fcs_bytes = (1 if single else 0, 2, 4, 8)[flags >> 6]
    head = pos + 5 + (0 if single else 1) + (0, 1, 2, 4)[flags & 3]
    if head + fcs_bytes > len(view):
        raise _corrupt("zstd frame header is truncated")
    if single:  # the window is the content
        window = int.from_bytes(view[head : head + fcs_bytes], "little")
        window += 256 if fcs_bytes == 2 else 0
    else:
        exponent, mantissa = view[pos + 5] >> 3, view[pos + 5] & 7
        window = 1 << (10 + exponent)
        window += (window >> 3) * mantissa
    return head + fcs_bytes, window, bool(flags & 4)


def _zstd_frames(payload: bytes | memoryview) -> None:
    """CORRUPT_MESSAGE unless a zstd payload is one or more whole frames (RFC 8878 section
    3.1) and nothing else, read from the frame and block headers without decoding (a few
    bytes per block of up to 128 KiB); skippable frames are passed over."""
    view = memoryview(payload)
    end, pos = len(view), 0
    if not end:
        raise _corrupt("zstd payload is empty")
    while pos < end:
        if end - pos < 8:
            raise _corrupt("zstd frame header is truncated")
        magic = int.from_bytes(view[pos : pos + 4], "little")
        if magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE:
            pos += 8 + int.from_bytes(view[pos + 4 : pos + 8], "little")
            if pos > end:
                raise _corrupt("zstd skippable frame is truncated")
            continue
        if magic != _ZSTD_MAGIC:
            raise _corrupt("bytes after the zstd frames are not a frame")
        pos, _, checksum = _zstd_header(view, pos)
        last = 0
        while not last:
            if pos + 3 > end:
                raise _corrupt("zstd frame is truncated")
            block = int.from_bytes(view[pos : pos + 3], "little")
            last, kind, size = block & 1, (block >> 1) & 3, block >> 3
            if kind == 3:
                raise _corrupt("zstd block of a reserved type")
            pos += 3 + (1 if kind == 1 else size)
        pos += 4 if checksum else 0
        if pos > end:
            raise _corrupt("zstd frame is truncated")
