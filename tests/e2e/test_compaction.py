"""cleanup.policy=compact in a running cluster (what keeps __consumer_offsets bounded): once
data is below the Raft window and the high watermark, only each key's latest record stays,
at its original offset; tombstones survive delete.retention.ms."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support import wire as W
from support.cluster import Cluster, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TOPIC = "compacted"
KEYS = 20
# About 2.5 MB: two closed 1 MiB segments for the cleaner, and the active one it leaves alone
WRITES = 6000


def read_all(bootstrap: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "compaction-check",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[tuple[int, bytes, bytes | None]] = []
    try:
        while not got or got[-1][0] < end - 1:
            msgs = consumer.consume(1000, 10)
            assert msgs, f"no more records after offset {got[-1][0] if got else None}"
            got.extend((m.offset(), m.key(), m.value()) for m in msgs if not m.error())
    finally:
        consumer.close()
    return got


def test_superseded_records_are_compacted_away(tmp_path):
    # Compaction works below the Raft window's last cut: a snapshot every 1-1.5 s, not every
    # 60-90 s (the default), which this test used to wait for.
    cluster = Cluster(
        tmp_path,
        name="compaction",
        broker={"log.cleaner.backoff.ms": 500, "raft.snapshot.interval.ms": 1000},
    )
    cluster.start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        created = admin.create_topics(
            [
                NewTopic(
                    TOPIC,
                    1,
                    3,
                    config={"cleanup.policy": "compact", "segment.bytes": str(1024 * 1024)},
                )
            ]
        )
        created[TOPIC].result(30)
        W.topic_metadata(cluster.bootstrap, TOPIC)
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "acks": "all",
                "linger.ms": 0,
                "max.in.flight.requests.per.connection": 1,
            }
        )
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        offsets: list[int] = []

        def record(err, msg):
            assert err is None, err
            offsets.append(msg.offset())
            latest[msg.key()] = (msg.offset(), msg.value())

        for i in range(WRITES):
            key = b"key-%d" % (i % KEYS)
            value = None if i == WRITES - KEYS else b"v%d-" % i + b"x" * 400  # one tombstone
            producer.produce(TOPIC, key=key, value=value, on_delivery=record)
            producer.poll(0)
            if i % 50 == 0:
                producer.flush(30)
        producer.flush(60)
        end = max(offsets) + 1
        assert len(offsets) == WRITES

        leader, _ = cluster.leader(TOPIC, 0)

        def cleaned():
            size = sum(
                p.stat().st_size for p in cluster.partition_dir(leader, TOPIC, 0).glob("*.log")
            )
            return size < WRITES * 400 // 2

        wait_for(cleaned, 120, what="the leader to compact its cleanable segments")
        got = read_all(cluster.bootstrap, end)
    finally:
        cluster.stop()

    assert len(got) < WRITES / 2, f"{len(got)} of {WRITES} records still there"
    offsets_read = [o for o, _, _ in got]
    assert offsets_read == sorted(set(offsets_read)), "offsets must stay in order, each once"
    by_key: dict[bytes, list[tuple[int, bytes | None]]] = {}
    for offset, key, value in got:
        by_key.setdefault(key, []).append((offset, value))
    for key, (offset, value) in latest.items():
        # every key's newest record is still there, at the offset it was written at
        assert (offset, value) in by_key[key], key
    compacted_away = [o for o in range(end) if o not in set(offsets_read)]
    assert compacted_away, "nothing was removed"
