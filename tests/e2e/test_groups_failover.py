"""Committed offsets survive the coordinator's death.

A confluent-kafka consumer reads part of a 3-partition topic, commits offsets (with
the leader epoch of the last record it processed), reads a little further without
committing, and then the node coordinating its group (the leader of the group's
`__consumer_offsets` partition) is killed with SIGKILL right after the commit returns.
A restarted consumer in the same group:
- resumes exactly at the committed offsets (nothing skipped), reads to the end;
- re-reads only the uncommitted work (duplicates = offsets consumed after the commit);
and OffsetFetch on the new coordinator returns the committed offsets, metadata and
leader epochs. The killed node, restarted, catches up on that partition.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
from support import groups as G
from support import records as R
from support import wire as W

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOPIC = "resume"
PARTITIONS = 3
PER_PARTITION = 200
COMMITTED = 80  # offset committed on every partition
UNCOMMITTED = 15  # at least this many records read past it before the "crash"
GROUP = "resume-group"


def _consumer(bootstrap: str, name: str):
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "client.id": name,
            "session.timeout.ms": G.SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": G.HEARTBEAT_INTERVAL_MS,
            "max.poll.interval.ms": G.MAX_POLL_INTERVAL_MS,
            # if the committed offsets were lost, "earliest" shows up as extra duplicates
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )


def _read_until(consumer, done, timeout: float, what: str) -> dict[int, dict[int, int | None]]:
    """{partition: {offset: leader epoch}} polled until done(read) or the timeout."""
    read: dict[int, dict[int, int | None]] = {p: {} for p in range(PARTITIONS)}
    dupes: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout
    while not done(read):
        assert time.monotonic() < deadline, f"{what}: not done in {timeout}s: " + str(
            {p: (min(o, default=None), max(o, default=None), len(o)) for p, o in read.items()}
        )
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        if msg.offset() in read[msg.partition()]:
            dupes.append((msg.partition(), msg.offset()))
        read[msg.partition()][msg.offset()] = msg.leader_epoch()
    assert not dupes, f"{what}: one consumer read offsets twice: {dupes[:10]}"
    return read


def test_commits_survive_coordinator_kill(cluster_factory):
    cluster = cluster_factory(name="groups-failover", broker=G.FAST_GROUPS)
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    recs = R.make_records("resume", PARTITIONS * PER_PARTITION, PARTITIONS)
    out = R.produce_confluent(cluster.bootstrap, TOPIC, recs, timeout=90)
    assert len(out.acked) == len(recs), out.failed[:3]
    ends = W.end_offsets(cluster.bootstrap, TOPIC)
    assert ends == dict.fromkeys(range(PARTITIONS), PER_PARTITION), ends

    from confluent_kafka import TopicPartition

    # --- first consumer: process, commit, process more, then its coordinator dies
    first = _consumer(cluster.bootstrap, "resume-first")
    first.subscribe([TOPIC])
    read_a = _read_until(
        first,
        lambda r: all(len(r[p]) >= COMMITTED + UNCOMMITTED for p in r),
        90,
        "first consumer",
    )
    commits = {p: (COMMITTED, read_a[p][COMMITTED - 1]) for p in range(PARTITIONS)}
    assert all(e is not None and e >= 0 for _, e in commits.values()), commits
    result = first.commit(
        offsets=[
            TopicPartition(TOPIC, p, off, metadata=f"m{p}", leader_epoch=epoch)
            for p, (off, epoch) in commits.items()
        ],
        asynchronous=False,
    )
    assert all(tp.error is None for tp in result), result

    coordinator = G.coordinator_address(cluster.bootstrap, GROUP)
    offsets_partition = G.coordinator_partition(GROUP)
    victim, term = cluster.leader(G.OFFSETS_TOPIC, offsets_partition)
    assert coordinator.node_id == victim, (
        f"FindCoordinator says node {coordinator.node_id}, but node {victim} leads "
        f"{G.OFFSETS_TOPIC}-{offsets_partition}"
    )
    cluster.kill(victim)

    # The crashed application's consumer is discarded; closing it only leaves the group.
    closer = threading.Thread(target=first.close, name="close-first", daemon=True)
    closer.start()
    closer.join(30)

    live = ",".join(cluster.node(n).kafka for n in cluster.node_ids if n != victim)
    new_leader, _ = cluster.leader(
        G.OFFSETS_TOPIC, offsets_partition, exclude=[victim], min_term=term, timeout=60
    )
    coordinator = G.coordinator_address(live, GROUP, timeout=60)
    assert coordinator.node_id == new_leader, (coordinator, new_leader)

    # --- OffsetFetch on the new coordinator: offsets, metadata and leader epochs survived
    with W.KafkaWire(coordinator.address) as w:
        err, fetched = G.offset_fetch(w, GROUP, {TOPIC: list(range(PARTITIONS))}, lo=5)
    assert err == G.NONE, err
    # confluent-kafka sends string metadata with its C terminator ("m0\x00"): strip it
    got = {
        k: dataclasses.replace(c, metadata=(c.metadata or "").rstrip("\x00"))
        for k, c in fetched.items()
    }
    assert got == {
        (TOPIC, p): G.Committed(off, epoch, f"m{p}", G.NONE) for p, (off, epoch) in commits.items()
    }, fetched

    # --- the restarted consumer resumes at the committed offsets
    second = _consumer(live, "resume-second")
    second.subscribe([TOPIC])
    try:
        read_b = _read_until(
            second,
            lambda r: all(max(r[p], default=-1) >= PER_PARTITION - 1 for p in r),
            120,
            "restarted consumer",
        )
    finally:
        second.close()
    for p in range(PARTITIONS):
        got_b = sorted(read_b[p])
        assert got_b == list(range(COMMITTED, PER_PARTITION)), (
            f"p{p}: restarted consumer read {got_b[:3]}..{got_b[-3:]} ({len(got_b)} records), "
            f"expected exactly [{COMMITTED}, {PER_PARTITION})"
        )
        assert set(read_a[p]) | set(read_b[p]) == set(range(PER_PARTITION)), f"p{p}: skipped"
        dupes = sorted(set(read_a[p]) & set(read_b[p]))
        uncommitted = sorted(o for o in read_a[p] if o >= COMMITTED)
        assert dupes == uncommitted, f"p{p}: re-read {dupes}, uncommitted work was {uncommitted}"

    # --- the killed node comes back and gets the group's records
    cluster.restart(victim)
    cluster.wait_caught_up(victim, G.OFFSETS_TOPIC, offsets_partition, timeout=90)
