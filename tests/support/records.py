"""Produce with real clients, consume everything back, and check the log.

Every produced record has a unique value `b"<run>:<seq>:..."`, explicit partition, key
(sometimes null), headers and an explicit CreateTime timestamp, so the checker can tell
exactly which acknowledged record ended up where.

Checker (DESIGN.md section 6): every acknowledged record is read back exactly once, at its
acknowledged offset, with key/value/headers/timestamp intact; offsets are contiguous per
partition; leader epochs never decrease along the log. Records whose send failed (the
client said so) may appear at most once; nothing else may appear.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Outgoing:
    """A record to send."""

    run: str
    seq: int
    partition: int
    key: bytes | None
    value: bytes
    headers: Headers
    timestamp: int  # ms, CreateTime


@dataclass(frozen=True)
class Rec:
    """A record as acknowledged by a producer or as read by a consumer."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int
    leader_epoch: int | None = None
    client: str = ""


@dataclass
class ProduceOutcome:
    client: str
    acked: list[Rec] = field(default_factory=list)
    failed: list[tuple[Outgoing, str]] = field(default_factory=list)
    unresolved: list[Outgoing] = field(default_factory=list)  # no answer before the deadline

    @property
    def maybe_values(self) -> set[bytes]:
        """Values that may or may not be in the log (the client could not tell)."""
        return {o.value for o, _ in self.failed} | {o.value for o in self.unresolved}


def record_id(value: bytes | None) -> tuple[str, int] | None:
    """(run, seq) from a value made by make_records."""
    if not value:
        return None
    parts = value.split(b":", 2)
    if len(parts) < 3:
        return None
    try:
        return parts[0].decode(), int(parts[1])
    except ValueError:
        return None


