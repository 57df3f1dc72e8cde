"""Share-group membership (raftlog/share/membership.py) and its assignor (assignor.py), driven
through ShareGroups.heartbeat on a manual clock (support.clock): session timeouts are
asserted to the millisecond and nothing sleeps. The rules are Kafka's
GroupMetadataManager.shareGroupHeartbeat and SimpleAssignor (KIP-932)."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.clock import ManualClock

from raftlog.common.errors import ErrorCode
from raftlog.share.assignor import assign
from raftlog.share.membership import HeartbeatResult, ShareGroups, ShareGroupSettings

E = ErrorCode
HOST = "/127.0.0.1"


class Cluster:
    """The topics ShareGroups sees: name -> partition count."""

    def __init__(self, **topics: int) -> None:
        self.topics = dict(topics)

    def partitions(self, name: str) -> int | None:
        return self.topics.get(name)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def groups(
    clock: ManualClock | None = None, cluster: Cluster | None = None, **kwargs
) -> tuple[ShareGroups, Cluster]:
    cluster = cluster or Cluster(t=1)
    return ShareGroups(cluster.partitions, clock or ManualClock(), **kwargs), cluster


def join(sg: ShareGroups, member: str, topics=("t",), group: str = "g") -> HeartbeatResult:
    return sg.heartbeat(group, member, 0, None, list(topics), "client-" + member, HOST)


def beat(
    sg: ShareGroups, member: str, epoch: int, group: str = "g", topics=None
) -> HeartbeatResult:
    return sg.heartbeat(group, member, epoch, None, topics, "client-" + member, HOST)


def leave(sg: ShareGroups, member: str, group: str = "g") -> HeartbeatResult:
    return sg.heartbeat(group, member, -1, None, None, "client-" + member, HOST)


def converge(sg: ShareGroups, group: str = "g") -> dict[str, dict[str, tuple[int, ...]]]:
    """One heartbeat from every member at its epoch: afterwards all sit on the target."""
    description = sg.describe(group)
    assert description is not None
    for m in description.members:
        assert beat(sg, m.member_id, m.member_epoch, group).error == E.none
    description = sg.describe(group)
    assert description is not None
    assert {m.member_epoch for m in description.members} <= {description.assignment_epoch}
    return {m.member_id: m.assignment for m in description.members}


def sharers(assignment: dict[str, dict[str, tuple[int, ...]]]) -> Counter[tuple[str, int]]:
    return Counter((t, p) for a in assignment.values() for t, ps in a.items() for p in ps)


def count(a: dict[str, tuple[int, ...]]) -> int:
    return sum(len(ps) for ps in a.values())


# ---- join, leave, epochs


def test_join_answers_an_epoch_the_interval_and_the_assignment() -> None:
    sg, _ = groups(cluster=Cluster(t=2), settings=lambda g: ShareGroupSettings(1234, 45000, 200))
    r = join(sg, "a")
    assert r == HeartbeatResult(E.none, None, "a", 1, 1234, {"t": (0, 1)})
    # a steady heartbeat: same epoch, no assignment (None = unchanged)
    assert beat(sg, "a", 1) == HeartbeatResult(E.none, None, "a", 1, 1234, None)
    assert sg.has_group("g") and sg.group_ids() == ["g"] and sg.is_member("g", "a")


def test_a_second_member_moves_the_group_epoch_and_the_first_one_follows() -> None:
    sg, _ = groups(cluster=Cluster(t=2))
    join(sg, "a")
    b = join(sg, "b")
    assert (b.member_epoch, b.assignment) == (2, {"t": (1,)})
    a = beat(sg, "a", 1)
    assert (a.member_epoch, a.assignment) == (2, {"t": (0,)})  # took its new target at once
    assert beat(sg, "a", 2).assignment is None


def test_leave_answers_minus_one_moves_the_epoch_and_tells_the_listeners() -> None:
    sg, _ = groups(cluster=Cluster(t=2))
    left: list[tuple[str, str]] = []
    sg.on_member_left.append(lambda g, m: left.append((g, m)))
    join(sg, "a")
    join(sg, "b")
    assert leave(sg, "b") == HeartbeatResult(E.none, None, "b", -1, 0, None)
    assert left == [("g", "b")] and not sg.is_member("g", "b")
    d = sg.describe("g")
    assert d is not None and (d.group_epoch, d.assignment_epoch) == (3, 2)
    # the one left takes both partitions at its next heartbeat
    a = beat(sg, "a", 1)
    assert (a.member_epoch, a.assignment) == (3, {"t": (0, 1)})
    assert leave(sg, "a").error == E.none
    d = sg.describe("g")
    assert d is not None and d.state == "Empty" and d.members == ()


def test_rejoin_with_epoch_zero_keeps_the_member_and_resends_its_assignment() -> None:
    sg, _ = groups(cluster=Cluster(t=2))
    join(sg, "a")
    join(sg, "b")
    beat(sg, "a", 1)
    left: list[str] = []
    sg.on_member_left.append(lambda g, m: left.append(m))
    r = join(sg, "a")  # e.g. after FENCED_MEMBER_EPOCH
    assert (r.error, r.member_id, r.member_epoch, r.assignment) == (E.none, "a", 2, {"t": (0,)})
    d = sg.describe("g")
    assert d is not None and d.group_epoch == 2 and [m.member_id for m in d.members] == ["a", "b"]
    assert left == []


def test_a_lost_answer_is_accepted_at_the_previous_epoch_and_older_ones_are_fenced() -> None:
    sg, _ = groups(cluster=Cluster(t=2))
    join(sg, "a")  # epoch 1
    join(sg, "b")  # group epoch 2
    assert beat(sg, "a", 1).member_epoch == 2  # this answer gets lost
    again = beat(sg, "a", 1)  # previous epoch: accepted, and the assignment is resent
    assert (again.error, again.member_epoch, again.assignment) == (E.none, 2, {"t": (0,)})
    join(sg, "c")  # group epoch 3
    assert beat(sg, "a", 2).member_epoch == 3
    old = beat(sg, "a", 1)  # neither current (3) nor previous (2)
    assert old.error == E.fenced_member_epoch and old.member_id is None
    assert sg.is_member("g", "a")  # fencing an epoch does not remove the member


def test_an_epoch_ahead_of_the_coordinator_is_fenced() -> None:
    sg, _ = groups()
    join(sg, "a")
    r = beat(sg, "a", 2)
    assert r.error == E.fenced_member_epoch and "greater member epoch (2)" in (r.message or "")


def test_unknown_members_and_groups() -> None:
    sg, _ = groups()
    assert beat(sg, "a", 1).error == E.unknown_member_id  # no group: the client rejoins
    assert not sg.has_group("g")
    assert leave(sg, "a").error == E.group_id_not_found
    join(sg, "a")
    assert beat(sg, "x", 1).error == E.unknown_member_id
    assert leave(sg, "x").error == E.unknown_member_id
    assert not sg.is_member("g", "x")


@pytest.mark.parametrize(
    ("group", "member", "epoch", "rack", "topics", "message"),
    [
        ("", "a", 0, None, ["t"], "GroupId can't be empty."),
        ("  ", "a", 1, None, None, "GroupId can't be empty."),
        ("g", "", 0, None, ["t"], "MemberId can't be empty."),
        ("g", " ", 1, None, None, "MemberId can't be empty."),
        ("g", "a", 0, "", ["t"], "RackId can't be empty."),
        ("g", "a", 0, None, None, "SubscribedTopicNames must be set in first request."),
        ("g", "a", 0, None, [], "SubscribedTopicNames must be set in first request."),
        ("g", "a", -2, None, None, "MemberEpoch is invalid."),
        ("g", "a" * 256, 0, None, ["t"], "MemberId can't be longer than 255 bytes."),
        (
            "g",
            "a",
            0,
            None,
            ["t", "__consumer_offsets", "__share_group_state"],
            "Share groups cannot subscribe to internal topics: "
            "__consumer_offsets, __share_group_state.",
        ),
    ],
)
def test_invalid_requests(group, member, epoch, rack, topics, message) -> None:
    sg, _ = groups()
    r = sg.heartbeat(group, member, epoch, rack, topics, "c", HOST)
    assert (r.error, r.message) == (E.invalid_request, message)
    assert sg.group_ids() == []


def test_a_member_cannot_change_its_subscription_to_an_internal_topic() -> None:
    sg, _ = groups()
    assert join(sg, "a").error is E.none
    r = beat(sg, "a", 1, topics=["__consumer_offsets"])
    assert r.error is E.invalid_request
    assert sg.describe("g").members[0].subscribed_topic_names == ("t",)  # type: ignore[union-attr]


def test_a_classic_group_id_is_refused() -> None:
    sg, _ = groups(is_classic_group=lambda g: g == "classic")
    for r in (join(sg, "a", group="classic"), leave(sg, "a", group="classic")):
        assert (r.error, r.message) == (E.group_id_not_found, "Group classic is not a share group.")
    assert not sg.has_group("classic")
    assert join(sg, "a", group="share").error == E.none


def test_a_full_group_refuses_new_members_only() -> None:
    sizes = {"g": 2, "h": 0}
    sg, _ = groups(settings=lambda g: ShareGroupSettings(max_size=sizes[g]))
    join(sg, "a")
    join(sg, "b")
    r = join(sg, "c")
    assert (r.error, r.message) == (
        E.group_max_size_reached,
        "The share group has reached its maximum capacity of 2 members.",
    )
    assert beat(sg, "a", 1).error == E.none and join(sg, "b").error == E.none
    assert join(sg, "a", group="h").error == E.group_max_size_reached
    assert not sg.has_group("h")  # a refused join creates no group


def test_a_subscription_change_moves_the_epoch() -> None:
    sg, _ = groups(cluster=Cluster(t=1, u=1))
    join(sg, "a")
    assert beat(sg, "a", 1, topics=["t"]).member_epoch == 1  # unchanged: no new epoch
    r = beat(sg, "a", 1, topics=["t", "u"])
    assert (r.member_epoch, r.assignment) == (2, {"t": (0,), "u": (0,)})


# ---- the assignment


def test_three_members_on_one_partition_all_get_it() -> None:
    sg, _ = groups(cluster=Cluster(t=1))
    for m in "abc":
        assert join(sg, m).assignment == {"t": (0,)}
    assert converge(sg) == {m: {"t": (0,)} for m in "abc"}
    assert sg.members_of("g", "t", 0) == {"a", "b", "c"}


def test_two_members_on_four_partitions_get_two_each() -> None:
    sg, _ = groups(cluster=Cluster(t=4))
    join(sg, "a")
    join(sg, "b")
    a = converge(sg)
    assert [count(x) for x in a.values()] == [2, 2]
    assert sharers(a) == Counter({("t", p): 1 for p in range(4)})


def test_five_members_on_two_partitions_share_them_as_kafka_does() -> None:
    """ceil(5/2) = 3 members per partition: 6 slots for 5 members, so every member has a
    partition, one has both, and each partition has 3 members (Kafka's SimpleAssignor)."""
    sg, _ = groups(cluster=Cluster(t=2))
    for m in "abcde":
        join(sg, m)
    a = converge(sg)
    assert sorted(count(x) for x in a.values()) == [1, 1, 1, 1, 2]
    assert sharers(a) == Counter({("t", 0): 3, ("t", 1): 3})


def test_a_new_member_takes_partitions_without_moving_the_others() -> None:
    sg, _ = groups(cluster=Cluster(t=4))
    join(sg, "a")
    join(sg, "b")
    before = converge(sg)
    join(sg, "c")
    after = converge(sg)
    assert count(after["c"]) == 1  # one partition moved: the least possible
    for m in "ab":
        assert set(after[m]["t"]) <= set(before[m]["t"])
    assert sorted(count(x) for x in after.values()) == [1, 1, 2]
    leave(sg, "c")
    assert converge(sg) == before  # and back again, with nothing else moving


def test_stickiness_keeps_what_balance_allows() -> None:
    # b already holds 1 and 3: it keeps both, a gets the rest
    target = assign({"a": ["t"], "b": ["t"]}, {"t": 4}, {"b": {"t": [1, 3]}})
    assert target == {"a": {"t": frozenset({0, 2})}, "b": {"t": frozenset({1, 3})}}
    # a held everything: it keeps the lower half of its surplus, b takes the rest
    target = assign({"a": ["t"], "b": ["t"]}, {"t": 4}, {"a": {"t": [0, 1, 2, 3]}})
    assert target == {"a": {"t": frozenset({0, 1})}, "b": {"t": frozenset({2, 3})}}
    # the larger quota goes to the member that already has more, whatever the join order:
    # already balanced, so nothing moves
    current = {"a": {"t": [0]}, "b": {"t": [1]}, "c": {"t": [2, 3]}}
    target = assign({m: ["t"] for m in "abc"}, {"t": 4}, current)
    assert target == {m: {"t": frozenset(a["t"])} for m, a in current.items()}


def test_heterogeneous_subscriptions_share_each_topic_among_its_subscribers() -> None:
    sg, _ = groups(cluster=Cluster(x=2, y=3))
    join(sg, "a", topics=["x", "y"])
    join(sg, "b", topics=["y"])
    join(sg, "c", topics=["x"])
    a = converge(sg)
    assert set(a["b"]) == {"y"} and set(a["c"]) == {"x"}
    # per topic: x's 2 partitions over a and c, y's 3 over a and b
    assert sorted([len(a["a"]["x"]), len(a["c"]["x"])]) == [1, 1]
    assert sorted([len(a["a"]["y"]), len(a["b"]["y"])]) == [1, 2]
    assert sharers(a) == Counter({(t, p): 1 for t, n in (("x", 2), ("y", 3)) for p in range(n)})


def test_a_partition_count_change_moves_the_epoch_and_reassigns() -> None:
    sg, cluster = groups(cluster=Cluster(t=1))
    join(sg, "a")
    join(sg, "b")
    assert converge(sg) == {"a": {"t": (0,)}, "b": {"t": (0,)}}
    sg.topics_changed()  # nothing changed
    d = sg.describe("g")
    assert d is not None and d.group_epoch == 2
    cluster.topics["t"] = 2
    sg.topics_changed()
    d = sg.describe("g")
    assert d is not None and d.group_epoch == 3
    after = converge(sg)
    assert sorted(after.values(), key=str) == [{"t": (0,)}, {"t": (1,)}]


def test_an_unknown_topic_is_ignored_until_it_exists() -> None:
    sg, cluster = groups(cluster=Cluster(t=1))
    r = join(sg, "a", topics=["t", "later"])
    assert r.assignment == {"t": (0,)}
    cluster.topics["later"] = 1
    # the heartbeat itself re-reads the partition counts
    r = beat(sg, "a", r.member_epoch)
    assert (r.member_epoch, r.assignment) == (2, {"later": (0,), "t": (0,)})


def test_no_partitions_means_an_empty_assignment() -> None:
    sg, _ = groups(cluster=Cluster())
    r = join(sg, "a", topics=["nothing"])
    assert (r.error, r.member_epoch, r.assignment) == (E.none, 1, {})


# ---- sessions


async def test_the_session_times_out_after_exactly_the_session_timeout(clock) -> None:
    sg, _ = groups(clock, settings=lambda g: ShareGroupSettings(session_timeout_ms=45000))
    left: list[tuple[str, str]] = []
    sg.on_member_left.append(lambda g, m: left.append((g, m)))
    join(sg, "a")
    join(sg, "b")
    await clock.advance(30)
    assert beat(sg, "a", 1).error == E.none  # a's session starts again here
    await clock.advance(14.999)
    assert left == [] and sg.is_member("g", "b")
    await clock.advance(0.001)  # 45 s after b's last heartbeat
    assert left == [("g", "b")] and not sg.is_member("g", "b")
    d = sg.describe("g")
    assert d is not None and d.group_epoch == 3
    await clock.advance(29.999)
    assert sg.is_member("g", "a")
    await clock.advance(0.001)
    assert left == [("g", "b"), ("g", "a")]
    assert beat(sg, "a", 2).error == E.unknown_member_id


async def test_leaving_or_closing_stops_the_session_timer(clock) -> None:
    sg, _ = groups(clock)
    left: list[str] = []
    sg.on_member_left.append(lambda g, m: left.append(m))
    join(sg, "a")
    join(sg, "b")
    leave(sg, "a")
    sg.close()
    await clock.advance(100)
    assert left == ["a"] and sg.is_member("g", "b")
    assert clock.next_due() is None


async def test_a_failing_listener_does_not_stop_the_others(clock) -> None:
    sg, _ = groups(clock)
    left: list[str] = []

    def broken(g: str, m: str) -> None:
        raise RuntimeError("boom")

    sg.on_member_left += [broken, lambda g, m: left.append(m)]
    join(sg, "a")
    assert leave(sg, "a").error == E.none and left == ["a"]


# ---- what the broker asks


def test_members_of_follows_what_each_member_was_told() -> None:
    sg, _ = groups(cluster=Cluster(t=2))
    join(sg, "a")
    assert sg.members_of("g", "t", 1) == {"a"}
    join(sg, "b")
    # a has not heartbeated since: it still holds both partitions
    assert sg.members_of("g", "t", 1) == {"a", "b"}
    beat(sg, "a", 1)
    assert sg.members_of("g", "t", 1) == {"b"} and sg.members_of("g", "t", 0) == {"a"}
    assert sg.members_of("g", "u", 0) == set() and sg.members_of("nope", "t", 0) == set()


def test_describe() -> None:
    sg, _ = groups(cluster=Cluster(t=2, u=1))
    assert sg.describe("g") is None
    sg.heartbeat("g", "a", 0, "rack1", ["u", "t"], "cid", "/10.0.0.1")
    join(sg, "b")
    d = sg.describe("g")
    assert d is not None
    assert (d.group_id, d.state, d.group_epoch, d.assignment_epoch, d.assignor_name) == (
        "g",
        "Stable",
        2,
        2,
        "simple",
    )
    a, b = d.members
    assert (a.member_id, a.rack_id, a.member_epoch, a.client_id, a.client_host) == (
        "a",
        "rack1",
        1,
        "cid",
        "/10.0.0.1",
    )
    assert a.subscribed_topic_names == ("t", "u")
    assert a.assignment == {"t": (0, 1), "u": (0,)}  # not heartbeated since b joined
    assert (b.member_id, b.rack_id, b.member_epoch, b.subscribed_topic_names) == (
        "b",
        None,
        2,
        ("t",),
    )


def test_delete() -> None:
    sg, _ = groups()
    assert sg.delete("g") == E.group_id_not_found
    join(sg, "a")
    assert sg.delete("g") == E.non_empty_group
    leave(sg, "a")
    assert sg.delete("g") == E.none
    assert not sg.has_group("g") and sg.group_ids() == []


# ---- the assignor's guarantees, over random joins and leaves

TOPICS = ("a", "b", "c")
subsets = st.sets(st.sampled_from(TOPICS), min_size=1).map(sorted)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("join"), subsets),
        st.tuples(st.just("leave"), st.integers(0, 1000)),
    ),
    max_size=30,
)


