"""Consumer-group helpers for the e2e tests.

- Kafka's group -> `__consumer_offsets` partition mapping (Java String.hashCode).
- Raw group APIs over `wire.KafkaWire` (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
  LeaveGroup, OffsetCommit, OffsetFetch, CreatePartitions, CreateTopics, Metadata with
  `is_internal`), for what real clients cannot be made to send (stale generations,
  unknown members, empty protocol lists, oversized group ids).
- Group members driven by real clients (confluent-kafka, kafka-python, aiokafka), each in
  its own thread, publishing their current assignment, so a test can watch a group
  rebalance.
- Reading `__consumer_offsets` with a plain consumer and decoding it with
  `offsets_decoder` (never with raftlog's own code).
- `running_cluster`: a started Cluster for a module fixture, stopped (and its data wiped
  if the tests passed) at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.index import load_request_schema

from support import offsets_decoder as D
from support import records as R
from support import wire as W
from support.cluster import Cluster, wait_for

OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_OFFSETS_PARTITIONS = 16

# API keys
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
CREATE_TOPICS = 19
DELETE_GROUPS = 42
CREATE_PARTITIONS = 37

# Kafka error codes
NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
INVALID_REPLICATION_FACTOR = 38
INVALID_PARTITIONS = 37
MEMBER_ID_REQUIRED = 79

# Versions these helpers build requests for (field layouts as in kio 0.6.5). Flexible
# versions are preferred: only they can carry a group id over 32767 bytes.
RANGES: dict[int, tuple[int, int]] = {
    FIND_COORDINATOR: (1, 4),
    JOIN_GROUP: (2, 7),
    SYNC_GROUP: (1, 5),
    HEARTBEAT: (1, 4),
    LEAVE_GROUP: (3, 5),
    OFFSET_COMMIT: (2, 8),
    OFFSET_FETCH: (1, 7),
    CREATE_PARTITIONS: (0, 3),
    CREATE_TOPICS: (2, 7),
    DESCRIBE_GROUPS: (0, 5),
    LIST_GROUPS: (0, 4),
    DELETE_GROUPS: (0, 2),
    W.METADATA: (1, 12),
}

# Broker settings that make test groups rebalance quickly.
FAST_GROUPS: dict[str, Any] = {"group.initial.rebalance.delay.ms": 100}

# Client settings shared by the group members below: fast heartbeats, short sessions.
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500
MAX_POLL_INTERVAL_MS = 30000


# --------------------------------------------------------------------------- mapping


def java_string_hash(s: str) -> int:
    """Java's String.hashCode(): 31*h + c over UTF-16 code units, as a signed int32."""
    data = s.encode("utf-16-be")
    h = 0
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(group: str, partitions: int = DEFAULT_OFFSETS_PARTITIONS) -> int:
    """Kafka's `Utils.abs(groupId.hashCode) % partitions` (abs(MIN_INT) is 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


# --------------------------------------------------------------------------- raw wire


def version(w: W.KafkaWire, api_key: int, lo: int | None = None, hi: int | None = None) -> int:
    """Highest version both the broker and these helpers speak within [lo, hi]."""
    r_lo, r_hi = RANGES[api_key]
    lo = r_lo if lo is None else max(lo, r_lo)
    hi = r_hi if hi is None else min(hi, r_hi)
    versions = w.api_versions()
    if api_key not in versions:
        raise W.WireError(f"broker does not advertise api key {api_key}")
    b_lo, b_hi = versions[api_key]
    v = min(hi, b_hi)
    if v < max(lo, b_lo):
        raise W.WireError(f"api key {api_key}: broker speaks v{b_lo}-v{b_hi}, need v{lo}-v{hi}")
    return v


def call(
    w: W.KafkaWire,
    api_key: int,
    data: dict[str, Any],
    lo: int | None = None,
    hi: int | None = None,
    timeout: float | None = None,
) -> Any:
    v = version(w, api_key, lo, hi)
    return w.request(W.build(load_request_schema(api_key, v), data), timeout)


def encode_subscription(topics: Sequence[str], user_data: bytes | None = None) -> bytes:
    """ConsumerProtocolSubscription v0."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        raw = t.encode()
        out += struct.pack(">h", len(raw)) + raw
    if user_data is None:
        return out + struct.pack(">i", -1)
    return out + struct.pack(">i", len(user_data)) + user_data


