"""Stop all three nodes and start them again (each with `raftlog serve --config`):
everything reads back as before, and no leader epoch is lower than before — in Metadata,
in the stored batches, or in any node's leader-epoch-checkpoint.
"""

from __future__ import annotations

import pytest
from support import history as H
from support import records as R
from support import segments as S
from support import wire as W

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TOPIC = "restart"
PARTITIONS = 3
COUNT = 6000


def snapshot_epochs(cluster) -> dict[tuple[int, int], int]:
    """{(node, partition): highest epoch in its segment list}."""
    out = {}
    for n in cluster.node_ids:
        for p in range(PARTITIONS):
            epochs = S.epochs_on_disk(cluster.partition_dir(n, TOPIC, p))
            out[(n, p)] = max((e for e, _ in epochs), default=-1)
    return out


def checkpoint_max(cluster) -> dict[tuple[int, int], int]:
    out = {}
    for n in cluster.node_ids:
        for p in range(PARTITIONS):
            ck = S.read_checkpoint(cluster.partition_dir(n, TOPIC, p))
            out[(n, p)] = max((e for e, _ in ck), default=-1)
    return out


@pytest.mark.parametrize("how", ["graceful", "kill"])
def test_full_cluster_restart(cluster_factory, how):
    cluster = cluster_factory(name=f"restart-{how}")
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    W.topic_metadata(cluster.bootstrap, TOPIC)

    first = R.produce_confluent(
        cluster.bootstrap, TOPIC, R.make_records("before", COUNT, PARTITIONS)
    )
    assert len(first.acked) == COUNT, first.failed[:3]
    ends = W.end_offsets(cluster.bootstrap, TOPIC)
    before = R.consume_confluent(cluster.bootstrap, TOPIC, ends)
    R.check_log(
        first.acked, before, start_offsets={p: 0 for p in ends}, end_offsets=ends
    ).raise_if_failed()
    md_before = W.topic_metadata(cluster.bootstrap, TOPIC).topics[TOPIC]
    for n in cluster.node_ids:  # let every replica have everything before stopping
        for p in range(PARTITIONS):
            cluster.wait_caught_up(n, TOPIC, p, timeout=120)
    disk_before = snapshot_epochs(cluster)
    ckpt_before = checkpoint_max(cluster)

    if how == "graceful":
        cluster.down()
    else:
        for n in cluster.node_ids:
            cluster.kill(n)
    assert not cluster.live_nodes()

    for n in cluster.node_ids:
        cluster.restart(n, wait=False)
    cluster.wait_all_ready(timeout=120)
    cluster.wait_topic_leaders(TOPIC, PARTITIONS, timeout=120)

    md_after = W.topic_metadata(cluster.bootstrap, TOPIC, timeout=60).topics[TOPIC]
    for p in range(PARTITIONS):
        assert md_after[p].leader_epoch >= md_before[p].leader_epoch, (
            f"p{p}: Metadata epoch {md_after[p].leader_epoch} < {md_before[p].leader_epoch} before restart"
        )

    # Everything reads back exactly as before (same offsets, same epochs).
    ends_after = W.end_offsets(cluster.bootstrap, TOPIC)
    assert ends_after == ends, f"log ends changed over the restart: {ends} -> {ends_after}"
    after = R.consume_confluent(cluster.bootstrap, TOPIC, ends)
    R.check_log(
        first.acked, after, start_offsets={p: 0 for p in ends}, end_offsets=ends
    ).raise_if_failed()
    was = {(r.partition, r.offset): r.leader_epoch for r in before}
    changed = [
        (r.partition, r.offset, was[(r.partition, r.offset)], r.leader_epoch)
        for r in after
        if was[(r.partition, r.offset)] != r.leader_epoch
    ]
    assert not changed, f"stored epochs changed over the restart: {changed[:5]}"

    # New writes land in an epoch no lower than any before.
    second = R.produce_confluent(cluster.bootstrap, TOPIC, R.make_records("after", 600, PARTITIONS))
    assert len(second.acked) == 600, second.failed[:3]
    ends2 = W.end_offsets(cluster.bootstrap, TOPIC)
    everything = R.consume_confluent(cluster.bootstrap, TOPIC, ends2)
    R.check_log(
        first.acked + second.acked,
        everything,
        start_offsets={p: 0 for p in ends2},
        end_offsets=ends2,
    ).raise_if_failed()
    old_max = {
        p: max(r.leader_epoch for r in before if r.partition == p) for p in range(PARTITIONS)
    }
    for r in everything:
        if R.record_id(r.value)[0] == "after":
            assert r.leader_epoch >= old_max[r.partition], (r.partition, r.offset, r.leader_epoch)
            assert r.leader_epoch >= md_before[r.partition].leader_epoch

    for n in cluster.node_ids:
        for p in range(PARTITIONS):
            cluster.wait_caught_up(n, TOPIC, p, timeout=120)
    disk_after = snapshot_epochs(cluster)
    ckpt_after = checkpoint_max(cluster)
    lower = {
        k: (disk_before[k], disk_after[k]) for k in disk_before if disk_after[k] < disk_before[k]
    }
    assert not lower, f"segment epochs went down (node, partition): {lower}"
    lower = {
        k: (ckpt_before[k], ckpt_after[k]) for k in ckpt_before if ckpt_after[k] < ckpt_before[k]
    }
    assert not lower, f"leader-epoch-checkpoint epochs went down (node, partition): {lower}"
    for n in cluster.node_ids:
        for p in range(PARTITIONS):
            problems = S.check_partition_dir(cluster.partition_dir(n, TOPIC, p), below=ends2[p])
            assert not problems, f"node {n} p{p}: {problems[:10]}"

    problems = H.leaders_per_term(H.records(cluster))
    assert not problems, problems


@pytest.mark.parametrize("nodes", [1, 3])
def test_kill_right_after_acks_loses_nothing(cluster_factory, nodes):
    """kill -9 every node the moment the last acks=all answer arrives: the page cache
    survives a process crash, so every acknowledged record must be there after the restart
    (Raft state that had not reached the OS when the answer went out would be cut)."""
    cluster = cluster_factory(nodes=nodes, name=f"crash{nodes}")
    cluster.create_topic(TOPIC, partitions=PARTITIONS * 2, replication_factor=nodes)
    W.topic_metadata(cluster.bootstrap, TOPIC)

    acked = R.produce_confluent(
        cluster.bootstrap, TOPIC, R.make_records("crash", COUNT * 3, PARTITIONS * 2)
    )
    for n in cluster.node_ids:
        cluster.kill(n)
    assert len(acked.acked) == COUNT * 3, acked.failed[:3]

    for n in cluster.node_ids:
        cluster.restart(n, wait=False)
    cluster.wait_all_ready(timeout=120)
    cluster.wait_topic_leaders(TOPIC, PARTITIONS * 2, timeout=120)
    ends = W.end_offsets(cluster.bootstrap, TOPIC)
    acked_ends = R.end_offsets_of(acked.acked)
    short = {p: (ends.get(p, 0), end) for p, end in acked_ends.items() if ends.get(p, 0) < end}
    assert not short, f"log ends below what was acknowledged (partition: now, acked): {short}"
    after = R.consume_confluent(cluster.bootstrap, TOPIC, ends)
    R.check_log(
        acked.acked, after, start_offsets={p: 0 for p in ends}, end_offsets=ends
    ).raise_if_failed()
