"""Workload 10, queue: share groups (KIP-932) and the HTTP consume proxy reading one
pre-produced topic, beside a plain consumer of the same records."""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable

import aiohttp
from confluent_kafka import (
    ShareConsumer,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from bench.procs import BenchError
from bench.systems import Raftlog, System
from bench.workloads import (
    client_config,
    consume,
    make_values,
    percentiles_ms,
    produce,
)
from consume_proxy.client import ClusterClient, KafkaUnavailable
from raftlog.config.node_config import parse_address

# queue: share groups (KIP-932) and the HTTP consume proxy over one pre-produced topic.
QUEUE_TOPIC = "queue"


QUEUE_PARTITIONS = 2


QUEUE_RECORD_BYTES = 100


HTTP_WORKERS = (1, 8, 32)


HTTP_MAX_RECORDS = 10  # per read; the acknowledge carries what the read got, as one batch


# The HTTP figures settle the topic's first this many records (at 650 records/s, one worker
# would take minutes over the whole topic); the share consumer and consume read all of it,
# which at 20,000 records was mostly their start-up (17,980 records/s against 46,327 at
# 200,000, the brokers 17 % busy).
HTTP_QUEUE_RECORDS = 20000


HTTP_TIMEOUT_MS = 1000  # a read's long poll


QUEUE_FIGURES = (*(f"http_{n}" for n in HTTP_WORKERS), "share_consumer", "consume")


QUEUE_STALL_S = 30.0  # no record newly settled this long: the figure fails


def queue_fill(system: System, records: int) -> dict:
    """The queue figures' topic: `records` values of QUEUE_RECORD_BYTES over QUEUE_PARTITIONS
    partitions, produced as workload 1 produces (so in librdkafka's usual large batches).
    Then one group coordinator lookup: the cluster's first creates __consumer_offsets (about
    1 s), which would otherwise land in the start-up of whichever figure runs first."""
    system.create_topic(QUEUE_TOPIC, QUEUE_PARTITIONS)
    values = make_values(QUEUE_RECORD_BYTES)
    result = produce(system, QUEUE_TOPIC, records, "none", values)
    start = time.perf_counter()
    asyncio.run(_find_coordinator(system.bootstrap, f"bench-{uuid.uuid4().hex[:8]}"))
    return {**result, "coordinator_s": time.perf_counter() - start}


async def _find_coordinator(bootstrap: str, group: str, timeout: float = 60.0) -> None:
    """FindCoordinator until one answers, with the proxy's own kio client. librdkafka's
    admin was used here first: asked again with a short request timeout while
    __consumer_offsets was being created, it aborted the bench process in a full run
    (rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed)."""
    cluster = ClusterClient([parse_address(a, "bootstrap") for a in bootstrap.split(",")])
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                await cluster.coordinator(group)
                return
            except KafkaUnavailable:
                if time.monotonic() > deadline:
                    raise BenchError(f"no group coordinator within {timeout:.0f} s") from None
                await asyncio.sleep(0.2)
    finally:
        cluster.close()


def queue_figures(system: Raftlog, records: int) -> dict[str, Callable[[], dict]]:
    """Workload 10's figures by key (QUEUE_FIGURES), each reading the whole queue topic, the
    share ones each in a fresh share group that starts at the earliest offset."""
    proxies = [f"http://{info['proxy']}" for _, info in sorted(system.node_info.items())]

    def http(workers: int) -> dict:
        settle = min(records, HTTP_QUEUE_RECORDS)
        return asyncio.run(_http_queue(proxies, share_group(system), settle, workers))

    figures = {f"http_{n}": functools.partial(http, n) for n in HTTP_WORKERS}
    figures["share_consumer"] = lambda: _share_consume(system, share_group(system), records)
    figures["consume"] = lambda: _consume_whole(system, records)
    return figures


def _consume_whole(system: System, records: int) -> dict:
    """Workload 2 on the queue topic, timed as the queue figures are: from assign() to the
    last record, all records counted (consume's own figures, from its first batch on, are
    kept under "from_first_batch")."""
    result = consume(system, QUEUE_TOPIC, records)
    seconds = result["first_batch_s"] + result["seconds"]
    return {
        "records": records,
        "seconds": seconds,
        "records_s": records / seconds,
        "first_s": result["first_batch_s"],
        "from_first_batch": result,
    }


def share_group(system: System) -> str:
    """A new share group id, set to start at the earliest offset (a group config, set as
    Kafka's users set it): the default, latest, would see none of the pre-produced records."""
    group = f"bench-share-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(client_config(system, log_level=5))  # no "purging unserved events" at exit
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    return group


class _Tally:
    """What the HTTP workers saw: reads per record, the settled ones, and when."""

    def __init__(self, records: int) -> None:
        self.records = records
        self.reads: Counter[tuple[int, int]] = Counter()  # (partition, offset) -> reads
        self.acked: set[tuple[int, int]] = set()
        self.errors: Counter[str] = Counter()  # "read 503", "ack 409", ...
        self.samples: dict[str, str] = {}  # one message per kind of error
        self.max_delivery = 0
        self.ack_ns: list[int] = []  # each acknowledge request's wall time
        self.started = self.progress = time.perf_counter()
        self.first: float | None = None  # when the first read with records came back
        self.done_at: float | None = None

    def error(self, kind: str, status: int, body: object) -> None:
        self.errors[f"{kind} {status}"] += 1
        self.samples.setdefault(f"{kind} {status}", str(body)[:300])

    def check(self) -> None:
        if time.perf_counter() - self.progress > QUEUE_STALL_S:
            raise BenchError(
                f"HTTP queue stalled at {len(self.acked)}/{self.records} acknowledged; "
                f"errors {dict(self.errors)} {self.samples}"
            )


async def _http_queue(proxies: list[str], group: str, records: int, workers: int) -> dict:
    """Workload 10, HTTP: `workers` concurrent clients of the proxies (worker i at node
    i mod 3), each reading HTTP_MAX_RECORDS and acknowledging what it got as one batch, until
    every record is acknowledged once. Timed from the first read to the last acknowledgement
    (the time to the first records is reported too); a record read twice is a redelivery.
    Each acknowledge request's wall time is kept too: the tail of the run is where they wait."""
    tally = _Tally(records)
    timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_MS / 1000 + 60)
    connector = aiohttp.TCPConnector(limit=0)  # one connection per worker, none waits
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

        async def post(url: str, body: object) -> tuple[int, dict]:
            """(HTTP status, JSON answer); status 0 when the proxy could not be reached."""
            try:
                async with session.post(url, json=body) as answer:
                    text = await answer.text()
                    try:
                        return answer.status, json.loads(text)
                    except ValueError:
                        return answer.status, {"error": text[:300]}
            except (aiohttp.ClientError, TimeoutError) as exc:
                return 0, {"error": repr(exc)}

        async def worker(i: int) -> None:
            base = f"{proxies[i % len(proxies)]}/v1/share/{group}"
            read = {
                "topic": QUEUE_TOPIC,
                "max_records": HTTP_MAX_RECORDS,
                "timeout_ms": HTTP_TIMEOUT_MS,
            }
            while len(tally.acked) < records:
                tally.check()
                status, body = await post(f"{base}/read", read)
                if status != 200:
                    tally.error("read", status, body)
                    await asyncio.sleep(0.1)
                    continue
                got = body["records"]
                if not got:
                    continue
                tally.first = tally.first or time.perf_counter()
                for r in got:
                    tally.reads[(r["partition"], r["offset"])] += 1
                    tally.max_delivery = max(tally.max_delivery, r["delivery_count"])
                refs = [{k: r[k] for k in ("topic", "partition", "offset")} for r in got]
                sent = time.perf_counter_ns()
                status, body = await post(f"{base}/acknowledge", {"records": refs})
                tally.ack_ns.append(time.perf_counter_ns() - sent)
                for result in body.get("results", []):
                    if result["status"] == 200:
                        tally.acked.add((result["partition"], result["offset"]))
                        tally.progress = time.perf_counter()
                    else:
                        tally.error("ack", result["status"], result)
                if status != 200 and "results" not in body:
                    tally.error("ack", status, body)
                if len(tally.acked) >= records and tally.done_at is None:
                    tally.done_at = time.perf_counter()

        try:
            async with asyncio.TaskGroup() as group_of_workers:
                for i in range(workers):
                    group_of_workers.create_task(worker(i))
        except* Exception as failed:  # the first worker's failure, not an ExceptionGroup
            raise failed.exceptions[0] from None
    seconds = (tally.done_at or time.perf_counter()) - tally.started
    delivered = sum(tally.reads.values())
    acks = percentiles_ms(tally.ack_ns or [0])
    return {
        "records": len(tally.acked),
        "seconds": seconds,
        "records_s": len(tally.acked) / seconds,
        "first_s": (tally.first or tally.started) - tally.started,
        "workers": workers,
        "reads_with_records": delivered,
        "redelivered": delivered - len(tally.reads),
        "max_delivery_count": tally.max_delivery,
        "ack_p50_ms": acks["p50_ms"],
        "ack_p99_ms": acks["p99_ms"],
        "ack_max_ms": acks["max_ms"],
        "errors": dict(tally.errors),
        "error_samples": tally.samples,
    }


