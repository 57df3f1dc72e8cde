"""One group's failure is logged, not raised: it must not stop the node's other groups, the
connection that carried its message, or the loop turn. Logged at most every few seconds per
group, so a group failing on every message cannot flood the log."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

INTERVAL = 5.0


class FailureLog:
    def __init__(
        self,
        logger: logging.Logger,
        interval: float = INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}

    def exception(self, key: str, message: str, *args: object) -> None:
        """Call from an `except` block: logs the exception being handled, with its traceback,
        unless `key`'s last one was logged within the interval."""
        now = self._clock()
        if now - self._last.get(key, -self._interval) >= self._interval:
            self._last[key] = now
            self._log.exception(message, *args)