def make_records(
    run: str,
    count: int,
    partitions: int | Sequence[int],
    value_size: int = 100,
    random_payload: bool = False,
    ts_base: int | None = None,
    start_seq: int = 0,
) -> list[Outgoing]:
    """`count` records round-robin over `partitions` (a count or explicit list)."""
    parts = list(range(partitions)) if isinstance(partitions, int) else list(partitions)
    ts_base = ts_base if ts_base is not None else int(time.time() * 1000) - 3_600_000
    out = []
    for i in range(start_seq, start_seq + count):
        head = f"{run}:{i}:".encode()
        pad = max(0, value_size - len(head))
        body = os.urandom(pad) if random_payload else (b"%08d" % i * (pad // 8 + 1))[:pad]
        key = None if i % 7 == 3 else f"key-{i % 1000}".encode()
        headers: Headers = (
            ("run", run.encode()),
            ("seq", str(i).encode()),
            ("empty", b""),
            ("ünï", "välue-✓".encode()),
        )
        out.append(
            Outgoing(
                run=run,
                seq=i,
                partition=parts[i % len(parts)],
                key=key,
                value=head + body,
                headers=headers,
                timestamp=ts_base + i,
            )
        )
    return out


def _acked(topic: str, o: Outgoing, partition: int, offset: int, client: str) -> Rec:
    return Rec(topic, partition, offset, o.key, o.value, o.headers, o.timestamp, None, client)


# --------------------------------------------------------------------------- producers


def produce_confluent(
    bootstrap: str,
    topic: str,
    records: Sequence[Outgoing],
    compression: str = "lz4",
    acks: str = "all",
    timeout: float = 180.0,
    extra: dict | None = None,
    max_in_queue: int = 5000,
) -> ProduceOutcome:
    from confluent_kafka import Producer

    conf = {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "compression.type": compression,
        "linger.ms": 5,
        "message.timeout.ms": int(timeout * 1000 * 0.8),
        "request.timeout.ms": 30000,
        "client.id": "raftlog-tests-confluent",
        **(extra or {}),
    }
    out = ProduceOutcome("confluent-kafka")
    producer = Producer(conf)
    pending: dict[int, Outgoing] = {}

    def make_cb(o: Outgoing):
        def cb(err, msg):
            pending.pop(o.seq, None)
            if err is not None:
                out.failed.append((o, str(err)))
            else:
                out.acked.append(_acked(topic, o, msg.partition(), msg.offset(), out.client))

        return cb

    deadline = time.monotonic() + timeout
    for o in records:
        while True:
            try:
                producer.produce(
                    topic,
                    value=o.value,
                    key=o.key,
                    partition=o.partition,
                    headers=list(o.headers),
                    timestamp=o.timestamp,
                    on_delivery=make_cb(o),
                )
                pending[o.seq] = o
                break
            except BufferError:
                producer.poll(0.05)
            if time.monotonic() > deadline:
                break
        if len(pending) >= max_in_queue:
            producer.poll(0.01)
        else:
            producer.poll(0)
        if time.monotonic() > deadline:
            break
    if producer.flush(max(1.0, deadline - time.monotonic())):
        producer.purge()  # reported failed by the callbacks
        producer.flush(5)
    done = {r.value for r in out.acked} | {o.value for o, _ in out.failed}
    out.unresolved = [o for o in records if o.value not in done]
    return out


def produce_kafka_python(
    bootstrap: str,
    topic: str,
    records: Sequence[Outgoing],
    compression: str = "gzip",
    acks: str | int = "all",
    timeout: float = 180.0,
    extra: dict | None = None,
) -> ProduceOutcome:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    out = ProduceOutcome("kafka-python")
    producer = KafkaProducer(
        bootstrap_servers=bootstrap.split(","),
        acks=acks,
        compression_type=compression,
        linger_ms=5,
        request_timeout_ms=30000,
        client_id="raftlog-tests-kafka-python",
        # kafka-python 3.x is idempotent by default (InitProducerId): left as users get it
        **(extra or {}),
    )
    deadline = time.monotonic() + timeout
    try:
        futures = []
        for o in records:
            fut = producer.send(
                topic,
                value=o.value,
                key=o.key,
                headers=list(o.headers),
                partition=o.partition,
                timestamp_ms=o.timestamp,
            )
            futures.append((o, fut))
        producer.flush(timeout=max(1.0, deadline - time.monotonic()))
        for o, fut in futures:
            try:
                md = fut.get(timeout=max(0.1, deadline - time.monotonic()))
                out.acked.append(_acked(topic, o, md.partition, md.offset, out.client))
            except KafkaError as exc:
                if fut.is_done:
                    out.failed.append((o, repr(exc)))
                else:
                    out.unresolved.append(o)
    finally:
        producer.close(timeout=10)
    return out


def produce_aiokafka(
    bootstrap: str,
    topic: str,
    records: Sequence[Outgoing],
    compression: str = "zstd",
    acks: str | int = "all",
    timeout: float = 180.0,
    extra: dict | None = None,
) -> ProduceOutcome:
    return asyncio.run(
        _produce_aiokafka(bootstrap, topic, records, compression, acks, timeout, extra or {})
    )


async def _produce_aiokafka(
    bootstrap, topic, records, compression, acks, timeout, extra
) -> ProduceOutcome:
    from aiokafka import AIOKafkaProducer

    out = ProduceOutcome("aiokafka")
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks=acks,
        compression_type=compression,
        linger_ms=5,
        request_timeout_ms=30000,
        client_id="raftlog-tests-aiokafka",
        **extra,
    )
    await asyncio.wait_for(producer.start(), 60)
    try:

        async def run() -> None:
            futures = []
            for o in records:
                fut = await producer.send(
                    topic,
                    value=o.value,
                    key=o.key,
                    partition=o.partition,
                    timestamp_ms=o.timestamp,
                    headers=list(o.headers),
                )
                futures.append((o, fut))
            for o, fut in futures:
                try:
                    md = await fut
                    out.acked.append(_acked(topic, o, md.partition, md.offset, out.client))
                except Exception as exc:  # noqa: BLE001 - a failed send is recorded, not raised
                    out.failed.append((o, repr(exc)))

        with contextlib.suppress(TimeoutError):  # what is left over counts as unresolved
            await asyncio.wait_for(run(), timeout)
    finally:
        await asyncio.wait_for(producer.stop(), 30)
    done = {r.value for r in out.acked} | {o.value for o, _ in out.failed}
    out.unresolved = [o for o in records if o.value not in done]
    return out


PRODUCERS = {
    "confluent-kafka": produce_confluent,
    "kafka-python": produce_kafka_python,
    "aiokafka": produce_aiokafka,
}


class ContinuousProducer(threading.Thread):
    """Produces with confluent-kafka (acks=all) until stop(); every record has a unique value.

    By default with no client retries: a failed send is recorded and a *new* record is sent
    instead, so the checker can demand exactly-once for acknowledged records and at-most-once
    for failed ones without idempotence. With idempotent=True the client retries as it likes
    and the broker must drop the duplicates: then every record is in the log at most once."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: Sequence[int],
        run: str = "cont",
        value_size: int = 200,
        rate_per_s: float = 2000.0,
        max_in_flight: int = 2000,
        compression: str = "lz4",
        idempotent: bool = False,
    ) -> None:
        super().__init__(name=f"producer-{run}", daemon=True)
        self.idempotent = idempotent
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = list(partitions)
        self.run_id = run
        self.value_size = value_size
        self.rate = rate_per_s
        self.max_in_flight = max_in_flight
        self.compression = compression
        self.outcome = ProduceOutcome("confluent-kafka")
        self.ack_times: dict[bytes, float] = {}
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._in_flight = 0
        self.error: BaseException | None = None
        self.sent = 0

    def acked_since(self, t: float, partition: int | None = None) -> int:
        with self._lock:
            return sum(
                1
                for r in self.outcome.acked
                if self.ack_times.get(r.value, 0) >= t
                and (partition is None or r.partition == partition)
            )

    def acked_count(self, partition: int | None = None) -> int:
        with self._lock:
            return sum(
                1 for r in self.outcome.acked if partition is None or r.partition == partition
            )

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - surfaced by stop()
            self.error = exc

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "compression.type": self.compression,
                "linger.ms": 5,
                **({} if self.idempotent else {"retries": 0}),
                "enable.idempotence": self.idempotent,
                "max.in.flight.requests.per.connection": 5,
                "message.timeout.ms": 30000,
                "request.timeout.ms": 15000,
                "topic.metadata.refresh.interval.ms": 1000,
                "client.id": "raftlog-tests-continuous",
            }
        )
        seq = 0
        t0 = time.monotonic()
        while not self._halt.is_set():
            target = int((time.monotonic() - t0) * self.rate)
            while seq < target and self._in_flight < self.max_in_flight and not self._halt.is_set():
                o = make_records(self.run_id, 1, self.partitions, self.value_size, start_seq=seq)[0]
                try:
                    producer.produce(
                        self.topic,
                        value=o.value,
                        key=o.key,
                        partition=o.partition,
                        headers=list(o.headers),
                        timestamp=o.timestamp,
                        on_delivery=self._callback(o),
                    )
                except BufferError:
                    break
                with self._lock:
                    self._in_flight += 1
                seq += 1
                self.sent = seq
            producer.poll(0.01)
        if producer.flush(40):
            producer.purge()  # whatever is left is reported failed ("maybe") by its callback
            producer.flush(5)

    def _callback(self, o: Outgoing):
        def cb(err, msg):
            with self._lock:
                self._in_flight -= 1
                if err is not None:
                    self.outcome.failed.append((o, str(err)))
                else:
                    self.outcome.acked.append(
                        _acked(self.topic, o, msg.partition(), msg.offset(), "continuous")
                    )
                    self.ack_times[o.value] = time.monotonic()

        return cb

    def stop(self, timeout: float = 90.0) -> ProduceOutcome:
        self._halt.set()
        self.join(timeout)
        if self.is_alive():
            raise TimeoutError("continuous producer did not stop in time")
        if self.error is not None:
            raise self.error
        return self.outcome


# --------------------------------------------------------------------------- consumers


def _headers(raw) -> Headers:
    return tuple((k if isinstance(k, str) else k.decode(), v) for k, v in (raw or ()))


def consume_confluent(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    starts: dict[int, int] | None = None,
    timeout: float = 180.0,
) -> list[Rec]:
    """Read [start, end) of each partition with confluent-kafka (assign, no group
    management, no commits). Message.leader_epoch() gives each batch's epoch."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"raftlog-tests-{os.getpid()}-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "client.id": "raftlog-tests-confluent-consumer",
            "fetch.max.bytes": 16 * 1024 * 1024,
        }
    )
    starts = starts or {}
    todo = {p: e for p, e in ends.items() if e > starts.get(p, 0)}
    out: list[Rec] = []
    try:
        consumer.assign(
            [
                TopicPartition(topic, p, starts[p] if starts.get(p) else OFFSET_BEGINNING)
                for p in todo
            ]
        )
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=5000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consumer error: {err}")
                p = msg.partition()
                if p not in todo or msg.offset() >= todo[p]:
                    continue
                _, ts = msg.timestamp()
                out.append(
                    Rec(
                        topic,
                        p,
                        msg.offset(),
                        msg.key(),
                        msg.value(),
                        _headers(msg.headers()),
                        ts,
                        msg.leader_epoch(),
                        "confluent-kafka",
                    )
                )
                if msg.offset() >= todo[p] - 1:
                    del todo[p]
        if todo:
            got = defaultdict(int)
            for r in out:
                got[r.partition] = max(got[r.partition], r.offset + 1)
            raise TimeoutError(
                f"confluent consumer: partitions {todo} not read to the end (got up to {dict(got)})"
            )
    finally:
        consumer.close()
    return out


