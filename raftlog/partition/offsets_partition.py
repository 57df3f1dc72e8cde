"""A coordinator's partition led by this node (`__consumer_offsets` for the group
coordinator, `__transaction_state` for the transaction coordinator)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.groups.offsets_log import LogRecord
from raftlog.partition.partition import Partition
from raftlog.storage.batch import iter_batches
from raftlog.storage.control import read_marker

COMMIT_TIMEOUT_MS = 10_000
READ_CHUNK = 4 * 1024 * 1024


class OffsetsPartition:
    """Implements raftlog.groups.offsets_log.OffsetsLog over a partition replica."""

    def __init__(self, partition: Partition) -> None:
        self._partition = partition
        self.index = partition.index

    @property
    def leader_epoch(self) -> int:
        return self._partition.leader_epoch

    async def append(
        self,
        records: Sequence[tuple[bytes, bytes | None]],
        producer: tuple[int, int] | None = None,
    ) -> int:
        """`producer`: a transaction's offsets (TxnOffsetCommit), in a transactional batch
        without sequence numbers, as Kafka's coordinator writes them."""
        producer_id, epoch = producer or (-1, -1)
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=producer is not None,
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=-1,
            batch_size=2**31 - 1,
        )
        now = int(time.time() * 1000)
        for i, (key, value) in enumerate(records):
            builder.append(i, timestamp=now, key=key, value=value, headers=[])
        result = await self._partition.produce(
            bytes(builder.build()), -1, COMMIT_TIMEOUT_MS, producer is not None
        )
        if result.error == ErrorCode.not_leader_or_follower:
            raise KafkaError(
                ErrorCode.not_coordinator, "no longer the leader of the group's partition"
            )
        if result.error != ErrorCode.none:
            raise KafkaError(result.error, result.message)
        return result.base_offset

    def read_committed(self) -> Iterator[LogRecord]:
        log = self._partition.log
        offset, end = log.log_start_offset, self._partition.high_watermark
        while offset < end:
            data = log.read(offset, READ_CHUNK, end, True)
            if not data:
                return
            for pos, header in iter_batches(data):
                offset = header.next_offset
                batch = data[pos : pos + header.size]
                pid = header.producer_id if header.is_transactional else -1
                if header.is_control:
                    marker = read_marker(batch, header)
                    if marker is not None:
                        yield LogRecord(header.base_offset, b"", None, pid, marker.commit)
                    continue
                for record in DefaultRecordBatch(batch):
                    yield LogRecord(record.offset, record.key, record.value, pid)
