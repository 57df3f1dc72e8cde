"""A `raftlog.common.clock.Clock` whose time moves only when the test moves it: timeouts are asserted
exactly and nothing sleeps. Its wall clock and its timers are one timeline."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

SETTLE_ROUNDS = 20  # loop turns that let every ready callback chain of a test finish


async def settle() -> None:
    """Lets tasks and callbacks that are ready run (loading, answered waiters, fired timers)."""
    for _ in range(SETTLE_ROUNDS):
        await asyncio.sleep(0)


class ManualTimer:
    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, ManualTimer]] = []  # heap of (due, order, timer)
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> ManualTimer:
        timer = ManualTimer(callback, args)
        heapq.heappush(self._timers, (self._now + max(delay, 0.0), next(self._order), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        woken = asyncio.get_running_loop().create_future()
        timer = self.call_later(seconds, _wake, woken)
        try:
            await woken
        finally:
            timer.cancel()

    def next_due(self) -> float | None:
        """When the earliest live timer fires; None if none is set."""
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    async def advance(self, seconds: float) -> None:
        """Moves time on by `seconds`: each timer due on the way fires at its own time, and the
        loop runs what it set off before the next one, as a real loop would."""
        await self._advance_to(self._now + seconds)

    def hold(self, seconds: float) -> None:
        """The loop is held for `seconds` (a callback that ran that long): time moves on and
        no timer fires until the next advance, which fires those due late, at once."""
        self._now += seconds

    async def _advance_to(self, until: float) -> None:
        await settle()
        while (due := self.next_due()) is not None and due <= until:
            _, _, timer = heapq.heappop(self._timers)
            self._now = max(self._now, due)
            timer.callback(*timer.args)
            await settle()
        self._now = until

    async def run(self, awaitable: Awaitable[T]) -> T:
        """Awaits `awaitable`, moving time on to the next timer whenever nothing else can run:
        what a test that waited in real time would see, without the wait."""
        task = asyncio.ensure_future(awaitable)
        while True:
            await settle()
            if task.done():
                return task.result()
            due = self.next_due()
            if due is None:
                task.cancel()
                raise AssertionError("waiting for something no timer will bring")
            await self._advance_to(due)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