def encode_assignment(partitions: dict[str, Sequence[int]]) -> bytes:
    """ConsumerProtocolAssignment v0."""
    out = struct.pack(">hi", 0, len(partitions))
    for topic, parts in partitions.items():
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in parts)
    return out + struct.pack(">i", -1)


@dataclass(frozen=True)
class CoordinatorAnswer:
    error: int
    node_id: int
    host: str
    port: int
    message: str | None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def find_coordinator(
    w: W.KafkaWire, group: str, timeout: float | None = None, hi: int | None = None
) -> CoordinatorAnswer:
    v = version(w, FIND_COORDINATOR, hi=hi)
    data: dict[str, Any] = {"key_type": 0}
    if v >= 4:
        data["coordinator_keys"] = [group]
    else:
        data["key"] = group
    resp = w.request(W.build(load_request_schema(FIND_COORDINATOR, v), data), timeout)
    c = resp.coordinators[0] if v >= 4 else resp
    return CoordinatorAnswer(
        W.code(c.error_code),
        int(c.node_id),
        str(c.host),
        int(c.port),
        getattr(c, "error_message", None),
    )


def coordinator_address(bootstrap: str, group: str, timeout: float = 60.0) -> CoordinatorAnswer:
    """FindCoordinator from any broker, retried until it names a coordinator (bounded)."""

    def ask() -> CoordinatorAnswer | None:
        for addr in bootstrap.split(","):
            with contextlib.suppress(OSError, W.WireError):
                with W.KafkaWire(addr, timeout=10) as w:
                    ans = find_coordinator(w, group)
                if ans.error == NONE:
                    return ans
        return None

    return wait_for(ask, timeout, interval=0.5, what=f"a coordinator for group {group!r}")


@dataclass(frozen=True)
class JoinResult:
    error: int
    generation: int
    protocol: str | None
    leader: str
    member_id: str
    members: dict[str, bytes]  # member id -> subscription (leader only)


def join_group(
    w: W.KafkaWire,
    group: str,
    protocols: Sequence[tuple[str, bytes]],
    member_id: str = "",
    session_timeout_ms: int = 30000,
    rebalance_timeout_ms: int = 30000,
    protocol_type: str = "consumer",
    follow_member_id_required: bool = True,
    timeout: float = 45.0,
    lo: int | None = None,
) -> JoinResult:
    """JoinGroup; a MEMBER_ID_REQUIRED answer (v4+) is followed once with the given id."""
    for _ in range(2):
        resp = call(
            w,
            JOIN_GROUP,
            {
                "group_id": group,
                "session_timeout": session_timeout_ms,
                "rebalance_timeout": rebalance_timeout_ms,
                "member_id": member_id,
                "group_instance_id": None,
                "protocol_type": protocol_type,
                "protocols": [{"name": n, "metadata": m} for n, m in protocols],
                "reason": None,
            },
            lo=lo,
            timeout=timeout,
        )
        err = W.code(resp.error_code)
        if err == MEMBER_ID_REQUIRED and follow_member_id_required and not member_id:
            member_id = str(resp.member_id)
            continue
        return JoinResult(
            err,
            int(resp.generation_id),
            getattr(resp, "protocol_name", None),
            str(resp.leader),
            str(resp.member_id),
            {str(m.member_id): bytes(m.metadata) for m in resp.members},
        )
    raise AssertionError("JoinGroup answered MEMBER_ID_REQUIRED twice")


