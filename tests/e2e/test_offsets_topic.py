"""`__consumer_offsets` as Kafka tools see it.

- The test-side decoder (tests/support/offsets_decoder.py, written from Kafka's JSON
  schemas) and the Java String.hashCode mapping are checked on hand-made bytes first.
- A plain consumer reads `__consumer_offsets` from the beginning: every key and value
  decodes with Kafka's schemas (OffsetCommitKey v1 / OffsetCommitValue v3,
  GroupMetadataKey v2 / GroupMetadataValue v3), no byte left over, each record sits in
  the partition its group hashes to, and the records match the commits a real client
  made (offset, leader epoch, metadata, member, subscription, assignment).
- The topic is internal (Metadata is_internal), 16 partitions, replication factor 3,
  listed by /v1/status like any topic.
- FindCoordinator names the leader of partition abs(hashCode(group)) % 16.
- Deleting a group leaves tombstones (null values) for its keys.
"""

from __future__ import annotations

import struct
import time

import pytest
from support import groups as G
from support import offsets_decoder as D
from support import records as R
from support import wire as W
from support.cluster import wait_for

TOPIC = "decoded"
PARTITIONS = 3
PER_PARTITION = 10
GROUP = "decode-group"
CLIENT_ID = "decode-client"
SESSION_MS = 6000
MAX_POLL_MS = 30000


# --------------------------------------------------------------------------- decoder (no cluster)


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def test_decoder_reads_kafka_key_layouts():
    """Bytes laid out by hand from OffsetCommitKey.json / GroupMetadataKey.json."""
    key = b"\x00\x01" + _s("g1") + _s("orders") + b"\x00\x00\x00\x07"
    assert D.decode_key(key) == D.OffsetCommitKey(1, "g1", "orders", 7)
    assert D.decode_key(b"\x00\x00" + key[2:]) == D.OffsetCommitKey(0, "g1", "orders", 7)
    assert D.decode_key(b"\x00\x02" + _s("grüppe")) == D.GroupMetadataKey(2, "grüppe")
    newer = b"\x00\x05whatever"
    assert D.decode_key(newer) == D.UnknownKey(5, newer)
    with pytest.raises(D.DecodeError):
        D.decode_key(key + b"\x00")  # a trailing byte is not Kafka's layout
    with pytest.raises(D.DecodeError):
        D.decode_key(key[:-1])


def test_decoder_reads_offset_commit_values():
    v3 = struct.pack(">hqi", 3, 42, 7) + _s("meta") + struct.pack(">q", 1_700_000_000_123)
    assert D.decode_offset_commit_value(v3) == D.OffsetCommitValue(
        3, 42, 7, "meta", 1_700_000_000_123
    )
    v1 = struct.pack(">hq", 1, 42) + _s("") + struct.pack(">qq", 5, 9)
    assert D.decode_offset_commit_value(v1) == D.OffsetCommitValue(1, 42, -1, "", 5, 9)
    v4 = D.encode_offset_commit_value(42, 7, "meta", 5, version=4)
    assert v4 == struct.pack(">hqi", 4, 42, 7) + b"\x05meta" + struct.pack(">q", 5) + b"\x00"
    assert D.decode_offset_commit_value(v4) == D.OffsetCommitValue(4, 42, 7, "meta", 5)
    with pytest.raises(D.DecodeError):
        D.decode_offset_commit_value(v3 + b"\x00")


