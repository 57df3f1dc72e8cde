"""Kafka transactions with real clients: a transactional producer's commits become visible
whole to read_committed consumers, its aborts never, and a producer that loses its
transactional id to a new instance is fenced. Three real nodes, so the coordinator, the
partition leaders and the markers between them are usually on different nodes."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaConsumer
from support import transactions as T

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

PARTITIONS = 3


def _send(producer: Producer, topic: str, values: list[bytes]) -> None:
    T.send(producer, topic, values, PARTITIONS)


def _read_confluent(bootstrap: str, topic: str, isolation: str, settle_s: float = 5.0) -> list:
    return sorted(T.read_values(bootstrap, topic, range(PARTITIONS), isolation, settle_s=settle_s))


def _read_kafka_python(bootstrap: str, topic: str) -> list:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    from kafka import TopicPartition as KTP

    consumer.assign([KTP(topic, p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    try:
        return sorted(m.value for m in consumer)
    finally:
        consumer.close()


def test_committed_transactions_are_read_whole_and_aborted_ones_never(cluster_factory):
    cluster = cluster_factory(name="txn")
    cluster.create_topic("orders", partitions=PARTITIONS, replication_factor=3)
    producer = T.transactional(cluster.bootstrap, "orders-writer")

    producer.begin_transaction()
    _send(producer, "orders", [b"c1-%d" % i for i in range(30)])
    producer.commit_transaction()

    producer.begin_transaction()
    _send(producer, "orders", [b"a1-%d" % i for i in range(30)])
    producer.flush()  # in the log, acknowledged, then thrown away
    producer.abort_transaction()

    producer.begin_transaction()
    _send(producer, "orders", [b"c2-%d" % i for i in range(30)])
    producer.commit_transaction()

    committed = sorted([b"c1-%d" % i for i in range(30)] + [b"c2-%d" % i for i in range(30)])
    assert _read_confluent(cluster.bootstrap, "orders", "read_committed") == committed
    assert _read_kafka_python(cluster.bootstrap, "orders") == committed
    everything = _read_confluent(cluster.bootstrap, "orders", "read_uncommitted")
    assert everything == sorted(committed + [b"a1-%d" % i for i in range(30)])


def test_an_open_transaction_holds_read_committed_back_until_it_commits(cluster_factory):
    cluster = cluster_factory(name="txn-open")
    cluster.create_topic("held", partitions=PARTITIONS, replication_factor=3)
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    producer = T.transactional(cluster.bootstrap, "held-writer")
    producer.begin_transaction()
    _send(producer, "held", [b"t-%d" % i for i in range(6)])
    producer.flush()
    _send(plain, "held", [b"p-%d" % i for i in range(6)])  # after the open transaction
    plain.flush()
    assert _read_confluent(cluster.bootstrap, "held", "read_committed", settle_s=3) == []
    producer.commit_transaction()
    values = _read_confluent(cluster.bootstrap, "held", "read_committed")
    assert values == sorted([b"t-%d" % i for i in range(6)] + [b"p-%d" % i for i in range(6)])


def test_a_new_producer_with_the_same_id_fences_the_old_and_aborts_its_transaction(
    cluster_factory,
):
    cluster = cluster_factory(name="txn-fence")
    cluster.create_topic("fenced", partitions=PARTITIONS, replication_factor=3)
    old = T.transactional(cluster.bootstrap, "same-id")
    old.begin_transaction()
    _send(old, "fenced", [b"zombie-%d" % i for i in range(6)])
    old.flush()
    new = T.transactional(cluster.bootstrap, "same-id")  # aborts what the old one left open
    new.begin_transaction()
    _send(new, "fenced", [b"new-%d" % i for i in range(6)])
    new.commit_transaction()
    with pytest.raises(KafkaException) as raised:
        old.commit_transaction()
    assert raised.value.args[0].fatal()
    assert _read_confluent(cluster.bootstrap, "fenced", "read_committed") == sorted(
        b"new-%d" % i for i in range(6)
    )


def test_read_process_write_commits_output_and_offsets_together(cluster_factory):
    """The exactly-once loop: records consumed, transformed and produced, and the consumer's
    offsets committed in the same transaction (send_offsets_to_transaction). An aborted
    round moves neither the output nor the group's offsets; the next round redoes it."""
    cluster = cluster_factory(name="txn-rpw")
    cluster.create_topic("in", partitions=PARTITIONS, replication_factor=3)
    cluster.create_topic("out", partitions=PARTITIONS, replication_factor=3)
    source = Producer({"bootstrap.servers": cluster.bootstrap})
    _send(source, "in", [b"%d" % i for i in range(60)])
    source.flush()
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "rpw",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["in"])
    producer = T.transactional(cluster.bootstrap, "rpw-writer")
    done, aborted_once = 0, False
    deadline = time.monotonic() + 120
    try:
        while done < 60 and time.monotonic() < deadline:
            batch = consumer.consume(20, 1.0)
            batch = [m for m in batch if not m.error()]
            if not batch:
                continue
            producer.begin_transaction()
            for message in batch:
                producer.produce("out", b"x" + message.value(), partition=message.partition())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata()
            )
            if not aborted_once:
                aborted_once = True
                producer.abort_transaction()
                # back to the last committed offsets, as a restarted processor would be
                committed = consumer.committed(consumer.assignment(), timeout=30)
                for tp in committed:
                    consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
                continue
            producer.commit_transaction()
            done += len(batch)
    finally:
        consumer.close()
    assert done == 60
    out = _read_confluent(cluster.bootstrap, "out", "read_committed")
    assert out == sorted(b"x%d" % i for i in range(60))
    checker = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "rpw"})
    try:
        committed = checker.committed(
            [TopicPartition("in", p) for p in range(PARTITIONS)], timeout=30
        )
    finally:
        checker.close()
    assert sum(tp.offset for tp in committed) == 60