def sync_group(
    w: W.KafkaWire,
    group: str,
    generation: int,
    member_id: str,
    assignments: dict[str, bytes],
    protocol_name: str | None = None,
    protocol_type: str = "consumer",
    timeout: float = 45.0,
) -> tuple[int, bytes]:
    """(error, this member's assignment bytes)."""
    resp = call(
        w,
        SYNC_GROUP,
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": None,
            "protocol_type": protocol_type,
            "protocol_name": protocol_name,
            "assignments": [{"member_id": m, "assignment": a} for m, a in assignments.items()],
        },
        timeout=timeout,
    )
    return W.code(resp.error_code), bytes(resp.assignment or b"")


def heartbeat(w: W.KafkaWire, group: str, generation: int, member_id: str) -> int:
    resp = call(
        w,
        HEARTBEAT,
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": None,
        },
    )
    return W.code(resp.error_code)


def leave_group(w: W.KafkaWire, group: str, member_id: str) -> int:
    resp = call(
        w,
        LEAVE_GROUP,
        {"group_id": group, "members": [{"member_id": member_id, "group_instance_id": None}]},
    )
    err = W.code(resp.error_code)
    if err == NONE and resp.members:
        err = W.code(resp.members[0].error_code)
    return err


Commit = tuple[int, int, str | None]  # (offset, leader epoch, metadata)