def check_pool(assignment: dict[str, set[tuple[str, int]]], partitions: set[tuple[str, int]]):
    """Kafka's SimpleAssignor guarantees over one pool of members and partitions."""
    members, n = len(assignment), len(partitions)
    if not members or not n:
        return
    held = Counter(tp for tps in assignment.values() for tp in tps)
    assert set(held) == partitions  # every partition has a member
    assert max(held.values()) <= math.ceil(members / n)  # shared no more than needed
    if members <= n:
        assert set(held.values()) == {1}  # no sharing while partitions suffice
    counts = [len(tps) for tps in assignment.values()]
    assert min(counts) >= 1  # every member has work
    assert max(counts) - min(counts) <= 1  # balance


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    counts=st.tuples(*[st.integers(1, 6)] * len(TOPICS)),
    homogeneous=st.booleans(),
    shared=subsets,
    ops=operations,
)
def test_assignment_invariants_over_joins_and_leaves(counts, homogeneous, shared, ops) -> None:
    cluster = Cluster(**dict(zip(TOPICS, counts, strict=True)))
    sg, _ = groups(cluster=cluster, settings=lambda g: ShareGroupSettings(max_size=1000))
    subscriptions: dict[str, list[str]] = {}
    previous: dict[str, set[tuple[str, int]]] = {}
    for i, (op, arg) in enumerate(ops):
        if op == "join":
            member = f"m{i}"
            subscriptions[member] = shared if homogeneous else arg
            assert join(sg, member, subscriptions[member]).error == E.none
        elif subscriptions:
            member = sorted(subscriptions)[arg % len(subscriptions)]
            del subscriptions[member]
            assert leave(sg, member).error == E.none
        else:
            continue
        now = {m: {(t, p) for t, ps in a.items() for p in ps} for m, a in converge(sg).items()}
        assert set(now) == set(subscriptions)
        for m, tps in now.items():
            assert {t for t, _ in tps} <= set(subscriptions[m])  # only its own topics
        if len({tuple(s) for s in subscriptions.values()}) <= 1:
            pool = {
                (t, p) for s in subscriptions.values() for t in s for p in range(cluster.topics[t])
            }
            check_pool(now, pool)
            # stickiness: while partitions suffice, a join only takes from the others and
            # a leave only gives to them
            if homogeneous and previous and max(len(now), len(previous)) <= len(pool):
                for m in set(now) & set(previous):
                    if op == "join":
                        assert now[m] <= previous[m]
                    else:
                        assert now[m] >= previous[m]
        else:
            for t in TOPICS:
                subscribers = [m for m, s in subscriptions.items() if t in s]
                check_pool(
                    {m: {tp for tp in now[m] if tp[0] == t} for m in subscribers},
                    {(t, p) for p in range(cluster.topics[t])},
                )
        previous = now
    sg.close()


@settings(max_examples=300, deadline=None)
@given(
    members=st.integers(1, 12),
    partitions=st.integers(1, 8),
    previous=st.lists(st.sets(st.integers(0, 10)), max_size=12),
)
def test_balance_holds_whatever_the_previous_assignment(members, partitions, previous) -> None:
    """Stickiness never costs balance: any previous target (stale partitions included)."""
    names = [f"m{i}" for i in range(members)]
    current = {m: {"t": ps} for m, ps in zip(names, previous, strict=False)}
    target = assign({m: ["t"] for m in names}, {"t": partitions}, current)
    check_pool(
        {m: {("t", p) for p in a.get("t", ())} for m, a in target.items()},
        {("t", p) for p in range(partitions)},
    )
