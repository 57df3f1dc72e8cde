"""raftlog/http_listener.py's accounting, on a listener that is never started: the caps count
connections in and out per address, and what a client repeats is reported in one log line
per REPORT_INTERVAL_SECONDS, with the count of those not reported (the real sockets, timeouts
and answers are tests/e2e/test_http_limits.py's)."""

from __future__ import annotations

import logging

import pytest
from aiohttp import web

from raftlog.http_listener import REPORT_INTERVAL_SECONDS, HttpLimits, HttpListener


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def listener(clock: Clock) -> HttpListener:
    limits = HttpLimits(header_timeout=1.0, max_connections=3, max_connections_per_address=2)
    return HttpListener("test", web.Application(), "127.0.0.1", 0, limits, clock=clock)


def test_the_caps_count_connections_per_address_and_give_slots_back() -> None:
    http = listener(Clock())
    assert http.admit("a") and http.admit("a")
    assert not http.admit("a")  # the address's cap
    assert http.admit("b")
    assert not http.admit("c")  # the listener's cap
    assert http.stats.refused == {"address": 1, "listener": 1}
    http.release("a")
    assert http.admit("c") and not http.admit("a")
    for address in ("a", "b", "c"):
        http.release(address)
    assert http.stats.open == 0 and http.stats.accepted == 4
    assert http.admit("a") and http.admit("a")  # nothing left over from before


def test_a_repeated_event_is_reported_once_per_interval_with_the_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    http = listener(clock)
    with caplog.at_level(logging.INFO, logger="raftlog.http_listener"):
        for _ in range(5):
            http.bad_request(414, "127.0.0.1", "the URL is longer than 8192 bytes")
        http.bad_request(431, "127.0.0.1", "a header line is longer than 8190 bytes")
        clock.now += REPORT_INTERVAL_SECONDS
        http.bad_request(414, "127.0.0.1", "the URL is longer than 8192 bytes")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "test HTTP listener: 414 to 127.0.0.1: the URL is longer than 8192 bytes",
        "test HTTP listener: 431 to 127.0.0.1: a header line is longer than 8190 bytes",
        "test HTTP listener: 414 to 127.0.0.1: the URL is longer than 8192 bytes "
        "(and 4 more since the last report)",
    ]
    assert [r.levelname for r in caplog.records] == ["INFO"] * 3
    assert http.stats.bad_requests == {400: 0, 414: 6, 431: 1}
