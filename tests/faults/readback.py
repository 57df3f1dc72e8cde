"""Reading every partition back from the beginning with a real client (confluent-kafka).

Like support.records.consume_confluent, but it keeps what it read when it cannot reach the
end (and says why), so a stuck partition shows as a gap at its tail instead of hiding
every other partition's findings. read_committed (librdkafka's default): a transactional
topic's aborted records are left out, and its markers take offsets no record is read at, so
a partition is read to its end when the consumer's position reaches it.
"""

from __future__ import annotations

import os
import time

from .checker import ReadRecord


def read_back(
    bootstrap: str, topic: str, ends: dict[int, int], timeout: float = 180.0
) -> tuple[list[ReadRecord], str | None]:
    """Records [0, ends[p]) of each partition (assign, no group, no commits) and an error
    text if some partition was not read to its end within `timeout`."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"raftlog-faults-{os.getpid()}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "client.id": "raftlog-faults-checker",
        }
    )
    todo = {p: e for p, e in ends.items() if e > 0}
    out: list[ReadRecord] = []
    errors: list[str] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=5000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        errors.append(str(err))
                    continue
                p, offset = msg.partition(), msg.offset()
                if p not in todo or offset >= todo[p]:
                    continue
                value = msg.value()
                out.append(
                    ReadRecord(
                        p,
                        offset,
                        value.decode(errors="replace") if value is not None else None,
                        msg.leader_epoch(),
                    )
                )
            for tp in consumer.position([TopicPartition(topic, p) for p in todo]):
                if tp.offset >= todo[tp.partition]:
                    del todo[tp.partition]
    finally:
        consumer.close()
    if todo:
        got: dict[int, int] = {}
        for r in out:
            got[r.partition] = max(got.get(r.partition, 0), r.offset + 1)
        return out, (
            f"partitions {sorted(todo)} not read to their end {todo} within {timeout:.0f}s "
            f"(read up to {got}); consumer errors: {errors[-3:]}"
        )
    return out, None
