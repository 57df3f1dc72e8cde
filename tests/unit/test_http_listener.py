"""raftlog/common/http_listener.py in-process, over real loopback sockets: the per-address cap
refuses, the listener's cap makes room by closing the oldest connection waiting for a request
head and refuses only when every connection has a request in progress, slots come back; and
what a client repeats is reported in one log line per REPORT_INTERVAL_SECONDS with the count
of those not reported. (A real node's listeners, timeouts and 414/431:
tests/e2e/test_http_limits.py.)"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from raftlog.common.http_listener import HttpLimits, HttpListener
from raftlog.common.log_reports import REPORT_INTERVAL_SECONDS


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Held:
    """/hold's requests: how many are in their handler, and the event that answers them."""

    def __init__(self) -> None:
        self.waiting = 0
        self.release = asyncio.Event()

    async def hold(self, _request: web.Request) -> web.Response:
        self.waiting += 1
        await self.release.wait()
        return web.Response(text="done")


async def ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


@pytest.fixture
async def served() -> AsyncIterator[tuple[HttpListener, Held]]:
    """A listener of 3 connections, 2 per address."""
    held = Held()
    app = web.Application()
    app.router.add_get("/hold", held.hold)
    app.router.add_get("/", ok)
    limits = HttpLimits(header_timeout=30.0, max_connections=3, max_connections_per_address=2)
    listener = HttpListener("test", app, "127.0.0.1", 0, limits)
    await listener.start()
    yield listener, held
    held.release.set()
    await listener.close()


async def connect(listener: HttpListener, source: str) -> Connection:
    return await asyncio.open_connection("127.0.0.1", listener.port, local_addr=(source, 0))


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not reached in 5 s")


async def closed_unanswered(connection: Connection) -> bool:
    reader, writer = connection
    try:
        data = await asyncio.wait_for(reader.read(), 5)
    except ConnectionResetError:
        data = b""
    writer.close()
    return data == b""


async def get(connection: Connection, path: str = "/") -> bytes:
    reader, writer = connection
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return answer.split(b"\r\n", 1)[0]


async def test_the_caps_refuse_or_make_room_and_give_slots_back(
    served: tuple[HttpListener, Held],
) -> None:
    listener, held = served
    stats = listener.stats
    first = await connect(listener, "127.0.0.1")
    second = await connect(listener, "127.0.0.1")
    await until(lambda: stats.open == 2)
    assert await closed_unanswered(await connect(listener, "127.0.0.1"))  # the address's cap
    assert stats.refused == {"address": 1, "listener": 0}

    third = await connect(listener, "127.0.0.2")
    await until(lambda: stats.open == 3)
    # the listener is full of connections waiting for a head: the oldest makes room
    assert await get(await connect(listener, "127.0.0.3")) == b"HTTP/1.1 200 OK"
    assert stats.evicted == 1 and await closed_unanswered(first)

    # every connection has a request in progress: a new one is refused
    holds = [asyncio.ensure_future(get(c, "/hold")) for c in (second, third)]
    holds.append(asyncio.ensure_future(get(await connect(listener, "127.0.0.4"), "/hold")))
    await until(lambda: held.waiting == 3)
    assert await closed_unanswered(await connect(listener, "127.0.0.5"))
    assert stats.refused == {"address": 1, "listener": 1} and stats.evicted == 1
    held.release.set()
    assert await asyncio.gather(*holds) == [b"HTTP/1.1 200 OK"] * 3
    await until(lambda: stats.open == 0)
    assert await get(await connect(listener, "127.0.0.1")) == b"HTTP/1.1 200 OK"


def test_a_repeated_event_is_reported_once_per_interval_with_the_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    http = HttpListener("test", web.Application(), "127.0.0.1", 0, HttpLimits(), clock=clock)
    with caplog.at_level(logging.INFO, logger="raftlog.common.http_listener"):
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
