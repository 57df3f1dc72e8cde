"""A Produce response body for every version we serve (3-13), written straight from the
partitions' results, byte-for-byte what kio's writer writes for the response built from
them (tests/unit/test_kafka_produce_encoding.py checks it).

Every acks=1/all record that a client sends alone is answered with one of these. kio's
generic writer (a walk of the schema per field) was 6 % of the cluster's CPU per record in
the small-requests workload; building the kio response for a hand-written writer to read
(an entity per partition and topic, each from a dict of keyword arguments filtered by the
version's fields, its append time a datetime) cost as much again.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence

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
from raftlog.api.produce_result import ProduceResult
from raftlog.api.values import BrokerInfo

_PARTITION = struct.Struct(">ihqq")  # index, error, base offset, log append time
_NO_THROTTLE = I32.pack(0)
FIRST_FLEXIBLE = 9  # the first version with compact fields and tagged sections

# One partition's answer: its index, its result, and (KIP-951) the leader id and epoch a
# client told NOT_LEADER_OR_FOLLOWER should go to, None when there is none to name.
PartitionAnswer = tuple[int, ProduceResult, "tuple[int, int] | None"]
# One topic's: its name (below v13) or id (v13, None for the null id), and its partitions'.
TopicAnswer = tuple["str | uuid.UUID | None", list[PartitionAnswer]]


def encode_produce_response(
    version: int, topics: Sequence[TopicAnswer], leaders: Sequence[BrokerInfo]
) -> bytes:
    """The body of a Produce response of `version` (no throttling), with `leaders` as
    KIP-951's node endpoints (v10 on)."""
    flexible = version >= FIRST_FLEXIBLE
    out = bytearray()
    array_length(out, len(topics), flexible)
    for topic, partitions in topics:
        if isinstance(topic, str):
            string(out, topic, flexible)
        else:
            out += uuid_bytes(topic)
        array_length(out, len(partitions), flexible)
        for index, result, leader in partitions:
            append_time = result.log_append_time
            out += _PARTITION.pack(
                index, result.error, result.base_offset, append_time if append_time >= 0 else -1
            )
            if version >= 5:
                out += I64.pack(result.log_start_offset)
            if version >= 8:
                array_length(out, len(result.record_errors), flexible)
                for batch_index, why in result.record_errors:
                    out += I32.pack(batch_index)
                    nullable_string(out, why, flexible)
                    if flexible:
                        out.append(0)
                nullable_string(out, result.message, flexible)
            if flexible:
                if version >= 10 and leader is not None:
                    out += b"\x01" + tagged(0, LEADER_AND_EPOCH.pack(leader[0], leader[1], 0))
                else:
                    out.append(0)
        if flexible:
            out.append(0)
    out += _NO_THROTTLE
    if flexible:
        if version >= 10 and leaders:
            out += b"\x01" + tagged(0, node_endpoints(leaders))
        else:
            out.append(0)
    return bytes(out)
