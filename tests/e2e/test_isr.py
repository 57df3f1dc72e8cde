"""The in-sync replicas a client reads in Metadata follow a follower's node pausing and
resuming, also for an idle partition whose Raft group has gone quiet (FORK.md 9): a quiet
leader's view is not recomputed every second, and a node that resumes wakes no group."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import wire as W
from support.cluster import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOPIC = "isr"


def groups_awake(admin: str) -> float:
    with urllib.request.urlopen(f"http://{admin}/metrics", timeout=30) as r:  # noqa: S310
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "raftlog_raft_groups_awake":
            return family.samples[0].value
    raise AssertionError("no raftlog_raft_groups_awake in /metrics")


def test_isr_follows_a_paused_follower_of_a_quiet_partition(cluster_factory):
    cluster = cluster_factory(name="isr")
    cluster.create_topic(TOPIC, partitions=1, replication_factor=3)
    W.topic_metadata(cluster.bootstrap, TOPIC)
    leader, _ = cluster.leader(TOPIC, 0)
    follower = next(n for n in cluster.node_ids if n != leader)
    node = cluster.node(leader)

    def isr() -> set[int]:
        with W.KafkaWire(node.kafka) as w:
            return set(w.metadata([TOPIC]).partition(TOPIC, 0).isr)

    everyone = set(cluster.node_ids)
    wait_for(lambda: isr() == everyone, 30, what="all three replicas in sync")
    wait_for(lambda: groups_awake(node.admin) == 0, 30, what="the idle group to go quiet")
    cluster.pause(follower)
    try:
        wait_for(lambda: isr() == everyone - {follower}, 30, what=f"node {follower} out of the ISR")
        # Quiet again without the paused follower, which is caught up: its resuming then wakes
        # nothing, and only the peers heard tell the leader's view to change.
        wait_for(lambda: groups_awake(node.admin) == 0, 30, what="the group to go quiet again")
    finally:
        cluster.resume(follower)
    wait_for(lambda: isr() == everyone, 30, what=f"node {follower} back in the ISR")
