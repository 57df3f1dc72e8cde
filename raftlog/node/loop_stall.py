"""How long the event loop was held. Every Raft group, listener and timer of a node shares one
loop, so a callback that runs for seconds (a listing built whole, a hash on the loop) stops
heartbeats and costs leaderships. A timer asks to run every INTERVAL_S; how much later than
that it ran is a stall. Each of 50 ms or more is counted in a histogram (/metrics) and the
longest is kept; one of LOG_AT_S or more is logged when the loop is back, at most one line per
LOG_INTERVAL_S with the count of those it stood for."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from raftlog.common.clock import Clock, Timer
from raftlog.common.counters import STALL_BUCKETS, Histogram

log = logging.getLogger(__name__)

INTERVAL_S = 0.1
LOG_AT_S = 0.3
LOG_INTERVAL_S = 10.0


class LoopStallMonitor:
    def __init__(self, clock: Clock, monotonic: Callable[[], float] = time.monotonic) -> None:
        """`clock` sets the timer; `monotonic` reads the time it ran at (a test's manual clock
        gives both)."""
        self._clock = clock
        self._monotonic = monotonic
        self.stalls = Histogram(STALL_BUCKETS)
        self.longest = 0.0
        self._due = 0.0
        self._timer: Timer | None = None
        self._logged_at = -LOG_INTERVAL_S
        self._unlogged = 0  # stalls of LOG_AT_S or more since the last line

    def start(self) -> None:
        self._schedule()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        self._due = self._monotonic() + INTERVAL_S
        self._timer = self._clock.call_later(INTERVAL_S, self._tick)

    def _tick(self) -> None:
        now = self._monotonic()
        stall = max(0.0, now - self._due)
        if stall >= STALL_BUCKETS[0]:
            self.stalls.observe(stall)
            self.longest = max(self.longest, stall)
        if stall >= LOG_AT_S:
            self._unlogged += 1
            if now - self._logged_at >= LOG_INTERVAL_S:
                more = f" ({self._unlogged - 1} more since the last report)" * (self._unlogged > 1)
                log.warning("event loop stalled for %.2fs%s", stall, more)
                self._logged_at, self._unlogged = now, 0
        self._schedule()
