"""A Raft group failing on every message is logged once per interval, with its traceback,
and another group's failure in the same interval is still logged."""

from __future__ import annotations

import logging

import pytest

from raftlog.raft.failure_log import FailureLog


def test_each_group_is_logged_at_most_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    failures = FailureLog(logging.getLogger("test.failures"), interval=5.0, clock=lambda: now[0])

    def fail(group: str) -> None:
        try:
            raise ValueError(f"bad message for {group}")
        except ValueError:
            failures.exception(group, "group %s failed", group)

    with caplog.at_level(logging.ERROR, logger="test.failures"):
        fail("a")
        fail("a")
        fail("b")
        now[0] += 4.9
        fail("a")
        now[0] += 0.1
        fail("a")
    assert [r.getMessage() for r in caplog.records] == [
        "group a failed",
        "group b failed",
        "group a failed",
    ]
    assert all(r.exc_info and r.exc_info[0] is ValueError for r in caplog.records)
