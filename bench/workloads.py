"""The workloads. Each drives one started system with confluent-kafka (librdkafka), the
same client and settings for every system, and returns its figures as a flat dict."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import random
import signal
import statistics
import struct
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import lz4.frame
from confluent_kafka import (
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from bench.procs import BenchError, alive, cpu_seconds, kill9, rss_mb, wait_until
from bench.systems import Raftlog, System
from consume_proxy.client import ClusterClient, KafkaUnavailable
from raftlog.config.node_config import parse_address

MB = 1e6  # throughput and sizes are in MB = 10^6 bytes of record values
VALUE_POOL = 1024  # distinct values, cycled: 1 MiB apart, beyond lz4's 64 KiB window
VALUES_TEXT = (
    f"first half random bytes, second half a repeated text pattern; {VALUE_POOL} distinct "
    "values cycled"
)
STAMP = struct.Struct(">qq")  # (sequence, perf_counter_ns) at the head of an e2e value
E2E_RATE = 200  # records/s: a light steady load; a run lasts records/rate whatever the latency
# The restart probe's client: tight backoffs, so it sees the node serving within ~50 ms.
PROBE = {
    "log_level": 2,  # not one "connection refused" line per attempt
    "linger.ms": 0,
    "message.timeout.ms": 120000,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 50,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 50,
}
# scale: a slow create or failover is a figure (None and a note), not the end of the run.
SCALE_CREATE_TIMEOUT = 300.0
SCALE_FAILOVER_TIMEOUT = 120.0
METADATA_SAMPLES = 5
SCRAPE_SAMPLES = 3  # fresh /metrics listings per node for scrape_ms
SCRAPE_RETRY_S = 1.0  # between asks while a node gives its last listing again
SCRAPE_FRESH_TIMEOUT_S = 120.0
BASELINE_PARTITIONS = 6  # what the spread over many partitions is compared with
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
# txn: transactions of TXN_RECORDS records, each committed before the next begins.
TXN_RECORDS = 100
TXN_INIT_TIMEOUT_S = 30.0  # a peer without transactions answers or hangs: n/a after this
TXN_COMMIT_TIMEOUT_S = 30.0
TXN_MAX_S = 300.0  # all transactions; ~5 s on raftlog3 at full size


@dataclass(frozen=True)
class Settings:
    runs: int
    produce_mb: float
    record_bytes: int
    partitions: int
    latency_records: int
    memory_mb: float
    restart_mb: float
    idle_partitions: int
    idle_seconds: float
    settle_seconds: float
    failover_rate: int
    scale_partitions: tuple[int, ...]
    scale_records: int
    queue_records: int
    small_seconds: float
    txn_mb: float
    move_mb: float


def make_values(record_bytes: int) -> list[bytes]:
    """Realistic-ish values: the first half random bytes (incompressible), the second half
    one repeated text pattern (what lz4 can squeeze), so lz4 gets about 2:1."""
    rng = random.Random(20240601)
    half = record_bytes // 2
    pattern = (b"raftlog-bench-payload " * (record_bytes // 16 + 1))[: record_bytes - half]
    return [rng.randbytes(half) + pattern for _ in range(VALUE_POOL)]


def lz4_ratio(values: list[bytes]) -> float:
    sample = b"".join(values[:256])
    return len(sample) / len(lz4.frame.compress(sample))


def records_for(megabytes: float, record_bytes: int) -> int:
    return max(1, round(megabytes * MB / record_bytes))


def _client(system: System, **overrides: object) -> dict:
    return {"bootstrap.servers": system.bootstrap, **system.client, **overrides}


def _throughput(records: int, nbytes: int, seconds: float) -> dict:
    return {
        "records": records,
        "mb": nbytes / MB,
        "seconds": seconds,
        "mb_s": nbytes / MB / seconds,
        "records_s": records / seconds,
    }


def _percentiles_ms(samples_ns: list[int]) -> dict:
    ordered = sorted(samples_ns)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6

    return {
        "records": len(ordered),
        "p50_ms": at(0.50),
        "p99_ms": at(0.99),
        "max_ms": ordered[-1] / 1e6,
        "mean_ms": statistics.fmean(ordered) / 1e6,
    }


# ----------------------------------------------------------------------------- produce

# Workload 1's producer settings; txn uses them too, so its ratio is the cost of transactions.
BATCHING = {"acks": "all", "linger.ms": 5, "batch.size": 1 << 20}


def produce(
    system: System,
    topic: str,
    records: int,
    compression: str,
    values: list[bytes],
    overrides: dict[str, object] | None = None,
) -> dict:
    """Workload 1: as fast as librdkafka takes them, acks=all, linger.ms=5, batch.size
    1 MiB, round-robin over the topic's partitions; timed until every record is acked.
    `overrides`: more producer settings (txn's baseline turns on enable.idempotence)."""
    errors: list[KafkaError] = []
    producer = Producer(
        _client(
            system,
            **BATCHING,
            **{"compression.type": compression, "delivery.report.only.error": True},
            **(overrides or {}),
            on_delivery=lambda err, _msg: errors.append(err),
        )
    )
    partitions = len(producer.list_topics(topic, timeout=30).topics[topic].partitions)
    send, mask = producer.produce, VALUE_POOL - 1
    nbytes = 0
    start = time.perf_counter()
    for i in range(records):
        value = values[i & mask]
        while True:
            try:
                send(topic, value, partition=i % partitions)
                break
            except BufferError:  # librdkafka's queue is full: let it drain
                producer.poll(0.005)
        nbytes += len(value)
    left = producer.flush(600)
    seconds = time.perf_counter() - start
    if left or errors:
        raise BenchError(f"{left} records unacknowledged, {len(errors)} failed: {errors[:3]}")
    return _throughput(records, nbytes, seconds)


# ----------------------------------------------------------------------------- txn


def transactions(system: System, settings: Settings, values: list[bytes], peer: bool) -> dict:
    """Workload 11: `txn_mb` of records in transactions of TXN_RECORDS, each committed
    before the next begins, with produce's batching, round-robin over `partitions`; timed
    from after init_transactions to the last commit. First the same records without
    transactions but with enable.idempotence, on a topic of their own, so
    `vs_idempotent` is what transactions cost on this system. `peer`: a system that may
    lack transactions, so a failed or timed-out init_transactions is n/a ("unsupported",
    with the reason) rather than an error; every wait is bounded either way."""
    count = max(1, math.ceil(records_for(settings.txn_mb, settings.record_bytes) / TXN_RECORDS))
    records = count * TXN_RECORDS
    for topic in ("txn-idempotent", "txn"):
        system.create_topic(topic, settings.partitions)
    plain = produce(system, "txn-idempotent", records, "none", values, {"enable.idempotence": True})
    result: dict = {
        "transactions": count,
        "records_per_txn": TXN_RECORDS,
        "idempotent_records_s": plain["records_s"],
        "idempotent": plain,
    }
    errors: list[KafkaError] = []
    producer = Producer(
        _client(
            system,
            **BATCHING,
            **{"compression.type": "none", "delivery.report.only.error": True},
            **{"transactional.id": f"bench-txn-{uuid.uuid4().hex[:8]}"},
            on_delivery=lambda err, _msg: errors.append(err),
        )
    )
    start = time.perf_counter()
    try:
        producer.init_transactions(TXN_INIT_TIMEOUT_S)
    except KafkaException as exc:
        err = exc.args[0]
        why = f"init_transactions failed after {time.perf_counter() - start:.1f} s: {err.name()}"
        if not peer:
            raise BenchError(f"{why}: {err.str()}") from None
        return {**result, "unsupported": f"{why} ({err.str()})"}
    result["init_s"] = time.perf_counter() - start
    partitions = len(producer.list_topics("txn", timeout=30).topics["txn"].partitions)
    send, mask = producer.produce, VALUE_POOL - 1
    nbytes, per_txn = 0, []
    start = time.perf_counter()
    for t in range(count):
        began = time.perf_counter_ns()
        producer.begin_transaction()
        for i in range(t * TXN_RECORDS, (t + 1) * TXN_RECORDS):
            value = values[i & mask]
            send("txn", value, partition=i % partitions)  # 100 records: the queue never fills
            nbytes += len(value)
        producer.commit_transaction(TXN_COMMIT_TIMEOUT_S)
        per_txn.append(time.perf_counter_ns() - began)
        if errors:
            raise BenchError(f"{t + 1}/{count} transactions committed; failed: {errors[:3]}")
        if time.perf_counter() - start > TXN_MAX_S and t + 1 < count:
            raise BenchError(f"{t + 1}/{count} transactions committed in {TXN_MAX_S:g} s")
    seconds = time.perf_counter() - start
    committed = _committed_end(system, "txn", partitions, records)
    txn = _throughput(records, nbytes, seconds)
    return {
        **result,
        **txn,
        "vs_idempotent": txn["records_s"] / plain["records_s"],
        "per_txn_ms": _percentiles_ms(per_txn),
        "committed_end_offsets": committed,
    }


def _committed_end(system: System, topic: str, partitions: int, records: int) -> int:
    """The sum of `topic`'s end offsets a read_committed consumer sees (the last stable
    offsets, markers included), once at least `records`: a commit that was acknowledged
    but left its records invisible would otherwise pass for a fast one. The markers of
    the last commit may land just after it returns, hence the wait."""
    consumer = _consumer(system, **{"isolation.level": "read_committed"})

    def end() -> int:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return sum(consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in tps)

    try:
        return wait_until(
            lambda: (n := end()) >= records and n,
            30,
            f"{records} committed records of {topic} for read_committed",
            step=0.2,
        )
    finally:
        consumer.close()


# ----------------------------------------------------------------------------- consume


# librdkafka stops fetching for fetch.queue.backoff.ms (1 s) whenever its local queue is
# full, that is whenever the broker delivers faster than the Python loop takes records out:
# the same raftlog3 cluster then measured 107-480 MB/s from run to run, while its nodes were
# 7 % busy. A short backoff measures the broker; every system gets the same client.
CONSUMER_QUEUE_BACKOFF_MS = 10


def _consumer(system: System, **overrides: object) -> Consumer:
    # Partitions are assigned, not subscribed: the group id is required but unused.
    return Consumer(
        _client(
            system,
            **{"group.id": f"bench-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False},
            **overrides,
        )
    )


def consume(system: System, topic: str, records: int, stall_timeout: float = 30.0) -> dict:
    """Workload 2: every partition of `topic` from offset 0 until `records` are read. Timed
    from the end of the first batch to the last record, so the consumer's start-up (its
    group coordinator lookup creates raftlog's __consumer_offsets) stays out of the rate;
    the time from assign() to the first batch is reported apart."""
    consumer = _consumer(system, **{"fetch.queue.backoff.ms": CONSUMER_QUEUE_BACKOFF_MS})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        assigned = last_progress = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        got = nbytes = 0
        first: tuple[float, int, int] | None = None  # (time, records, bytes) after batch 1
        while got < records:
            # Never ask for more than is left: consume() waits out its timeout for a full batch.
            batch = consumer.consume(min(1000, records - got), 1.0)
            if batch:
                last_progress = time.perf_counter()
            elif time.perf_counter() - last_progress > stall_timeout:
                raise BenchError(f"consume stalled at {got}/{records} records")
            for msg in batch:
                if msg.error():
                    raise BenchError(f"consume: {msg.error()}")
                got += 1
                nbytes += len(msg)
            if batch and first is None:
                first = (last_progress, got, nbytes)
        start, base_records, base_bytes = first or (assigned, 0, 0)
        seconds = time.perf_counter() - start
        result = _throughput(got - base_records, nbytes - base_bytes, seconds)
        return {**result, "first_batch_s": (first or (assigned,))[0] - assigned}
    finally:
        consumer.close()


# ----------------------------------------------------------------------------- latency


def produce_latency(system: System, topic: str, records: int, value: bytes) -> dict:
    """Workload 3: one record in flight, acks=all: produce, then flush until acked."""
    errors: list[KafkaError] = []
    producer = Producer(
        _client(
            system,
            acks="all",
            **{"linger.ms": 0},
            on_delivery=lambda err, _msg: err and errors.append(err),
        )
    )
    samples = []
    for i in range(-20, records):  # the first 20 warm the connection up and are dropped
        start = time.perf_counter_ns()
        producer.produce(topic, value, partition=0)
        if producer.flush(30) or errors:
            raise BenchError(f"record {i} not acknowledged: {errors[:1]}")
        if i >= 0:
            samples.append(time.perf_counter_ns() - start)
    return _percentiles_ms(samples)


SMALL_PRODUCERS = 16
SMALL_PARTITIONS = 12
SMALL_RECORD = b"s" * 100


def small_requests(system: System, seconds: float) -> dict:
    """Many small writes, each its own request: SMALL_PRODUCERS producers, each with one
    100-byte acks=all record in flight (flushed before the next), round-robin over
    SMALL_PARTITIONS partitions. Every record is a Raft entry of its own, so this measures
    the per-request and per-entry path: records/s, and the brokers' CPU per record."""
    system.create_topic("small", SMALL_PARTITIONS)
    producers = [
        Producer(_client(system, acks="all", **{"linger.ms": 0, "max.in.flight": 1}))
        for _ in range(SMALL_PRODUCERS)
    ]
    counts = [0] * SMALL_PRODUCERS
    errors: list[str] = []
    begin = threading.Barrier(SMALL_PRODUCERS + 1)
    stop = threading.Event()

    def run(i: int) -> None:
        producer = producers[i]
        producer.list_topics("small", timeout=30)
        begin.wait()
        n = i
        while not stop.is_set():
            producer.produce("small", SMALL_RECORD, partition=n % SMALL_PARTITIONS)
            if producer.flush(30):
                errors.append("a record was not acknowledged within 30 s")
                return
            n += 1
            counts[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(SMALL_PRODUCERS)]
    for t in threads:
        t.start()
    begin.wait()
    time.sleep(min(3.0, seconds / 4))  # connections warm, leaders found
    pids = system.pids()
    cpu_before = sum(cpu_seconds(pid) for pid in pids.values())
    counted, start = sum(counts), time.monotonic()
    time.sleep(seconds)
    records, elapsed = sum(counts) - counted, time.monotonic() - start
    cpu = sum(cpu_seconds(pid) for pid in pids.values()) - cpu_before
    stop.set()
    for t in threads:
        t.join(60)
    if errors or not records:
        raise BenchError(f"small requests: {records} records, errors: {errors[:3]}")
    return {
        "records_s": records / elapsed,
        "server_cpu_ms": 1000 * cpu / records,
        "producers": SMALL_PRODUCERS,
        "partitions": SMALL_PARTITIONS,
    }


def end_to_end(
    system: System, topic: str, records: int, record_bytes: int, rate: int = E2E_RATE
) -> dict:
    """Workload 4: produce (acks=all, linger.ms=0) at a steady `rate` while a consumer,
    assigned at the end of the partition, polls; latency = poll time - send time (carried
    in the value). librdkafka's fetch defaults (fetch.wait.max.ms 500) apply, so a broker
    that holds a waiting Fetch after data arrives shows here."""
    producer = Producer(_client(system, acks="all", **{"linger.ms": 0}))
    consumer = _consumer(system)
    padding = bytes(record_bytes - STAMP.size)

    def send(seq: int) -> None:
        producer.produce(topic, STAMP.pack(seq, time.perf_counter_ns()) + padding, partition=0)
        producer.poll(0)

    def poll(timeout: float) -> tuple[int, int] | None:
        """(sequence, latency in ns) of the next record, None if none came in time."""
        msg = consumer.poll(timeout)
        if msg is None:
            return None
        if msg.error():
            raise BenchError(f"e2e consumer: {msg.error()}")
        seq, sent_ns = STAMP.unpack_from(msg.value())
        return seq, time.perf_counter_ns() - sent_ns

    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
        # The consumer resolves "end" asynchronously: send markers (-1) until one comes back.
        wait_until(lambda: send(-1) or poll(0.5), 60, "the e2e consumer to be positioned")
        samples: dict[int, int] = {}
        sent, next_send = 0, time.monotonic()
        while len(samples) < records:
            now = time.monotonic()
            if sent < records and now >= next_send:
                send(sent)
                sent, next_send = sent + 1, next_send + 1 / rate
            elif sent == records and now > next_send + 30:
                raise BenchError(f"{records - len(samples)} e2e records unread 30 s after sending")
            got = poll(0.001)
            if got and got[0] >= 0:
                samples[got[0]] = got[1]
        producer.flush(30)
        return _percentiles_ms(list(samples.values()))
    finally:
        consumer.close()


# ----------------------------------------------------------------------------- memory, CPU


def memory(system: System, settings: Settings, written_mb: float, values: list[bytes]) -> dict:
    """Workload 7: tops the system up to `memory_mb` written in total (workload 1's bytes
    count), then reads every broker process's VmRSS."""
    if settings.memory_mb > written_mb:
        system.create_topic("memory", settings.partitions)
        extra = records_for(settings.memory_mb - written_mb, settings.record_bytes)
        written_mb += produce(system, "memory", extra, "none", values)["mb"]
    time.sleep(1)
    per_node = {label: rss_mb(pid) for label, pid in system.pids().items()}
    return {
        "rss_mb": max(v or 0 for v in per_node.values()),
        "per_node": per_node,
        "written_mb": written_mb,
    }


def idle_cpu(system: System, settings: Settings) -> dict:
    """Workload 8: a topic with many partitions and no clients; each broker process's CPU
    (utime+stime) over `idle_seconds`, as % of one core."""
    system.create_topic("idle", settings.idle_partitions)
    per_node = _idle_cpu_pct(system, settings)
    return {
        "cpu_pct": max(per_node.values()),
        "per_node": per_node,
        "partitions": settings.idle_partitions,
    }


def _idle_cpu_pct(system: System, settings: Settings) -> dict[str, float]:
    """Each broker process's CPU (utime+stime) over `idle_seconds`, as % of one core,
    after `settle_seconds` for what the last request set off to finish."""
    time.sleep(settings.settle_seconds)
    pids = system.pids()
    before = {label: cpu_seconds(pid) for label, pid in pids.items()}
    start = time.monotonic()
    time.sleep(settings.idle_seconds)
    elapsed = time.monotonic() - start
    return {
        label: 100 * (cpu_seconds(pid) - before[label]) / elapsed for label, pid in pids.items()
    }


# ----------------------------------------------------------------------------- faults


def failover(system: Raftlog, settings: Settings, value: bytes, timeout: float = 60.0) -> dict:
    """Workload 5: steady acks=all production (`failover_rate` records/s) to a one-partition
    topic; kill -9 its leader; time from the kill until the first record produced after
    the kill is acknowledged."""
    topic = "failover"
    system.create_topic(topic, 1)
    errors: list[KafkaError] = []
    killed_at, acked_at, acked = [float("inf")], [], [0]

    def delivered(sent_at: float, err: KafkaError | None, _msg: object) -> None:
        if err:
            errors.append(err)
            return
        acked[0] += 1
        if sent_at > killed_at[0] and not acked_at:
            acked_at.append(time.monotonic())

    producer = Producer(_client(system, acks="all", **{"linger.ms": 5, "batch.size": 1 << 20}))
    interval, next_send = 1 / settings.failover_rate, time.monotonic()
    warm_until, sent = next_send + 2.0, 0
    while not acked_at:
        now = time.monotonic()
        if now >= next_send:
            producer.produce(
                topic, value, partition=0, on_delivery=functools.partial(delivered, now)
            )
            next_send, sent = next_send + interval, sent + 1
        if killed_at[0] == float("inf") and now >= warm_until:
            _, old_leader = system.leaders(topic)[0]
            killed_at[0] = time.monotonic()
            os.kill(system.pids()[f"node-{old_leader}"], signal.SIGKILL)
        elif now - killed_at[0] > timeout:
            raise BenchError(f"no record acknowledged {timeout:.0f}s after the leader's kill")
        producer.poll(0.0005)
    left = producer.flush(60)
    wait_until(lambda: not alive(system.pids()[f"node-{old_leader}"]), 15, "the old leader to die")
    term, new_leader = wait_until(lambda: system.leaders(topic).get(0), 30, "a new leader")
    return {
        "seconds": acked_at[0] - killed_at[0],
        "old_leader": old_leader,
        "new_leader": new_leader,
        "new_term": term,
        "records": sent,
        "errors": len(errors),
        "unacknowledged": left,
        "acked_records": acked[0],
        "lost_records": _lost(system, topic, {0: acked[0]}, probes=0),
    }


MOVE_TOPIC, MOVE_LOAD_TOPIC = "move", "move-load"
MOVE_FROM, MOVE_TO = [1, 2], [1, 3]  # the moving partition's replicas before and after
MOVE_WARM_S = 2.0  # the load producer runs this long before its baseline is counted
MOVE_CHECK_S = 0.25  # how often the load loop asks whether the move is over
MOVE_TIMEOUT_S = 900.0


def move(system: Raftlog, settings: Settings, values: list[bytes]) -> dict:
    """Workload 12 (issue 44): one replica of a partition holding `move_mb` moves to the node
    that has none of it (replicas 1, 2 -> 1, 3: node 3 copies node 1's log, as a learner
    paced by leader.replication.throttled.rate, the snapshot install included) while a
    producer writes as fast as it can (produce's settings) to a topic of `partitions`
    partitions on all three nodes. `seconds`: from AlterPartitionReassignments until no
    move is listed; `produce_ratio`: the producer's acknowledged records/s during the move
    over those of the `settle_seconds` x 2 before it (the target: at least 0.7), counted by
    the load topic's high watermarks. Each node's CPU (% of a core) in both spans says where
    the move's cost went."""
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import KafkaAdminClient

    admin = AdminClient(_client(system))
    futures = admin.create_topics([NewTopic(MOVE_TOPIC, 1, -1, replica_assignment=[MOVE_FROM])])
    futures[MOVE_TOPIC].result(60)
    system.wait_leaders(MOVE_TOPIC, 1, 60)
    fill = produce(
        system, MOVE_TOPIC, records_for(settings.move_mb, settings.record_bytes), "none", values
    )
    system.create_topic(MOVE_LOAD_TOPIC, settings.partitions)
    kafka_admin = KafkaAdminClient(bootstrap_servers=system.bootstrap, request_timeout_ms=30000)
    errors: list[KafkaError] = []
    producer = Producer(
        _client(
            system,
            **BATCHING,
            **{"compression.type": "none", "delivery.report.only.error": True},
            on_delivery=lambda err, _msg: errors.append(err),
        )
    )
    pids = system.pids()
    sent = [0]

    def committed() -> int:
        """Records the load topic holds below its high watermarks: acknowledged ones (the
        client's own counting, a callback per record, was its bottleneck)."""
        return sum(system.high_watermarks(MOVE_LOAD_TOPIC).values())

    def load(until: Callable[[], bool]) -> tuple[float, int, dict[str, float]]:
        """Produces until `until()` (asked every MOVE_CHECK_S); (seconds, records committed,
        CPU % of a core per node) over that span."""
        start, acked_from = time.monotonic(), committed()
        cpu_from = {label: cpu_seconds(pid) for label, pid in pids.items()}
        next_check, partitions, mask = start + MOVE_CHECK_S, settings.partitions, VALUE_POOL - 1
        while True:
            i = sent[0]
            try:
                producer.produce(MOVE_LOAD_TOPIC, values[i & mask], partition=i % partitions)
                sent[0] = i + 1
            except BufferError:  # librdkafka's queue is full: let it drain
                producer.poll(0.005)
            now = time.monotonic()
            if now >= next_check:
                next_check = now + MOVE_CHECK_S
                if until():
                    break
        seconds, acked = time.monotonic() - start, committed() - acked_from
        cpu = {k: 100 * (cpu_seconds(pid) - cpu_from[k]) / seconds for k, pid in pids.items()}
        return seconds, acked, cpu

    def moving() -> bool:
        return bool(kafka_admin.list_partition_reassignments())

    try:
        warm_until = time.monotonic() + MOVE_WARM_S
        load(lambda: time.monotonic() >= warm_until)
        baseline_s = 2 * settings.settle_seconds
        base_until = time.monotonic() + baseline_s
        # (the same question as during the move, so both spans pay for it)
        before_s, before, before_cpu = load(lambda: moving() or time.monotonic() >= base_until)
        tp = KafkaTopicPartition(MOVE_TOPIC, 0)
        refused = kafka_admin.alter_partition_reassignments({tp: MOVE_TO})
        if refused.get(tp) is not None:
            raise BenchError(f"the move was refused: {refused[tp]}")
        move_deadline = time.monotonic() + MOVE_TIMEOUT_S
        move_s, during, during_cpu = load(lambda: not moving() or time.monotonic() >= move_deadline)
        if moving():
            raise BenchError(f"the move took more than {MOVE_TIMEOUT_S:.0f} s")
        left = producer.flush(60)
    finally:
        kafka_admin.close()
    if left or errors:
        raise BenchError(f"{left} records unacknowledged, {len(errors)} failed: {errors[:3]}")
    replicas = admin.list_topics(MOVE_TOPIC, timeout=30).topics[MOVE_TOPIC].partitions[0].replicas
    if sorted(replicas) != MOVE_TO:
        raise BenchError(f"the partition's replicas are {replicas} after the move, not {MOVE_TO}")
    before_rate, during_rate = before / before_s, during / move_s
    return {
        "seconds": move_s,
        "partition_mb": fill["mb"],
        "copy_mb_s": fill["mb"] / move_s,
        "before_records_s": before_rate,
        "during_records_s": during_rate,
        "produce_ratio": during_rate / before_rate,
        "before_s": before_s,
        "cpu_pct_before": before_cpu,
        "cpu_pct_during": during_cpu,
    }


def restart(system: Raftlog, settings: Settings, values: list[bytes]) -> dict:
    """Workload 6: one node with `restart_mb` of log, kill -9, `raftlog serve` again; time
    from the start of the process until a produce (acks=all) is acknowledged. Also counts
    the acknowledged records the restart lost (high watermarks before and after)."""
    topic = "restart"
    system.create_topic(topic, settings.partitions)
    fill = produce(
        system, topic, records_for(settings.restart_mb, settings.record_bytes), "none", values
    )
    log_mb = sum(f.stat().st_size for f in system.workdir.rglob("*") if f.is_file()) / MB
    acked = system.high_watermarks(topic)
    pid = system.pids()["node-1"]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not alive(pid), 15, "the node to die")
    producer = Producer(_client(system, acks="all", **PROBE))
    errors: list[KafkaError] = []
    start = time.monotonic()
    system.restart(1)
    producer.produce(
        topic, values[0], partition=0, on_delivery=lambda err, _m: err and errors.append(err)
    )
    wait_until(lambda: producer.flush(0.005) == 0, 120, "a produce to the restarted node", step=0)
    serving = time.monotonic() - start
    if errors:
        raise BenchError(f"probe record failed: {errors[:1]}")
    return {
        "seconds": serving,
        "data_dir_mb": log_mb,
        "written_mb": fill["mb"],
        "acked_records": sum(acked.values()),
        "lost_records": _lost(system, topic, acked, probes=1),
    }


def _lost(
    system: Raftlog, topic: str, acked: dict[int, int], probes: int, patience: float = 10.0
) -> int:
    """Acknowledged records missing: each partition's high watermark (less the `probes`
    records sent to partition 0 since) below what was acked; waits up to `patience` s for
    the high watermarks to come back. A lower bound where retries may have duplicated."""
    deadline = time.monotonic() + patience
    while True:
        now = system.high_watermarks(topic)
        now[0] = now.get(0, 0) - probes
        lost = sum(max(0, hw - now.get(p, 0)) for p, hw in acked.items())
        if not lost or time.monotonic() > deadline:
            return lost
        time.sleep(0.2)


# ----------------------------------------------------------------------------- scale


def scale(
    system: Raftlog,
    settings: Settings,
    partitions: int,
    values: list[bytes],
    baseline: bool,
    note: Callable[[str], None],
) -> dict:
    """Workload 9, on a fresh cluster: one topic of `partitions` partitions. Its creation
    until Metadata shows every partition led; idle CPU and RSS; Metadata time; acks=all
    produce spread over all partitions (with `baseline`, also over six, to compare with);
    then kill -9 of the node leading most partitions, until a live node's Metadata shows
    every partition led again. A figure that fails or times out is None, with the reason in
    "failed" (or "skipped", when it needs a figure that failed), so the rest still count."""
    topic = "scale"
    admin = AdminClient(_client(system, log_level=2))  # no line per refused reconnect
    result: dict = {"partitions": partitions, "per_node": {}, "failed": {}, "skipped": {}}

    def measure(field: str, fn: Callable[[], float], needs: str | None = None) -> None:
        result[field] = None
        if needs and result[needs] is None:
            result["skipped"][field] = f"no {needs}"
            note(f"{field} skipped: no {needs}")
            return
        try:
            result[field] = fn()
        except Exception as exc:  # noqa: BLE001 - one failed figure must not lose the others
            result["failed"][field] = f"{type(exc).__name__}: {exc}"
            note(f"{field} failed: {result['failed'][field]}")
            return
        note(f"{field}={result[field]:.4g}")

    def idle_cpu_pct() -> float:
        result["per_node"]["idle_cpu_pct"] = cpu = _idle_cpu_pct(system, settings)
        return max(cpu.values())

    def rss() -> float:
        result["per_node"]["rss_mb"] = per_node = {
            label: rss_mb(pid) for label, pid in system.pids().items()
        }
        return max(v or 0 for v in per_node.values())

    def scrape_ms() -> float:
        idle = result["per_node"].get("idle_cpu_pct", {})
        result["per_node"]["scrape_ms"], result["series"] = _scrape_ms(system, idle)
        return max(result["per_node"]["scrape_ms"].values())

    def over_six() -> float:
        system.create_topic("scale-six", BASELINE_PARTITIONS)
        return produce(system, "scale-six", settings.scale_records, "none", values)["mb_s"]

    def spread() -> float:
        return produce(system, topic, settings.scale_records, "none", values)["mb_s"]

    def failover() -> float:
        victim, led = Counter(_metadata_leaders(admin, topic).values()).most_common(1)[0]
        result["failover_node"], result["failover_led"] = victim, led
        return _failover_s(system, topic, partitions, victim)

    measure("create_s", lambda: _create_s(admin, system, topic, partitions))
    measure("idle_cpu_pct", idle_cpu_pct)
    measure("rss_mb", rss)
    measure("metadata_ms", lambda: _metadata_ms(admin, topic))
    measure("scrape_ms", scrape_ms)
    if baseline:
        measure("six_mb_s", over_six)
    measure("spread_mb_s", spread, needs="create_s")
    measure("failover_s", failover, needs="create_s")
    return result


def _scrape_ms(system: Raftlog, idle_pct: dict[str, float]) -> tuple[dict[str, float], int]:
    """Per node, the CPU milliseconds one GET /metrics costs it (the mean of SCRAPE_SAMPLES,
    less its idle CPU meanwhile), and the most series a node listed. Fresh listings only: the
    bench's scraper is paused, and a listing byte for byte the last one is a node giving its
    last listing again (raftlog.node.metrics.SCRAPE_REUSE_FACTOR): it is asked again until it
    makes a new one. (Waiting a fixed time instead, the 3,000-partition figure, whose
    listings take seconds to make under load and are kept nine times that, measured 6 ms.)"""
    pids, urls = system.pids(), system.metrics_urls()
    spent, series = dict.fromkeys(urls, 0.0), 0
    with system.scraper_paused():
        for label, url in urls.items():
            last = _get(url)
            for _ in range(SCRAPE_SAMPLES):
                deadline = time.monotonic() + SCRAPE_FRESH_TIMEOUT_S
                while True:
                    before, start = cpu_seconds(pids[label]), time.monotonic()
                    listing = _get(url)
                    took = time.monotonic() - start
                    if listing != last or time.monotonic() > deadline:
                        break
                    time.sleep(SCRAPE_RETRY_S)
                idle_s = idle_pct.get(label, 0.0) / 100 * took
                spent[label] += max(0.0, cpu_seconds(pids[label]) - before - idle_s)
                series = max(series, sum(1 for line in listing.splitlines() if line[:1] != b"#"))
                last = listing
    return {label: 1000 * cpu / SCRAPE_SAMPLES for label, cpu in spent.items()}, series


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as answer:  # noqa: S310 - loopback
        return answer.read()


def _metadata_leaders(
    admin: AdminClient, topic: str, timeout: float = 10.0, dead: int = -1
) -> dict[int, int]:
    """{partition: leader node id} as Metadata tells it, for the partitions led by a node
    other than `dead`."""
    meta = admin.list_topics(topic, timeout=timeout).topics[topic]
    return {p: m.leader for p, m in meta.partitions.items() if m.leader not in (-1, dead)}


def _create_s(admin: AdminClient, system: System, topic: str, partitions: int) -> float:
    """Seconds from sending CreateTopics until Metadata shows a leader for every partition."""
    start = time.monotonic()
    futures = admin.create_topics(
        [NewTopic(topic, partitions, system.replication_factor)],
        request_timeout=SCALE_CREATE_TIMEOUT,
    )
    try:
        futures[topic].result(SCALE_CREATE_TIMEOUT)
    except TimeoutError:
        raise BenchError(f"CreateTopics unanswered after {SCALE_CREATE_TIMEOUT:g} s") from None
    wait_until(
        lambda: len(_metadata_leaders(admin, topic)) == partitions,
        start + SCALE_CREATE_TIMEOUT - time.monotonic(),
        f"leaders of all {partitions} partitions of {topic}",
        step=0.1,
    )
    return time.monotonic() - start


def _metadata_ms(admin: AdminClient, topic: str) -> float:
    """Median wall time of a Metadata request for `topic`, after one to warm up (the
    client's decoding of the answer included)."""
    admin.list_topics(topic, timeout=30)
    samples = []
    for _ in range(METADATA_SAMPLES):
        start = time.perf_counter()
        admin.list_topics(topic, timeout=30)
        samples.append(time.perf_counter() - start)
    return 1000 * statistics.median(samples)


def _failover_s(system: Raftlog, topic: str, partitions: int, victim: int) -> float:
    """kill -9 of node `victim`; seconds until a live node's Metadata shows every partition
    of `topic` led by a live node."""
    live = next(info["kafka"] for i, info in system.node_info.items() if i != victim)
    watcher = AdminClient({"bootstrap.servers": live, "log_level": 2})
    _metadata_leaders(watcher, topic)  # connected before the kill
    start = time.monotonic()
    kill9(system.pids()[f"node-{victim}"])
    wait_until(
        lambda: len(_metadata_leaders(watcher, topic, timeout=5, dead=victim)) == partitions,
        SCALE_FAILOVER_TIMEOUT,
        f"leaders of all {partitions} partitions of {topic} after node {victim}'s kill",
        step=0.1,
    )
    return time.monotonic() - start


# ----------------------------------------------------------------------------- queue


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
    admin = AdminClient(_client(system, log_level=5))  # no "purging unserved events" at exit
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
    acks = _percentiles_ms(tally.ack_ns or [0])
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
        _client(system, **{"group.id": group, "share.acknowledgement.mode": "implicit"})
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
