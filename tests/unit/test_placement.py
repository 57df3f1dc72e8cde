"""Replica placement (raftlog/cluster/placement.py): Kafka's assignment, rack-aware (KIP-36). Kafka's
own worked examples give the exact lists; properties over any brokers, racks, start and
shift give what the algorithm guarantees: distinct brokers always, as many distinct racks
as there are (up to the replication factor), leaders even within one, and replicas exactly
even over whole rounds of partitions when the racks are of one size. TopicAdmin places
CreateTopics and CreatePartitions with it."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.api.values import BrokerInfo, TopicSpec
from raftlog.broker.topic_admin import TopicAdmin
from raftlog.cluster.placement import broker_order, place
from raftlog.common.errors import ErrorCode
from raftlog.common.limits import ReplicaBudget


def placed(
    racks: Mapping[int, str | None],
    partitions: int,
    rf: int,
    existing: Sequence[Sequence[int]] = (),
    start: int | None = None,
    shift: int | None = None,
    rng: random.Random | None = None,
) -> list[list[int]]:
    return list(place(racks, partitions, rf, existing=existing, start=start, shift=shift, rng=rng))


def test_kafkas_rack_aware_example() -> None:
    """AdminUtils' javadoc: racks 0 rack1, 1 rack3, 2 rack3, 3 rack2, 4 rack2, 5 rack1 give
    the order 0, 3, 1, 5, 4, 2; six partitions at RF 3 from the start walk it, and the
    seventh shifts its followers (0, 4, 2 rather than 0, 3, 1)."""
    racks: dict[int, str | None] = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2"}
    racks |= {4: "rack2", 5: "rack1"}
    assert broker_order(racks) == [0, 3, 1, 5, 4, 2]
    assert placed(racks, 7, 3, start=0, shift=0) == [
        [0, 3, 1],
        [3, 1, 5],
        [1, 5, 4],
        [5, 4, 2],
        [4, 2, 0],
        [2, 0, 3],
        [0, 4, 2],
    ]


def test_kafkas_rack_unaware_example() -> None:
    """AdminUtils' javadoc table: five brokers without racks, ten partitions at RF 3; the
    second round's followers are shifted one further."""
    racks = dict.fromkeys(range(5), None)
    assignment = placed(racks, 10, 3, start=0, shift=0)
    assert assignment[:5] == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1]]
    assert assignment[5:] == [[0, 2, 3], [1, 3, 4], [2, 4, 0], [3, 0, 1], [4, 1, 2]]


def test_racks_interleave_and_rackless_brokers_are_one_rack_of_their_own() -> None:
    assert broker_order({1: "a", 2: "a", 3: "b", 4: "b", 5: "c"}) == [1, 3, 5, 2, 4]
    mixed: dict[int, str | None] = {1: "a", 2: "a", 3: None, 4: "b", 5: None, 6: "b"}
    assert broker_order(mixed) == [3, 1, 4, 5, 2, 6]
    for replicas in placed(mixed, 30, 3):
        assert {mixed[b] for b in replicas} == {"a", "b", None}


def test_new_partitions_continue_the_topics_stripe() -> None:
    """Partitions added later are placed as if created with the others (the next leader
    after the last partition's), however many rounds in."""
    racks = {i: "abc"[i % 3] for i in range(1, 7)}
    whole = placed(racks, 20, 3, start=4, shift=2)
    for cut in (1, 5, 6, 13):
        assert whole[:cut] + placed(racks, 20 - cut, 3, existing=whole[:cut], shift=2) == whole


def test_a_last_leader_that_is_gone_starts_anywhere() -> None:
    racks = {1: "a", 2: "b", 3: "c"}
    added = placed(racks, 3, 3, existing=[[9, 1, 2]], rng=random.Random(1))
    assert sorted(r[0] for r in added) == [1, 2, 3]


@pytest.mark.parametrize(("partitions", "rf"), [(-1, 1), (1, 0), (1, 4)])
def test_impossible_placements_are_refused(partitions: int, rf: int) -> None:
    with pytest.raises(ValueError, match="must not be negative|needs from 1 to 3 brokers"):
        place({1: "a", 2: "b", 3: None}, partitions, rf)


# --- properties ---------------------------------------------------------------------------


