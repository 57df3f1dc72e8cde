"""The records inside a batch's (decompressed) records section, walked without building
record objects: produce checks their lengths, ListOffsets reads their timestamps, compaction
their keys, the consume proxy decodes only the records it was handed. Kafka's record layout
(magic 2): a zigzag varint length, then attributes (1 byte), timestamp delta (varlong),
offset delta, key length, key, value length, value, headers.
"""

from __future__ import annotations

from collections.abc import Iterator

from raftlog.common.errors import ErrorCode, KafkaError

# (start, end, offset delta, timestamp delta, key, is a tombstone) of one record
Record = tuple[int, int, int, int, bytes | None, bool]


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint/varlong and the position after it; IndexError past the data."""
    byte = data[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    value = byte & 0x7F
    shift = 7
    while True:
        pos += 1
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos + 1
        shift += 7
        if shift > 63:
            raise _corrupt("varint longer than 10 bytes")


def walk(data: bytes, count: int, pos: int = 0) -> Iterator[Record]:
    """The batch's `count` records from `pos` in order; KafkaError CORRUPT_MESSAGE when one
    overruns the section or, once all are read, bytes are left over."""
    try:
        for _ in range(count):
            length, body = varint(data, pos)
            end = body + length
            timestamp_delta, p = varint(data, body + 1)  # after the attributes byte
            offset_delta, p = varint(data, p)
            key_length, p = varint(data, p)
            key = None
            if key_length >= 0:
                key = data[p : p + key_length]
                p += key_length
            value_length, p = varint(data, p)
            if length <= 0 or end > len(data) or p + max(value_length, 0) > end:
                raise _corrupt(f"record at byte {pos} overruns its batch")
            yield pos, end, offset_delta, timestamp_delta, key, value_length < 0
            pos = end
    except IndexError:
        raise _corrupt(f"record at byte {pos} runs past the batch") from None
    if pos != len(data):
        raise _corrupt(f"{len(data) - pos} bytes follow the last record")


Header = tuple[str, bytes | None]


def fields(data: bytes, start: int, end: int) -> tuple[bytes | None, bytes | None, list[Header]]:
    """Key, value and headers of the record at `start` (a walk's start and end): the walk
    leaves them undecoded, so a reader pays for the records it wants only. KafkaError
    CORRUPT_MESSAGE when a field runs past the record."""
    try:
        _, p = varint(data, start)
        _, p = varint(data, p + 1)  # timestamp delta, after the attributes byte
        _, p = varint(data, p)  # offset delta
        key, p = _bytes(data, p)
        value, p = _bytes(data, p)
        header_count, p = varint(data, p)
        headers: list[Header] = []
        for _ in range(header_count):
            name, p = _bytes(data, p)
            header_value, p = _bytes(data, p)
            headers.append(((name or b"").decode("utf-8", "replace"), header_value))
    except IndexError:
        p = end + 1
    if p > end:
        raise _corrupt(f"record at byte {start} has fields past its end")
    return key, value, headers


def _bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    """A varint-length-prefixed field; length -1 is null."""
    length, pos = varint(data, pos)
    if length < 0:
        return None, pos
    if pos + length > len(data):
        raise IndexError(pos)
    return data[pos : pos + length], pos + length


def count(data: bytes | memoryview, expected: int) -> None:
    """Walks only the length prefixes (the produce path's check): exactly `expected` records,
    filling the bytes."""
    pos, found = _skip(data, len(data), 0)
    _check(pos - len(data), found, expected)


class Counter:
    """count() over a records section that arrives in pieces (a compressed batch checked as
    it decompresses, so the whole section is never held): between pieces it keeps how far
    the current record reaches past the piece, or the few bytes of a length prefix the
    piece cut."""

    def __init__(self) -> None:
        self.found = 0
        self._ahead = 0  # bytes of the record in hand that lie in the pieces to come
        self._cut = b""  # the start of a length prefix at the end of the last piece

    def feed(self, piece: bytes | memoryview) -> None:
        if self._cut:
            piece = self._cut + piece
            self._cut = b""
        size = len(piece)
        if self._ahead >= size:
            self._ahead -= size
            return
        pos, found = _skip(piece, size, self._ahead)
        self.found += found
        if pos >= size:
            self._ahead = pos - size
        else:
            self._ahead = 0
            self._cut = bytes(piece[pos:])

    def check(self, expected: int) -> None:
        """CORRUPT_MESSAGE unless the pieces held exactly `expected` whole records."""
        _check(-1 if self._cut else self._ahead, self.found, expected)


def _check(over: int, found: int, expected: int) -> None:
    """`over`: how far the last record runs past the section's end, -1 if a length prefix
    does."""
    if over > 0:
        raise _corrupt(f"record {found - 1} runs past the batch")
    if over < 0:
        raise _corrupt(f"the length of record {found} runs past the batch")
    if found != expected:
        raise _corrupt(f"batch holds {found} records, its header says {expected}")


def skip(data: bytes | memoryview, records: int) -> int:
    """The position of the record after the first `records` ones, reading only lengths."""
    pos, found = _skip(data, records, 0)
    if found < records:
        raise _corrupt(f"batch holds {found} records, not {records}")
    return pos


def _skip(data: bytes | memoryview, records: int, pos: int) -> tuple[int, int]:
    """(position, records passed) after up to `records` records from `pos`: past the end
    of the data when the last record runs beyond it, or the start of a length prefix the
    data cuts short. About 0.25 us a record (one- and two-byte lengths, records under
    8 KiB, are taken without the general loop)."""
    found, end = 0, len(data)
    while pos < end and found < records:
        byte = data[pos]
        if byte < 0x80:
            zigzag = byte
            step = 1
        elif pos + 1 < end and (second := data[pos + 1]) < 0x80:
            zigzag = (byte & 0x7F) | (second << 7)
            step = 2
        else:
            zigzag, step = _uvarint(data, pos)
            if not step:
                return pos, found
        if zigzag & 1 or not zigzag:  # a negative or zero length
            raise _corrupt(f"record {found} has length {(zigzag >> 1) ^ -(zigzag & 1)}")
        pos += step + (zigzag >> 1)
        found += 1
    return pos, found


def _uvarint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (a record length) and its length in bytes; 0
    bytes when the data ends inside it."""
    value = shift = 0
    end = len(data)
    start = pos
    while pos < end:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos - start
        shift += 7
        if shift > 28:
            raise _corrupt("record length varint too long")
    return 0, 0
