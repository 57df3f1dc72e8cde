"""The controller's ticker (controller/ticker.py): groups are ticked when their timers are due,
and between those times, or while every group is quiet, its loop sleeps."""

from __future__ import annotations

import asyncio
import time

from raftlog.controller.ticker import Tickable, Ticker
from raftlog.raft.elections import ElectionBudget


class Group:
    """A group whose next due time the test sets; its ticks are counted."""

    def __init__(self, ticker: Ticker) -> None:
        self.name = "g"
        self.ticks: list[float] = []
        self.next: float | None = None
        self._ticker = ticker

    def tick(self) -> None:
        self.ticks.append(time.monotonic())
        self._ticker.set_due(self, self.next)


class CountingTicker(Ticker):
    """Counts the rounds of the ticker's loop (each takes the due groups off the heap)."""

    rounds = 0

    def due_groups(self) -> list[Tickable]:
        self.rounds += 1
        return super().due_groups()


async def test_a_ticker_sleeps_while_no_group_is_due_and_wakes_for_the_next_due_time() -> None:
    ticker = CountingTicker(ElectionBudget(100.0, 25, time.monotonic), period=0.02)
    group = Group(ticker)
    ticker.start()
    try:
        ticker.add(group)  # due at once: the first round ticks it; it is quiet after
        await asyncio.sleep(0.1)
        assert len(group.ticks) == 1
        rounds = ticker.rounds
        await asyncio.sleep(0.3)  # fifteen periods, nothing due
        assert ticker.rounds == rounds
        # A due time set while it sleeps wakes it in time for that one; the sleep before it
        # lasts until about then, not a period at a time.
        group.next = None
        asked = time.monotonic()
        ticker.set_due(group, asked + 0.2)
        await asyncio.sleep(0.1)
        assert len(group.ticks) == 1 and ticker.rounds <= rounds + 1
        await asyncio.sleep(0.2)
        assert len(group.ticks) == 2 and group.ticks[1] >= asked + 0.2
        assert ticker.rounds <= rounds + 3
    finally:
        ticker.stop()
