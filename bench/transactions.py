"""Workload 11, transactions: the same records produced in committed transactions and
idempotently without them, so their ratio is what transactions cost a system."""

from __future__ import annotations

import math
import time
import uuid

from confluent_kafka import (
    KafkaError,
    KafkaException,
    TopicPartition,
)

from bench.procs import BenchError, wait_until
from bench.systems import System
from bench.workloads import (
    VALUE_POOL,
    Settings,
    batching_producer,
    new_consumer,
    percentiles_ms,
    produce,
    records_for,
    throughput,
)

# txn: transactions of TXN_RECORDS records, each committed before the next begins.
TXN_RECORDS = 100


TXN_INIT_TIMEOUT_S = 30.0  # a peer without transactions answers or hangs: n/a after this


TXN_COMMIT_TIMEOUT_S = 30.0


TXN_MAX_S = 300.0  # all transactions; ~5 s on raftlog3 at full size


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
    txn_id = f"bench-txn-{uuid.uuid4().hex[:8]}"
    producer = batching_producer(system, "none", errors, {"transactional.id": txn_id})
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
    txn = throughput(records, nbytes, seconds)
    return {
        **result,
        **txn,
        "vs_idempotent": txn["records_s"] / plain["records_s"],
        "per_txn_ms": percentiles_ms(per_txn),
        "committed_end_offsets": committed,
    }


def _committed_end(system: System, topic: str, partitions: int, records: int) -> int:
    """The sum of `topic`'s end offsets a read_committed consumer sees (the last stable
    offsets, markers included), once at least `records`: a commit that was acknowledged
    but left its records invisible would otherwise pass for a fast one. The markers of
    the last commit may land just after it returns, hence the wait."""
    consumer = new_consumer(system, **{"isolation.level": "read_committed"})

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
