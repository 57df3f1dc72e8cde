"""A thousand partitions on the three-node loopback cluster, used the way a Kafka user would:
`raftlog topic create`, every partition led, a record written to and read back from each
with confluent-kafka (acks=all, the client's default timeouts), and after a kill -9 of the
node leading the most of them, every partition led again by the others and writable.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from support.cluster import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

TOPIC = "many"
PARTITIONS = 1000


def leaders(admin: AdminClient) -> dict[int, int]:
    """partition -> leader as Metadata tells a client (-1: none)."""
    topic = admin.list_topics(TOPIC, timeout=30).topics[TOPIC]
    return {p: info.leader for p, info in topic.partitions.items()}


def produce_one_each(bootstrap: str, round_: int) -> dict[int, int]:
    """One acks=all record per partition; partition -> offset acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    acked: dict[int, int] = {}
    errors: list[str] = []

    def done(err, msg) -> None:
        if err is not None:
            errors.append(f"{msg.partition()}: {err}")
        else:
            acked[msg.partition()] = msg.offset()

    for p in range(PARTITIONS):
        producer.produce(TOPIC, value=b"r%d-p%d" % (round_, p), partition=p, on_delivery=done)
        producer.poll(0)
    assert producer.flush(300) == 0
    assert errors == []
    return acked


def read_back(bootstrap: str, ends: dict[int, int]) -> dict[int, list[bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "many-reader", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 180
    try:
        while any(len(got[p]) < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1.0):
                assert msg.error() is None, msg.error()
                got[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    return got


def test_a_thousand_partitions_are_led_written_read_and_re_led_after_a_kill(cluster_factory):
    cluster = cluster_factory(name="many")
    started = time.monotonic()
    cluster.cli(
        "topic", "create", TOPIC, "--partitions", str(PARTITIONS), "--replication-factor", "3",
        "--bootstrap",
        cluster.bootstrap, timeout=300,
    )  # fmt: skip
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_for(
        lambda: all(leader >= 0 for leader in leaders(admin).values()),
        120,
        what=f"a leader for each of {PARTITIONS} partitions",
    )
    print(f"{PARTITIONS} partitions created and led in {time.monotonic() - started:.1f} s")
    # leadership is spread over the nodes (a few partitions may be between leaders again)
    by_node = Counter(leader for leader in leaders(admin).values() if leader >= 0)
    assert len(by_node) == 3

    first = produce_one_each(cluster.bootstrap, 0)
    assert set(first) == set(range(PARTITIONS)) and set(first.values()) == {0}

    def awake() -> int:
        """Replicas of the topic whose Raft group still runs timers, over all nodes."""
        return sum(
            not p["quiet"]
            for n in cluster.node_ids
            for p in cluster.status(n, timeout=10)["partitions"]
            if p["topic"] == TOPIC
        )

    # Written and idle again, the thousand groups go quiet: no timers, no heartbeats.
    wait_for(lambda: awake() == 0, 60, what=f"the {PARTITIONS} idle groups to go quiet")

    victim = by_node.most_common(1)[0][0]
    cluster.kill(victim)
    killed = time.monotonic()
    survivors = ",".join(cluster.node(n).kafka for n in cluster.node_ids if n != victim)
    admin = AdminClient({"bootstrap.servers": survivors})
    wait_for(
        lambda: all(leader not in (-1, victim) for leader in leaders(admin).values()),
        120,
        what=f"the {by_node[victim]} partitions node {victim} led to be led by the others",
    )
    print(f"{by_node[victim]} partitions re-led in {time.monotonic() - killed:.1f} s")

    second = produce_one_each(survivors, 1)
    assert set(second.values()) == {1}  # nothing acknowledged before the kill was lost
    got = read_back(survivors, {p: 2 for p in range(PARTITIONS)})
    assert got == {p: [b"r0-p%d" % p, b"r1-p%d" % p] for p in range(PARTITIONS)}
