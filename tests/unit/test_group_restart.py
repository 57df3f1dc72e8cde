"""A partition replica whose Raft group raised is reopened from its files and goes on with its
peers (issue 43): three replicas with real segment logs and journals on the in-process
network of tests/support/replicas.py, with an injected clock."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import weakref
from pathlib import Path

import pytest
from support.raftnet import Clock
from support.replicas import IDS, Replicas, values

from raftlog.common.errors import ErrorCode
from raftlog.common.heap import HeapFreezer
from raftlog.node.listener_metrics import KafkaMetrics
from unit.test_metrics import ReplicaNode, samples, value


@pytest.fixture
async def replicas(tmp_path: Path):
    r = Replicas(tmp_path, Clock())
    yield r
    r.close()


async def test_a_leader_whose_append_reads_past_its_segment_reopens_and_goes_on(
    replicas: Replicas, caplog: pytest.LogCaptureFixture
) -> None:
    """The fault run's symptom, injected: the window places the leader's newest entry just
    past the end of its segment, so encoding its append raises (`Segment(...) has no N bytes
    at N`). The leader's group is stopped with that append unsent, counted, and the replica
    reopened from its files, where the entry's location is right; the producer's retry of
    the batch it was not answered for is committed once, and every replica holds the same
    records."""
    leader = await replicas.leader()
    first = replicas.produce(leader, 0, 10)
    assert (await replicas.until(first)).error == ErrorCode.none
    p = replicas.partitions[leader]
    second = replicas.produce(leader, 10, 10)  # appended now; its append goes out this turn
    entry = p.journal.entry(-1)
    loc = entry.location
    assert loc is not None
    entry.location = dataclasses.replace(loc, position=loc.position + loc.size)
    with caplog.at_level(logging.ERROR):
        await replicas.settle()
    driver = replicas.driver(leader)
    assert driver.failures_total == 1 and driver.failures == {"t/0": 1}
    scraped = await samples(ReplicaNode(replicas, leader), KafkaMetrics())
    assert value(scraped, "raftlog_raft_group_failures_total", raft_group="t/0") == 1
    assert [r.getMessage()[:29] for r in caplog.records if r.levelno >= logging.ERROR] == [
        "raft group t/0: ready failed;"
    ]
    answer = await replicas.until(second)
    assert answer.error == ErrorCode.request_timed_out  # unknown outcome: the client retries
    assert driver.holds(p.group) and p.journal.entry(-1).location == loc  # reopened
    new_leader = await replicas.leader()
    retry = replicas.produce(new_leader, 10, 10)
    assert (await replicas.until(retry)).error == ErrorCode.none
    third = replicas.produce(new_leader, 20, 10)
    assert (await replicas.until(third)).error == ErrorCode.none
    await replicas.run(0.5)
    expected = [b"p7-s%d" % i for i in range(30)]
    for node_id in IDS:
        assert values(replicas.partitions[node_id]) == expected
        if node_id != leader:
            assert replicas.driver(node_id).failures_total == 0


async def test_a_reopened_replica_is_frozen_as_the_node_freezes_an_opened_one(
    replicas: Replicas,
) -> None:
    """A node freezes the objects of the replicas it opens out of full GC passes
    (raftlog/common/heap.py). A replica the driver reopened after its group raised is treated the
    same: its old objects (their cycles held by the freeze at its opening) are collected, and
    its new ones frozen, once for every replica reopened meanwhile."""
    leader = await replicas.leader()
    p = replicas.partitions[leader]
    heap = replicas.contexts[leader].heap = HeapFreezer(refreeze_seconds=0.0)
    try:
        heap.opened()  # as the node froze it when it opened the replica
        # the old group's own installer, held by it alone: a compiled CoreGroup takes no weak
        # reference, and the installer lives at least as long as its group
        old = weakref.ref(p.group.installer)
        p.restart()  # what the driver calls once it stopped the group
        new = p.group
        for _ in range(3):
            await asyncio.sleep(0)  # the freeze's turn
        assert old() is None
        assert not any(o is new for o in gc.get_objects())  # frozen: in no generation
        assert replicas.driver(leader).holds(new)  # and it runs
    finally:
        gc.unfreeze()
