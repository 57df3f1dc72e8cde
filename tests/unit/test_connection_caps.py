"""The node's Kafka connection caps (kafka_api/connection_caps.py) on a real listener: at
max.connections the connection quiet longest makes room, one with a request in progress is
kept (and a new one refused if every one scanned has), and max.connections.per.ip refuses."""

from __future__ import annotations

import asyncio
import types

import pytest

from kafka_api import connection_caps
from kafka_api.connection_caps import ConnectionCaps
from kafka_api.handlers import HANDLERS
from kafka_api.server import KafkaServer
from raftlog.common import limits

from .test_kafka_server import (
    API_VERSIONS,
    METADATA,
    assert_serving,
    connect,
    frame,
    is_closed,
    metadata_request,
    read_response,
)


@pytest.fixture
async def capped():
    caps = ConnectionCaps(max_connections=3, max_per_address=5)
    server = KafkaServer(None, "127.0.0.1", 0, caps=caps)
    await server.start()
    yield server
    await server.close()


async def _answered(reader, writer, correlation_id):
    writer.write(frame(API_VERSIONS, 0, correlation_id))
    assert (await read_response(reader, API_VERSIONS, 0))[0] == correlation_id


async def _admitted(server, count):
    for _ in range(500):
        if server.caps.open == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{server.caps.open} connections admitted, expected {count}")


async def test_at_the_cap_the_connection_quiet_longest_makes_room(capped) -> None:
    first = await connect(capped)
    second = await connect(capped)
    third = await connect(capped)
    await _admitted(capped, 3)
    await _answered(*first, 1)  # the first spoke last: the second is now the quietest
    await _answered(*third, 2)
    await _answered(*first, 3)
    await assert_serving(capped)  # a fourth: the second is closed for it
    assert await is_closed(second[0])
    assert capped.caps.metrics.connections_evicted == 1
    await _answered(*first, 4)
    await _answered(*third, 5)
    for _, writer in (first, second, third):
        writer.close()


async def test_connections_with_requests_in_progress_are_kept_and_a_new_one_refused(
    capped, monkeypatch
) -> None:
    never = asyncio.Event()

    async def handle(ctx, request):
        await never.wait()

    handler = types.SimpleNamespace(API_KEY=METADATA, MIN_VERSION=0, MAX_VERSION=13, handle=handle)
    monkeypatch.setitem(HANDLERS, METADATA, handler)
    busy = [await connect(capped) for _ in range(3)]
    for i, (_, writer) in enumerate(busy):
        writer.write(frame(METADATA, 1, i, metadata_request("t")))
    await _admitted(capped, 3)
    await asyncio.sleep(0.1)  # the handlers have started
    reader, writer = await connect(capped)
    assert await is_closed(reader)
    writer.close()
    assert capped.caps.metrics.connections_refused == {"node": 1, "address": 0}
    assert capped.caps.open == 3
    never.set()
    for _, w in busy:
        w.close()


async def test_only_the_scanned_connections_are_looked_at(capped, monkeypatch) -> None:
    monkeypatch.setattr(connection_caps, "EVICTION_SCAN", 0)
    held = [await connect(capped) for _ in range(3)]
    await _admitted(capped, 3)
    reader, writer = await connect(capped)
    assert await is_closed(reader)
    writer.close()
    for _, w in held:
        w.close()


async def test_past_max_connections_per_ip_a_new_one_is_closed() -> None:
    caps = ConnectionCaps(max_connections=100, max_per_address=2)
    server = KafkaServer(None, "127.0.0.1", 0, caps=caps)
    await server.start()
    try:
        held = [await connect(server) for _ in range(2)]
        await _admitted(server, 2)
        reader, writer = await connect(server)
        assert await is_closed(reader)
        writer.close()
        assert caps.metrics.connections_refused == {"node": 0, "address": 1}
        held[0][1].close()
        await _admitted(server, 1)
        await assert_serving(server)  # room again once one closed
        held[1][1].close()
    finally:
        await server.close()


def test_the_default_cap_is_what_the_descriptors_leave() -> None:
    # 20,000 descriptors, 1,100 replicas at 5, two HTTP listeners of 256, 512 kept aside
    assert limits.connection_cap(-1, 20_000, 1_100, 512) == 20_000 - 5_500 - 512 - 512
    assert limits.connection_cap(-1, 1_024, 0, 512) == 128  # an eighth, at least
    assert limits.connection_cap(-1, 20_000, 10_000, 512) == 2_500  # replicas set past the files
    assert limits.connection_cap(300, 20_000, 1_100, 512) == 300