@st.composite
def clusters(draw: st.DrawFn) -> dict[int, str | None]:
    """1-12 brokers with sparse ids, each on one of up to 5 racks or (sometimes) none."""
    ids = draw(st.lists(st.integers(0, 60), min_size=1, max_size=12, unique=True))
    names = st.sampled_from(["r0", "r1", "r2", "r3", "r4"])
    rack = st.one_of(names, st.none()) if draw(st.booleans()) else names
    return {i: draw(rack) for i in ids}


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_every_placement_spreads_over_brokers_racks_and_leaders(data: st.DataObject) -> None:
    racks = data.draw(clusters())
    count = len(racks)
    rf = data.draw(st.integers(1, count))
    partitions = data.draw(st.integers(0, 4 * count))
    existing = [[-1]] * data.draw(st.integers(0, 2 * count))
    start, shift = data.draw(st.integers(0, 3 * count)), data.draw(st.integers(0, 3 * count))
    assignment = placed(racks, partitions, rf, existing=existing, start=start, shift=shift)
    assert len(assignment) == partitions
    rack_count = len(set(racks.values()))
    for replicas in assignment:
        assert len(replicas) == rf and len(set(replicas)) == rf
        assert set(replicas) <= set(racks)
        assert len({racks[b] for b in replicas}) == min(rf, rack_count)
    leaders = Counter(r[0] for r in assignment)
    led = [leaders[b] for b in racks]
    assert max(led) - min(led) <= 1


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_whole_rounds_on_racks_of_one_size_spread_replicas_exactly(data: st.DataObject) -> None:
    """Kafka's guarantee: with every rack holding as many brokers (or no racks at all),
    each round of as many partitions as brokers, counted from partition 0, puts the same
    number of replicas on every broker."""
    rack_count, size = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    racks: dict[int, str | None] = {
        b: (f"r{b % rack_count}" if rack_count > 1 else None) for b in range(rack_count * size)
    }
    count = len(racks)
    rf = data.draw(st.integers(1, count))
    rounds_before, rounds = data.draw(st.integers(0, 2)), data.draw(st.integers(1, 3))
    existing = [[-1]] * (rounds_before * count)
    start, shift = data.draw(st.integers(0, count - 1)), data.draw(st.integers(0, count - 1))
    assignment = placed(racks, rounds * count, rf, existing=existing, start=start, shift=shift)
    held = Counter(b for replicas in assignment for b in replicas)
    assert {held[b] for b in racks} == {rounds * rf}


# --- TopicAdmin places with it -------------------------------------------------------------


class _Controller:
    def __init__(self) -> None:
        self.state = SimpleNamespace(topics={})

    async def call(self, method: str, *args: Any, timeout: float = 0.0) -> Any:
        """The controller's two commands a placement makes, applied at once."""
        if method == "update_topics_create":
            for name, topic_id, assignments, configs, internal in args[0]:
                self.state.topics[name] = {
                    "id": topic_id,
                    "partitions": assignments,
                    "configs": configs,
                    "internal": internal,
                }
            return [None] * len(args[0])
        name, _, new = args  # add_partitions
        self.state.topics[name]["partitions"] += new
        return None


class _View:
    def __init__(self, racks: dict[int, str | None]) -> None:
        self.racks = racks

    def live_brokers(self) -> list[BrokerInfo]:
        return [BrokerInfo(b, "h", 9000 + b, rack) for b, rack in sorted(self.racks.items())]

    def topic(self, name: str) -> None:
        return None


async def test_create_topics_and_partitions_put_each_partitions_replicas_on_distinct_racks() -> (
    None
):
    """Six brokers, two a rack: every partition of a new topic, and of the partitions added
    to it, has its three replicas on the three racks (Kafka's rack-unaware placement put
    consecutive brokers by id together: 1, 2, 3 are racks a, a, b)."""
    racks: dict[int, str | None] = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    controller = _Controller()
    node = SimpleNamespace(
        controller=controller,
        config=SimpleNamespace(broker_setting={}.__getitem__),
        budget=ReplicaBudget(10**6, 0),
    )
    admin = TopicAdmin(node, _View(racks))  # type: ignore[arg-type]  # the fakes
    for _ in range(5):  # a random start each time
        controller.state.topics.clear()
        (created,) = await admin.create_topics([TopicSpec("t", 12, 3)], False, 1000)
        assert created.error == ErrorCode.none
        added = await admin.create_partitions("t", 20, None, False, 1000)
        assert added.error == ErrorCode.none
        partitions = controller.state.topics["t"]["partitions"]
        assert len(partitions) == 20
        assert all({racks[b] for b in r} == {"a", "b", "c"} for r in partitions)
        leaders = Counter(r[0] for r in partitions)
        assert sorted(leaders.values()) == [3, 3, 3, 3, 4, 4]