def offset_commit(
    w: W.KafkaWire,
    group: str,
    offsets: dict[tuple[str, int], Commit],
    generation: int = -1,
    member_id: str = "",
    lo: int | None = None,
) -> dict[tuple[str, int], int]:
    """{(topic, partition): error}. Generation -1 with member "" is a simple (non-member)
    commit, as admin tools make."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), (off, epoch, meta) in offsets.items():
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": p,
                "committed_offset": off,
                "committed_leader_epoch": epoch,
                "committed_metadata": meta,
                "commit_timestamp": -1,
            }
        )
    resp = call(
        w,
        OFFSET_COMMIT,
        {
            "group_id": group,
            "generation_id_or_member_epoch": generation,
            "member_id": member_id,
            "group_instance_id": None,
            "retention_time": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        },
        lo=lo,
    )
    return {
        (str(t.name), int(p.partition_index)): W.code(p.error_code)
        for t in resp.topics
        for p in t.partitions
    }


@dataclass(frozen=True)
class Committed:
    offset: int
    leader_epoch: int
    metadata: str | None
    error: int


def offset_fetch(
    w: W.KafkaWire,
    group: str,
    partitions: dict[str, Sequence[int]] | None = None,
    lo: int | None = None,
) -> tuple[int, dict[tuple[str, int], Committed]]:
    """(group-level error, {(topic, partition): Committed}); `partitions` None = all (v2+).
    committed leader epochs need v5+ (pass lo=5)."""
    topics = (
        None
        if partitions is None
        else [{"name": t, "partition_indexes": list(ps)} for t, ps in partitions.items()]
    )
    resp = call(
        w,
        OFFSET_FETCH,
        {"group_id": group, "topics": topics, "require_stable": False},
        lo=lo if partitions is not None else max(lo or 2, 2),
    )
    out = {
        (str(t.name), int(p.partition_index)): Committed(
            int(p.committed_offset),
            int(getattr(p, "committed_leader_epoch", -1)),
            p.metadata,
            W.code(p.error_code),
        )
        for t in resp.topics
        for p in t.partitions
    }
    return W.code(getattr(resp, "error_code", 0)), out


@dataclass(frozen=True)
class DescribedMember:
    member_id: str
    client_id: str
    client_host: str
    subscription: D.Subscription | None
    assignment: dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class DescribedGroup:
    error: int
    state: str
    protocol_type: str
    protocol: str
    members: tuple[DescribedMember, ...]

    def assignments(self, topic: str) -> dict[str, frozenset[int]]:
        """{client id: partitions of `topic`} (client ids are unique in these tests)."""
        return {m.client_id: frozenset(m.assignment.get(topic, ())) for m in self.members}


def describe_group(w: W.KafkaWire, group: str) -> DescribedGroup:
    """DescribeGroups on this connection (which must be the group's coordinator);
    subscriptions and assignments decoded with offsets_decoder."""
    resp = call(w, DESCRIBE_GROUPS, {"groups": [group], "include_authorized_operations": False})
    (g,) = resp.groups
    members = []
    for m in g.members:
        sub = bytes(m.member_metadata or b"")
        members.append(
            DescribedMember(
                str(m.member_id),
                str(m.client_id),
                str(m.client_host),
                D.decode_subscription(sub) if sub else None,
                D.decode_assignment(bytes(m.member_assignment or b"")).partitions,
            )
        )
    return DescribedGroup(
        W.code(g.error_code),
        str(g.group_state),
        str(g.protocol_type),
        str(g.protocol_data),
        tuple(members),
    )


def delete_group(w: W.KafkaWire, group: str) -> int:
    """DeleteGroups for one group (on its coordinator): the error code."""
    resp = call(w, DELETE_GROUPS, {"groups_names": [group]})
    (r,) = resp.results
    return W.code(r.error_code)


def create_partitions(
    w: W.KafkaWire, topic: str, count: int, validate_only: bool = False
) -> tuple[int, str | None]:
    resp = call(
        w,
        CREATE_PARTITIONS,
        {
            "topics": [{"name": topic, "count": count, "assignments": None}],
            "timeout": 30000,
            "validate_only": validate_only,
        },
        timeout=45,
    )
    (r,) = resp.results
    return W.code(r.error_code), r.error_message


def create_topic(
    w: W.KafkaWire, name: str, partitions: int, replication_factor: int
) -> tuple[int, str | None]:
    resp = call(
        w,
        CREATE_TOPICS,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": replication_factor,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout": 30000,
            "validate_only": False,
        },
        timeout=45,
    )
    (t,) = resp.topics
    return W.code(t.error_code), getattr(t, "error_message", None)


@dataclass(frozen=True)
class TopicMeta:
    name: str
    error: int
    is_internal: bool
    partitions: dict[int, W.PartitionMeta]


def metadata(
    w: W.KafkaWire, topics: Iterable[str] | None, allow_auto_topic_creation: bool = True
) -> tuple[dict[int, str], dict[str, TopicMeta]]:
    """(brokers {id: host:port}, {topic: TopicMeta}) with the `is_internal` flag that
    wire.KafkaWire.metadata leaves out. Auto-creation is allowed, as clients ask."""
    req = None if topics is None else [{"name": t, "topic_id": W._ZERO_UUID} for t in topics]
    resp = call(
        w,
        W.METADATA,
        {
            "topics": req,
            "allow_auto_topic_creation": allow_auto_topic_creation,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
        timeout=45,
    )
    brokers = {int(b.node_id): f"{b.host}:{int(b.port)}" for b in resp.brokers}
    out = {}
    for t in resp.topics:
        name = str(t.name)
        out[name] = TopicMeta(
            name,
            W.code(t.error_code),
            bool(getattr(t, "is_internal", False)),
            {
                int(p.partition_index): W.PartitionMeta(
                    name,
                    int(p.partition_index),
                    W.code(p.error_code),
                    int(p.leader_id),
                    int(getattr(p, "leader_epoch", -1)),
                    tuple(int(r) for r in p.replica_nodes),
                    tuple(int(r) for r in p.isr_nodes),
                )
                for p in t.partitions
            },
        )
    return brokers, out


def offsets_topic_leaders(
    bootstrap: str, partitions: int = DEFAULT_OFFSETS_PARTITIONS, timeout: float = 60.0
) -> dict[int, W.PartitionMeta]:
    """`__consumer_offsets` partition metadata once every partition has a live leader."""

    def complete() -> dict[int, W.PartitionMeta] | None:
        for addr in bootstrap.split(","):
            with contextlib.suppress(OSError, W.WireError):
                with W.KafkaWire(addr, timeout=10) as w:
                    brokers, topics = metadata(w, [OFFSETS_TOPIC])
                t = topics.get(OFFSETS_TOPIC)
                if (
                    t is not None
                    and t.error == NONE
                    and len(t.partitions) == partitions
                    and all(p.error == NONE and p.leader in brokers for p in t.partitions.values())
                ):
                    return t.partitions
        return None

    return wait_for(
        complete, timeout, interval=0.5, what=f"leaders for every {OFFSETS_TOPIC} partition"
    )


# --------------------------------------------------------------------------- client members


@dataclass
class Event:
    at: float
    kind: str  # "assign" | "revoke" | "lost"
    partitions: frozenset[int]


class Member(threading.Thread):
    """One group member driven by a real client in its own thread: subscribes to `topic`,
    polls until stop(), then closes (leaving the group). `assignment` is the partitions
    (of `topic`) the client says it owns, refreshed after every poll."""

    client = ""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, **conf: Any) -> None:
        super().__init__(name=f"member-{name}", daemon=True)
        self.bootstrap = bootstrap
        self.group = group
        self.topic = topic
        self.member_name = name
        self.conf = conf
        self.error: BaseException | None = None
        self.events: list[Event] = []
        self._assignment: frozenset[int] = frozenset()
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self.closed = threading.Event()
        self._calls: queue.Queue[tuple[Callable[[Any], Any], queue.Queue]] = queue.Queue()

    def call(self, fn: Callable[[Any], Any], timeout: float = 30.0) -> Any:
        """Run `fn(client consumer)` on the member's own thread, between two polls (the
        clients are not meant to be shared between threads); returns its result."""
        answer: queue.Queue = queue.Queue()
        self._calls.put((fn, answer))
        try:
            ok, value = answer.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(
                f"member {self.member_name} did not run the call in {timeout}s"
            ) from None
        if not ok:
            raise value
        return value

    def _run_calls(self, consumer: Any) -> None:
        while True:
            try:
                fn, answer = self._calls.get_nowait()
            except queue.Empty:
                return
            try:
                answer.put((True, fn(consumer)))
            except Exception as exc:  # noqa: BLE001 - handed to the caller
                answer.put((False, exc))

    def commit(self, offsets: dict[int, int], timeout: float = 30.0) -> None:
        """Synchronously commit {partition: offset} of the member's topic."""
        raise NotImplementedError

    @property
    def assignment(self) -> frozenset[int]:
        with self._lock:
            return self._assignment

    def _publish(self, partitions: Iterable[int]) -> None:
        with self._lock:
            self._assignment = frozenset(partitions)

    def _event(self, kind: str, partitions: Iterable[int]) -> None:
        with self._lock:
            self.events.append(Event(time.monotonic(), kind, frozenset(partitions)))

    def events_since(self, t: float, kind: str | None = None) -> list[Event]:
        with self._lock:
            return [e for e in self.events if e.at >= t and (kind is None or e.kind == kind)]

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - surfaced by check()/stop()
            self.error = exc
        finally:
            self._publish(())
            self.closed.set()

    def _run(self) -> None:
        raise NotImplementedError

    @property
    def halted(self) -> bool:
        return self._halt.is_set()

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"{self.client} member {self.member_name} failed") from self.error
        if self.closed.is_set() and not self._halt.is_set():
            raise AssertionError(f"{self.client} member {self.member_name} stopped by itself")

    def stop(self, timeout: float = 60.0) -> None:
        """Close the client (it leaves the group) and wait for the thread."""
        self._halt.set()
        self.join(timeout)
        if self.is_alive():
            raise TimeoutError(
                f"{self.client} member {self.member_name} did not close in {timeout}s"
            )
        if self.error is not None:
            raise AssertionError(f"{self.client} member {self.member_name} failed") from self.error


