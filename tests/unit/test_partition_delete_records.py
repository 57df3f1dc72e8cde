"""DeleteRecords on three real replicas of one partition (tests/support/replicas.py): the log
start moves through the Raft log, so every replica moves it, a restart keeps it and a next
leader answers from it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support.raftnet import Clock
from support.replicas import IDS, Replicas, values

from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.storage.log import LogConfig


@pytest.fixture
async def replicas(tmp_path: Path):
    r = Replicas(tmp_path, Clock())
    yield r
    r.close()


async def _produced(replicas: Replicas, leader: str, batches: int, first: int = 0) -> None:
    """`batches` batches of 10 records, acks=all, from sequence `first` on."""
    for n in range(batches):
        answer = await replicas.until(replicas.produce(leader, first + 10 * n, 10))
        assert answer.error == ErrorCode.none


def _log_starts(root: Path, node_id: str) -> list[tuple[int, str]]:
    lines = (root / node_id / "history.jsonl").read_text().splitlines()
    return [
        (r["log_start_offset"], r["reason"])
        for r in map(json.loads, lines)
        if r["kind"] == "log_start"
    ]


async def test_every_replica_moves_its_start_and_keeps_it_across_restart_and_leader_change(
    replicas: Replicas, tmp_path: Path
) -> None:
    leader = await replicas.leader()
    await _produced(replicas, leader, 3)  # offsets 0-29
    answer = await replicas.until(replicas.partitions[leader].delete_records(15, 5_000))
    assert answer == (ErrorCode.none, 15)  # mid-batch, as Kafka allows
    await replicas.run(0.3)  # the followers learn the commit
    for node_id in IDS:
        p = replicas.partitions[node_id]
        assert p.log_start_offset == 15
        assert _log_starts(tmp_path, node_id) == [(15, "delete_records")]
    with pytest.raises(KafkaError) as below:
        replicas.partitions[leader].read(14, 1 << 20, True)
    assert below.value.code == ErrorCode.offset_out_of_range
    # the batch holding the start is read whole; the consumer skips what lies below it
    assert values(replicas.partitions[leader])[5:6] == [b"p7-s15"]

    for node_id in IDS:
        replicas.crash_and_restart(node_id)
        assert replicas.partitions[node_id].log_start_offset == 15
    term = max(p.group.term for p in replicas.partitions.values())
    replicas.net.isolate(leader)
    follower = await replicas.leader(among=tuple(i for i in IDS if i != leader), above_term=term)
    p = replicas.partitions[follower]
    assert p.log_start_offset == 15
    earliest = await p.offset_for_timestamp(-2)
    assert earliest is not None and earliest.offset == 15
    # below the start, or back to it, moves nothing and is answered with the start
    assert await replicas.until(p.delete_records(3, 5_000)) == (ErrorCode.none, 15)


async def test_the_offset_is_checked_against_the_high_watermark_and_leadership(
    replicas: Replicas,
) -> None:
    leader = await replicas.leader()
    await _produced(replicas, leader, 2)  # offsets 0-19
    p = replicas.partitions[leader]
    assert await replicas.until(p.delete_records(21, 5_000)) == (
        ErrorCode.offset_out_of_range,
        -1,
    )
    assert await replicas.until(p.delete_records(-2, 5_000)) == (
        ErrorCode.offset_out_of_range,
        -1,
    )
    follower = next(i for i in IDS if i != leader)
    assert await replicas.until(replicas.partitions[follower].delete_records(5, 5_000)) == (
        ErrorCode.not_leader_or_follower,
        -1,
    )
    hw = p.high_watermark
    assert await replicas.until(p.delete_records(-1, 5_000)) == (ErrorCode.none, hw)
    assert p.log_start_offset == hw


async def test_a_deletion_that_cannot_commit_times_out_and_is_not_applied(
    replicas: Replicas,
) -> None:
    """The leader shows the start it proposed at once, as Kafka's leader moves its own start
    before its followers do (a ListOffsets pipelined after the DeleteRecords sees it); if
    that never commits, the next leader's log has the old start, and so has the old leader
    once it learns it was deposed."""
    leader = await replicas.leader()
    await _produced(replicas, leader, 2)
    p = replicas.partitions[leader]
    term = p.group.term
    replicas.net.isolate(leader)
    answer = p.delete_records(10, 0)
    assert p.log_start_offset == 10 and p.log.log_start_offset == 0
    await asyncio.sleep(0.01)
    assert await answer == (ErrorCode.request_timed_out, -1)
    others = tuple(i for i in IDS if i != leader)
    follower = await replicas.leader(among=others, above_term=term)
    assert replicas.partitions[follower].log_start_offset == 0
    replicas.net.heal()
    for _ in range(100):
        await replicas.step()
        if not p.is_leader and p.group.term > term:
            break
    assert all(r.log_start_offset == 0 for r in replicas.partitions.values())


async def test_segments_below_the_start_go_at_retention_and_a_far_follower_learns_the_start(
    replicas: Replicas, tmp_path: Path
) -> None:
    """The segments wholly below the start are deleted once Raft's window no longer needs
    them; a follower that was away while the window was cut installs a snapshot from below
    the start (the whole batch holding it) and takes the start from the snapshot."""
    for p in replicas.partitions.values():
        p.log.config = LogConfig(segment_bytes=400)  # a segment every few batches
    leader = await replicas.leader()
    away = next(i for i in IDS if i != leader)
    replicas.net.isolate(away)
    await _produced(replicas, leader, 12)  # offsets 0-119
    assert await replicas.until(replicas.partitions[leader].delete_records(45, 5_000)) == (
        ErrorCode.none,
        45,
    )
    await _produced(replicas, leader, 1, first=120)
    for node_id in IDS:
        if node_id != away:
            replicas.partitions[node_id].group.force_compaction()
    await replicas.run(0.3)
    p = replicas.partitions[leader]
    before = p.log.segment_start
    p.apply_retention()
    assert before < p.log.segment_start <= 45 == p.log_start_offset
    assert all(s.next_offset > 45 for s in p.log.segments())
    assert p.epochs.entries()[0][1] == p.log.segment_start  # the cache is the segment list

    replicas.net.heal()
    far = replicas.partitions[away]
    for _ in range(200):
        await replicas.step()
        if far.high_watermark == p.high_watermark and far.log_start_offset == 45:
            break
    assert far.log_start_offset == 45
    assert values(far) == values(p)
    assert (45, "install") in _log_starts(tmp_path, away)


async def test_retention_moving_the_start_is_recorded_for_the_audit(
    replicas: Replicas, tmp_path: Path
) -> None:
    leader = await replicas.leader()
    p = replicas.partitions[leader]
    p.log.config = LogConfig(segment_bytes=400, retention_bytes=800)
    await _produced(replicas, leader, 12)
    p.group.force_compaction()
    await replicas.run(0.3)
    p.apply_retention()
    assert p.log_start_offset > 0
    assert _log_starts(tmp_path, leader) == [(p.log_start_offset, "retention")]


async def test_a_producer_whose_batches_lie_below_the_start_is_remembered_after_a_restart(
    replicas: Replicas,
) -> None:
    """Producer 7 wrote offsets 0-9, producer 8 offsets 10-19; the start moves to 15. A
    restarted replica rebuilds its producer state from what its segments hold, as a replica
    that did not restart remembers it: producer 7's retry of its batch is known, not written
    twice."""
    leader = await replicas.leader()
    assert (await replicas.until(replicas.produce(leader, 0, 10, pid=7))).error == ErrorCode.none
    assert (await replicas.until(replicas.produce(leader, 0, 10, pid=8))).error == ErrorCode.none
    assert await replicas.until(replicas.partitions[leader].delete_records(15, 5_000)) == (
        ErrorCode.none,
        15,
    )
    await replicas.run(0.3)
    term = replicas.partitions[leader].group.term
    for node_id in IDS:
        replicas.crash_and_restart(node_id)
    leader = await replicas.leader(above_term=term)
    retry = await replicas.until(replicas.produce(leader, 0, 10, pid=7))
    assert (retry.error, retry.base_offset) == (ErrorCode.none, 0)
    assert replicas.partitions[leader].log_end_offset == 20
