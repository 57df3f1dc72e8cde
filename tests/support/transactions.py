"""confluent-kafka helpers of the transaction tests: a transactional producer, round-robin
sends, and what a consumer of either isolation reads from the start."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition


def transactional(bootstrap: str, txn_id: str, **conf: Any) -> Producer:
    """A transactional producer, initialised (its id's previous instance fenced)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **conf})
    producer.init_transactions()
    return producer


def send(producer: Producer, topic: str, values: list[bytes], partitions: int) -> None:
    """value i to partition i % partitions, then flushed (acknowledged)."""
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % partitions)
    producer.flush()


def read_values(
    bootstrap: str,
    topic: str,
    partitions: Iterable[int],
    isolation: str = "read_committed",
    expected: int = 0,
    settle_s: float = 5.0,
    timeout: float = 90.0,
) -> list[bytes]:
    """Every value a consumer of this isolation reads from the start of `partitions`: once
    `expected` arrived and `settle_s` brought nothing more, or at the timeout."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"txn-reader-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    values: list[bytes] = []
    deadline, quiet_since = time.monotonic() + timeout, time.monotonic()
    try:
        while time.monotonic() < deadline:
            if len(values) >= expected and time.monotonic() - quiet_since > settle_s:
                break
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            values.append(message.value())
            quiet_since = time.monotonic()
    finally:
        consumer.close()
    return values
