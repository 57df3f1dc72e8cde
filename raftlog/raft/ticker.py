"""Drives every Raft group of a node from the event loop.

pysyncobj normally runs a thread per group that wakes every 50 ms. Here a group is ticked
right after something happens to it (a proposal, a message) and otherwise on a shared
period for its timers (heartbeats, elections), so a node with many idle groups costs little
and a busy group is never waiting for its next wake-up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

log = logging.getLogger(__name__)


class Tickable(Protocol):
    name: str

    def tick(self) -> None: ...


class Ticker:
    def __init__(self, period: float = 0.05) -> None:
        self._period = period
        self._groups: dict[str, Tickable] = {}
        self._scheduled: set[str] = set()
        self._loop = asyncio.get_event_loop()
        self._task: asyncio.Task | None = None
        self._last_error: dict[str, float] = {}

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def add(self, group: Tickable) -> None:
        self._groups[group.name] = group

    def remove(self, group: Tickable) -> None:
        self._groups.pop(group.name, None)

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
            now = time.monotonic()
            if now - self._last_error.get(group.name, 0.0) > 5.0:
                self._last_error[group.name] = now
                log.exception("raft group %s: tick failed", group.name)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._period)
            for group in list(self._groups.values()):
                self._tick(group)