def consume_kafka_python(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    starts: dict[int, int] | None = None,
    timeout: float = 180.0,
) -> list[Rec]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap.split(","),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        client_id="raftlog-tests-kafka-python-consumer",
        max_poll_records=5000,
    )
    starts = starts or {}
    todo = {p: e for p, e in ends.items() if e > starts.get(p, 0)}
    out: list[Rec] = []
    try:
        tps = {p: TopicPartition(topic, p) for p in todo}
        consumer.assign(list(tps.values()))
        for p, tp in tps.items():
            consumer.seek(tp, starts.get(p, 0))
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=500)
            for tp, msgs in batch.items():
                for m in msgs:
                    p = tp.partition
                    if p not in todo or m.offset >= todo[p]:
                        continue
                    out.append(
                        Rec(
                            topic,
                            p,
                            m.offset,
                            m.key,
                            m.value,
                            _headers(m.headers),
                            m.timestamp,
                            m.leader_epoch
                            if m.leader_epoch is not None and m.leader_epoch >= 0
                            else None,
                            "kafka-python",
                        )
                    )
                    if m.offset >= todo[p] - 1:
                        del todo[p]
        if todo:
            raise TimeoutError(f"kafka-python consumer: partitions {todo} not read to the end")
    finally:
        consumer.close()
    return out


