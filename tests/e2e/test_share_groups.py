"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka's share consumer),
unchanged, against a 3-node cluster:
- implicit acknowledgement: one consumer reads every record of a 2-partition topic once;
- explicit: a RELEASEd record comes back with delivery count 2, a REJECTed one never does;
- three consumers on ONE partition (more members than partitions) split its records: each
  record goes to exactly one of them;
- a consumer that closes with records unacknowledged hands them back at once, and so does
  one killed with kill -9 (its connection's close ends its share session), well before the
  30 s record locks run out;
- 2,000 ShareFetches from member ids that never joined open no share session on the
  partition leader (UNKNOWN_MEMBER_ID), and a consumer reads from that node right after;
- a share group cannot subscribe to an internal topic;
- a read_committed group (share.isolation.level) gets committed transactions only.
The group starts at the earliest offset (share.auto.offset.reset, a group config set with
IncrementalAlterConfigs, as Kafka's users do it)."""

from __future__ import annotations

import select
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer
from support import groups as G
from support import share as S
from support import transactions as T
from support import wire as W
from support.share import share_consumer, share_group, share_topic

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

READ_DEADLINE = 60.0


def _read(consumer: ShareConsumer, want: int, explicit_ack=None, seconds=READ_DEADLINE) -> list:
    """Polls until `want` records arrived or `seconds` passed."""
    got: list = []
    deadline = time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        for m in consumer.poll(1.0) or []:
            assert m.error() is None, m.error()
            got.append(m)
            if explicit_ack is not None:
                consumer.acknowledge(m, explicit_ack(m))
        if explicit_ack is not None:
            consumer.commit_sync(30)
    return got


def test_one_implicit_consumer_reads_every_record_once(module_cluster) -> None:
    values = share_topic(module_cluster, "share-implicit", 2, 200)
    consumer = share_consumer(module_cluster, share_group(module_cluster))
    consumer.subscribe(["share-implicit"])
    try:
        got = _read(consumer, len(values))
        # the next polls bring nothing more: everything was accepted
        extra = _read(consumer, 1, seconds=3) if len(got) == len(values) else []
    finally:
        consumer.close()
    assert sorted(m.value() for m in got) == values
    assert {m.delivery_count() for m in got} == {1}
    assert extra == []


def test_a_read_committed_group_gets_committed_transactions_only(module_cluster) -> None:
    """share.isolation.level=read_committed with confluent-kafka's transactional producer:
    an aborted transaction's records are never handed out, an open one's not before its
    commit; a read_uncommitted group gets all of them."""
    topic = "share-txn"
    module_cluster.create_topic(topic, partitions=1, replication_factor=3)
    producer = T.transactional(module_cluster.bootstrap, f"share-txn-{uuid.uuid4().hex[:6]}")
    for name, commit in (("aborted", False), ("committed", True), ("open", None)):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, b"%s-%d" % (name.encode(), i), partition=0)
        producer.flush(30)
        if commit is True:
            producer.commit_transaction()
        elif commit is False:
            producer.abort_transaction()
    group = share_group(module_cluster, share_isolation_level="read_committed")
    consumer = share_consumer(module_cluster, group)
    consumer.subscribe([topic])
    everyone = share_consumer(module_cluster, share_group(module_cluster))
    everyone.subscribe([topic])
    try:
        before = _read(consumer, 5)
        held_back = _read(consumer, 1, seconds=3)  # the open transaction's wait
        producer.commit_transaction()
        after = _read(consumer, 5)
        uncommitted = _read(everyone, 15)
    finally:
        consumer.close()
        everyone.close()
    assert sorted(m.value() for m in before) == [b"committed-%d" % i for i in range(5)]
    assert held_back == []
    assert sorted(m.value() for m in after) == [b"open-%d" % i for i in range(5)]
    assert len({m.value() for m in uncommitted}) == 15


def test_a_released_record_comes_back_and_a_rejected_one_never(module_cluster) -> None:
    values = share_topic(module_cluster, "share-explicit", 1, 20)
    consumer = share_consumer(module_cluster, share_group(module_cluster), explicit=True)
    consumer.subscribe(["share-explicit"])
    seen: dict[int, list[int]] = {}

    def verdict(m) -> AcknowledgeType:
        seen.setdefault(m.offset(), []).append(m.delivery_count())
        if m.offset() == 3 and m.delivery_count() == 1:
            return AcknowledgeType.RELEASE
        if m.offset() == 5:
            return AcknowledgeType.REJECT
        return AcknowledgeType.ACCEPT

    try:
        got = _read(consumer, len(values) + 1, verdict)
        extra = _read(consumer, 1, verdict, seconds=3)
    finally:
        consumer.close()
    assert sorted(seen) == list(range(len(values)))
    assert seen[3] == [1, 2]  # released, then delivered again with its count
    assert seen[5] == [1]  # rejected: archived, never again
    assert all(counts == [1] for offset, counts in seen.items() if offset != 3)
    assert len(got) == len(values) + 1 and extra == []


def test_more_consumers_than_partitions_share_one_partition(module_cluster) -> None:
    values = share_topic(module_cluster, "share-fanout", 1, 300, per_batch=5)
    group = share_group(module_cluster)
    received: list[list[bytes]] = [[] for _ in range(3)]
    done = threading.Event()

    def run(i: int) -> None:
        consumer = share_consumer(module_cluster, group, explicit=True, **{"max.poll.records": 10})
        consumer.subscribe(["share-fanout"])
        try:
            deadline = time.monotonic() + READ_DEADLINE
            while not done.is_set() and time.monotonic() < deadline:
                for m in consumer.poll(0.5) or []:
                    assert m.error() is None, m.error()
                    received[i].append(m.value())
                    consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                    time.sleep(0.01)  # a slow worker, so the others get their share
                consumer.commit_sync(30)
                if sum(map(len, received)) >= len(values):
                    done.set()
        finally:
            consumer.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(READ_DEADLINE + 30)
    everything = sorted(v for r in received for v in r)
    assert everything == values  # each record exactly once over the three
    assert sum(1 for r in received if r) >= 2, [len(r) for r in received]


def test_records_a_consumer_held_when_it_closed_go_to_the_next(module_cluster) -> None:
    values = share_topic(module_cluster, "share-handover", 1, 30)
    group = share_group(module_cluster)
    first = share_consumer(module_cluster, group, explicit=True)
    first.subscribe(["share-handover"])
    held = []
    deadline = time.monotonic() + READ_DEADLINE
    while not held and time.monotonic() < deadline:
        held = [m for m in first.poll(1.0) or [] if m.error() is None]
    assert held
    for m in held:
        first.acknowledge(m, AcknowledgeType.RELEASE)
    first.close()  # releases go out with the close
    second = share_consumer(module_cluster, group)
    second.subscribe(["share-handover"])
    try:
        got = _read(second, len(values))
    finally:
        second.close()
    assert sorted(m.value() for m in got) == values
    assert {m.delivery_count() for m in got if m.offset() in {h.offset() for h in held}} == {2}


# A share consumer in its own process: it reads until it holds `want` records, says which,
# and holds them (explicit mode, never acknowledged) until it is killed.
HOLDER = """
import sys
from confluent_kafka import ShareConsumer

bootstrap, group, topic, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
consumer = ShareConsumer(
    {"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"}
)
consumer.subscribe([topic])
held = set()
while len(held) < want:
    held.update(m.offset() for m in consumer.poll(1.0) or [] if m.error() is None)
print(" ".join(map(str, sorted(held))), flush=True)
sys.stdin.read()
"""
LOCK_MS = 30_000  # Kafka's default record lock: without the close, the records wait for it
RELEASE_DEADLINE = 10.0  # for the next consumer to get them after the kill


def test_records_a_killed_consumer_held_go_to_the_next_before_their_locks_run_out(
    module_cluster,
) -> None:
    """kill -9 sends no final request, and the member stays in its group until its session
    times out (45 s). The partition leader sees the consumer's connection close, ends the
    share session it opened, and hands back what it held at once, as Kafka does (before:
    only when the 30 s locks ran out)."""
    topic = "share-killed"
    values = share_topic(module_cluster, topic, 1, 20)  # one batch: the holder takes it whole
    group = share_group(module_cluster, share_record_lock_duration_ms=str(LOCK_MS))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, module_cluster.bootstrap, group, topic, str(len(values))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([holder.stdout], [], [], READ_DEADLINE)
        assert ready, "the holder got no records"
        assert holder.stdout is not None
        assert holder.stdout.readline().split() == [str(i) for i in range(len(values))]
    finally:
        holder.kill()
        holder.wait()
    killed = time.monotonic()
    second = share_consumer(module_cluster, group)
    second.subscribe([topic])
    try:
        got = _read(second, len(values), seconds=RELEASE_DEADLINE)
    finally:
        second.close()
    took = time.monotonic() - killed
    print(f"\nrecords a killed consumer held came back to another in {took:.2f} s")
    assert sorted(m.value() for m in got) == values, f"{len(got)} in {took:.1f} s"
    assert {m.delivery_count() for m in got} == {2}


def test_strangers_open_no_share_session_and_a_consumer_reads_right_after(module_cluster) -> None:
    """Before, 2,000 ShareFetches with made-up member ids (no heartbeat ever sent) filled the
    partition leader's share sessions: every share consumer of any group on that node got
    SHARE_SESSION_LIMIT_REACHED until half a minute after the flood."""
    values = share_topic(module_cluster, "share-strangers", 1, 50)
    partition, leader = W.find_partition_leader(module_cluster.bootstrap, "share-strangers", 0)
    # a group coordinated elsewhere: the leader asks the coordinator over the mesh
    group = next(
        name
        for name in (f"share-strangers-{i}" for i in range(100))
        if G.coordinator_address(module_cluster.bootstrap, name).node_id != partition.leader
    )
    share_group(module_cluster, name=group)
    with W.KafkaWire(leader, timeout=30) as w:
        topic = S.topic_id(w, "share-strangers")
        flood = [S.share_fetch(group, uuid.uuid4().hex, 0, topic, 0) for _ in range(2000)]
        answers = S.pipelined(w, flood)
        assert {(W.code(a.error_code), a.responses) for a in answers} == {(S.UNKNOWN_MEMBER_ID, ())}
        # nor can a stranger acknowledge: it has no session to do it in
        ack = w.request(S.share_acknowledge(group, "stranger", 1))
        assert W.code(ack.error_code) == S.SHARE_SESSION_NOT_FOUND
    consumer = share_consumer(module_cluster, group)
    consumer.subscribe(["share-strangers"])
    try:
        got = _read(consumer, len(values))
    finally:
        consumer.close()
    assert sorted(m.value() for m in got) == values


def test_a_share_group_cannot_subscribe_to_an_internal_topic(module_cluster) -> None:
    group = share_group(module_cluster, earliest=False)
    coordinator = G.coordinator_address(module_cluster.bootstrap, group)
    with W.KafkaWire(coordinator.address) as w:
        joining = S.share_heartbeat(group, uuid.uuid4().hex, 0, ["__consumer_offsets"])
        answer = w.request(joining)
    assert W.code(answer.error_code) == S.INVALID_REQUEST
    assert "internal" in answer.error_message