def test_decoder_reads_group_metadata_values():
    sub = struct.pack(">hi", 0, 1) + _s("t") + struct.pack(">i", -1)
    assignment = struct.pack(">hi", 0, 1) + _s("t") + struct.pack(">iii", 2, 0, 1)
    assignment += struct.pack(">i", -1)
    member = (
        _s("m-1")
        + struct.pack(">h", -1)  # groupInstanceId null (v3+)
        + _s("client")
        + _s("/127.0.0.1")
        + struct.pack(">ii", 30000, 6000)
        + struct.pack(">i", len(sub))
        + sub
        + struct.pack(">i", len(assignment))
        + assignment
    )
    v3 = (
        struct.pack(">h", 3)
        + _s("consumer")
        + struct.pack(">i", 4)
        + _s("range")
        + _s("m-1")
        + struct.pack(">q", 123)
        + struct.pack(">i", 1)
        + member
    )
    value = D.decode_group_metadata_value(v3)
    expected_member = D.MemberMetadata(
        "m-1", None, "client", "/127.0.0.1", 30000, 6000, sub, assignment
    )
    assert value == D.GroupMetadataValue(3, "consumer", 4, "range", "m-1", 123, (expected_member,))
    assert D.decode_subscription(sub).topics == ("t",)
    assert D.decode_assignment(assignment).partitions == {"t": (0, 1)}
    empty = struct.pack(">h", 3) + _s("consumer") + struct.pack(">ihhqi", 5, -1, -1, 9, 0)
    assert D.decode_group_metadata_value(empty) == D.GroupMetadataValue(
        3, "consumer", 5, None, None, 9, ()
    )
    v4 = D.encode_group_metadata_value("consumer", 4, "range", "m-1", 123, [expected_member], 4)
    assert D.decode_group_metadata_value(v4) == D.GroupMetadataValue(
        4, "consumer", 4, "range", "m-1", 123, (expected_member,)
    )
    with pytest.raises(D.DecodeError):
        D.decode_group_metadata_value(v3[:-1])


def test_group_to_partition_mapping_is_javas():
    assert G.java_string_hash("") == 0
    assert G.java_string_hash("a") == 97
    assert G.java_string_hash("hello") == 99162322
    assert G.java_string_hash("😀") == 31 * 0xD83D + 0xDE00  # UTF-16 code units
    assert G.java_string_hash("polygenelubricants") == -(2**31)
    assert G.coordinator_partition("polygenelubricants") == 0  # abs(MIN_INT) is 0
    assert G.coordinator_partition("hello") == 99162322 % 16
    assert G.coordinator_partition("a", 50) == 97 % 50


# --------------------------------------------------------------------------- cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with G.running_cluster(
        tmp_path_factory.mktemp("offsets_topic"), name="offsets_topic", broker=G.FAST_GROUPS
    ) as c:
        yield c


