"""Time, for code that waits on it: a seam, so tests move time by hand instead of sleeping
(tests/support/clock.py has the manual one)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock seconds since the Unix epoch: what records carry and retention counts
        in. Timers do not follow it: they are relative to when they were set."""
        ...

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Timer:
        """Calls `callback(*args)` on the event loop `delay` seconds from now."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class LoopClock:
    """The real time: the system's wall clock and the running event loop's timers."""

    def now(self) -> float:
        return time.time()

    def call_later(
        self, delay: float, callback: Callable[..., object], *args: Any
    ) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(delay, callback, *args)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


LOOP_CLOCK = LoopClock()


def now_ms(clock: Clock) -> int:
    return int(clock.now() * 1000)
