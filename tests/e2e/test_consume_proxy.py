"""The HTTP consume proxy (kafka-consume-srv's contract on share groups) of a 3-node cluster
of real processes, driven over HTTP as its users would (aiohttp's client):
- twelve workers on a 2-partition topic get disjoint records and together all of them,
  acknowledging at a node other than the one that handed the record out;
- a record left pending comes back after its pending timeout with delivery count 2, a
  cancelled one at once; at the delivery limit a record is archived and never served again;
- what is not pending, unknown or malformed gets a clear 4xx;
- a native share consumer (confluent-kafka) and the proxy share one group;
- `raftlog proxy` runs alone, and `raftlog share list|describe` show the group;
- a body nested 100,000 deep is a 400 (one log line, no traceback), internal topics a 403,
  and 100 groups named once by somebody do not keep a new group out."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import subprocess
import threading
import time

import aiohttp
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from support import node_logs
from support.cluster import raftlog_argv, tail
from support.share import share_consumer, share_group, share_topic

from consume_proxy.service import MAX_GROUPS

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

DEADLINE = 60.0


class Proxies:
    """The cluster's proxies, one per node, over one HTTP session."""

    def __init__(self, cluster, session: aiohttp.ClientSession) -> None:
        self.urls = [f"http://{n.proxy}" for _, n in sorted(cluster.nodes.items())]
        self.session = session
        self._next = itertools.cycle(range(len(self.urls)))

    async def post(self, node: int | None, path: str, body: object) -> tuple[int, dict]:
        url = self.urls[next(self._next) if node is None else node]
        async with self.session.post(url + path, json=body) as answer:
            return answer.status, await answer.json()

    async def read(self, group: str, topic: str, node: int | None = None, **kw) -> list[dict]:
        status, body = await self.post(
            node, f"/v1/share/{group}/read", {"topic": topic, "text": True, **kw}
        )
        assert status == 200, body
        return body["records"]

    async def settle(self, verb: str, group: str, record: dict, node: int | None = None):
        ref = {k: record[k] for k in ("topic", "partition", "offset")}
        return await self.post(node, f"/v1/share/{group}/{verb}", ref)


@pytest.fixture
async def proxies(module_cluster):
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=90)) as session:
        yield Proxies(module_cluster, session)