class ConfluentMember(Member):
    client = "confluent-kafka"

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        conf = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "client.id": self.member_name,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 2000,
            **self.conf,
        }
        consumer = Consumer(conf)

        def on_assign(c, parts) -> None:
            self._event("assign", (p.partition for p in parts))

        def on_revoke(c, parts) -> None:
            self._event("revoke", (p.partition for p in parts))

        def on_lost(c, parts) -> None:
            self._event("lost", (p.partition for p in parts))

        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        try:
            while not self._halt.is_set():
                consumer.poll(0.2)
                with contextlib.suppress(KafkaException):
                    self._publish(p.partition for p in consumer.assignment())
                self._run_calls(consumer)
        finally:
            consumer.close()

    def commit(self, offsets: dict[int, int], timeout: float = 30.0) -> None:
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(self.topic, p, o) for p, o in offsets.items()]
        result = self.call(lambda c: c.commit(offsets=tps, asynchronous=False), timeout)
        failed = [tp for tp in result or [] if tp.error is not None]
        if failed:
            raise AssertionError(f"commit failed: {failed}")


class KafkaPythonMember(Member):
    client = "kafka-python"

    def _run(self) -> None:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap.split(","),
            group_id=self.group,
            client_id=self.member_name,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            metadata_max_age_ms=2000,
            **self.conf,
        )
        try:
            consumer.subscribe([self.topic])
            while not self._halt.is_set():
                consumer.poll(timeout_ms=200)
                self._publish(tp.partition for tp in consumer.assignment())
                self._run_calls(consumer)
        finally:
            consumer.close()

    def commit(self, offsets: dict[int, int], timeout: float = 30.0) -> None:
        from kafka import OffsetAndMetadata, TopicPartition

        req = {
            TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()
        }
        self.call(lambda c: c.commit(req), timeout)


