"""kill -9 the leader of a partition under continuous acks=all production.

- production resumes on a new leader;
- every acknowledged record is read back exactly once (failed sends at most once);
- Metadata shows a strictly higher leader epoch for the partition;
- OffsetForLeaderEpoch for the old epoch returns the start offset of the next one;
- batches written after the failover carry the new epoch; epochs never decrease;
- the killed node, restarted, catches up and holds the same bytes.
"""

from __future__ import annotations

import time

import pytest
from support import history as H
from support import records as R
from support import segments as S
from support import wire as W
from support.cluster import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TOPIC = "failover"
PARTITIONS = 3
VICTIM_PARTITION = 0
BEFORE = 3000  # acknowledged records on the victim partition before the kill
AFTER = 3000  # ... and after the new leader is known


def test_kill_leader_under_load(cluster_factory):
    cluster = cluster_factory(name="failover")
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    W.topic_metadata(cluster.bootstrap, TOPIC)

    producer = R.ContinuousProducer(
        cluster.bootstrap, TOPIC, range(PARTITIONS), run="fo", rate_per_s=3000
    )
    producer.start()
    try:
        wait_for(
            lambda: producer.acked_count(VICTIM_PARTITION) >= BEFORE or producer.error,
            120,
            what=f"{BEFORE} acknowledged records before the kill",
        )
        assert producer.error is None, producer.error

        old_leader, old_term = cluster.leader(TOPIC, VICTIM_PARTITION)
        with W.KafkaWire(cluster.node(old_leader).kafka) as w:
            old_epoch = w.metadata([TOPIC]).partition(TOPIC, VICTIM_PARTITION).leader_epoch
        assert old_epoch == old_term, f"Metadata epoch {old_epoch} != Raft term {old_term}"

        cluster.kill(old_leader)
        t_kill = time.monotonic()

        new_leader, new_term = cluster.leader(
            TOPIC, VICTIM_PARTITION, timeout=60, exclude=[old_leader], min_term=old_term
        )
        live_bootstrap = ",".join(
            cluster.node(n).kafka for n in cluster.node_ids if n != old_leader
        )

        def metadata_moved():
            md = W.topic_metadata(live_bootstrap, TOPIC, timeout=10)
            pm = md.partition(TOPIC, VICTIM_PARTITION)
            return pm if pm.leader == new_leader and pm.leader_epoch > old_epoch else None

        new_meta = wait_for(
            metadata_moved, 60, what="Metadata to name the new leader with a higher epoch"
        )
        assert new_meta.leader_epoch > old_epoch
        t_new = time.monotonic()

        wait_for(
            lambda: producer.acked_since(t_new, VICTIM_PARTITION) >= AFTER or producer.error,
            180,
            what=f"{AFTER} acknowledged records on the new leader (production resumes)",
        )
        assert producer.error is None, producer.error
    finally:
        outcome = producer.stop()

    acked_after_kill = [r for r in outcome.acked if producer.ack_times[r.value] >= t_kill]
    assert any(r.partition == VICTIM_PARTITION for r in acked_after_kill), (
        "production did not resume"
    )

    # Metadata after the dust settles: the epoch never went back.
    md = W.topic_metadata(live_bootstrap, TOPIC)
    new_epoch = md.partition(TOPIC, VICTIM_PARTITION).leader_epoch
    assert new_epoch >= new_meta.leader_epoch > old_epoch

    # Read everything back through the surviving nodes.
    ends = W.end_offsets(live_bootstrap, TOPIC)
    got = R.consume_confluent(live_bootstrap, TOPIC, ends, timeout=180)
    report = R.check_log(
        outcome.acked,
        got,
        maybe=outcome.maybe_values,
        start_offsets={p: 0 for p in ends},
        end_offsets=ends,
    )
    report.raise_if_failed()
    assert not R.check_send_order(outcome.acked)

    victim = sorted((r for r in got if r.partition == VICTIM_PARTITION), key=lambda r: r.offset)
    assert all(r.leader_epoch is not None for r in victim)
    later = [r for r in victim if r.leader_epoch > old_epoch]
    assert later, "no batch with an epoch above the old one after the failover"
    new_epoch_start = later[0].offset
    assert all(r.leader_epoch <= old_epoch for r in victim if r.offset < new_epoch_start)

    # OffsetForLeaderEpoch(old epoch) on the new leader = start offset of the next epoch.
    with W.KafkaWire(cluster.node(new_leader).kafka) as w:
        oe = w.offset_for_leader_epoch(
            TOPIC, VICTIM_PARTITION, leader_epoch=old_epoch, current_leader_epoch=new_epoch
        )
    assert oe.error == W.NONE, oe
    assert (oe.leader_epoch, oe.end_offset) == (old_epoch, new_epoch_start), (
        f"OffsetForLeaderEpoch({old_epoch}) = {oe}; the first batch of a later epoch is at {new_epoch_start}"
    )

    # Batches written after the new leader was visible carry the new epoch (or later).
    acked_epoch = {r.value: r.leader_epoch for r in victim}
    late = [
        r
        for r in outcome.acked
        if r.partition == VICTIM_PARTITION and producer.ack_times[r.value] >= t_new
    ]
    assert late
    low = [
        (r.offset, acked_epoch[r.value])
        for r in late
        if acked_epoch[r.value] < new_meta.leader_epoch
    ]
    assert not low, f"records acknowledged after the failover carry an older epoch: {low[:5]}"

    # On disk (new leader): every batch carries its segment's term; terms never decrease.
    hw = ends[VICTIM_PARTITION]
    problems = S.check_partition_dir(
        cluster.partition_dir(new_leader, TOPIC, VICTIM_PARTITION), below=hw
    )
    assert not problems, problems[:10]

    # The killed node comes back, catches up, and holds the same bytes as the leader.
    cluster.restart(old_leader)
    cluster.wait_caught_up(old_leader, TOPIC, VICTIM_PARTITION, timeout=120)
    diff = S.compare_replicas(
        cluster.partition_dir(new_leader, TOPIC, VICTIM_PARTITION),
        cluster.partition_dir(old_leader, TOPIC, VICTIM_PARTITION),
        below=hw,
    )
    assert not diff, diff

    # No two nodes ever won the same term (every node's history journal).
    problems = H.leaders_per_term(H.records(cluster))
    assert not problems, problems
