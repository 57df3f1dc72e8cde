"""Drives the controller's pysyncobj group from the event loop (partitions are ticked by the
Raft core's driver, raft/driver.py).

pysyncobj normally runs a thread per group that wakes every 50 ms. Here a group is ticked
right after something happens to it (a proposal, a message), and otherwise when its timers
are due: after each tick the group says when that is (a leader's next heartbeat, a
follower's election deadline; never, while it is quiet, FORK.md 9), and the shared period's
round ticks only the groups whose time has come. Ticking every group every round cost a
thousand-partition node its whole event loop while the groups elected their leaders. Between
rounds the ticker sleeps until the earliest of those times (none while every group is quiet),
not a period at a time: an idle node's loop is not woken 20 times a second for nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Callable
from typing import Protocol

from raftlog.raft.elections import ElectionBudget
from raftlog.raft.failure_log import FailureLog

log = logging.getLogger(__name__)


class Tickable(Protocol):
    name: str

    def tick(self) -> None: ...


class Ticker:
    def __init__(
        self,
        elections: ElectionBudget,
        period: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`elections`: the node's budget, shared with its Raft driver."""
        self._period = period
        self._clock = clock
        self.elections = elections
        self._groups: dict[str, Tickable] = {}
        self._due: dict[str, float] = {}  # when each group's timers next need a tick
        self._timers: list[tuple[float, str]] = []  # heap of (due, group); stale ones skipped
        self._scheduled: set[str] = set()
        self._sleeping_until: float | None = None  # None: not asleep; inf: until a due is set
        self._woken = asyncio.Event()
        self._loop = asyncio.get_event_loop()
        self._task: asyncio.Task[None] | None = None
        self._failures = FailureLog(log)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def add(self, group: Tickable) -> None:
        self._groups[group.name] = group
        self.set_due(group, 0.0)

    def remove(self, group: Tickable) -> None:
        self._groups.pop(group.name, None)
        self._due.pop(group.name, None)

    def set_due(self, group: Tickable, due: float | None) -> None:
        """When the group's timers next need a tick (the clock's time); None: not before
        something happens to it."""
        name = group.name
        if due is None:
            self._due.pop(name, None)
        elif self._due.get(name) != due and name in self._groups:
            self._due[name] = due
            heapq.heappush(self._timers, (due, name))
            if self._sleeping_until is not None and due < self._sleeping_until:
                self._woken.set()

    def schedule(self, group: Tickable) -> None:
        """Ticks the group soon; many requests before it runs cost one tick."""
        if group.name not in self._scheduled:
            self._scheduled.add(group.name)
            self._loop.call_soon(self._tick_scheduled, group.name)

    def _tick_scheduled(self, name: str) -> None:
        self._scheduled.discard(name)
        group = self._groups.get(name)
        if group is not None:
            self._tick(group)

    def _tick(self, group: Tickable) -> None:
        try:
            group.tick()
        except Exception:
            self._failures.exception(group.name, "raft group %s: tick failed", group.name)

    def due_groups(self) -> list[Tickable]:
        """Takes the groups whose timers are due off the timer heap."""
        now = self._clock()
        due = []
        timers = self._timers
        while timers and timers[0][0] <= now:
            when, name = heapq.heappop(timers)
            if self._due.get(name) == when:
                del self._due[name]  # the tick sets the next one
                due.append(self._groups[name])
        return due

    def _next_due(self) -> float | None:
        """The earliest time a group's timers need a tick (stale heap entries dropped)."""
        timers = self._timers
        while timers and self._due.get(timers[0][1]) != timers[0][0]:
            heapq.heappop(timers)
        return timers[0][0] if timers else None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._period)
            for group in self.due_groups():
                self._tick(group)
            due = self._next_due()
            # The round's period is its resolution: it sleeps on when the next due is farther.
            until = float("inf") if due is None else due - self._period
            wait = until - self._clock()
            if wait > 0:
                self._sleeping_until = until
                self._woken.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._woken.wait(), None if due is None else wait)
                self._sleeping_until = None
