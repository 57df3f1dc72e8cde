"""Retention and compaction failures (raftlog/node/failure_streaks.py, the node's timer loops): a
partition failing at every pass is logged once when it starts failing, with its reason and no
traceback, once when it recovers, with the count, and again only when it fails anew."""

from __future__ import annotations

import logging

import pytest

from raftlog.node.failure_streaks import FailureStreaks

log = logging.getLogger("raftlog.node.node")
A, B = ("t", 0), ("t", 1)


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    found = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    caplog.clear()
    return found


def fail(streaks: FailureStreaks, key: tuple[str, int]) -> None:
    try:
        raise OSError(5, "Input/output error")
    except OSError as exc:
        streaks.failed(key, exc)


def test_a_failing_partition_is_logged_once_per_state_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="raftlog.node.node")
    streaks = FailureStreaks(log, "retention")
    for _ in range(100):  # a pass every interval, failing each time
        fail(streaks, A)
        streaks.succeeded(B)
    assert lines(caplog) == [
        (
            logging.WARNING,
            "retention of t-0 failing: OSError: [Errno 5] Input/output error "
            "(logged again when it works)",
        )
    ]
    assert not any(r.exc_info for r in caplog.records)  # a reason, not a traceback
    streaks.succeeded(A)
    streaks.succeeded(A)
    assert lines(caplog) == [(logging.INFO, "retention of t-0 recovered after 100 failures")]
    fail(streaks, A)
    assert [level for level, _ in lines(caplog)] == [logging.WARNING]  # a new streak


def test_a_partition_dropped_while_failing_is_forgotten(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="raftlog.node.node")
    streaks = FailureStreaks(log, "compaction")
    fail(streaks, A)
    fail(streaks, B)
    lines(caplog)
    streaks.keep({B})  # A's topic was deleted
    streaks.succeeded(A)  # a new t-0 of the same name
    streaks.succeeded(B)
    assert lines(caplog) == [(logging.INFO, "compaction of t-1 recovered after 1 failures")]
