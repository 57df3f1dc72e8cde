"""The event-loop stall detector (raftlog/node/loop_stall.py) on a manual clock: a held loop shows
as a stall of about the time it was held, counted, kept as the longest and logged, at most a
line per interval."""

from __future__ import annotations

import logging

import pytest
from support.clock import ManualClock

from raftlog.node.loop_stall import LOG_INTERVAL_S, LoopStallMonitor


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


async def test_a_held_loop_is_a_stall_of_that_long(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="raftlog.node.loop_stall")
    monitor = LoopStallMonitor(clock, clock.now)
    monitor.start()
    await clock.advance(5.0)
    assert sum(monitor.stalls.counts) == 0 and monitor.longest == 0.0
    clock.hold(2.5)
    await clock.advance(0.2)
    assert sum(monitor.stalls.counts) == 1
    assert 2.4 <= monitor.longest <= 2.5
    assert monitor.stalls.counts[monitor.stalls.bounds.index(2.5)] == 1  # in (1, 2.5]
    assert [r.getMessage() for r in caplog.records] == [
        f"event loop stalled for {monitor.longest:.2f}s"
    ]
    # Within the interval a stall is counted, not logged; the next line says how many it was.
    clock.hold(0.5)
    await clock.advance(0.2)
    assert sum(monitor.stalls.counts) == 2 and len(caplog.records) == 1
    await clock.advance(LOG_INTERVAL_S)
    clock.hold(1.0)
    await clock.advance(0.2)
    last = caplog.records[-1].getMessage()
    assert last.startswith(
        ("event loop stalled for 0.9", "event loop stalled for 1.00")
    ) and last.endswith("s (1 more since the last report)")
    assert 2.4 <= monitor.longest <= 2.5
    monitor.stop()
    clock.hold(10.0)
    await clock.advance(1.0)
    assert sum(monitor.stalls.counts) == 3


async def test_short_delays_are_not_stalls(clock: ManualClock) -> None:
    monitor = LoopStallMonitor(clock, clock.now)
    monitor.start()
    for _ in range(20):
        clock.hold(0.04)
        await clock.advance(0.1)
    assert sum(monitor.stalls.counts) == 0
