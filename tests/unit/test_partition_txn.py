"""The log side of transactions on a partition's three replicas (tests/support/replicas.py):
what a read_committed consumer may read (the last stable offset), the aborted transactions
it is told of, and that every replica, restarted or newly leading, computes the same."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch
from support.raftnet import Clock
from support.replicas import IDS, Replicas
from support.wire import make_batch

from raftlog.api.values import LATEST_TIMESTAMP
from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.partition.partition import Partition
from raftlog.partition.producer_state import AbortedTxn, ActiveProducer
from raftlog.storage.batch import iter_batches

PID = 7


@pytest.fixture
async def replicas(tmp_path: Path):
    r = Replicas(tmp_path, Clock())
    yield r
    r.close()


def txn_batch(*vals: bytes, seq: int = 0, pid: int = PID) -> bytes:
    return make_batch([(None, v) for v in vals], producer=(pid, 0, seq), transactional=True)


async def leading(replicas: Replicas) -> tuple[str, Partition]:
    leader = await replicas.leader()
    await replicas.run(0.3)
    return leader, replicas.partitions[leader]


async def committed(replicas: Replicas, answer: asyncio.Future | object) -> None:
    result = await replicas.until(asyncio.ensure_future(answer))  # type: ignore[arg-type]
    assert result.error == ErrorCode.none, result
    await replicas.run(0.2)  # the followers learn the commit index


async def test_an_open_transaction_holds_read_committed_back_until_its_abort_is_listed(
    replicas: Replicas,
) -> None:
    """Records of a transaction still open are below the high watermark but not readable
    read_committed; once the abort marker commits, they are, with the abort listed so the
    consumer drops them; a plain record after them was held back meanwhile too."""
    leader, p = await leading(replicas)
    await committed(replicas, p.produce(txn_batch(b"t1", b"t2"), -1, 30_000, transactional=True))
    await committed(replicas, p.produce(make_batch([(None, b"plain")]), -1, 30_000))
    assert p.high_watermark == 3
    for replica in replicas.partitions.values():
        assert replica.last_stable_offset == 0
    assert p.read(0, 1 << 20, True, committed=True) == b""
    assert len(p.read(0, 1 << 20, True)) > 0  # read_uncommitted sees them
    latest = await p.offset_for_timestamp(LATEST_TIMESTAMP, committed=True)
    assert latest is not None and latest.offset == 0

    await committed(replicas, p.write_marker(PID, 0, False, 0))
    for replica in replicas.partitions.values():
        assert replica.last_stable_offset == replica.high_watermark == 4
        assert replica.aborted_transactions(0, 4) == [AbortedTxn(PID, 0, 3)]
    data = p.read(0, 1 << 20, True, committed=True)
    batches = [h for _, h in iter_batches(data)]
    assert [h.is_control for h in batches] == [False, False, True]
    marker = DefaultRecordBatch(data[sum(h.size for h in batches[:2]) :])
    assert marker.is_control_batch and marker.producer_id == PID


async def test_a_commit_releases_the_transaction_and_lists_nothing(replicas: Replicas) -> None:
    _, p = await leading(replicas)
    await committed(replicas, p.produce(txn_batch(b"a"), -1, 30_000, transactional=True))
    assert p.last_stable_offset == 0
    await committed(replicas, p.write_marker(PID, 0, True, 0))
    assert p.last_stable_offset == 2 and p.aborted_transactions(0, 2) == []


async def test_a_read_committed_long_poll_waits_for_the_marker_not_for_the_next_commit(
    replicas: Replicas,
) -> None:
    """A read_committed Fetch parked at the last stable offset must go on waiting while other
    records commit behind the open transaction (answered at once, its client would fetch in a
    loop), and wake when the marker moves the last stable offset."""
    _, p = await leading(replicas)
    await committed(replicas, p.produce(txn_batch(b"a"), -1, 30_000, transactional=True))
    waiting = asyncio.ensure_future(p.wait_for_data(0, 60.0, committed=True))
    await committed(replicas, p.produce(make_batch([(None, b"plain")]), -1, 30_000))
    assert not waiting.done()
    await committed(replicas, p.write_marker(PID, 0, True, 0))
    await asyncio.sleep(0)
    assert waiting.done()


async def test_a_new_leader_and_a_restarted_replica_rebuild_the_same_state_from_the_log(
    replicas: Replicas,
) -> None:
    """Open and aborted transactions are rebuilt from the log after a kill -9 (nothing saved
    on the way down), and the replica that leads next answers as the old leader did."""
    leader, p = await leading(replicas)
    await committed(replicas, p.produce(txn_batch(b"a"), -1, 30_000, transactional=True))
    await committed(replicas, p.write_marker(PID, 0, False, 0))
    await committed(
        replicas, p.produce(txn_batch(b"b", seq=1, pid=8), -1, 30_000, transactional=True)
    )
    for node_id in IDS:
        replicas.crash_and_restart(node_id)
    new_leader = await replicas.leader(above_term=p.group.term)
    q = replicas.partitions[new_leader]
    await replicas.run(0.3)
    assert q.last_stable_offset == 2  # pid 8's transaction, open from offset 2
    assert q.aborted_transactions(0, q.high_watermark) == [AbortedTxn(PID, 0, 1)]


async def test_a_stale_epochs_marker_is_refused_and_ends_nothing(replicas: Replicas) -> None:
    _, p = await leading(replicas)
    batch = make_batch([(None, b"a")], producer=(PID, 3, 0), transactional=True)
    await committed(replicas, p.produce(batch, -1, 30_000, transactional=True))
    answer = await replicas.until(asyncio.ensure_future(p.write_marker(PID, 2, True, 0)))
    assert answer.error == ErrorCode.invalid_producer_epoch
    assert p.last_stable_offset == 0


async def test_an_older_coordinators_marker_is_refused_and_leaves_the_next_transaction_open(
    replicas: Replicas,
) -> None:
    """The fault suite's seed 2123: the epoch-14 coordinator committed a transaction; the
    producer opened its next one; the epoch-13 coordinator, cut off, retried its marker of the
    same commit. Accepted, it closed the new transaction as committed and a read_committed
    consumer read records the epoch-14 coordinator then aborted. Refused, nothing stored, the
    abort hides them; every replica, restarted from the log, goes on refusing it."""
    _, p = await leading(replicas)
    await committed(replicas, p.produce(txn_batch(b"a"), -1, 30_000, transactional=True))
    await committed(replicas, p.write_marker(PID, 0, True, 14))
    await committed(replicas, p.produce(txn_batch(b"b", seq=1), -1, 30_000, transactional=True))
    end = p.high_watermark
    stale = await replicas.until(asyncio.ensure_future(p.write_marker(PID, 0, True, 13)))
    assert stale.error == ErrorCode.transaction_coordinator_fenced
    await replicas.run(0.2)
    assert p.high_watermark == end == 3  # nothing stored
    assert p.last_stable_offset == 2  # the transaction from offset 2 is still open
    assert p.read(2, 1 << 20, True, committed=True) == b""
    await committed(replicas, p.write_marker(PID, 0, False, 14))
    for replica in replicas.partitions.values():
        assert replica.last_stable_offset == replica.high_watermark == 4
        assert replica.aborted_transactions(0, 4) == [AbortedTxn(PID, 2, 3)]

    for node_id in IDS:
        replicas.crash_and_restart(node_id)
    q = replicas.partitions[await replicas.leader(above_term=p.group.term)]
    await replicas.run(0.3)
    await committed(replicas, q.produce(txn_batch(b"c", seq=2), -1, 30_000, transactional=True))
    stale = await replicas.until(asyncio.ensure_future(q.write_marker(PID, 0, True, 13)))
    assert stale.error == ErrorCode.transaction_coordinator_fenced
    assert q.last_stable_offset == 4


async def test_two_coordinators_markers_racing_through_the_queue_only_the_newer_lands(
    replicas: Replicas,
) -> None:
    """Both submitted before either is appended: the judgement is at append, in log order, so
    the older coordinator's marker behind the newer's is refused."""
    _, p = await leading(replicas)
    await committed(replicas, p.produce(txn_batch(b"a"), -1, 30_000, transactional=True))
    newer = p.write_marker(PID, 0, False, 14)
    older = p.write_marker(PID, 0, True, 13)
    assert (await replicas.until(asyncio.ensure_future(newer))).error == ErrorCode.none
    assert (await replicas.until(asyncio.ensure_future(older))).error == (
        ErrorCode.transaction_coordinator_fenced
    )
    await replicas.run(0.2)
    assert p.high_watermark == 2 and p.aborted_transactions(0, 2) == [AbortedTxn(PID, 0, 1)]


async def test_the_leader_describes_its_producers_and_their_open_transactions(
    replicas: Replicas,
) -> None:
    """DescribeProducers reads the leader's producer state; a follower refuses, as every read
    a client is served from does."""
    leader, p = await leading(replicas)
    await committed(replicas, p.produce(make_batch([(None, b"plain")]), -1, 30_000))
    await committed(replicas, p.produce(txn_batch(b"a", b"b"), -1, 30_000, transactional=True))
    assert p.active_producers() == [ActiveProducer(PID, 0, 1, 1)]
    await committed(replicas, p.write_marker(PID, 0, True, 0))
    assert p.active_producers() == [ActiveProducer(PID, 0, 1, -1, 0)]
    follower = next(r for node, r in replicas.partitions.items() if node != leader)
    with pytest.raises(KafkaError) as refused:
        follower.active_producers()
    assert refused.value.code == ErrorCode.not_leader_or_follower