def _set_group_config(cluster, group: str, name: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


async def test_twelve_http_workers_split_a_two_partition_topic(module_cluster, proxies) -> None:
    values = share_topic(module_cluster, "proxy-fanout", 2, 600, per_batch=20)
    group = share_group(module_cluster)
    got: list[list[str]] = [[] for _ in range(12)]
    acked_elsewhere = 0

    async def worker(i: int) -> None:
        nonlocal acked_elsewhere
        deadline = time.monotonic() + DEADLINE
        while sum(map(len, got)) < len(values) and time.monotonic() < deadline:
            node = i % 3
            for record in await proxies.read(group, "proxy-fanout", node, max_records=5):
                got[i].append(record["value"])
                await asyncio.sleep(0.005)  # a little work, so all twelve get some
                status, body = await proxies.settle("acknowledge", group, record, (node + 1) % 3)
                assert status == 200, body
                acked_elsewhere += 1

    await asyncio.gather(*(worker(i) for i in range(12)))
    everything = sorted(v for g in got for v in g)
    assert everything == sorted(v.decode() for v in values)  # all, each once: disjoint
    assert sum(1 for g in got if g) >= 8, [len(g) for g in got]  # beyond the partition count
    assert acked_elsewhere == len(values)


async def test_pending_records_come_back_after_their_timeout_or_at_once_when_cancelled(
    module_cluster, proxies
) -> None:
    share_topic(module_cluster, "proxy-pending", 1, 3)
    group = share_group(module_cluster)
    (first,) = await proxies.read(group, "proxy-pending", 0, pending_timeout_ms=1500)
    (second,) = await proxies.read(group, "proxy-pending", 1)
    assert (first["offset"], second["offset"]) == (0, 1)
    assert (await proxies.settle("cancel", group, second, 2))[0] == 200
    (again,) = await proxies.read(group, "proxy-pending", 2, timeout_ms=5000)
    assert (again["offset"], again["delivery_count"]) == (1, 2)  # at once, not after 30 s
    started = time.monotonic()
    back = await proxies.read(group, "proxy-pending", 1, timeout_ms=10_000)
    # offset 2 was free all along; the first pending one returns after its 1.5 s
    offsets = {r["offset"]: r["delivery_count"] for r in back}
    while 0 not in offsets and time.monotonic() - started < 10:
        offsets.update(
            {r["offset"]: r["delivery_count"] for r in await proxies.read(group, "proxy-pending")}
        )
    assert offsets.get(0) == 2
    # pending again (for its second reader): an acknowledgement by (topic, partition, offset)
    # settles it whoever sends it, as the contract has no receipt
    assert (await proxies.settle("acknowledge", group, first, 0))[0] == 200


async def test_a_record_is_archived_at_the_delivery_limit(module_cluster, proxies) -> None:
    share_topic(module_cluster, "proxy-limit", 1, 2)
    group = share_group(module_cluster)
    _set_group_config(module_cluster, group, "share.delivery.count.limit", "2")
    for delivery in (1, 2):
        (record,) = await proxies.read(group, "proxy-limit", timeout_ms=5000)
        assert (record["offset"], record["delivery_count"]) == (0, delivery)
        assert (await proxies.settle("cancel", group, record))[0] == 200
    rest = await proxies.read(group, "proxy-limit", max_records=10, timeout_ms=2000)
    assert [r["offset"] for r in rest] == [1]  # 0 is archived: never served again
    assert (await proxies.settle("acknowledge", group, rest[0]))[0] == 200
    assert await proxies.read(group, "proxy-limit", timeout_ms=1000) == []


async def test_what_is_not_pending_unknown_or_malformed_gets_a_4xx(module_cluster, proxies) -> None:
    share_topic(module_cluster, "proxy-errors", 1, 3)
    group = share_group(module_cluster)
    first, second = await proxies.read(group, "proxy-errors", 0, max_records=2, timeout_ms=5000)
    assert (await proxies.settle("acknowledge", group, second, 1))[0] == 200
    status, body = await proxies.settle("acknowledge", group, second, 2)
    assert status == 409 and "not pending" in body["error"]  # settled already
    never = {**first, "offset": 999}
    (late,) = await proxies.read(group, "proxy-errors", 0, pending_timeout_ms=300, timeout_ms=5000)
    await asyncio.sleep(1.0)  # its pending timeout runs out (a real process: real time)
    status, body = await proxies.settle("acknowledge", group, late, 2)
    assert status == 409 and "not pending" in body["error"]
    assert (await proxies.settle("acknowledge", group, never, 2))[0] == 409
    assert (await proxies.settle("cancel", group, {**first, "partition": 5}))[0] == 404
    assert (await proxies.settle("cancel", group, {**first, "topic": "nope"}))[0] == 404
    status, _ = await proxies.post(0, f"/v1/share/{group}/read", {"topic": "nope"})
    assert status == 404
    bad = [
        ("read", {"topic": ""}),
        ("read", {"topic": "proxy-errors", "max_records": 0}),
        ("read", {"topic": "proxy-errors", "timeout_ms": "soon"}),
        ("read", {"topic": "proxy-errors", "pending_timeout_ms": 10**9}),
        ("read", [1, 2]),
        ("acknowledge", {"records": []}),
        ("acknowledge", {"topic": "proxy-errors", "partition": -1, "offset": 0}),
        ("cancel", {"records": [{"topic": "proxy-errors"}]}),
    ]
    for verb, body in bad:
        status, answer = await proxies.post(0, f"/v1/share/{group}/{verb}", body)
        assert status == 400, (verb, body, answer)
    url = proxies.urls[0] + f"/v1/share/{group}/read"
    async with proxies.session.post(url, data=b"{" * 10) as answer:
        assert answer.status == 400
    async with proxies.session.post(url, data=b"x" * (2 << 20)) as answer:
        assert answer.status == 413
    async with proxies.session.get(proxies.urls[2] + "/v1/openapi.json") as answer:
        assert answer.status == 200 and "/v1/share/{group}/read" in (await answer.json())["paths"]
    # and the proxy still serves
    assert (await proxies.settle("acknowledge", group, first, 1))[0] == 200


async def test_a_native_share_consumer_and_the_proxy_share_one_group(
    module_cluster, proxies
) -> None:
    values = share_topic(module_cluster, "proxy-mixed", 1, 300, per_batch=5)
    group = share_group(module_cluster)
    native: list[str] = []
    done = threading.Event()

    def consume() -> None:
        consumer = share_consumer(module_cluster, group, **{"max.poll.records": 10})
        consumer.subscribe(["proxy-mixed"])
        try:
            deadline = time.monotonic() + DEADLINE
            while not done.is_set() and time.monotonic() < deadline:
                for m in consumer.poll(0.5) or []:
                    if m.error() is None:
                        native.append(m.value().decode())
                time.sleep(0.05)  # a slow consumer, so the proxy gets its share
        finally:
            consumer.close()

    thread = threading.Thread(target=consume)
    thread.start()
    http: list[str] = []
    try:
        deadline = time.monotonic() + DEADLINE
        while len(native) + len(http) < len(values) and time.monotonic() < deadline:
            for record in await proxies.read(group, "proxy-mixed", max_records=5):
                http.append(record["value"])
                assert (await proxies.settle("acknowledge", group, record))[0] == 200
    finally:
        done.set()
        await asyncio.to_thread(thread.join, 60)
    assert sorted(native + http) == sorted(v.decode() for v in values)  # each record once
    assert native and http


async def test_a_standalone_proxy_serves_and_the_cli_describes_the_group(
    module_cluster, proxies
) -> None:
    """`raftlog proxy --bootstrap` alone, a client of the cluster; its records acknowledged at
    a node's proxy; `raftlog share list|describe` show the group and its partitions."""
    share_topic(module_cluster, "proxy-alone", 1, 10)
    group = share_group(module_cluster)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [*raftlog_argv(), "proxy", "--bootstrap", module_cluster.bootstrap]
    output = module_cluster.workdir / "proxy-alone.log"
    with open(output, "wb") as out:
        proc = subprocess.Popen(
            [*argv, "--listen", f"127.0.0.1:{port}"],
            env=module_cluster.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        alone = f"http://127.0.0.1:{port}/v1/share/{group}/read"
        records: list[dict] = []
        deadline = time.monotonic() + DEADLINE
        while not records and time.monotonic() < deadline:
            try:
                body = {"topic": "proxy-alone", "max_records": 4, "timeout_ms": 2000}
                async with proxies.session.post(alone, json=body) as answer:
                    records = (await answer.json())["records"]
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.2)  # still starting
        assert [r["offset"] for r in records] == [0, 1, 2, 3]
        for record in records[:2]:  # acknowledged at node 1's proxy, not the one that read
            assert (await proxies.settle("acknowledge", group, record, 0))[0] == 200
        listed = module_cluster.cli("share", "list", "--bootstrap", module_cluster.bootstrap)
        assert [group, "Stable"] in [line.split() for line in listed.stdout.splitlines()]
        described = module_cluster.cli(
            "share", "describe", group, "--json", "--bootstrap", module_cluster.bootstrap
        )
        doc = json.loads(described.stdout)
        assert doc["state"] == "Stable" and doc["members"]
        (partition,) = doc["partitions"]
        assert (partition["start_offset"], partition["high_watermark"]) == (2, 10)
        assert partition["in_flight"]["ACQUIRED"] == 2 and partition["lag"] == 8
    finally:
        proc.terminate()
        assert proc.wait(30) == 0  # a clean stop on SIGTERM
        node_logs.check_files("raftlog proxy", [output])  # no ERROR or traceback
    # it logs as a node does (before: nothing but bare WARNINGs, no time or level)
    assert f" INFO [proxy] raftlog.process: consume proxy serving HTTP on 127.0.0.1:{port}" in (
        output.read_text()
    )


async def test_hostile_bodies_and_internal_topics_get_a_4xx_and_the_proxy_serves_on(
    module_cluster, proxies
) -> None:
    """Before, 100,000 nested "[" escaped as a 500 with an ERROR traceback, and the proxy
    served `__consumer_offsets` to anyone."""
    share_topic(module_cluster, "proxy-hostile", 1, 1)
    group = share_group(module_cluster)
    url = proxies.urls[0] + f"/v1/share/{group}/read"
    async with proxies.session.post(url, data=b"[" * 100_000) as answer:
        assert answer.status == 400
        assert (await answer.json())["error"] == "the body is not JSON: nested too deeply"
    log = tail(module_cluster.nodes[1].log, lines=400)
    assert "Traceback" not in log and "Error handling request" not in log
    assert [line for line in log.splitlines() if "nested too deeply" in line] != []
    for verb, body in [
        ("read", {"topic": "__consumer_offsets", "timeout_ms": 0}),
        ("acknowledge", {"topic": "__consumer_offsets", "partition": 0, "offset": 0}),
        ("cancel", {"records": [{"topic": "__consumer_offsets", "partition": 0, "offset": 0}]}),
    ]:
        status, answer = await proxies.post(0, f"/v1/share/{group}/{verb}", body)
        assert status == 403, (verb, answer)
    (record,) = await proxies.read(group, "proxy-hostile", 0, timeout_ms=5000)
    assert (await proxies.settle("acknowledge", group, record, 0))[0] == 200


async def test_groups_named_once_do_not_keep_a_new_group_out(module_cluster, proxies) -> None:
    """Before, any client naming 100 groups filled a proxy's table for 5 minutes: every
    other group got 429. A group nothing waits on or holds now makes room at once."""
    share_topic(module_cluster, "proxy-crowd", 1, 3)
    for i in range(MAX_GROUPS):
        status, body = await proxies.post(
            1, f"/v1/share/crowd-{i}/read", {"topic": "proxy-crowd", "timeout_ms": 0}
        )
        assert (status, body) == (200, {"records": []})
    group = share_group(module_cluster)
    records = await proxies.read(group, "proxy-crowd", 1, max_records=3, timeout_ms=10_000)
    assert [r["offset"] for r in records] == [0, 1, 2]
    for record in records:
        assert (await proxies.settle("acknowledge", group, record, 1))[0] == 200
