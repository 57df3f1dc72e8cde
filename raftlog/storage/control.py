"""Transaction markers: the control batches that end a producer's transaction on a partition.

Kafka's layout (ControlRecordType, EndTransactionMarker): one record in a batch whose
attributes say transactional and control; its key is (version 0, type) as two int16, its
value (version 0, coordinator epoch) as int16 and int32. Type 0 aborts, 1 commits. The batch
carries the producer's id and epoch and no sequence. Consumers skip control batches; a
read_committed one uses the aborts, through the aborted-transactions list of a Fetch answer.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.storage.batch import BatchHeader, build, records_section
from raftlog.storage.records import fields, walk

ABORT, COMMIT = 0, 1
TRANSACTIONAL_CONTROL = 0x30  # attributes: isTransactional (0x10) | isControl (0x20)

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class Marker(NamedTuple):
    commit: bool
    coordinator_epoch: int


def marker_batch(
    producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp: int
) -> bytes:
    """A commit or abort marker at base offset 0 (the log assigns its offset)."""
    key = _KEY.pack(0, COMMIT if commit else ABORT)
    value = _VALUE.pack(0, coordinator_epoch)
    # attributes, timestamp delta 0, offset delta 0, key length, key, value length, value,
    # no headers; every varint here is below 64, one byte of zigzag (2n)
    body = b"\x00\x00\x00" + bytes([2 * len(key)]) + key + bytes([2 * len(value)]) + value + b"\x00"
    record = bytes([2 * len(body)]) + body
    header = BatchHeader(
        base_offset=0,
        batch_length=0,  # build() sets it
        partition_leader_epoch=-1,
        magic=2,
        crc=0,
        attributes=TRANSACTIONAL_CONTROL,
        last_offset_delta=0,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        record_count=1,
    )
    return build(header, record)


def read_marker(batch: bytes | memoryview, header: BatchHeader) -> Marker | None:
    """The marker a control batch holds; None for any other control record (Kafka has none
    that ends a transaction besides these two). KafkaError CORRUPT_MESSAGE if unreadable."""
    data = records_section(batch, header)
    for start, end, *_ in walk(data, header.record_count):
        key, value, _ = fields(data, start, end)
        if key is None or len(key) != _KEY.size:
            raise KafkaError(ErrorCode.corrupt_message, "control record key is not 4 bytes")
        kind = _KEY.unpack(key)[1]
        if kind not in (ABORT, COMMIT):
            return None
        epoch = (
            _VALUE.unpack(value[: _VALUE.size])[1] if value and len(value) >= _VALUE.size else -1
        )
        return Marker(kind == COMMIT, epoch)
    return None