@pytest.fixture(scope="module")
def commits(cluster):
    """A confluent-kafka consumer in GROUP reads TOPIC, commits chosen offsets with
    metadata and the records' leader epochs, then leaves (the group becomes Empty).
    Returns (commits {partition: (offset, epoch, metadata)}, member id, time window)."""
    from confluent_kafka import Consumer, TopicPartition

    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    recs = R.make_records("dec", PARTITIONS * PER_PARTITION, PARTITIONS)
    out = R.produce_confluent(cluster.bootstrap, TOPIC, recs, timeout=60)
    assert len(out.acked) == len(recs), out.failed[:3]

    t0 = int(time.time() * 1000)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": GROUP,
            "client.id": CLIENT_ID,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": 500,
            "max.poll.interval.ms": MAX_POLL_MS,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "partition.assignment.strategy": "range",
        }
    )
    epochs: dict[tuple[int, int], int | None] = {}
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 90
        while len(epochs) < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                epochs[(msg.partition(), msg.offset())] = msg.leader_epoch()
        assert len(epochs) == PARTITIONS * PER_PARTITION, f"read {len(epochs)} records in 90 s"
        member_id = consumer.memberid()
        wanted = {p: (3 + p, epochs[(p, 2 + p)], f"meta-{p}") for p in range(PARTITIONS)}
        result = consumer.commit(
            offsets=[
                TopicPartition(TOPIC, p, off, metadata=meta, leader_epoch=epoch)
                for p, (off, epoch, meta) in wanted.items()
            ],
            asynchronous=False,
        )
        assert all(tp.error is None for tp in result), result
    finally:
        consumer.close()
    return wanted, member_id, (t0, int(time.time() * 1000) + 1)


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_records_decode_with_kafka_schemas(cluster, commits):
    """Every record: known key version, value of the version Kafka writes, no trailing
    bytes, in the partition its group hashes to; the latest offset commits are ours."""
    wanted, member_id, (t0, t1) = commits
    records = G.read_offsets_topic(cluster.bootstrap)
    assert records, "__consumer_offsets is empty after a group committed offsets"
    for r in records:
        assert not isinstance(r.key, D.UnknownKey), f"unknown key version: {r}"
        if isinstance(r.key, D.OffsetCommitKey):
            assert r.key.version == 1, f"OffsetCommitKey v{r.key.version} (Kafka writes v1): {r}"
            assert r.tombstone or r.value.version == 3, f"OffsetCommitValue must be v3: {r}"
        else:
            assert r.key.version == 2, r
            assert r.tombstone or r.value.version == 3, f"GroupMetadataValue must be v3: {r}"
        assert r.partition == G.coordinator_partition(r.key.group), (
            f"group {r.key.group!r} record in partition {r.partition}, "
            f"expected {G.coordinator_partition(r.key.group)}"
        )
    latest = G.latest_commits(records, GROUP)
    assert set(latest) == {(TOPIC, p) for p in range(PARTITIONS)}, latest
    for p, (off, epoch, meta) in wanted.items():
        v = latest[(TOPIC, p)]
        assert v is not None, f"p{p}: latest commit is a tombstone"
        assert (v.offset, v.leader_epoch) == (off, epoch), (p, v)
        assert v.metadata in (meta, meta + "\x00"), (p, v)  # confluent-kafka sends a NUL too
        assert t0 - 5000 <= v.commit_timestamp <= t1 + 5000, (v.commit_timestamp, t0, t1)


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_group_metadata_records_describe_the_member(cluster, commits):
    """A GroupMetadataValue names the consumer: protocol, leader, client id and host,
    timeouts, its subscription and assignment; after it left, the last one is Empty."""
    _, member_id, (t0, t1) = commits

    def left_empty() -> list[D.OffsetsRecord] | None:
        recs = G.group_records(G.read_offsets_topic(cluster.bootstrap), GROUP)
        return recs if recs and recs[-1].value is not None and not recs[-1].value.members else None

    # The Empty-group record may be committed just after LeaveGroup is answered.
    try:
        records = wait_for(left_empty, 30, interval=1, what="an Empty GroupMetadata record")
    except TimeoutError:
        records = G.group_records(G.read_offsets_topic(cluster.bootstrap), GROUP)
    assert records, f"no GroupMetadata record for {GROUP}"
    with_members = [r.value for r in records if r.value is not None and r.value.members]
    assert with_members, f"no GroupMetadataValue listing a member: {records}"
    v = with_members[-1]
    assert v.protocol_type == "consumer" and v.protocol == "range", v
    assert v.generation >= 1 and v.leader == member_id, (v, member_id)
    assert t0 - 5000 <= v.current_state_timestamp <= t1 + 5000, v
    (m,) = v.members
    assert m.member_id == member_id and m.client_id == CLIENT_ID, m
    assert "127.0.0.1" in m.client_host, m
    assert (m.session_timeout, m.rebalance_timeout) == (SESSION_MS, MAX_POLL_MS), m
    assert D.decode_subscription(m.subscription).topics == (TOPIC,), m
    assert D.decode_assignment(m.assignment).partitions == {TOPIC: tuple(range(PARTITIONS))}
    last = records[-1].value
    assert last is not None and last.members == (), f"group left Empty, last record: {last}"
    assert last.generation > v.generation, (last, v)


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_offsets_topic_is_internal_rf3_and_listed(cluster, commits):
    brokers, topics = _metadata(cluster.bootstrap, None)
    t = topics.get(G.OFFSETS_TOPIC)
    assert t is not None, f"Metadata (all topics) does not list {G.OFFSETS_TOPIC}"
    assert t.is_internal, "__consumer_offsets must be marked internal"
    assert not topics[TOPIC].is_internal
    assert sorted(t.partitions) == list(range(16))
    for p in t.partitions.values():
        assert len(p.replicas) == 3 and set(p.replicas) <= set(cluster.node_ids), p
    for p in range(16):  # /v1/status shows each partition like any topic's
        leader, _ = cluster.leader(G.OFFSETS_TOPIC, p, timeout=30)
        assert len(cluster.partition_status(G.OFFSETS_TOPIC, p)) == 3
        assert leader in t.partitions[p].replicas