def _share_consume(system: System, group: str, records: int) -> dict:
    """Workload 10, native: confluent-kafka's ShareConsumer (implicit acknowledgement: a
    poll accepts what the previous one returned) until every record was read once, then
    commit_sync for the last poll's. Timed from subscribe() to the end of that commit."""
    consumer = ShareConsumer(
        client_config(system, **{"group.id": group, "share.acknowledgement.mode": "implicit"})
    )
    try:
        seen: set[tuple[int, int]] = set()
        delivered = 0
        first: float | None = None  # when the first poll with records came back
        started = last_progress = time.perf_counter()
        consumer.subscribe([QUEUE_TOPIC])
        while len(seen) < records:
            batch = consumer.poll(1.0)
            for msg in batch:
                if msg.error():
                    raise BenchError(f"share consumer: {msg.error()}")
                delivered += 1
                seen.add((msg.partition(), msg.offset()))
            if batch:
                last_progress = time.perf_counter()
                first = first or last_progress
            elif time.perf_counter() - last_progress > QUEUE_STALL_S:
                raise BenchError(f"share consumer stalled at {len(seen)}/{records} records")
        consumer.commit_sync()  # the last poll's records are accepted too
        seconds = time.perf_counter() - started
        return {
            "records": len(seen),
            "seconds": seconds,
            "records_s": len(seen) / seconds,
            "first_s": (first or started) - started,
            "redelivered": delivered - len(seen),
        }
    finally:
        consumer.close()
