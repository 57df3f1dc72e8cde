"""The node's request memory as raftlog sees it: the part that opening compressed batches
takes. Forty 2 KB zstd batches of 60 MB each, recompressed at once, took a node from 238 to
784 MB (the wire bytes were all the budget counted). A batch's decompressed size is now
admitted here before it is opened, and given back when the thread that opened it is done.

kafka_api.request_memory.RequestMemory is the same budget with the listeners' requests and read
buffers in it (queued.max.request.bytes): one node, one budget, whatever holds the bytes.

Admission: a size is granted while it fits beside what is held, or when no other batch is
being opened (so one batch always makes progress, and the budget is passed by one batch at
most, as Kafka's memory pool lets one request pass it). A size larger than the budget is never
granted: that batch is refused, not waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

from raftlog.common.clock import LOOP_CLOCK, Clock
from raftlog.common.errors import ErrorCode, KafkaError

_T = TypeVar("_T")

# What a node's requests hold at most, all together (Kafka's queued.max.request.bytes idea).
MAX_QUEUED_BYTES = 256 * 1024 * 1024


class MemoryBudget:
    def __init__(self, limit: int = MAX_QUEUED_BYTES) -> None:
        self.limit = limit
        self.opened = 0  # decompressed bytes of batches being opened in threads
        # Waiting for room (read buffers, batches to open), woken when memory is given back.
        self._waiting: dict[object, Callable[[], None]] = {}

    def in_use(self) -> int:
        """Every byte the budget holds (RequestMemory adds its requests and read buffers)."""
        return self.opened

    def try_open(self, size: int) -> bool:
        """Takes `size` decompressed bytes if they fit beside what is held, or if no batch is
        being opened now; False: wait for memory to be given back."""
        if size and self.opened and self.in_use() + size > self.limit:
            return False
        self.opened += size
        return True

    def close(self, size: int) -> None:
        """A batch's decompressed bytes given back (its thread finished)."""
        self.opened -= size
        self._wake()

    def wait(self, waiter: object, resume: Callable[[], None]) -> None:
        self._waiting[waiter] = resume

    def stop_waiting(self, waiter: object) -> None:
        self._waiting.pop(waiter, None)

    def _wake(self) -> None:
        if self._waiting:
            waiting, self._waiting = self._waiting, {}
            for resume in waiting.values():
                resume()


async def run_opened(
    budget: MemoryBudget,
    size: int,
    timeout: float,
    executor: Executor,
    fn: Callable[..., _T],
    *args: object,
    clock: Clock = LOOP_CLOCK,
) -> _T:
    """`fn(*args)` in `executor` once `size` decompressed bytes are admitted; they are given
    back when the thread is done, not when the caller stops waiting (a thread cannot be
    stopped, and its memory is held until it ends). KafkaError MESSAGE_TOO_LARGE at once if
    `size` is more than the whole budget; REQUEST_TIMED_OUT if no room came within `timeout`
    seconds (nothing was opened, so nothing is stored)."""
    if size > budget.limit:
        raise KafkaError(
            ErrorCode.message_too_large,
            f"record batches decompress to {size} bytes, more than the node's request memory "
            f"({budget.limit} bytes, queued.max.request.bytes)",
        )
    if not budget.try_open(size):
        await _room(budget, size, timeout, clock)
    loop = asyncio.get_running_loop()
    try:
        work = executor.submit(fn, *args)
    except BaseException:
        budget.close(size)
        raise
    work.add_done_callback(lambda _w: _given_back(loop, budget, size))
    return await asyncio.wrap_future(work)


def _given_back(loop: asyncio.AbstractEventLoop, budget: MemoryBudget, size: int) -> None:
    """Called in the thread that finished (or where the work was cancelled unstarted)."""
    with contextlib.suppress(RuntimeError):  # the loop closed first: nothing left to admit
        loop.call_soon_threadsafe(budget.close, size)


async def _room(budget: MemoryBudget, size: int, timeout: float, clock: Clock) -> None:
    """Waits until try_open(size) grants, or raises REQUEST_TIMED_OUT after `timeout`."""
    loop = asyncio.get_running_loop()
    granted: asyncio.Future[None] = loop.create_future()
    waiter = object()

    def retry() -> None:
        if granted.done():
            return
        if budget.try_open(size):
            granted.set_result(None)
        else:
            budget.wait(waiter, retry)

    def time_out() -> None:
        if not granted.done():
            granted.set_exception(
                KafkaError(
                    ErrorCode.request_timed_out,
                    f"no room in the node's request memory to open {size} bytes of record "
                    f"batches within {timeout:.1f} s",
                )
            )

    budget.wait(waiter, retry)
    timer = clock.call_later(timeout, time_out)
    try:
        await granted
    except BaseException:
        if granted.done() and not granted.cancelled() and granted.exception() is None:
            budget.close(size)  # granted, then cancelled before it could be used
        raise
    finally:
        timer.cancel()
        budget.stop_waiting(waiter)