def _metadata(bootstrap: str, topics: list[str] | None):
    with W.KafkaWire(bootstrap.split(",")[0], timeout=30) as w:
        return G.metadata(w, topics, allow_auto_topic_creation=False)


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_coordinator_is_leader_of_hashed_partition(cluster, commits):
    groups = ["polygenelubricants", GROUP, "a", "ünïcode-grüppe", "😀-group", "orders-7"]

    def consistent() -> dict[str, tuple[int, int]] | None:
        leaders = G.offsets_topic_leaders(cluster.bootstrap, timeout=30)
        out = {}
        for g in groups:
            ans = G.coordinator_address(cluster.bootstrap, g, timeout=30)
            expected = leaders[G.coordinator_partition(g)].leader
            if ans.node_id != expected:
                return None
            out[g] = (ans.node_id, G.coordinator_partition(g))
        return out

    # Leaders may move between the two questions: ask until both agree (bounded).
    found = wait_for(consistent, 60, interval=1, what="FindCoordinator == leader of hash % 16")
    assert found["polygenelubricants"][1] == 0


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_deleted_group_leaves_tombstones(cluster, commits):
    """DeleteGroups on an Empty group: its offset and group keys get null values, and
    OffsetFetch no longer returns the offsets."""
    group = "doomed-group"
    coord = G.coordinator_address(cluster.bootstrap, group)
    with W.KafkaWire(coord.address) as w:
        if G.DELETE_GROUPS not in w.api_versions():
            pytest.skip("DeleteGroups (42) is not advertised")
        errors = G.offset_commit(w, group, {(TOPIC, 0): (4, -1, ""), (TOPIC, 1): (6, -1, "")})
        assert set(errors.values()) == {G.NONE}, errors
        assert G.delete_group(w, group) == G.NONE

    def tombstoned() -> list[D.OffsetsRecord] | None:
        recs = G.read_offsets_topic(cluster.bootstrap)
        latest = G.latest_commits(recs, group)
        return recs if latest and all(v is None for v in latest.values()) else None

    try:
        records = wait_for(tombstoned, 30, interval=1, what="tombstones for the deleted group")
    except TimeoutError:
        records = G.read_offsets_topic(cluster.bootstrap)
    latest = G.latest_commits(records, group)
    assert set(latest) == {(TOPIC, 0), (TOPIC, 1)}, latest
    assert all(v is None for v in latest.values()), f"offsets not tombstoned: {latest}"
    group_recs = G.group_records(records, group)
    assert group_recs and group_recs[-1].tombstone, f"no group tombstone: {group_recs}"
    coord = G.coordinator_address(cluster.bootstrap, group)
    with W.KafkaWire(coord.address) as w:
        _, got = G.offset_fetch(w, group, {TOPIC: [0, 1]})
    assert {k: c.offset for k, c in got.items()} == {(TOPIC, 0): -1, (TOPIC, 1): -1}, got


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_clients_cannot_write_to_or_delete_the_offsets_topic(cluster, commits):
    """Group state is written by the coordinators only (Kafka: INVALID_TOPIC_EXCEPTION). A
    client's garbage batch left every group on its partition loading forever; DeleteTopics
    of it was accepted and every committed offset was gone."""
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient

    wanted, _member, _window = commits
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    errors: list[KafkaError | None] = []
    producer.produce(
        "__consumer_offsets",
        b"forged",
        key=b"\x00\x01",
        partition=0,
        on_delivery=lambda err, _msg: errors.append(err),
    )
    assert producer.flush(60) == 0
    assert errors and errors[0] is not None
    assert errors[0].code() == KafkaError.TOPIC_EXCEPTION, errors[0]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    future = admin.delete_topics(["__consumer_offsets"], operation_timeout=30)["__consumer_offsets"]
    with pytest.raises(KafkaException) as refused:
        future.result(60)
    assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    coord = G.coordinator_address(cluster.bootstrap, GROUP)
    with W.KafkaWire(coord.address) as w:
        _, got = G.offset_fetch(w, GROUP, {TOPIC: list(range(PARTITIONS))})
    assert {k: c.offset for k, c in got.items()} == {
        (TOPIC, p): off for p, (off, _epoch, _meta) in wanted.items()
    }
