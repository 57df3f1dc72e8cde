"""A follower stopped while 50 MB is produced (enough to pass a Raft log compaction)
catches up after restart, and its batches are byte-identical to the leader's up to the
smaller high watermark. Every node's RSS is recorded afterwards (see conftest report_rss).
"""

from __future__ import annotations

import os

import pytest
from support import history as H
from support import records as R
from support import segments as S
from support import wire as W

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TOPIC = "catchup"
MEGABYTES = int(os.environ.get("RAFTLOG_CATCHUP_MB", "50"))
VALUE_SIZE = 1024


def test_follower_catches_up_after_50mb(cluster_factory, report_rss):
    cluster = cluster_factory(name="catchup")
    cluster.create_topic(TOPIC, partitions=1, replication_factor=3)
    W.topic_metadata(cluster.bootstrap, TOPIC)
    leader, _ = cluster.leader(TOPIC, 0)
    controller = cluster.controller_leader()
    candidates = [n for n in cluster.node_ids if n != leader]
    follower = next((n for n in candidates if n != controller), candidates[0])

    cluster.terminate(follower)
    assert not cluster.is_alive(follower)

    count = MEGABYTES * 1024 * 1024 // VALUE_SIZE
    live = ",".join(cluster.node(n).kafka for n in cluster.node_ids if n != follower)
    recs = R.make_records("bulk", count, 1, value_size=VALUE_SIZE, random_payload=True)
    out = R.produce_confluent(live, TOPIC, recs, compression="none", timeout=300)
    assert len(out.acked) == count, f"{len(out.failed)} failed, first: {out.failed[:3]}"
    del recs

    cluster.restart(follower)
    try:
        status = cluster.wait_caught_up(follower, TOPIC, 0, timeout=180)
    finally:  # the memory figures are wanted even when the catch-up fails
        rss = report_rss(f"after {MEGABYTES} MB produced, follower {follower} restarted", cluster)
    assert all(v is not None for v in rss.values()), f"a node died: {rss}"
    leader_now, _ = cluster.leader(TOPIC, 0)
    hw_leader = int(status[leader_now]["high_watermark"])
    hw_follower = int(status[follower]["high_watermark"])
    below = min(hw_leader, hw_follower)
    assert below >= count

    leader_dir = cluster.partition_dir(leader_now, TOPIC, 0)
    follower_dir = cluster.partition_dir(follower, TOPIC, 0)
    diff = S.compare_replicas(leader_dir, follower_dir, below)
    assert not diff, "\n".join(diff)
    batches, size = S.batch_count_below(follower_dir, below)
    assert size >= MEGABYTES * 1024 * 1024, f"only {size} bytes of batches below {below}"
    problems = S.check_partition_dir(follower_dir, below=below)
    assert not problems, problems[:10]
    assert S.epochs_on_disk(follower_dir) == S.epochs_on_disk(leader_dir)

    # the follower fell behind a compaction: it caught up through a snapshot install
    installs = [
        r
        for r in H.read_history(cluster.node(follower).data_dir)
        if r.get("kind") == "snapshot_install"
        and r.get("topic") == TOPIC
        and r.get("partition") == 0
    ]
    assert installs, (
        f"node {follower} caught up without a snapshot install: {MEGABYTES} MB did not pass a compaction"
    )

    # every acknowledged record reads back, in place
    ends = W.end_offsets(cluster.bootstrap, TOPIC)
    got = R.consume_confluent(cluster.bootstrap, TOPIC, ends, timeout=300)
    R.check_log(out.acked, got, start_offsets={0: 0}, end_offsets=ends).raise_if_failed()
    del got
