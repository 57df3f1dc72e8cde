"""`__transaction_state` keys and values in Kafka's own binary format, so Kafka's tools can
read the topic (schemas: apache/kafka transaction-coordinator/src/main/resources/common/
message/{TransactionLogKey,TransactionLogValue}.json).

Key: int16 version 0, then the transactional id (int16 length, UTF-8). Value: int16 version,
then producer id (int64), producer epoch (int16), timeout ms (int32), state (int8), the
partitions ([topic, [partition]], null when Empty), last update and start times (int64 ms;
start -1 with no transaction). Version 1 is the flexible encoding of the same fields plus
tagged ones Kafka leaves at their defaults; raftlog writes version 0 and reads both.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, state

KEY_VERSION = 0
VALUE_VERSION = 0
FLEXIBLE_VERSION = 1

Partitions = dict[str, frozenset[int]]


class RecordError(ValueError):
    """The bytes do not follow the schema their version names."""


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int  # TxnState's value
    partitions: Partitions
    last_update_ms: int
    start_ms: int


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return _I16.pack(KEY_VERSION) + _I16.pack(len(raw)) + raw


def decode_key(data: bytes) -> str | None:
    """The transactional id; None for a key version this reader does not know (skipped)."""
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version != KEY_VERSION:
            return None
        (length,) = _I16.unpack_from(data, 2)
        if length < 0 or 4 + length != len(data):
            raise RecordError("transactional id length does not match the key")
        return data[4 : 4 + length].decode()
    except (struct.error, UnicodeDecodeError) as exc:
        raise RecordError(str(exc)) from exc


def encode_value(value: TxnLogValue) -> bytes:
    out = bytearray(
        _HEAD.pack(
            VALUE_VERSION, value.producer_id, value.producer_epoch, value.timeout_ms, value.state
        )
    )
    if not value.partitions and value.start_ms < 0:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(value.partitions))
        for topic, indexes in sorted(value.partitions.items()):
            raw = topic.encode()
            out += _I16.pack(len(raw)) + raw + _I32.pack(len(indexes))
            for index in sorted(indexes):
                out += _I32.pack(index)
    out += _I64.pack(value.last_update_ms) + _I64.pack(value.start_ms)
    return bytes(out)


def decode_value(data: bytes) -> TxnLogValue:
    try:
        version, pid, epoch, timeout, state = _HEAD.unpack_from(data, 0)
        if version not in (VALUE_VERSION, FLEXIBLE_VERSION):
            raise RecordError(f"unknown value version {version}")
        reader = _Reader(data, _HEAD.size, version >= FLEXIBLE_VERSION)
        partitions: Partitions = {}
        for _ in range(reader.length()):
            topic = reader.string()
            partitions[topic] = frozenset(reader.int32() for _ in range(reader.length()))
            reader.tags()
        last_update, start = reader.int64(), reader.int64()
        return TxnLogValue(pid, epoch, timeout, state, partitions, last_update, start)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise RecordError(str(exc)) from exc


class _Reader:
    """Fields of either encoding: version 1 uses unsigned-varint lengths plus one and tag
    sections (skipped: Kafka leaves its tagged fields at their defaults)."""

    def __init__(self, data: bytes, pos: int, flexible: bool) -> None:
        self.data, self.pos, self.flexible = data, pos, flexible

    def _uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordError("varint too long")

    def length(self) -> int:
        """An array's element count; 0 for null."""
        if self.flexible:
            return max(0, self._uvarint() - 1)
        (n,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return max(0, n)

    def string(self) -> str:
        if self.flexible:
            n = self._uvarint() - 1
        else:
            (n,) = _I16.unpack_from(self.data, self.pos)
            self.pos += 2
        if n < 0 or self.pos + n > len(self.data):
            raise RecordError("string runs past the value")
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return raw.decode()

    def int32(self) -> int:
        (v,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(v)

    def int64(self) -> int:
        (v,) = _I64.unpack_from(self.data, self.pos)
        self.pos += 8
        return int(v)

    def tags(self) -> None:
        if not self.flexible:
            return
        for _ in range(self._uvarint()):
            self._uvarint()  # tag
            self.pos += self._uvarint()  # its size, then the data skipped
