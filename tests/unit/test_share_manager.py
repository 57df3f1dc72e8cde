"""The share-partition manager on a real partition leader (three in-process replicas, real
Raft, injected clocks): what ShareFetch and ShareAcknowledge do to a share group's records."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords
from support.clock import ManualClock
from support.raftnet import Clock
from support.replicas import Replicas
from support.wire import make_batch

import raftlog.raft.syncobj_fork as core
from raftlog import group_config as gc
from raftlog.errors import ErrorCode
from raftlog.partition import Partition
from raftlog.share.manager import Fetched, ShareManager
from raftlog.share.partition_state import AckBatch, AckType

KEY = ("t", 0)
EARLIEST = {gc.AUTO_OFFSET_RESET: "earliest"}


@pytest.fixture
async def leader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    clock = Clock()
    monkeypatch.setattr(core, "monotonicTime", clock)
    replicas = Replicas(tmp_path, clock)
    node = await replicas.leader()
    await replicas.run(0.3)
    for i in range(10):  # ten one-record batches: offsets 0..9
        replicas.send(node, make_batch([(None, b"v%d" % i)]))
    await replicas.run(0.5)
    partition = replicas.partitions[node]
    assert partition.high_watermark == 10
    yield replicas, partition
    replicas.close()


def manager(clock: ManualClock, **configs: str) -> ShareManager:
    return ShareManager(lambda _group: gc.values({**EARLIEST, **configs}), clock)


def values(fetched: Fetched) -> dict[int, bytes]:
    """offset -> value of the records the member holds (the client keeps only those)."""
    held = {o for r in fetched.acquired for o in range(r.first_offset, r.last_offset + 1)}
    records = MemoryRecords(fetched.records)
    found = {}
    while (batch := records.next_batch()) is not None:
        found.update({r.offset: r.value for r in batch if r.offset in held})
    return found


async def fetch(share: ShareManager, member: str, p: Partition, wait: float = 0.0):
    got = await share.fetch("g", member, [(KEY, p)], wait, 1 << 20, 500)
    return got.get(KEY)


async def test_each_record_goes_to_one_member_and_a_release_brings_it_back(leader) -> None:
    _, p = leader
    clock = ManualClock()
    share = manager(clock)
    first = await fetch(share, "a", p)
    assert first is not None and values(first) == {i: b"v%d" % i for i in range(10)}
    assert {r.delivery_count for r in first.acquired} == {1}
    assert await fetch(share, "b", p) is None  # everything is held by a
    accept = AckBatch(0, 4, (AckType.ACCEPT,))
    release = AckBatch(5, 9, (AckType.RELEASE,))
    assert share.acknowledge("g", "b", KEY, p, [accept]) == ErrorCode.invalid_record_state
    assert share.acknowledge("g", "a", KEY, p, [accept, release]) == ErrorCode.none
    again = await fetch(share, "b", p)
    assert again is not None and sorted(values(again)) == [5, 6, 7, 8, 9]
    assert {r.delivery_count for r in again.acquired} == {2}


async def test_an_expired_lock_and_a_closed_session_hand_records_back(leader) -> None:
    _, p = leader
    clock = ManualClock()
    share = manager(clock, **{gc.RECORD_LOCK_DURATION_MS: "15000"})
    assert share.lock_duration_ms("g") == 15000
    assert await fetch(share, "a", p) is not None
    await clock.advance(14.9)
    assert await fetch(share, "b", p) is None
    await clock.advance(0.2)  # a's lock ran out: the records are the group's again
    held_by_b = await fetch(share, "b", p)
    assert held_by_b is not None and len(values(held_by_b)) == 10
    share.release("g", "b")  # b's session closed (ShareAcknowledge epoch -1)
    back = await fetch(share, "c", p)
    assert back is not None and {r.delivery_count for r in back.acquired} == {3}


async def test_a_fetch_waits_for_new_records(leader) -> None:
    replicas, p = leader
    share = manager(ManualClock())
    node = next(n for n, q in replicas.partitions.items() if q is p)
    assert share.acknowledge("g", "a", KEY, p, []) == ErrorCode.invalid_record_state
    taken = await fetch(share, "a", p)
    assert taken is not None
    waiting = asyncio.ensure_future(fetch(share, "a", p, wait=30.0))
    await replicas.run(0.2)
    assert not waiting.done()
    replicas.send(node, make_batch([(None, b"late")]))
    await replicas.run(0.5)
    got = await waiting
    assert got is not None and values(got) == {10: b"late"}


async def test_the_group_starts_at_the_high_watermark_by_default(leader) -> None:
    _, p = leader
    share = ShareManager(lambda _group: gc.values({}), ManualClock())
    assert await fetch(share, "a", p) is None  # latest: only what comes after
