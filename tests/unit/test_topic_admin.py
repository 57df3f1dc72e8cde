"""TopicAdmin's bound on one CreateTopics: Kafka's controller creates at most 10,000
partitions per request (ReplicationControlManager.validateTotalNumberOfPartitions) and
refuses a request over it whole; Metadata's auto-creation goes through the same check. And
how a request of thousands of topics is judged, recorded and waited for."""

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.controller_machine import OneNodeController as MachineController
from support.loop_holds import LoopHolds
from support.raftnet import Clock

import raftlog.controller.syncobj_fork as core
from raftlog.api.values import BrokerInfo, TopicSpec
from raftlog.broker.topic_admin import CREATE_BATCH_BYTES, TopicAdmin
from raftlog.common.errors import ErrorCode
from raftlog.common.limits import MAX_RECORDS_PER_USER_OP, ReplicaBudget
from raftlog.controller import ControllerMachine


class Controller:
    def __init__(self) -> None:
        self.state = SimpleNamespace(topics={})
        self.calls: list[tuple] = []

    async def call(self, method: str, *args: object) -> None:
        self.calls.append((method, *args))


class View:
    def live_brokers(self) -> list[BrokerInfo]:
        return [BrokerInfo(1, "h", 1), BrokerInfo(2, "h", 2)]

    def topic(self, name: str) -> None:
        return None


def admin(num_partitions: int = 1) -> tuple[TopicAdmin, Controller]:
    controller = Controller()
    broker = {"num.partitions": num_partitions, "offsets.topic.num.partitions": 50}
    node = SimpleNamespace(
        controller=controller,
        config=SimpleNamespace(broker_setting=broker.__getitem__),
        budget=ReplicaBudget(10**9, 0),
    )
    return TopicAdmin(node, View()), controller


async def test_a_create_topics_over_10000_partitions_is_refused_whole() -> None:
    topics, controller = admin(num_partitions=4)
    specs = [
        TopicSpec("small", 1, 1),
        TopicSpec("assigned", assignments={0: (1,), 1: (2,)}),
        TopicSpec("defaulted"),  # num.partitions: 4
        TopicSpec("__consumer_offsets"),  # offsets.topic.num.partitions: 50
        TopicSpec("big", MAX_RECORDS_PER_USER_OP - 1 - 2 - 4 - 50 + 1, 1),
    ]
    for validate_only in (True, False):
        results = await topics.create_topics(specs, validate_only, 1000)
        assert [(r.name, r.error, r.message) for r in results] == [
            (
                s.name,
                ErrorCode.policy_violation,
                "Excessively large number of partitions per request: 10001, at most 10000.",
            )
            for s in specs
        ]
    huge = await topics.create_topics([TopicSpec("huge", 2**31 - 1, 3)], False, 1000)
    assert huge[0].error == ErrorCode.policy_violation
    assert controller.calls == []
    fits = await topics.create_topics([TopicSpec("fits", MAX_RECORDS_PER_USER_OP, 1)], True, 1)
    assert fits[0].error == ErrorCode.none and controller.calls == []


# --- many topics in one request, recorded by a real (one-node) controller machine ---------


class LedView(View):
    """Every partition of a recorded topic is led (no elections to wait for)."""

    def __init__(self, state: ControllerMachine) -> None:
        self.state = state

    def live_brokers(self) -> list[BrokerInfo]:
        return [BrokerInfo(n, "h", n) for n in (1, 2, 3)]

    def topic(self, name: str) -> Any:
        topic = self.state.topics.get(name)
        if topic is None:
            return None
        return SimpleNamespace(
            name=name,
            partitions=[SimpleNamespace(leader=r[0]) for r in topic["partitions"]],
        )


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MachineController]:
    clock = Clock()
    monkeypatch.setattr(core, "monotonicTime", clock)
    controller = MachineController(tmp_path, clock)
    yield controller
    controller.close()


