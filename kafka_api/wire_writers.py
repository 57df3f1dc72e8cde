"""Kafka's primitive encodings, for the hand-written encoders of hot responses (Fetch,
Produce) and the bounds checks; each writes what kio's writer writes."""

from __future__ import annotations

import struct
from typing import Any

I32 = struct.Struct(">i")


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
