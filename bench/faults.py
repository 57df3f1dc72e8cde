"""The workloads that break something on purpose: a leader's kill -9 (failover), a node's
kill -9 and restart, and a replica's move under load; each counts the acknowledged records
lost."""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Callable

from confluent_kafka import (
    KafkaError,
    Producer,
)
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
)

from bench.procs import BenchError, cpu_seconds, wait_until
from bench.systems import Raftlog
from bench.workloads import (
    MB,
    VALUE_POOL,
    Settings,
    batching_producer,
    client_config,
    produce,
    records_for,
)
from raftlog_app.local_nodes import alive

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

    producer = Producer(
        client_config(system, acks="all", **{"linger.ms": 5, "batch.size": 1 << 20})
    )
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

    admin = AdminClient(client_config(system))
    futures = admin.create_topics([NewTopic(MOVE_TOPIC, 1, -1, replica_assignment=[MOVE_FROM])])
    futures[MOVE_TOPIC].result(60)
    system.wait_leaders(MOVE_TOPIC, 1, 60)
    fill = produce(
        system, MOVE_TOPIC, records_for(settings.move_mb, settings.record_bytes), "none", values
    )
    system.create_topic(MOVE_LOAD_TOPIC, settings.partitions)
    kafka_admin = KafkaAdminClient(bootstrap_servers=system.bootstrap, request_timeout_ms=30000)
    errors: list[KafkaError] = []
    producer = batching_producer(system, "none", errors)
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
    producer = Producer(client_config(system, acks="all", **PROBE))
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
