"""Failures of work a node repeats on each partition on a timer (retention, compaction), logged
once per state change instead of at every pass: a partition whose retention failed every
log.retention.check.interval.ms logged a full traceback each time, and the lines that said
something new were lost among them. The first failure of a streak is one WARNING with its
reason (its traceback at DEBUG), the repeats are counted, and the recovery is one line with
the count, as the mesh's silent peers and the Raft state saves are logged."""

from __future__ import annotations

import logging
from collections.abc import Container

Key = tuple[str, int]  # (topic, partition)


class FailureStreaks:
    def __init__(self, logger: logging.Logger, what: str) -> None:
        """`what` names the work in the log lines ("retention of t-0 ...")."""
        self._log = logger
        self._what = what
        self._failing: dict[Key, int] = {}  # partition -> failures in its current streak

    def failed(self, key: Key, error: BaseException) -> None:
        count = self._failing.get(key, 0)
        if count == 0:
            self._log.warning(
                "%s of %s-%d failing: %s: %s (logged again when it works)",
                self._what,
                *key,
                type(error).__name__,
                error,
            )
            self._log.debug("%s of %s-%d failed", self._what, *key, exc_info=error)
        self._failing[key] = count + 1

    def succeeded(self, key: Key) -> None:
        count = self._failing.pop(key, 0)
        if count:
            self._log.info("%s of %s-%d recovered after %d failures", self._what, *key, count)

    def keep(self, live: Container[Key]) -> None:
        """Forgets the streaks of keys no longer worked on (a partition dropped while
        failing), so they neither grow the table nor log a recovery."""
        if self._failing:
            self._failing = {k: n for k, n in self._failing.items() if k in live}
