"""Kafka's primitive encodings, for the hand-written encoders of hot responses (Fetch,
Produce) and the bounds checks; each writes what kio's writer writes."""

from __future__ import annotations

import struct
import uuid
from typing import Any

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
# KIP-951's LeaderIdAndEpoch (leader id, leader epoch), with no tagged fields of its own
LEADER_AND_EPOCH = struct.Struct(">iiB")
_NO_UUID = bytes(16)


def uvarint(value: int) -> bytes:
    """Kafka's unsigned varint (compact lengths, tag numbers and sizes)."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string(out: bytearray, value: str, flexible: bool) -> None:
    data = value.encode()
    if flexible:
        out += uvarint(len(data) + 1)
    else:
        out += len(data).to_bytes(2, "big", signed=True)
    out += data


def nullable_string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is not None:
        string(out, value, flexible)
    elif flexible:
        out.append(0)
    else:
        out += b"\xff\xff"


def uuid_bytes(value: uuid.UUID | None) -> bytes:
    """A uuid field; kio writes None (the null id) as sixteen zero bytes."""
    return value.bytes if value is not None else _NO_UUID


def array_length(out: bytearray, length: int | None, flexible: bool) -> None:
    if flexible:
        out += uvarint(0 if length is None else length + 1)
    else:
        out += I32.pack(-1 if length is None else length)


def tagged(tag: int, data: bytes) -> bytes:
    return uvarint(tag) + uvarint(len(data)) + data


def node_endpoints(endpoints: Any) -> bytes:
    out = bytearray(uvarint(len(endpoints) + 1))
    for endpoint in endpoints:
        out += I32.pack(endpoint.node_id)
        string(out, endpoint.host, True)
        out += I32.pack(endpoint.port)
        nullable_string(out, endpoint.rack, True)
        out.append(0)
    return bytes(out)
