"""Opening compressed batches admitted against the node's request memory by their decompressed
size (raftlog/common/memory_budget.py): forty 2 KB zstd batches of 60 MB each, recompressed at once,
took a node from 238 to 784 MB when only their wire bytes were counted. The budget, its
timeouts on a manual clock, and a real leader replica's produce path with its budget held."""

from __future__ import annotations

import asyncio
import gc
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import zstandard
from support.clock import ManualClock, settle
from support.raftnet import Clock
from support.replicas import Replicas, values
from support.wire import make_batch, with_payload, zstd_bomb

from kafka_api.request_memory import Refused, RequestMemory
from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.common.memory_budget import MemoryBudget, run_opened

from .test_partition_produce import checks_finished, done, leading

MB = 1024 * 1024
GZIP, ZSTD = 1, 4


@pytest.fixture
def executor():
    pool = ThreadPoolExecutor(max_workers=4)
    yield pool
    pool.shutdown(wait=True)


def test_a_size_is_granted_while_it_fits_or_while_nothing_else_is_open() -> None:
    budget = MemoryBudget(100)
    assert budget.try_open(60)
    assert not budget.try_open(50)  # 110 > 100 while another batch is open
    assert budget.try_open(40)
    assert budget.try_open(0)  # nothing to open: never waits
    budget.close(60)
    budget.close(40)
    assert budget.opened == 0
    assert budget.try_open(100)  # alone, a batch may take all of it


def test_request_bytes_and_read_buffers_share_the_budget_with_opened_batches() -> None:
    memory = RequestMemory(100)
    memory.hold(30)  # requests not yet answered
    assert memory.grow(10, authenticated=True)  # a read buffer
    assert memory.try_open(60)  # 30 + 10 + 60 = 100
    assert not memory.try_open(1)
    # a frame's buffer now waits for the opened batch rather than being refused: that
    # memory comes back when the batch's thread ends
    assert memory.grow(10, authenticated=True) is False
    woken = []
    memory.wait("connection", lambda: woken.append(True))
    memory.close(60)
    assert woken == [True]
    assert memory.grow(10, authenticated=True)
    # half-read frames alone holding it: waiting would not help, as before
    lone = RequestMemory(100)
    assert lone.grow(100, authenticated=True)
    with pytest.raises(Refused):
        lone.grow(10, authenticated=True)


async def test_a_batch_waits_for_room_and_opens_when_another_thread_finishes(executor) -> None:
    budget = MemoryBudget(100)
    clock = ManualClock()
    release = threading.Event()
    first = asyncio.ensure_future(
        run_opened(budget, 80, 5.0, executor, release.wait, 10, clock=clock)
    )
    await settle()
    second = asyncio.ensure_future(run_opened(budget, 50, 5.0, executor, len, b"ab", clock=clock))
    await clock.advance(4.0)
    assert not second.done() and budget.opened == 80  # waiting, nothing opened for it
    release.set()
    assert await asyncio.wait_for(first, 10) is True
    assert await asyncio.wait_for(second, 10) == 2
    await settle()
    assert budget.opened == 0


async def test_no_room_within_the_timeout_is_request_timed_out_and_nothing_runs(
    executor,
) -> None:
    budget = MemoryBudget(100)
    clock = ManualClock()
    assert budget.try_open(90)
    ran = []
    waiting = asyncio.ensure_future(
        run_opened(budget, 20, 2.0, executor, ran.append, 1, clock=clock)
    )
    await clock.advance(1.9)
    assert not waiting.done()
    await clock.advance(0.2)
    with pytest.raises(KafkaError) as info:
        await waiting
    assert info.value.code == ErrorCode.request_timed_out
    assert ran == [] and budget.opened == 90
    budget.close(90)
    assert budget._waiting == {}  # the timed-out waiter left


async def test_more_than_the_whole_budget_is_refused_at_once(executor) -> None:
    budget = MemoryBudget(100)
    with pytest.raises(KafkaError) as info:
        await run_opened(budget, 101, 5.0, executor, len, b"", clock=ManualClock())
    assert info.value.code == ErrorCode.message_too_large
    assert budget.opened == 0


