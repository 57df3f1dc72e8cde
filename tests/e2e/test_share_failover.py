"""Share-group state outlives its leader (KIP-932 with raftlog's Raft-replicated share state),
with confluent-kafka's ShareConsumer, unchanged, on a 3-node cluster of real processes:
- kill -9 of the share-partition leader mid-stream: no record whose ACCEPT the broker
  confirmed is ever delivered again, every record is delivered (no gaps), and the records a
  second member held unacknowledged when the leader died are served again;
- kill -9 of every node and a restart: the acknowledged records stay acknowledged, and the
  group goes on exactly where it was."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer
from support.share import share_consumer, share_group, share_topic

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

TOPIC = "share-failover"
DEADLINE = 120.0


class Reader:
    """An explicit-mode member that accepts everything it gets, one commit_sync per poll, and
    remembers which offsets the broker confirmed."""

    def __init__(self, consumer: ShareConsumer) -> None:
        self.consumer = consumer
        self.seen: dict[int, list[int]] = {}  # offset -> delivery counts
        self.confirmed: set[int] = set()
        self.again_after_confirmed: list[int] = []
        self.failed_commits = 0

    def step(self) -> None:
        batch = []
        for m in self.consumer.poll(1.0) or []:
            if m.error() is not None:
                continue
            offset = m.offset()
            if offset in self.confirmed:
                self.again_after_confirmed.append(offset)
            self.seen.setdefault(offset, []).append(m.delivery_count())
            self.consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            batch.append(offset)
        if not batch:
            return
        try:
            results = self.consumer.commit_sync(30)
        except KafkaException:
            self.failed_commits += 1
            return
        if results and all(error is None for error in results.values()):
            self.confirmed.update(batch)
        else:
            self.failed_commits += 1

    def until(self, done, seconds: float = DEADLINE) -> None:
        deadline = time.monotonic() + seconds
        while not done() and time.monotonic() < deadline:
            self.step()


def test_a_killed_share_partition_leader_loses_no_accepted_record(cluster_factory) -> None:
    cluster = cluster_factory(name="share-kill")
    count = 300
    share_topic(cluster, TOPIC, 1, count, per_batch=10)
    group = share_group(cluster)
    reader = Reader(share_consumer(cluster, group, explicit=True, **{"max.poll.records": 20}))
    holder = share_consumer(cluster, group, explicit=True, **{"max.poll.records": 20})
    reader.consumer.subscribe([TOPIC])
    holder.subscribe([TOPIC])
    try:
        reader.until(lambda: len(reader.confirmed) >= 100)
        assert len(reader.confirmed) >= 100
        held: set[int] = set()
        deadline = time.monotonic() + DEADLINE
        while not held and time.monotonic() < deadline:  # a member that stalls with records
            held = {m.offset() for m in holder.poll(1.0) or [] if m.error() is None}
        assert held and not held & set(reader.seen)
        leader, _ = cluster.leader(TOPIC, 0)
        cluster.kill(leader)
        reader.until(lambda: len(reader.seen) == count)
        assert reader.again_after_confirmed == []  # a confirmed ACCEPT survived the kill
        assert sorted(reader.seen) == list(range(count))  # no gaps; the held ones came back
        assert held <= set(reader.seen)
        redelivered = {o: c for o, c in reader.seen.items() if len(c) > 1}
        print(
            f"\n[share-failover] killed node {leader}; {len(held)} held records served again; "
            f"{len(redelivered)} delivered twice to the reader (unconfirmed acks); "
            f"{reader.failed_commits} failed commits"
        )
    finally:
        reader.consumer.close()
        holder.close()
    cluster.restart(leader)


def test_a_full_restart_keeps_the_acknowledged_records(cluster_factory) -> None:
    cluster = cluster_factory(name="share-restart")
    count = 100
    share_topic(cluster, TOPIC, 1, count, per_batch=5)
    group = share_group(cluster)
    first = Reader(share_consumer(cluster, group, explicit=True, **{"max.poll.records": 5}))
    first.consumer.subscribe([TOPIC])
    try:
        first.until(lambda: len(first.confirmed) >= 40)
    finally:
        first.consumer.close()
    assert len(first.confirmed) >= 40 and first.failed_commits == 0
    for node_id in cluster.node_ids:
        cluster.kill(node_id)
    for node_id in cluster.node_ids:
        cluster.restart(node_id, wait=False)
    cluster.wait_all_ready()
    second = Reader(share_consumer(cluster, group, explicit=True))
    second.consumer.subscribe([TOPIC])
    try:
        second.until(lambda: len(first.confirmed) + len(second.seen) >= count)
        extra_deadline = time.monotonic() + 3
        while time.monotonic() < extra_deadline:  # and nothing more comes
            second.step()
    finally:
        second.consumer.close()
    assert sorted(second.seen) == sorted(set(range(count)) - first.confirmed)
