"""What an authorizer's answers look like to a real client (confluent-kafka), for the ACL
tests: `conf` is the client's librdkafka settings, security included."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer

from support.cluster import wait_for


def produce_error(conf: dict[str, Any], topic: str) -> int | None:
    """The error of one acks=all produce with confluent-kafka, None if it was written."""
    producer = Producer({**conf, "acks": "all", "message.timeout.ms": 15000})
    errors: list[KafkaError | None] = []
    producer.produce(topic, b"value", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    assert errors, "no delivery report"
    return None if errors[0] is None else errors[0].code()


def wait_produce(
    conf: dict[str, Any], topic: str, wanted: int | None, timeout: float = 60.0
) -> None:
    wait_for(
        lambda: produce_error(conf, topic) == wanted,
        timeout,
        what=f"a produce to {topic} to be answered {wanted}",
    )


def join_outcome(conf: dict[str, Any], group: str, topic: str, timeout: float = 45.0) -> str | int:
    """What a confluent-kafka consumer of `group` gets first: "assigned", or an error code."""
    consumer = Consumer(
        {
            **conf,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is not None:
                code = message.error().code()
                if code != KafkaError._PARTITION_EOF:
                    return code
            if consumer.assignment():
                return "assigned"
        return "nothing"
    finally:
        consumer.close()
