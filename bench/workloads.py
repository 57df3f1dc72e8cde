"""The workloads. Each drives one started system with confluent-kafka (librdkafka), the
same client and settings for every system, and returns its figures as a flat dict. Here the
settings, the values and the clients they share, and the workloads that only produce and
consume (produce, consume, latency, small requests, end to end, memory, idle CPU); the others
have a module each: transactions, faults (failover, restart, a replica's move), scale and
queues."""

from __future__ import annotations

import random
import statistics
import struct
import threading
import time
import uuid
from dataclasses import dataclass

import lz4.frame
from confluent_kafka import (
    OFFSET_END,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)

from bench.procs import BenchError, cpu_seconds, preemptions, rss_mb, wait_until
from bench.systems import System

MB = 1e6  # throughput and sizes are in MB = 10^6 bytes of record values


VALUE_POOL = 1024  # distinct values, cycled: 1 MiB apart, beyond lz4's 64 KiB window


VALUES_TEXT = (
    f"first half random bytes, second half a repeated text pattern; {VALUE_POOL} distinct "
    "values cycled"
)


STAMP = struct.Struct(">qq")  # (sequence, perf_counter_ns) at the head of an e2e value


E2E_RATE = 200  # records/s: a light steady load; a run lasts records/rate whatever the latency


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


def client_config(system: System, **overrides: object) -> dict:
    return {"bootstrap.servers": system.bootstrap, **system.client, **overrides}


def throughput(records: int, nbytes: int, seconds: float) -> dict:
    return {
        "records": records,
        "mb": nbytes / MB,
        "seconds": seconds,
        "mb_s": nbytes / MB / seconds,
        "records_s": records / seconds,
    }


def percentiles_ms(samples_ns: list[int]) -> dict:
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


# Workload 1's producer settings; txn uses them too, so its ratio is the cost of transactions.
BATCHING = {"acks": "all", "linger.ms": 5, "batch.size": 1 << 20}


def batching_producer(
    system: System,
    compression: str,
    errors: list[KafkaError],
    settings: dict[str, object] | None = None,
) -> Producer:
    """Workload 1's producer (BATCHING, `compression`, and `settings` over them): a failed
    delivery is appended to `errors`, and only failures are reported (a callback per record
    was the client's bottleneck)."""
    return Producer(
        client_config(
            system,
            **BATCHING,
            **{"compression.type": compression, "delivery.report.only.error": True},
            **(settings or {}),
            on_delivery=lambda err, _msg: errors.append(err),
        )
    )


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
    producer = batching_producer(system, compression, errors, overrides)
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
    return throughput(records, nbytes, seconds)


# librdkafka stops fetching for fetch.queue.backoff.ms (1 s) whenever its local queue is
# full, that is whenever the broker delivers faster than the Python loop takes records out:
# the same raftlog3 cluster then measured 107-480 MB/s from run to run, while its nodes were
# 7 % busy. A short backoff measures the broker; every system gets the same client.
CONSUMER_QUEUE_BACKOFF_MS = 10


def new_consumer(system: System, **overrides: object) -> Consumer:
    # Partitions are assigned, not subscribed: the group id is required but unused.
    return Consumer(
        client_config(
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
    consumer = new_consumer(system, **{"fetch.queue.backoff.ms": CONSUMER_QUEUE_BACKOFF_MS})
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
        result = throughput(got - base_records, nbytes - base_bytes, seconds)
        return {**result, "first_batch_s": (first or (assigned,))[0] - assigned}
    finally:
        consumer.close()


SPREAD_PARTITIONS = 1000  # issue 45's spread figure: one producer over a thousand partitions


def spread(system: System, settings: Settings, values: list[bytes]) -> dict:
    """One producer's acks=all records round-robin over SPREAD_PARTITIONS partitions of a
    fresh instance (produce's settings, scale_records records): what a small batch per
    partition costs each system, where produce measures large batches over a few."""
    system.create_topic("spread", SPREAD_PARTITIONS)
    return produce(system, "spread", settings.scale_records, "none", values)


def produce_latency(system: System, topic: str, records: int, value: bytes) -> dict:
    """Workload 3: one record in flight, acks=all: produce, then flush until acked."""
    errors: list[KafkaError] = []
    producer = Producer(
        client_config(
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
    return percentiles_ms(samples)


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
        Producer(client_config(system, acks="all", **{"linger.ms": 0, "max.in.flight": 1}))
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
    preempted_before = sum(preemptions(pid) for pid in pids.values())
    counted, start = sum(counts), time.monotonic()
    time.sleep(seconds)
    records, elapsed = sum(counts) - counted, time.monotonic() - start
    cpu = sum(cpu_seconds(pid) for pid in pids.values()) - cpu_before
    preempted = sum(preemptions(pid) for pid in pids.values()) - preempted_before
    stop.set()
    for t in threads:
        t.join(60)
    if errors or not records:
        raise BenchError(f"small requests: {records} records, errors: {errors[:3]}")
    return {
        "records_s": records / elapsed,
        "server_cpu_ms": 1000 * cpu / records,
        "server_preempted": preempted / records,
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
    producer = Producer(client_config(system, acks="all", **{"linger.ms": 0}))
    consumer = new_consumer(system)
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
        return percentiles_ms(list(samples.values()))
    finally:
        consumer.close()


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
    per_node = idle_cpu_per_node(system, settings)
    return {
        "cpu_pct": max(per_node.values()),
        "per_node": per_node,
        "partitions": settings.idle_partitions,
    }


def idle_cpu_per_node(system: System, settings: Settings) -> dict[str, float]:
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
