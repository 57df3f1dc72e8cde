"""The mesh's frames (raft/mesh.py): their kinds, what a group's message is, and how the Raft
driver's frame of a turn is packed without copying its large entries, apart from the
connections that carry them."""

from __future__ import annotations

import struct
from typing import Any

import msgpack

RAFT, PING, CONTROL, HELLO, WELCOME, AUTH, BEATS, CORE = range(8)

# What a group sends a peer: a pysyncobj message (a dict), or a beat, the compact form of a
# heartbeat or of its answer (a list; controller/transport.py).
Message = dict[str, Any]
Beat = list[Any]


def encode_default(obj: Any) -> Any:
    """pysyncobj hands us lazy journal objects (see raft/journal.py); bytes go on the wire."""
    if hasattr(obj, "entries"):
        return obj.entries()
    if hasattr(obj, "__bytes__"):
        return bytes(obj)
    if isinstance(obj, set | frozenset):
        return list(obj)
    raise TypeError(f"cannot send {type(obj).__name__} to a peer")


# An entry's bytes larger than this leave from their own buffer, not copied into their frame.
INLINE_ENTRY_BYTES = 16 * 1024
_BIN16, _BIN32 = struct.Struct(">BH"), struct.Struct(">BI")  # msgpack's bin 16/32 headers


def core_frame(packer: msgpack.Packer, items: list[Any]) -> list[bytes]:
    """What `packer` makes of [CORE, items] (raft/driver.py's items), byte for byte, as
    buffers for one writev: an entry's bytes over INLINE_ENTRY_BYTES are one of them as they
    are. Packed whole, each would be copied twice more per follower (into msgpack's buffer,
    then out of it): a 1 MiB entry, four copies a follower with its read."""
    if not any(item[-1] for item in items):  # no entries: heartbeats, votes, answers
        return [packer.pack([CORE, items])]
    pack, header = packer.pack, packer.pack_array_header
    out: list[bytes] = []
    head = bytearray(header(2))
    head += pack(CORE)
    head += header(len(items))
    for item in items:
        flat = item[-1]
        # (the driver's items end in a list: anything else is packed whole, never walked)
        if type(flat) is not list or not any(
            type(v) is bytes and len(v) > INLINE_ENTRY_BYTES for v in flat
        ):
            head += pack(item)
            continue
        head += header(len(item))
        for field in item[:-1]:
            head += pack(field)
        head += header(len(flat))
        for value in flat:
            if type(value) is bytes and len(value) > INLINE_ENTRY_BYTES:
                size = len(value)
                head += _BIN16.pack(0xC5, size) if size < 0x10000 else _BIN32.pack(0xC6, size)
                out.append(bytes(head))
                out.append(value)
                head.clear()
            else:
                head += pack(value)
    if head:
        out.append(bytes(head))
    return out
