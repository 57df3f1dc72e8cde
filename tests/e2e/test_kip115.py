"""KIP-115: `__consumer_offsets` is never created under-replicated.

A cluster started with one node (offsets.topic.replication.factor left at its default,
3) answers FindCoordinator with COORDINATOR_NOT_AVAILABLE (15), Metadata naming the
topic with INVALID_REPLICATION_FACTOR (38), CreateTopics asking for more replicas than
live nodes with 38, and has no `__consumer_offsets` at all. Two nodes join
(`raftlog cluster add-node`): the first FindCoordinator after that succeeds and the
topic exists with replication factor 3 on the three nodes. With the factor set to 1, a
single node serves a consumer group end to end.
"""

from __future__ import annotations

import time

import pytest
from support import groups as G
from support import records as R
from support import wire as W

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

GROUP = "kip115-group"


def _find(address: str, group: str, hi: int | None = None) -> G.CoordinatorAnswer:
    with W.KafkaWire(address, timeout=60) as w:
        return G.find_coordinator(w, group, timeout=60, hi=hi)


def _no_offsets_topic(cluster) -> None:
    for n in cluster.node_ids:
        with W.KafkaWire(cluster.node(n).kafka) as w:
            _, topics = G.metadata(w, None, allow_auto_topic_creation=False)
        assert G.OFFSETS_TOPIC not in topics, f"node {n} lists {G.OFFSETS_TOPIC}"
        parts = [
            p
            for p in cluster.status(n).get("partitions") or []
            if p.get("topic") == G.OFFSETS_TOPIC
        ]
        assert not parts, f"node {n} hosts {G.OFFSETS_TOPIC} replicas: {parts}"
        data = cluster.node(n).data_dir / "data"
        dirs = sorted(p.name for p in data.glob(f"{G.OFFSETS_TOPIC}-*")) if data.exists() else []
        assert not dirs, f"node {n} has {G.OFFSETS_TOPIC} partition directories {dirs}"


def test_offsets_topic_waits_for_enough_nodes(cluster_factory):
    cluster = cluster_factory(nodes=1, name="kip115", port_slots=3)
    addr = cluster.node(1).kafka

    # --- one live node, factor 3
    for hi in (3, 4):  # FindCoordinator with one key (v1-v3) and batched (v4+)
        ans = _find(addr, GROUP, hi=hi)
        assert ans.error == G.COORDINATOR_NOT_AVAILABLE, f"FindCoordinator v<={hi}: {ans}"
    with W.KafkaWire(addr) as w:
        _, topics = G.metadata(w, [G.OFFSETS_TOPIC], allow_auto_topic_creation=True)
        assert topics[G.OFFSETS_TOPIC].error == G.INVALID_REPLICATION_FACTOR, topics
        err, message = G.create_topic(w, "kip115-rf3", 3, 3)
        assert err == G.INVALID_REPLICATION_FACTOR, (err, message)
        _, topics = G.metadata(w, None, allow_auto_topic_creation=False)
        assert "kip115-rf3" not in topics
    _no_offsets_topic(cluster)

    # --- two more nodes join
    cluster.add_node()
    cluster.add_node()
    assert cluster.node_ids == [1, 2, 3]
    cluster.wait_live(timeout=60)

    t0 = time.monotonic()
    ans = _find(addr, GROUP)
    assert ans.error == G.NONE, f"first FindCoordinator after the nodes joined: {ans}"
    assert ans.node_id in cluster.node_ids, ans
    elapsed = time.monotonic() - t0

    leaders = G.offsets_topic_leaders(cluster.bootstrap, timeout=60)
    assert sorted(leaders) == list(range(16))
    for p in leaders.values():
        assert sorted(p.replicas) == [1, 2, 3], f"replication factor is not 3: {p}"
    with W.KafkaWire(addr) as w:
        _, topics = G.metadata(w, [G.OFFSETS_TOPIC])
        assert topics[G.OFFSETS_TOPIC].is_internal
        # and CreateTopics can now have three replicas, too
        err, message = G.create_topic(w, "kip115-rf3", 3, 3)
        assert err == G.NONE, (err, message)
    print(f"\n[kip115] first FindCoordinator after growth answered in {elapsed:.1f}s")


def test_single_node_with_factor_one(cluster_factory):
    """offsets.topic.replication.factor = 1: one node coordinates a group, stores its
    commits, and a restarted consumer gets them back."""
    from confluent_kafka import Consumer

    cluster = cluster_factory(
        nodes=1,
        name="kip115-solo",
        broker={"offsets.topic.replication.factor": 1, **G.FAST_GROUPS},
    )
    topic = "solo"
    cluster.create_topic(topic, partitions=2, replication_factor=1)
    recs = R.make_records("solo", 20, 2)
    out = R.produce_confluent(cluster.bootstrap, topic, recs, timeout=60)
    assert len(out.acked) == 20, out.failed[:3]

    def consumer():
        return Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": "solo-group",
                "session.timeout.ms": G.SESSION_TIMEOUT_MS,
                "heartbeat.interval.ms": G.HEARTBEAT_INTERVAL_MS,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )

    c = consumer()
    c.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 60
    try:
        while seen < 20 and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                seen += 1
        assert seen == 20, f"read {seen} of 20 records through the group"
        c.commit(asynchronous=False)
    finally:
        c.close()

    from confluent_kafka import TopicPartition

    c = consumer()
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(2)], timeout=30)
    finally:
        c.close()
    assert {tp.partition: tp.offset for tp in got} == {0: 10, 1: 10}, got
    leaders = G.offsets_topic_leaders(cluster.bootstrap)
    assert all(p.replicas == (1,) for p in leaders.values()), leaders