def machine_admin(controller: MachineController, budget: int) -> TopicAdmin:
    broker = {"num.partitions": 1, "default.replication.factor": 3}
    node = SimpleNamespace(
        controller=controller,
        config=SimpleNamespace(broker_setting=broker.__getitem__),
        budget=ReplicaBudget(budget, 0),
    )
    return TopicAdmin(node, LedView(controller.state))  # type: ignore[arg-type]


async def test_thousands_of_topics_are_recorded_a_batch_a_command_each_alone(
    machine: MachineController,
) -> None:
    """3,000 topics of a request are a few controller commands (one per topic before: a
    commit and a leader wait each, and a 1,000-topic CreateTopics timed out after 60 s). Each
    is judged alone against the replica budget, earlier ones counted: the ones past it are
    INVALID_PARTITIONS and stored in no part; an existing one is TOPIC_ALREADY_EXISTS."""
    admin = machine_admin(machine, budget=2_000)
    assert (await admin.create_topics([TopicSpec("old", 1, 3)], False, 1000))[0].error == 0
    machine.commands.clear()
    specs = [TopicSpec(f"t{i:04d}-" + "x" * 240, 1, 3) for i in range(3_000)]
    specs.insert(10, TopicSpec("old", 1, 3))
    results = await admin.create_topics(specs, False, 30_000)
    assert [r.name for r in results] == [s.name for s in specs]
    errors = [r.error for r in results]
    assert errors[10] == ErrorCode.topic_already_exists
    created = [r for r in results if r.error == ErrorCode.none]
    assert len(created) == 1_999  # 2,000 replicas a node, "old" holds one
    assert (
        errors[: 1_999 + 1]
        == [ErrorCode.none] * 10 + [ErrorCode.topic_already_exists] + [ErrorCode.none] * 1_989
    )
    refused = results[1_999 + 1 :]
    assert {r.error for r in refused} == {ErrorCode.invalid_partitions}
    assert all(r.topic is not None and len(r.topic.partitions) == 1 for r in created)
    topics = machine.state.topics
    assert len(topics) == 2_000 and not any(r.name in topics for r in refused)
    assert all(len(topics[r.name]["partitions"][0]) == 3 for r in created)
    per_command = CREATE_BATCH_BYTES // (64 + 250 + 36 + 16 * 4)
    assert 1_999 // per_command <= len(machine.commands) <= 1_999 // per_command + 2


async def test_a_topic_recorded_meanwhile_by_another_request_is_already_exists(
    machine: MachineController,
) -> None:
    """Planned, then created by a racing request before this one's command applies: that
    topic is TOPIC_ALREADY_EXISTS and keeps the other's id; the rest are created."""
    admin = machine_admin(machine, budget=100)
    raced = {"id": "00000000-0000-0000-0000-000000000001", "partitions": [[1]]}

    def race() -> None:
        machine.state.topics["b"] = {**raced, "configs": {}, "internal": False}
        machine.before_apply = lambda: None

    machine.before_apply = race
    results = await admin.create_topics([TopicSpec(n, 2, 3) for n in "abc"], False, 1000)
    assert [r.error for r in results] == [
        ErrorCode.none,
        ErrorCode.topic_already_exists,
        ErrorCode.none,
    ]
    assert machine.state.topics["b"]["id"] == raced["id"]
    assert len(machine.state.topics["c"]["partitions"]) == 2


async def test_planning_10000_topics_hands_the_loop_back(machine: MachineController) -> None:
    """A request's per-topic checks and placement (validate_only: nothing else) run in slices:
    10,000 topics of 249-character names, the most one request may hold, never hold the loop
    for long at once (support/loop_holds.py)."""
    admin = machine_admin(machine, budget=100_000)
    specs = [TopicSpec(f"{i:05d}" + "y" * 244, 1, 3) for i in range(10_000)]
    async with LoopHolds() as holds:
        results = await admin.create_topics(specs, True, 1000)
    assert {r.error for r in results} == {ErrorCode.none} and len(results) == 10_000
    assert machine.commands == []
    assert holds.longest < 0.1, holds.longest
