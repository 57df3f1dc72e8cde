"""Log lines a client can cause, rate-limited so that repeating the cause cannot flood the log."""

from __future__ import annotations

import logging
from collections.abc import Callable

REPORT_INTERVAL_SECONDS = 10.0


class Reports:
    """One log line per kind of event and REPORT_INTERVAL_SECONDS at most, with the count of
    those not reported."""

    def __init__(self, log: logging.Logger, clock: Callable[[], float]) -> None:
        self._log = log
        self._clock = clock
        self._kinds: dict[str, tuple[float, int]] = {}  # kind -> (last logged, unlogged)

    def report(self, kind: str, level: int, message: str, *args: object) -> None:
        now = self._clock()
        logged, unlogged = self._kinds.get(kind, (-REPORT_INTERVAL_SECONDS, 0))
        if now - logged < REPORT_INTERVAL_SECONDS:
            self._kinds[kind] = (logged, unlogged + 1)
            return
        self._kinds[kind] = (now, 0)
        if unlogged:
            self._log.log(level, message + " (and %d more since the last report)", *args, unlogged)
        else:
            self._log.log(level, message, *args)
