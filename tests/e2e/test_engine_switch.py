"""A data directory written with partitions on the pysyncobj engine opens on raftlog's own
Raft core (issue 27): every acknowledged record reads back in place after the switch, the
partitions elect leaders in later terms, and new writes land after the old ones."""

from __future__ import annotations

import pytest
from support import records as R
from support import wire as W

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOPIC = "switch"
PARTITIONS = 3
COUNT = 600


def test_a_cluster_written_on_pysyncobj_restarts_on_the_core(cluster_factory):
    cluster = cluster_factory(name="switch", raft_engine="pysyncobj")
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    W.topic_metadata(cluster.bootstrap, TOPIC)
    before = R.produce_confluent(
        cluster.bootstrap, TOPIC, R.make_records("fork", COUNT, PARTITIONS)
    )
    assert len(before.acked) == COUNT, before.failed[:3]
    epochs_before = {p: cluster.leader(TOPIC, p)[1] for p in range(PARTITIONS)}

    for n in cluster.node_ids:
        cluster.terminate(n)
    for n in cluster.node_ids:
        config = cluster.node(n).config
        text = config.read_text()
        assert 'raft_engine = "pysyncobj"' in text
        config.write_text(text.replace('raft_engine = "pysyncobj"', 'raft_engine = "core"'))
        cluster.restart(n, wait=False)
    cluster.wait_all_ready(timeout=120)
    cluster.wait_topic_leaders(TOPIC, PARTITIONS, timeout=120)

    after = R.produce_confluent(cluster.bootstrap, TOPIC, R.make_records("core", COUNT, PARTITIONS))
    assert len(after.acked) == COUNT, after.failed[:3]
    ends = W.end_offsets(cluster.bootstrap, TOPIC)
    got = R.consume_confluent(cluster.bootstrap, TOPIC, ends)
    R.check_log(
        before.acked + after.acked, got, start_offsets={p: 0 for p in ends}, end_offsets=ends
    ).raise_if_failed()
    for p in range(PARTITIONS):
        assert cluster.leader(TOPIC, p)[1] > epochs_before[p]  # epochs never go backwards
