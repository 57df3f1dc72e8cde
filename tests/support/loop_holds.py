"""The longest the running event loop was held, for in-process tests that a large request
never freezes a node (loop_stalls.py reads a real node's own stall histogram instead)."""

from __future__ import annotations

import asyncio
import gc
import time
from types import TracebackType


class LoopHolds:
    """`async with LoopHolds() as holds:` ... `holds.longest`: a task asks to run every half
    millisecond, and the longest it waited past that is how long something held the loop,
    less the time the loop's thread was ready but waiting for a CPU other processes had (the
    kernel's schedstat). That time is not the handler's: under a loaded machine the plain wait
    read 0.146-0.158 s for handlers that hold the loop 20-35 ms. Blocking on the loop (a lock,
    a thread's result, a synchronous read) still counts. Long-lived objects are frozen, as a
    node freezes its own (raftlog/common/heap.py), so a collection of the test's own heap does
    not count either."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._done = False
        self._watcher: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopHolds:
        gc.collect()
        gc.freeze()
        self._watcher = asyncio.create_task(self._watch())
        await asyncio.sleep(0.002)
        self.longest = 0.0  # the watcher's own start is not a hold
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._done = True
        try:
            if self._watcher is not None:
                await self._watcher
        finally:
            gc.unfreeze()

    async def _watch(self) -> None:
        last, waited = time.perf_counter(), _cpu_wait()
        while not self._done:
            await asyncio.sleep(0.0005)
            now, now_waited = time.perf_counter(), _cpu_wait()
            self.longest = max(self.longest, (now - last) - (now_waited - waited))
            last, waited = now, now_waited


def _cpu_wait() -> float:
    """Seconds this thread has so far waited, runnable, for a CPU (0 where the kernel does not
    say: the plain wait is measured then)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0
