"""A Produce response encoder for every version we serve (3-13), byte-for-byte what kio's
writer produces (tests/unit/test_kafka_produce_encoding.py checks it).

Every acks=1/all record that a client sends alone is answered with one of these, and kio's
generic writer (a walk of the schema per field) was 6 % of the cluster's CPU per record in
the small-requests workload; this writes the fields straight into one bytearray.
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
    nullable_string,
    string,
    tagged,
    uuid_bytes,
)

PRODUCE_API_KEY = 0

_PARTITION = struct.Struct(">ihq")  # index, error, base offset


def encode_produce_response(response: Any, out: bytearray) -> bytearray:
    """Appends the body of `response` (a kio ProduceResponse) to `out`, which already holds
    the frame's size placeholder and header."""
    version = response.__version__
    flexible = version >= 9
    array_length(out, len(response.responses), flexible)
    for topic in response.responses:
        if version >= 13:
            out += uuid_bytes(topic.topic_id)
        else:
            string(out, topic.name, flexible)
        array_length(out, len(topic.partition_responses), flexible)
        for partition in topic.partition_responses:
            out += _PARTITION.pack(partition.index, partition.error_code, partition.base_offset)
            append_time = partition.log_append_time
            out += I64.pack(-1 if append_time is None else round(append_time.timestamp() * 1000))
            if version >= 5:
                out += I64.pack(partition.log_start_offset)
            if version >= 8:
                array_length(out, len(partition.record_errors), flexible)
                for error in partition.record_errors:
                    out += I32.pack(error.batch_index)
                    nullable_string(out, error.batch_index_error_message, flexible)
                    if flexible:
                        out.append(0)
                nullable_string(out, partition.error_message, flexible)
            if flexible:
                leader = partition.current_leader if version >= 10 else None
                if leader is not None and (leader.leader_id != -1 or leader.leader_epoch != -1):
                    out += b"\x01" + tagged(
                        0, LEADER_AND_EPOCH.pack(leader.leader_id, leader.leader_epoch, 0)
                    )
                else:
                    out.append(0)
        if flexible:
            out.append(0)
    out += I32.pack(round(response.throttle_time.total_seconds() * 1000))
    if flexible:
        if version >= 10 and response.node_endpoints:
            out += b"\x01" + tagged(0, node_endpoints(response.node_endpoints))
        else:
            out.append(0)
    return out
