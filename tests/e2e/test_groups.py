"""Consumer groups with unchanged Kafka clients, and the coordinator's answers to bad input.

Rebalancing (one shared 3-node cluster, group.initial.rebalance.delay.ms lowered):
- three members of one group on a 6-partition topic get two partitions each; a fourth
  joins (2/2/1/1) and one leaves (2/2/2): every time all partitions are covered exactly
  once, as the clients see it and as DescribeGroups reports it. For confluent-kafka,
  kafka-python and aiokafka.
- a cooperative-sticky confluent-kafka group: when a member joins, only the partitions
  that move are revoked (the others stay put), and the incremental rebalance finishes.

Bad input (raw requests; a member holds the group meanwhile and keeps heartbeating):
- OffsetCommit from an unknown member -> UNKNOWN_MEMBER_ID (25); with a stale or future
  generation -> ILLEGAL_GENERATION (22);
- JoinGroup with no protocols -> INCONSISTENT_GROUP_PROTOCOL (23);
- a group id over 32767 UTF-8 bytes -> INVALID_GROUP_ID (24) (32767 bytes is fine);
- CreatePartitions on __consumer_offsets -> an error saying it would remap every group;
and after each: OffsetFetch returns exactly what was committed before, and the member
saw no rebalance.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest
from support import groups as G
from support import records as R
from support import wire as W
from support.cluster import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOPIC = "rebalance"
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with G.running_cluster(
        tmp_path_factory.mktemp("groups"), name="groups", broker=G.FAST_GROUPS
    ) as c:
        c.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        recs = R.make_records("rb", 60, PARTITIONS)
        out = R.produce_confluent(c.bootstrap, TOPIC, recs, timeout=60)
        assert len(out.acked) == len(recs), out.failed[:3]
        yield c


def _server_view(bootstrap: str, group: str) -> tuple[str, dict[str, frozenset[int]]]:
    coord = G.coordinator_address(bootstrap, group, timeout=30)
    with W.KafkaWire(coord.address) as w:
        d = G.describe_group(w, group)
    assert d.error == G.NONE, d
    return d.state, d.assignments(TOPIC)


def _agrees_with_server(bootstrap: str, group: str, members: list[G.Member]) -> None:
    """DescribeGroups (on the coordinator) shows the group Stable with exactly the
    members and assignments the clients report."""
    want = {m.member_name: m.assignment for m in members}

    def same() -> bool:
        state, view = _server_view(bootstrap, group)
        return state == "Stable" and view == want

    try:
        wait_for(same, 20, interval=0.5, what="DescribeGroups to match the clients")
    except TimeoutError as exc:
        server = _server_view(bootstrap, group)
        raise AssertionError(f"{exc}: server {server}, clients {want}") from None


@pytest.mark.parametrize("client", list(G.MEMBERS))
def test_group_splits_and_rebalances(cluster, client):
    group = f"split-{client}"
    members: list[G.Member] = []
    with G.members_stopped(members):
        for i in range(3):
            members.append(G.start_member(client, cluster.bootstrap, group, TOPIC, f"{client}-{i}"))
        G.wait_assignment(members, PARTITIONS, [2, 2, 2], timeout=60)
        _agrees_with_server(cluster.bootstrap, group, members)

        members.append(G.start_member(client, cluster.bootstrap, group, TOPIC, f"{client}-3"))
        G.wait_assignment(members, PARTITIONS, [2, 2, 1, 1], timeout=60)
        _agrees_with_server(cluster.bootstrap, group, members)

        leaver = members.pop(0)
        leaver.stop()
        G.wait_assignment(members, PARTITIONS, [2, 2, 2], timeout=60)
        _agrees_with_server(cluster.bootstrap, group, members)


def test_cooperative_sticky_incremental_rebalance(cluster):
    group = "cooperative"
    conf = {"partition.assignment.strategy": "cooperative-sticky"}
    members: list[G.Member] = []
    with G.members_stopped(members):
        for i in range(3):
            members.append(
                G.start_member(
                    "confluent-kafka", cluster.bootstrap, group, TOPIC, f"coop-{i}", **conf
                )
            )
        before = G.wait_assignment(members, PARTITIONS, [2, 2, 2], timeout=60)

        t_join = time.monotonic()
        newcomer = G.start_member(
            "confluent-kafka", cluster.bootstrap, group, TOPIC, "coop-3", **conf
        )
        members.append(newcomer)
        after = G.wait_assignment(members, PARTITIONS, [2, 2, 1, 1], timeout=90)
        _agrees_with_server(cluster.bootstrap, group, members)
        revoked: set[int] = set()
        for m in members[:3]:
            assert after[m.member_name] <= before[m.member_name], (
                f"{m.member_name} was given partitions it did not own: {before} -> {after}"
            )
            for e in m.events_since(t_join, "revoke"):
                assert e.partitions <= before[m.member_name] - after[m.member_name], (
                    f"{m.member_name} had {sorted(e.partitions)} revoked but kept some of them"
                )
                revoked |= e.partitions
            assert not m.events_since(t_join, "lost"), f"{m.member_name} lost partitions"
        assert revoked == after["coop-3"], (
            f"cooperative rebalance revoked {sorted(revoked)}, newcomer got {sorted(after['coop-3'])}"
        )

        leaver = members.pop(0)
        leaver.stop()
        final = G.wait_assignment(members, PARTITIONS, [2, 2, 2], timeout=90)
        for m in members:
            assert final[m.member_name] >= after[m.member_name], (
                f"{m.member_name} lost partitions when another member left: {after} -> {final}"
            )
        _agrees_with_server(cluster.bootstrap, group, members)


# --------------------------------------------------------------------------- bad input

GUARDED_TOPIC = "guarded"


@dataclass
class Guarded:
    """A group held by one raw member with committed offsets; a thread heartbeats."""

    bootstrap: str
    group: str
    coordinator: str
    member_id: str
    generation: int
    baseline: dict[tuple[str, int], G.Committed]
    heartbeat_errors: list[int] = field(default_factory=list)
    halt: threading.Event = field(default_factory=threading.Event)

    def fetch(self) -> dict[tuple[str, int], G.Committed]:
        coord = G.coordinator_address(self.bootstrap, self.group, timeout=30)
        with W.KafkaWire(coord.address) as w:
            err, got = G.offset_fetch(w, self.group, {GUARDED_TOPIC: [0, 1]}, lo=5)
        assert err == G.NONE, err
        return got

    def assert_untouched(self) -> None:
        assert self.fetch() == self.baseline, "committed offsets changed"
        bad = [e for e in self.heartbeat_errors if e != G.NONE]
        assert not bad, f"the member's heartbeats failed ({bad}): the group was disturbed"


@pytest.fixture(scope="module")
def guarded(cluster):
    cluster.create_topic(GUARDED_TOPIC, partitions=2, replication_factor=3)
    group = "guarded-group"
    coord = G.coordinator_address(cluster.bootstrap, group)
    md = W.topic_metadata(cluster.bootstrap, GUARDED_TOPIC)
    epoch = md.partition(GUARDED_TOPIC, 0).leader_epoch
    with W.KafkaWire(coord.address) as w:
        j = G.join_group(
            w, group, [("range", G.encode_subscription([GUARDED_TOPIC]))], session_timeout_ms=10000
        )
        assert j.error == G.NONE and j.leader == j.member_id, j
        err, _ = G.sync_group(
            w,
            group,
            j.generation,
            j.member_id,
            {j.member_id: G.encode_assignment({GUARDED_TOPIC: [0, 1]})},
            protocol_name=j.protocol,
        )
        assert err == G.NONE, err
        errors = G.offset_commit(
            w,
            group,
            {(GUARDED_TOPIC, 0): (5, epoch, "before"), (GUARDED_TOPIC, 1): (7, -1, "")},
            j.generation,
            j.member_id,
            lo=6,
        )
        assert set(errors.values()) == {G.NONE}, errors
    g = Guarded(cluster.bootstrap, group, coord.address, j.member_id, j.generation, {})
    g.baseline = g.fetch()
    assert g.baseline == {
        (GUARDED_TOPIC, 0): G.Committed(5, epoch, "before", G.NONE),
        (GUARDED_TOPIC, 1): G.Committed(7, -1, "", G.NONE),
    }, g.baseline

    def beat() -> None:
        with W.KafkaWire(coord.address) as hw:
            while not g.halt.wait(1.0):
                g.heartbeat_errors.append(G.heartbeat(hw, group, g.generation, g.member_id))

    t = threading.Thread(target=beat, name="guarded-heartbeat", daemon=True)
    t.start()
    yield g
    g.halt.set()
    t.join(15)
    with W.KafkaWire(coord.address) as w:
        G.leave_group(w, group, g.member_id)


def test_commit_from_unknown_member_is_refused(guarded):
    with W.KafkaWire(guarded.coordinator) as w:
        errors = G.offset_commit(
            w,
            guarded.group,
            {(GUARDED_TOPIC, 0): (99, -1, "bad")},
            guarded.generation,
            "not-a-member-of-this-group",
        )
    assert errors == {(GUARDED_TOPIC, 0): G.UNKNOWN_MEMBER_ID}, errors
    guarded.assert_untouched()


def test_commit_with_wrong_generation_is_refused(guarded):
    with W.KafkaWire(guarded.coordinator) as w:
        for generation in (guarded.generation - 1, guarded.generation + 1):
            errors = G.offset_commit(
                w,
                guarded.group,
                {(GUARDED_TOPIC, 0): (99, -1, "bad"), (GUARDED_TOPIC, 1): (98, -1, "bad")},
                generation,
                guarded.member_id,
            )
            assert set(errors.values()) == {G.ILLEGAL_GENERATION}, (generation, errors)
    guarded.assert_untouched()


def test_join_with_no_protocols_is_refused(guarded):
    with W.KafkaWire(guarded.coordinator) as w:
        j = G.join_group(w, guarded.group, [])
        assert j.error == G.INCONSISTENT_GROUP_PROTOCOL, j
    fresh = "no-protocols-group"
    coord = G.coordinator_address(guarded.bootstrap, fresh)
    with W.KafkaWire(coord.address) as w:
        j = G.join_group(w, fresh, [])
        assert j.error == G.INCONSISTENT_GROUP_PROTOCOL, j
    guarded.assert_untouched()


def test_group_id_over_32767_bytes_is_refused(cluster, guarded):
    leaders = G.offsets_topic_leaders(cluster.bootstrap)
    brokers = W.topic_metadata(cluster.bootstrap, GUARDED_TOPIC).brokers

    def coordinator_of(group: str) -> str:
        return brokers[leaders[G.coordinator_partition(group)].leader]

    too_long = "é" * 16384  # 16384 characters, 32768 UTF-8 bytes
    with W.KafkaWire(coordinator_of(too_long)) as w:
        sub = G.encode_subscription([GUARDED_TOPIC])
        j = G.join_group(w, too_long, [("range", sub)], lo=6)  # flexible: a longer string fits
        assert j.error == G.INVALID_GROUP_ID, j
        errors = G.offset_commit(w, too_long, {(GUARDED_TOPIC, 0): (1, -1, "")}, lo=8)
        assert errors == {(GUARDED_TOPIC, 0): G.INVALID_GROUP_ID}, errors
    longest = "x" * 32767
    with W.KafkaWire(coordinator_of(longest)) as w:
        j = G.join_group(w, longest, [("range", sub)], follow_member_id_required=False, lo=6)
        assert j.error in (G.NONE, G.MEMBER_ID_REQUIRED), f"32767 bytes is a valid group id: {j}"
        if j.error == G.NONE:
            G.leave_group(w, longest, j.member_id)
    guarded.assert_untouched()


def test_create_partitions_on_offsets_topic_is_refused(cluster, guarded):
    md = W.topic_metadata(cluster.bootstrap, GUARDED_TOPIC)
    with W.KafkaWire(md.brokers[md.controller_id]) as w:
        for validate_only in (True, False):
            err, message = G.create_partitions(w, G.OFFSETS_TOPIC, 20, validate_only)
            assert err != G.NONE, f"CreatePartitions on {G.OFFSETS_TOPIC} accepted"
            text = (message or "").lower()
            says_why = any(w in text for w in ("every group", "all groups", "remap"))
            assert says_why and "partition" in text, (
                f"error {err}: the message should say it would remap every group: {message!r}"
            )
    leaders = G.offsets_topic_leaders(cluster.bootstrap)
    assert sorted(leaders) == list(range(16))
    guarded.assert_untouched()


def test_a_member_joining_with_rebalance_timeout_zero_can_sync(cluster):
    """kafkajs's protocol tests join with rebalance timeout 0 (left unset) and then sync: the
    member keeps its session timeout to send SyncGroup instead of being dropped at once."""
    group = "rebalance-timeout-zero"
    coord = G.coordinator_address(cluster.bootstrap, group)
    assignment = G.encode_assignment({TOPIC: [0, 1]})
    with W.KafkaWire(coord.address) as w:
        j = G.join_group(
            w,
            group,
            [("range", G.encode_subscription([TOPIC]))],
            session_timeout_ms=10000,
            rebalance_timeout_ms=0,
        )
        assert j.error == G.NONE and j.leader == j.member_id, j
        time.sleep(0.5)  # a slow client: Kafka 3.0+ would have dropped the member by now
        err, mine = G.sync_group(
            w, group, j.generation, j.member_id, {j.member_id: assignment}, j.protocol
        )
        assert (err, mine) == (G.NONE, assignment)
        assert G.heartbeat(w, group, j.generation, j.member_id) == G.NONE
        assert G.describe_group(w, group).state == "Stable"
        G.leave_group(w, group, j.member_id)