class AiokafkaMember(Member):
    client = "aiokafka"

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            client_id=self.member_name,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
            rebalance_timeout_ms=MAX_POLL_INTERVAL_MS,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            metadata_max_age_ms=2000,
            **self.conf,
        )
        await asyncio.wait_for(consumer.start(), 60)
        try:
            while not self._halt.is_set():
                await consumer.getmany(timeout_ms=200)
                self._publish(tp.partition for tp in consumer.assignment())
        finally:
            await asyncio.wait_for(consumer.stop(), 30)


MEMBERS: dict[str, type[Member]] = {
    "confluent-kafka": ConfluentMember,
    "kafka-python": KafkaPythonMember,
    "aiokafka": AiokafkaMember,
}


def start_member(
    client: str, bootstrap: str, group: str, topic: str, name: str, **conf: Any
) -> Member:
    m = MEMBERS[client](bootstrap, group, topic, name, **conf)
    m.start()
    return m


def assignment_problems(
    members: Sequence[Member], partitions: int, sizes: Sequence[int] | None = None
) -> list[str]:
    """Why the members' assignments are not a complete, exactly-once cover of the topic
    (and, with `sizes`, not of those sizes in any order). Empty list = good."""
    seen: dict[int, list[str]] = {}
    for m in members:
        for p in m.assignment:
            seen.setdefault(p, []).append(m.member_name)
    problems = [f"p{p} owned by {owners}" for p, owners in sorted(seen.items()) if len(owners) > 1]
    missing = sorted(set(range(partitions)) - set(seen))
    if missing:
        problems.append(f"partitions {missing} owned by nobody")
    extra = sorted(set(seen) - set(range(partitions)))
    if extra:
        problems.append(f"unknown partitions {extra} assigned")
    if sizes is not None:
        got = sorted(len(m.assignment) for m in members)
        if got != sorted(sizes):
            problems.append(f"assignment sizes {got}, expected {sorted(sizes)}")
    return problems