def consume_aiokafka(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    starts: dict[int, int] | None = None,
    timeout: float = 180.0,
) -> list[Rec]:
    return asyncio.run(_consume_aiokafka(bootstrap, topic, ends, starts or {}, timeout))


async def _consume_aiokafka(bootstrap, topic, ends, starts, timeout) -> list[Rec]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        client_id="raftlog-tests-aiokafka-consumer",
    )
    await asyncio.wait_for(consumer.start(), 60)
    todo = {p: e for p, e in ends.items() if e > starts.get(p, 0)}
    out: list[Rec] = []
    try:
        tps = {p: TopicPartition(topic, p) for p in todo}
        consumer.assign(list(tps.values()))
        for p, tp in tps.items():
            consumer.seek(tp, starts.get(p, 0))
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=5000)
            for tp, msgs in batch.items():
                for m in msgs:
                    p = tp.partition
                    if p not in todo or m.offset >= todo[p]:
                        continue
                    out.append(
                        Rec(
                            topic,
                            p,
                            m.offset,
                            m.key,
                            m.value,
                            _headers(m.headers),
                            m.timestamp,
                            None,
                            "aiokafka",
                        )
                    )
                    if m.offset >= todo[p] - 1:
                        del todo[p]
        if todo:
            raise TimeoutError(f"aiokafka consumer: partitions {todo} not read to the end")
    finally:
        await asyncio.wait_for(consumer.stop(), 30)
    return out


CONSUMERS = {
    "confluent-kafka": consume_confluent,
    "kafka-python": consume_kafka_python,
    "aiokafka": consume_aiokafka,
}


# --------------------------------------------------------------------------- checker


class LogCheckError(AssertionError):
    pass


@dataclass
class LogReport:
    partitions: dict[int, tuple[int, int]]  # partition -> (first offset, end offset) read
    acked: int
    consumed: int
    maybe_present: int
    problems: list[str]

    def raise_if_failed(self, limit: int = 25) -> None:
        if self.problems:
            shown = "\n  ".join(self.problems[:limit])
            more = (
                f"\n  ... and {len(self.problems) - limit} more"
                if len(self.problems) > limit
                else ""
            )
            raise LogCheckError(
                f"log check failed ({len(self.problems)} problems; {self.acked} acked, "
                f"{self.consumed} read):\n  {shown}{more}"
            )


