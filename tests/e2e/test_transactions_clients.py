"""Kafka transactions with the other pinned clients (tests/e2e/test_transactions.py drives
confluent-kafka): kafka-python's and aiokafka's transactional producers commit and abort, and
their read_committed consumers read exactly the committed records. Each client speaks its own
versions of the transactional APIs (aiokafka only v0 of each), so each is a separate check of
the coordinator, the markers and the last stable offset. Three real nodes.

Readers do not wait for quiet: EndTxn is answered once the decision is logged, before the
markers land, so a reader first polls until every partition's last stable offset has caught
up with its high watermark (no transaction left open), then reads to exactly those ends."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.errors import ProducerFenced as AioProducerFenced
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.errors import ProducerFencedError as KafkaProducerFenced
from support.cluster import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

PARTITIONS = 3


def _values(prefix: str, n: int = 30) -> list[bytes]:
    return [b"%s-%d" % (prefix.encode(), i) for i in range(n)]


def _settled_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Every partition's end once no transaction is open on it: the read_committed end (the
    last stable offset) equals the read_uncommitted one (the high watermark)."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    committed = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    uncommitted = KafkaConsumer(bootstrap_servers=bootstrap)
    try:

        def settled() -> dict[int, int] | None:
            lso = committed.end_offsets(tps)
            hw = uncommitted.end_offsets(tps)
            return {tp.partition: off for tp, off in lso.items()} if lso == hw else None

        return wait_for(settled, timeout=60, what=f"no open transaction on {topic}")
    finally:
        committed.close()
        uncommitted.close()


def _read_kafka_python(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """Every value a kafka-python consumer of this isolation reads from the start to the
    settled ends, sorted."""
    ends = _settled_ends(bootstrap, topic)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False
    )
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    values: list[bytes] = []

    def caught_up() -> bool:
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(r.value for r in records)
        return all(consumer.position(tp) >= ends[tp.partition] for tp in tps)

    try:
        wait_for(caught_up, timeout=60, interval=0, what=f"kafka-python reading {topic}")
    finally:
        consumer.close()
    return sorted(values)


def _kafka_python_producer(bootstrap: str, txn_id: str) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
    producer.init_transactions()
    return producer


def _send_kafka_python(producer: KafkaProducer, topic: str, values: list[bytes]) -> None:
    for i, value in enumerate(values):
        producer.send(topic, value, partition=i % PARTITIONS)


def test_kafka_python_commits_are_read_whole_and_aborts_never(cluster_factory):
    cluster = cluster_factory(name="txn-kp")
    cluster.create_topic("kp", partitions=PARTITIONS, replication_factor=3)
    producer = _kafka_python_producer(cluster.bootstrap, "kp-writer")
    try:
        producer.begin_transaction()
        _send_kafka_python(producer, "kp", _values("c1"))
        producer.commit_transaction()

        producer.begin_transaction()
        _send_kafka_python(producer, "kp", _values("a1"))
        producer.flush()  # in the log, acknowledged, then thrown away
        producer.abort_transaction()

        producer.begin_transaction()
        _send_kafka_python(producer, "kp", _values("c2"))
        producer.commit_transaction()
    finally:
        producer.close()

    committed = sorted(_values("c1") + _values("c2"))
    assert _read_kafka_python(cluster.bootstrap, "kp", "read_committed") == committed
    everything = _read_kafka_python(cluster.bootstrap, "kp", "read_uncommitted")
    assert everything == sorted(committed + _values("a1"))


def test_kafka_python_a_new_producer_with_the_same_id_fences_the_old(cluster_factory):
    """The new instance's InitProducerId aborts what the old one left open and bumps the
    epoch: the old one's commit is refused as fenced, and only the new one's records count."""
    cluster = cluster_factory(name="txn-kp-fence")
    cluster.create_topic("fenced", partitions=PARTITIONS, replication_factor=3)
    old = _kafka_python_producer(cluster.bootstrap, "kp-same-id")
    new: KafkaProducer | None = None
    try:
        old.begin_transaction()
        _send_kafka_python(old, "fenced", _values("zombie", 6))
        old.flush()
        new = _kafka_python_producer(cluster.bootstrap, "kp-same-id")
        new.begin_transaction()
        _send_kafka_python(new, "fenced", _values("new", 6))
        new.commit_transaction()
        with pytest.raises(KafkaProducerFenced):
            old.commit_transaction()
    finally:
        old.close()
        if new is not None:
            new.close()
    assert _read_kafka_python(cluster.bootstrap, "fenced", "read_committed") == sorted(
        _values("new", 6)
    )
    everything = _read_kafka_python(cluster.bootstrap, "fenced", "read_uncommitted")
    assert everything == sorted(_values("new", 6) + _values("zombie", 6))


def _committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets on `topic` (-1 for none)."""
    checker = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        offsets = {p: checker.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        checker.close()
    return {p: -1 if offset is None else offset for p, offset in offsets.items()}


def _wait_committed(bootstrap: str, group: str, topic: str, expected: dict[int, int]) -> None:
    """Until the group's offsets are `expected`: a transactional commit of them shows once
    its marker is on __consumer_offsets, a little after EndTxn's answer."""
    seen: list[dict[int, int]] = []

    def landed() -> bool:
        seen.append(_committed_offsets(bootstrap, group, topic))
        return seen[-1] == expected

    try:
        wait_for(landed, timeout=60, what=f"{group}'s offsets {expected}")
    except TimeoutError as exc:
        raise AssertionError(f"{group}'s offsets: last seen {seen[-1:]}") from exc


def _input_and_output(cluster: Any) -> None:
    """Topics "in", holding 60 records, and "out", empty."""
    cluster.create_topic("in", partitions=PARTITIONS, replication_factor=3)
    cluster.create_topic("out", partitions=PARTITIONS, replication_factor=3)
    source = KafkaProducer(bootstrap_servers=cluster.bootstrap)
    for i in range(60):
        source.send("in", b"%d" % i, partition=i % PARTITIONS)
    source.flush()
    source.close()


def test_kafka_python_read_process_write_commits_output_and_offsets_together(cluster_factory):
    """send_offsets_to_transaction with the consumer's group metadata (TxnOffsetCommit v3 with
    generation and member id): an aborted round moves neither the output nor the offsets."""
    cluster = cluster_factory(name="txn-kp-rpw")
    _input_and_output(cluster)

    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        group_id="kp-rpw",
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    consumer.subscribe(["in"])
    producer = _kafka_python_producer(cluster.bootstrap, "kp-rpw-writer")
    done, aborted_once = 0, False
    deadline = time.monotonic() + 120
    try:
        while done < 60 and time.monotonic() < deadline:
            polled = consumer.poll(timeout_ms=1000, max_records=20)
            batch = [r for records in polled.values() for r in records]
            if not batch:
                continue
            producer.begin_transaction()
            for record in batch:
                producer.send("out", b"x" + record.value, partition=record.partition)
            offsets = {
                tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in consumer.assignment()
            }
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            if not aborted_once:
                aborted_once = True
                producer.abort_transaction()
                # back to the last committed offsets, as a restarted processor would be
                for tp in consumer.assignment():
                    committed = consumer.committed(tp)
                    consumer.seek(tp, 0 if committed is None else committed)
                continue
            producer.commit_transaction()
            done += len(batch)
    finally:
        consumer.close()
        producer.close()
    assert aborted_once and done == 60

    out = _read_kafka_python(cluster.bootstrap, "out", "read_committed")
    assert out == sorted(b"x%d" % i for i in range(60))
    _wait_committed(cluster.bootstrap, "kp-rpw", "in", {p: 20 for p in range(PARTITIONS)})


# ----------------------------------------------------------------- aiokafka


async def _read_aiokafka(bootstrap: str, topic: str, ends: dict[int, int]) -> list[bytes]:
    """Every value an aiokafka read_committed consumer reads from the start to `ends`."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    tps = [AioTopicPartition(topic, p) for p in range(PARTITIONS)]
    values: list[bytes] = []
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        # its own view of the ends agrees: they are the last stable offsets
        assert {tp.partition: off for tp, off in (await consumer.end_offsets(tps)).items()} == ends
        deadline = time.monotonic() + 60
        while not all(
            position >= ends[tp.partition]
            for tp, position in [(tp, await consumer.position(tp)) for tp in tps]
        ):
            assert time.monotonic() < deadline, f"aiokafka reading {topic}: {values}"
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(r.value for r in records)
    finally:
        await consumer.stop()
    return sorted(values)


async def _aiokafka_producer(bootstrap: str, txn_id: str) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
    await producer.start()  # InitProducerId with the transactional id
    return producer


async def _send_aiokafka(producer: AIOKafkaProducer, topic: str, values: list[bytes]) -> None:
    """Each value acknowledged by its partition's leader."""
    futures = [
        await producer.send(topic, value, partition=i % PARTITIONS)
        for i, value in enumerate(values)
    ]
    await asyncio.gather(*futures)


class _Abort(Exception):
    """Raised inside `producer.transaction()` to leave it by abort."""


async def _aiokafka_transactions(bootstrap: str) -> None:
    producer = await _aiokafka_producer(bootstrap, "aio-writer")
    try:
        async with producer.transaction():
            await _send_aiokafka(producer, "aio", _values("c1"))
        with pytest.raises(_Abort):
            async with producer.transaction():
                await _send_aiokafka(producer, "aio", _values("a1"))
                raise _Abort
        await producer.begin_transaction()  # the explicit calls, as well as the context
        await _send_aiokafka(producer, "aio", _values("a2"))
        await producer.abort_transaction()
        async with producer.transaction():
            await _send_aiokafka(producer, "aio", _values("c2"))
    finally:
        await producer.stop()


def test_aiokafka_commits_are_read_whole_and_aborts_never(cluster_factory):
    cluster = cluster_factory(name="txn-aio")
    cluster.create_topic("aio", partitions=PARTITIONS, replication_factor=3)
    asyncio.run(_aiokafka_transactions(cluster.bootstrap))

    committed = sorted(_values("c1") + _values("c2"))
    ends = _settled_ends(cluster.bootstrap, "aio")
    assert asyncio.run(_read_aiokafka(cluster.bootstrap, "aio", ends)) == committed
    everything = _read_kafka_python(cluster.bootstrap, "aio", "read_uncommitted")
    assert everything == sorted(committed + _values("a1") + _values("a2"))


async def _aiokafka_fencing(bootstrap: str) -> None:
    old = await _aiokafka_producer(bootstrap, "aio-same-id")
    try:
        await old.begin_transaction()
        await _send_aiokafka(old, "fenced", _values("zombie", 6))
        new = await _aiokafka_producer(bootstrap, "aio-same-id")
        try:
            async with new.transaction():
                await _send_aiokafka(new, "fenced", _values("new", 6))
        finally:
            await new.stop()
        with pytest.raises(AioProducerFenced):
            await old.commit_transaction()
    finally:
        await old.stop()


def test_aiokafka_a_new_producer_with_the_same_id_fences_the_old(cluster_factory):
    """As for kafka-python, with EndTxn v0: the old producer must be told INVALID_PRODUCER_EPOCH
    (aiokafka does not know PRODUCER_FENCED, which v0 never carries)."""
    cluster = cluster_factory(name="txn-aio-fence")
    cluster.create_topic("fenced", partitions=PARTITIONS, replication_factor=3)
    asyncio.run(_aiokafka_fencing(cluster.bootstrap))
    ends = _settled_ends(cluster.bootstrap, "fenced")
    assert asyncio.run(_read_aiokafka(cluster.bootstrap, "fenced", ends)) == sorted(
        _values("new", 6)
    )
    everything = _read_kafka_python(cluster.bootstrap, "fenced", "read_uncommitted")
    assert everything == sorted(_values("new", 6) + _values("zombie", 6))


async def _aiokafka_read_process_write(bootstrap: str) -> tuple[int, bool]:
    consumer = AIOKafkaConsumer(
        "in",
        bootstrap_servers=bootstrap,
        group_id="aio-rpw",
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    producer = await _aiokafka_producer(bootstrap, "aio-rpw-writer")
    done, aborted_once = 0, False
    deadline = time.monotonic() + 120
    try:
        while done < 60 and time.monotonic() < deadline:
            polled = await consumer.getmany(timeout_ms=1000, max_records=20)
            batch = [r for records in polled.values() for r in records]
            if not batch:
                continue
            try:
                async with producer.transaction():
                    for record in batch:
                        await producer.send("out", b"x" + record.value, partition=record.partition)
                    offsets = {tp: await consumer.position(tp) for tp in consumer.assignment()}
                    await producer.send_offsets_to_transaction(offsets, "aio-rpw")
                    if not aborted_once:
                        aborted_once = True
                        raise _Abort
            except _Abort:
                for tp in consumer.assignment():
                    committed = await consumer.committed(tp)
                    consumer.seek(tp, 0 if committed is None else committed)
                continue
            done += len(batch)
    finally:
        await consumer.stop()
        await producer.stop()
    return done, aborted_once


def test_aiokafka_read_process_write_commits_output_and_offsets_together(cluster_factory):
    """send_offsets_to_transaction by group id: TxnOffsetCommit v0 names no member, yet the
    group has one (the consumer), and Kafka takes such a commit all the same."""
    cluster = cluster_factory(name="txn-aio-rpw")
    _input_and_output(cluster)

    assert asyncio.run(_aiokafka_read_process_write(cluster.bootstrap)) == (60, True)
    ends = _settled_ends(cluster.bootstrap, "out")
    out = asyncio.run(_read_aiokafka(cluster.bootstrap, "out", ends))
    assert out == sorted(b"x%d" % i for i in range(60))
    _wait_committed(cluster.bootstrap, "aio-rpw", "in", {p: 20 for p in range(PARTITIONS)})