def wait_assignment(
    members: Sequence[Member],
    partitions: int,
    sizes: Sequence[int] | None = None,
    timeout: float = 60.0,
    settle: float = 1.5,
) -> dict[str, frozenset[int]]:
    """Until the members' assignments cover every partition exactly once (with `sizes`),
    unchanged for `settle` seconds. Returns {member name: partitions}."""
    deadline = time.monotonic() + timeout
    stable_since: float | None = None
    last: dict[str, frozenset[int]] = {}
    problems: list[str] = ["not checked yet"]
    while time.monotonic() < deadline:
        for m in members:
            m.check()
        now = {m.member_name: m.assignment for m in members}
        problems = assignment_problems(members, partitions, sizes)
        if problems or now != last:
            stable_since = None if problems else time.monotonic()
        elif stable_since is not None and time.monotonic() - stable_since >= settle:
            return now
        last = now
        time.sleep(0.1)
    raise TimeoutError(
        f"group did not settle in {timeout:.0f}s: {problems}; assignments "
        f"{ {k: sorted(v) for k, v in last.items()} }"
    )


def stop_all(members: Iterable[Member], timeout: float = 60.0) -> None:
    """Stop every member still running (errors of the first failing one are raised last)."""
    first: BaseException | None = None
    for m in members:
        if m.is_alive() or not m.closed.is_set():
            try:
                m.stop(timeout)
            except BaseException as exc:  # noqa: BLE001 - stop the others first
                first = first or exc
    if first is not None:
        raise first


@contextlib.contextmanager
def members_stopped(members: list[Member]) -> Iterator[list[Member]]:
    """Yields `members` (a list the test may extend) and stops them all at the end."""
    try:
        yield members
    finally:
        with contextlib.suppress(BaseException):
            stop_all(members)


# --------------------------------------------------------------------------- __consumer_offsets


def read_offsets_topic(bootstrap: str, timeout: float = 120.0) -> list[D.OffsetsRecord]:
    """Every record of `__consumer_offsets` up to the current end offsets, read with a
    plain kafka-python consumer (assign, no group) and decoded with Kafka's schemas."""
    ends = W.end_offsets(bootstrap, OFFSETS_TOPIC, timeout=timeout)
    recs = R.consume_kafka_python(bootstrap, OFFSETS_TOPIC, ends, timeout=timeout)
    recs.sort(key=lambda r: (r.partition, r.offset))
    return [D.decode_record(r.partition, r.offset, r.key, r.value) for r in recs]  # type: ignore[arg-type]


def latest_commits(
    records: Iterable[D.OffsetsRecord], group: str
) -> dict[tuple[str, int], D.OffsetCommitValue | None]:
    """{(topic, partition): last OffsetCommitValue for the group (None if tombstoned)}."""
    out: dict[tuple[str, int], D.OffsetCommitValue | None] = {}
    for r in records:
        if isinstance(r.key, D.OffsetCommitKey) and r.key.group == group:
            out[(r.key.topic, r.key.partition)] = r.value  # type: ignore[assignment]
    return out


def group_records(records: Iterable[D.OffsetsRecord], group: str) -> list[D.OffsetsRecord]:
    return [r for r in records if isinstance(r.key, D.GroupMetadataKey) and r.key.group == group]


# --------------------------------------------------------------------------- clusters


@contextlib.contextmanager
def running_cluster(
    workdir: Path,
    nodes: int = 3,
    name: str = "groups",
    broker: dict[str, Any] | None = None,
    **kw: Any,
) -> Iterator[Cluster]:
    """A started Cluster (with `[broker]` settings), stopped at the end; its data is wiped
    unless a test failed while it ran (conftest marks it)."""
    c = Cluster(workdir, nodes=nodes, name=name, broker=broker, **kw)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        if not c.failed:
            c.wipe_data()