def check_log(
    acked: Iterable[Rec],
    consumed: Sequence[Rec],
    maybe: Iterable[bytes] = (),
    start_offsets: dict[int, int] | None = None,
    end_offsets: dict[int, int] | None = None,
    foreign_ok: bool = False,
) -> LogReport:
    """Check `consumed` (everything read back from one topic) against what was acknowledged.

    - every acknowledged record is read back exactly once, at its acknowledged partition
      and offset, with key, value, headers and timestamp intact;
    - no two acknowledgements name the same offset;
    - offsets read are contiguous per partition (from `start_offsets` and up to
      `end_offsets` when given);
    - leader epochs (where the consumer reports them) never decrease along a partition;
    - a record that was not acknowledged appears only if its value is in `maybe` (a send
      the client saw fail or never answered), and then at most once. With `foreign_ok`,
      records not made by make_records (no run:seq value) are ignored for this rule.
    """
    acked = list(acked)
    problems: list[str] = []
    maybe = set(maybe)

    by_part: dict[int, list[Rec]] = defaultdict(list)
    for r in consumed:
        by_part[r.partition].append(r)
    ranges: dict[int, tuple[int, int]] = {}
    for p, recs in sorted(by_part.items()):
        recs.sort(key=lambda r: r.offset)
        offsets = [r.offset for r in recs]
        first = offsets[0]
        if start_offsets is not None and p in start_offsets and first != start_offsets[p]:
            problems.append(f"p{p}: first offset read {first}, expected {start_offsets[p]}")
        for a, b in zip(offsets, offsets[1:], strict=False):
            if b == a:
                problems.append(f"p{p}: offset {a} read twice")
            elif b != a + 1:
                problems.append(f"p{p}: offsets jump from {a} to {b} (not contiguous)")
        end = offsets[-1] + 1
        if end_offsets is not None and p in end_offsets and end != end_offsets[p]:
            problems.append(f"p{p}: read up to {end}, expected end offset {end_offsets[p]}")
        ranges[p] = (first, end)
        last_epoch = None
        for r in recs:
            if r.leader_epoch is None:
                continue
            if last_epoch is not None and r.leader_epoch < last_epoch[0]:
                problems.append(
                    f"p{p}: epoch goes down from {last_epoch[0]} (offset {last_epoch[1]}) "
                    f"to {r.leader_epoch} (offset {r.offset})"
                )
            last_epoch = (r.leader_epoch, r.offset)
    if end_offsets is not None:
        for p, end in end_offsets.items():
            start = (start_offsets or {}).get(p, 0)
            if end > start and p not in by_part:
                problems.append(f"p{p}: nothing read, expected offsets [{start}, {end})")

    seen: dict[bytes | None, list[Rec]] = defaultdict(list)
    for r in consumed:
        seen[r.value].append(r)

    ack_offsets: dict[tuple[int, int], Rec] = {}
    acked_values = set()
    for a in acked:
        acked_values.add(a.value)
        prev = ack_offsets.get((a.partition, a.offset))
        if prev is not None:
            problems.append(
                f"p{a.partition}@{a.offset} acknowledged twice: {record_id(prev.value)} and {record_id(a.value)}"
            )
        ack_offsets[(a.partition, a.offset)] = a
        got = seen.get(a.value, [])
        rid = record_id(a.value)
        if not got:
            problems.append(
                f"acknowledged {rid} (p{a.partition}@{a.offset}, {a.client}) lost: never read back"
            )
            continue
        if len(got) > 1:
            where = ", ".join(f"p{g.partition}@{g.offset}" for g in got)
            problems.append(f"acknowledged {rid} read back {len(got)} times: {where}")
        g = got[0]
        if (g.partition, g.offset) != (a.partition, a.offset):
            problems.append(
                f"{rid}: acknowledged at p{a.partition}@{a.offset}, read at p{g.partition}@{g.offset}"
            )
        if g.key != a.key:
            problems.append(f"{rid}: key {g.key!r} != sent {a.key!r}")
        if tuple(g.headers) != tuple(a.headers):
            problems.append(f"{rid}: headers {g.headers!r} != sent {a.headers!r}")
        if g.timestamp != a.timestamp:
            problems.append(f"{rid}: timestamp {g.timestamp} != sent {a.timestamp}")

    maybe_present = 0
    for value, recs in seen.items():
        if value in acked_values:
            continue
        rid = record_id(value)
        if value in maybe:
            maybe_present += 1
            if len(recs) > 1:
                problems.append(f"unacknowledged {rid} read back {len(recs)} times")
            continue
        if foreign_ok and rid is None:
            continue
        r = recs[0]
        problems.append(
            f"p{r.partition}@{r.offset}: record {rid or value[:40]!r} was never sent or acknowledged"
        )

    return LogReport(ranges, len(acked), len(consumed), maybe_present, problems)


def check_send_order(records: Iterable[Rec]) -> list[str]:
    """Within one run and partition, offsets must grow with the sequence number (what one
    producer sent to one partition is stored in send order)."""
    problems = []
    groups: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for r in records:
        rid = record_id(r.value)
        if rid is not None:
            groups[(rid[0], r.partition)].append((rid[1], r.offset))
    for (run, p), pairs in sorted(groups.items()):
        pairs.sort()
        for (s1, o1), (s2, o2) in zip(pairs, pairs[1:], strict=False):
            if o2 <= o1:
                problems.append(
                    f"{run} p{p}: seq {s2} at offset {o2} is not after seq {s1} at {o1}"
                )
                break
    return problems


def end_offsets_of(records: Iterable[Rec]) -> dict[int, int]:
    out: dict[int, int] = {}
    for r in records:
        out[r.partition] = max(out.get(r.partition, 0), r.offset + 1)
    return out
