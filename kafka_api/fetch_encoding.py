"""A Fetch response encoder for every version we serve (4-18), byte-for-byte what kio's writer
produces (tests/unit/test_kafka_fetch_encoding.py checks it).

kio's writer is pure Python and copies every record set twice (into a BytesIO, then out of it);
Fetch is the hot path, so this writes the small fields straight into one bytearray with
precompiled structs and hands large record sets over as separate buffers, uncopied, for the
transport to send in sequence.
"""

from __future__ import annotations

import struct
from typing import Any

from kafka_api.wire_writers import (
    I32,
    I64,
    LEADER_AND_EPOCH,
    array_length,
    node_endpoints,
    string,
    tagged,
    uuid_bytes,
    uvarint,
)

FETCH_API_KEY = 1
# Record sets at least this large are passed through as their own buffer instead of being
# copied into the surrounding bytearray.
INLINE_RECORDS_LIMIT = 16 * 1024

_TOP_V4 = struct.Struct(">i")  # throttle
_TOP_V7 = struct.Struct(">ihi")  # throttle, error, session id
_PARTITION = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_ABORTED = struct.Struct(">qq")
_EPOCH_END = struct.Struct(">iqB")  # epoch, end offset, no tagged fields
_SNAPSHOT = struct.Struct(">qiB")  # end offset, epoch, no tagged fields


def _partition_tags(partition: Any) -> bytes:
    """Tagged fields 0-2 of a v12+ partition, each only when it differs from its default."""
    diverging = partition.diverging_epoch
    leader = partition.current_leader
    snapshot = partition.snapshot_id
    tags = []
    if diverging.epoch != -1 or diverging.end_offset != -1:
        tags.append(tagged(0, _EPOCH_END.pack(diverging.epoch, diverging.end_offset, 0)))
    if leader.leader_id != -1 or leader.leader_epoch != -1:
        tags.append(tagged(1, LEADER_AND_EPOCH.pack(leader.leader_id, leader.leader_epoch, 0)))
    if snapshot.end_offset != -1 or snapshot.epoch != -1:
        tags.append(tagged(2, _SNAPSHOT.pack(snapshot.end_offset, snapshot.epoch, 0)))
    return uvarint(len(tags)) + b"".join(tags) if tags else b"\x00"


def encode_fetch_response(response: Any, out: bytearray) -> list[bytes | bytearray]:
    """Appends the body of `response` (a kio FetchResponse) to `out`, which already holds the
    frame's size placeholder and header, and returns the frame as buffers with `out` first."""
    version = response.__version__
    flexible = version >= 12
    parts: list[bytes | bytearray] = [out]
    throttle = round(response.throttle_time.total_seconds() * 1000)
    if version >= 7:
        out += _TOP_V7.pack(throttle, response.error_code, response.session_id)
    else:
        out += _TOP_V4.pack(throttle)
    array_length(out, len(response.responses), flexible)
    for topic in response.responses:
        if version >= 13:
            out += uuid_bytes(topic.topic_id)
        else:
            string(out, topic.topic, flexible)
        array_length(out, len(topic.partitions), flexible)
        for partition in topic.partitions:
            out += _PARTITION.pack(
                partition.partition_index,
                partition.error_code,
                partition.high_watermark,
                partition.last_stable_offset,
            )
            if version >= 5:
                out += I64.pack(partition.log_start_offset)
            aborted = partition.aborted_transactions
            array_length(out, None if aborted is None else len(aborted), flexible)
            for transaction in aborted or ():
                out += _ABORTED.pack(transaction.producer_id, transaction.first_offset)
                if flexible:
                    out.append(0)
            if version >= 11:
                out += I32.pack(partition.preferred_read_replica)
            records = partition.records
            if records is None:
                out += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                out += uvarint(len(records) + 1) if flexible else I32.pack(len(records))
                if len(records) >= INLINE_RECORDS_LIMIT:
                    parts.append(records)
                    out = bytearray()
                    parts.append(out)
                else:
                    out += records
            if flexible:
                out += _partition_tags(partition)
        if flexible:
            out.append(0)
    if flexible:
        if version >= 16 and response.node_endpoints:
            out += b"\x01" + tagged(0, node_endpoints(response.node_endpoints))
        else:
            out.append(0)
    if not out:
        parts.pop()
    return parts
