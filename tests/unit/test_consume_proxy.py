"""The consume proxy's own rules, before anything reaches a cluster (its behaviour against a
real cluster is tests/e2e/test_consume_proxy.py): a body that is not JSON, however it fails,
is a 400 with one log line; the group table makes room by leaving idle groups, so naming
groups cannot lock others out; internal topics are refused."""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from consume_proxy import http
from consume_proxy import service as S
from consume_proxy.client import ClusterClient, TopicMeta
from consume_proxy.member import Record
from consume_proxy.service import ConsumeProxy, ProxyError


def _nobody() -> tuple[str, int]:
    """An address no broker listens on: these tests never reach a cluster."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()


@pytest.fixture
async def proxy() -> AsyncIterator[ConsumeProxy]:
    proxy = ConsumeProxy([_nobody()])
    yield proxy
    await proxy.close()


@pytest.fixture
async def server(proxy: ConsumeProxy) -> AsyncIterator[TestServer]:
    server = TestServer(http.app(proxy))
    await server.start_server()
    yield server
    await server.close()


async def post(server: TestServer, path: str, data: bytes) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.make_url(path), data=data) as answer,
    ):
        return answer.status, await answer.json()


async def test_a_body_nested_too_deeply_is_a_400_logged_in_one_line(
    server: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """100,000 "[" used to escape json.loads as a RecursionError: a 500 and a traceback."""
    with caplog.at_level(logging.INFO):
        status, body = await post(server, "/v1/share/g/read", b"[" * 100_000)
    assert status == 400 and body["error"] == "the body is not JSON: nested too deeply"
    (line,) = [r for r in caplog.records if r.name == http.__name__]
    assert line.levelno == logging.INFO and line.exc_info is None
    assert "\n" not in line.getMessage()
    for bad in (b"{" * 10, b"\xff\xfe", b"", b"nul", b'{"topic": "t"' + b"]" * 10):
        status, body = await post(server, "/v1/share/g/acknowledge", bad)
        assert status == 400 and body["error"].startswith("the body is not JSON"), bad
    status, body = await post(server, "/v1/share/g/cancel", b"[1]")
    assert (status, body["error"]) == (400, "the body must be a JSON object")


async def test_an_answer_falls_back_to_base64_when_a_field_is_not_utf8() -> None:
    record = Record("t", 0, 7, None, b"\xff", [("h", b"v")], 1, 2)
    assert http._records_json([record], text=True) == (
        b'{"records": [{"topic": "t", "partition": 0, "offset": 7, "key": null, '
        b'"value": "/w==", "headers": [{"key": "h", "value": "dg=="}], "timestamp": 1, '
        b'"delivery_count": 2, "encoding": "base64"}]}'
    )


async def test_a_full_table_makes_room_by_leaving_its_least_recently_used_idle_group(
    proxy: ConsumeProxy,
) -> None:
    """Any client names any group: 100 named once must not keep the 101st out."""
    groups = [f"g{i}" for i in range(S.MAX_GROUPS)]
    for group in groups:
        proxy._group(group)
    proxy._group("g0")  # used again: now the most recently used
    proxy._group("new")
    assert "g1" not in proxy._groups and {"g0", "new"} <= set(proxy._groups)
    assert len(proxy._groups) == S.MAX_GROUPS


async def test_only_a_table_of_busy_groups_answers_429(proxy: ConsumeProxy) -> None:
    for i in range(S.MAX_GROUPS):
        proxy._group(f"g{i}").settling = 1  # an acknowledgement under way in each
    with pytest.raises(ProxyError) as refused:
        proxy._group("new")
    assert refused.value.status == 429
    assert "all of them busy" in refused.value.message
    proxy._groups["g5"].settling = 0
    proxy._group("new")
    assert "g5" not in proxy._groups


@pytest.mark.parametrize("name", ["__consumer_offsets", "__transaction_state"])
async def test_an_internal_topic_is_refused(proxy: ConsumeProxy, name: str) -> None:
    marked = name == "__consumer_offsets"  # as Metadata marks it; the other by its name
    proxy.cluster.topics[name] = TopicMeta(name, uuid.uuid4(), {0: 1}, internal=marked)
    for call in (
        proxy.read("g", name, 1, 0, None),
        proxy.settle("g", name, 0, 0, S.ACCEPT),
    ):
        with pytest.raises(ProxyError) as refused:
            await call
        assert refused.value.status == 403 and "internal" in refused.value.message
    assert proxy._groups == {}  # nothing joined for it


async def test_concurrent_callers_share_one_connection_to_a_node() -> None:
    """A heartbeat, a metadata refresh and an acknowledgement asking for one node's connection
    at once each opened one, the last replacing the others: a share session opened on a
    replaced connection ended when it was dropped, and the next acknowledgement got
    SHARE_SESSION_NOT_FOUND (test_twelve_http_workers_split_a_two_partition_topic, a 503)."""
    accepted: list[asyncio.StreamWriter] = []

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    broker = await asyncio.start_server(accept, "127.0.0.1", 0)
    address = broker.sockets[0].getsockname()[:2]
    cluster = ClusterClient([address])
    try:
        conns = await asyncio.gather(*(cluster.connection(address) for _ in range(5)))
        await asyncio.sleep(0.05)  # let the broker accept whatever was opened
        assert len({id(c) for c in conns}) == 1
        assert len(accepted) == 1
    finally:
        cluster.close()
        for writer in accepted:
            writer.close()
        broker.close()
        await broker.wait_closed()