async def test_memory_is_given_back_when_the_thread_ends_not_when_the_caller_stops_waiting(
    executor,
) -> None:
    budget = MemoryBudget(100)
    release = threading.Event()
    task = asyncio.ensure_future(
        run_opened(budget, 70, 5.0, executor, release.wait, 10, clock=ManualClock())
    )
    await settle()
    task.cancel()
    await settle()
    assert budget.opened == 70  # the thread still holds what it opened
    release.set()
    for _ in range(100):
        await asyncio.sleep(0.01)
        if budget.opened == 0:
            break
    assert budget.opened == 0


# --- a leader replica's produce path ----------------------------------------------------------


@pytest.fixture
async def replicas(tmp_path: Path):
    r = Replicas(tmp_path, Clock())
    yield r
    r.close()


def zstd_records(*vals: bytes) -> bytes:
    """A batch of `vals` with its records section zstd-compressed (its CRC made valid)."""
    plain = make_batch([(None, v) for v in vals])
    return with_payload(plain, ZSTD, zstandard.ZstdCompressor().compress(plain[61:]))


async def test_a_produce_waits_for_room_in_its_place_and_is_written_when_there_is(
    replicas: Replicas,
) -> None:
    """The budget held by others: the compressed batch is not opened, the plain request
    behind it keeps behind it, and both are written in order once memory is given back."""
    leader, p = await leading(replicas)
    budget = MemoryBudget(1 * MB)
    replicas.contexts[leader].memory = budget
    assert budget.try_open(1 * MB)  # another batch holds all of it
    compressed = replicas.send(leader, zstd_records(b"a" * 1000, b"b" * 1000))
    plain = replicas.send(leader, make_batch([(None, b"c")]))
    await replicas.run(0.3)
    assert not compressed.done() and not plain.done()
    assert budget.opened == 1 * MB
    budget.close(1 * MB)
    await checks_finished(p)
    await replicas.run(0.3)
    assert [r.base_offset for r in done(compressed, plain)] == [0, 2]
    assert values(p) == [b"a" * 1000, b"b" * 1000, b"c"]
    assert budget.opened == 0


async def test_a_batch_decompressing_past_the_budget_is_refused_and_not_stored(
    replicas: Replicas,
) -> None:
    leader, p = await leading(replicas)
    replicas.contexts[leader].memory = MemoryBudget(2 * MB)
    bomb = with_payload(make_batch([(None, b"x")]), ZSTD, zstd_bomb(3 * MB))
    refused = replicas.send(leader, bomb)
    after = replicas.send(leader, make_batch([(None, b"y")]))
    await checks_finished(p)
    await replicas.run(0.3)
    assert done(refused)[0].error == ErrorCode.message_too_large
    assert done(after)[0].base_offset == 0
    assert values(p) == [b"y"]


async def test_a_check_failing_after_its_leader_stepped_down_is_read_not_logged(
    replicas: Replicas, caplog: pytest.LogCaptureFixture
) -> None:
    """A request waiting for room when its leader steps down is answered then; the check
    that opens it later and fails is still read (asyncio logs an ERROR for an exception
    nobody read). gzip: its check always runs in a thread (check_inline)."""
    old, p = await leading(replicas)
    budget = MemoryBudget(1 * MB)
    replicas.contexts[old].memory = budget
    assert budget.try_open(1 * MB)
    wrong = bytearray(make_batch([(None, b"a" * 100), (None, b"b" * 100)]))
    wrong[23:27] = (2).to_bytes(4, "big")  # last offset delta
    wrong[57:61] = (3).to_bytes(4, "big")  # three records claimed, two inside
    gzip = zlib.compressobj(wbits=31)
    payload = gzip.compress(bytes(wrong[61:])) + gzip.flush()
    waiting = replicas.send(old, with_payload(bytes(wrong), GZIP, payload))
    replicas.net.isolate(old)
    while p.is_leader:
        await replicas.step()
    assert done(waiting)[0].error == ErrorCode.not_leader_or_follower
    tasks = [t for t in asyncio.all_tasks() if "_opened" in repr(t)]
    assert len(tasks) == 1  # the request left the queue; its check still waits for room
    budget.close(1 * MB)
    for _ in range(300):  # the check runs in a thread, on real time
        if tasks[0].done():
            break
        await asyncio.sleep(0.01)
    assert tasks[0].done()
    del tasks
    gc.collect()
    await settle()
    assert "never retrieved" not in caplog.text
