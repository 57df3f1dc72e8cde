"""Topic administration: creating topics and partitions, deleting topics, changing their
configs. Placement (raftlog/cluster/placement.py: Kafka's, rack-aware) is checked against every
node's replica budget before anything the size of the request is built; changes go through
the controller group, and creation waits (up to LEADER_WAIT) for the new partitions to be
led."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from raftlog.api.values import PartitionInfo, TopicInfo, TopicResult, TopicSpec
from raftlog.cluster.placement import place
from raftlog.common.errors import ErrorCode
from raftlog.common.limits import MAX_RECORDS_PER_USER_OP
from raftlog.config import topic_config
from raftlog.controller import EXISTS, ControllerUnavailable, moves
from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC
from raftlog.txn.coordinator import TOPIC as TXN_TOPIC

if TYPE_CHECKING:
    from raftlog.node.cluster_view import ClusterView
    from raftlog.node.node import Node

LEADER_WAIT = 10.0
# The least a leader wait looks again after a change, and how many times as long as a look
# took, so that looking takes at most a fifth of the loop.
LEADER_LOOK_S = 0.05
LOOK_SPACING = 4
# The least time the controller is given to record a request's topics, whatever its timeout.
MIN_CONTROLLER_WAIT = 1.0
# What one controller command of new topics holds at most (their names, ids, assignments and
# configs, roughly): far below the 4 MiB a Raft entry may reach (RaftTimings.max_message_bytes),
# so a command goes to the followers in one message, behind no other group's heartbeats long.
CREATE_BATCH_BYTES = 256 * 1024
# The longest a request's per-topic planning or looking holds the loop at once (a tenth of the
# shortest election timeout), and how many topics run between looks at the clock.
SLICE_S = 0.005
_CLOCK_EVERY = 32


# What a coordinator's topic is keyed by: hashing one over the partitions finds its coordinator.
_KEYED_BY = {OFFSETS_TOPIC: "group", TXN_TOPIC: "transactional id"}
# The coordinators' topics: (partition count, replication factor) settings.
_INTERNAL_SETTINGS = {
    OFFSETS_TOPIC: ("offsets.topic.num.partitions", "offsets.topic.replication.factor"),
    TXN_TOPIC: (
        "transaction.state.log.num.partitions",
        "transaction.state.log.replication.factor",
    ),
}


@dataclass(frozen=True, slots=True)
class _Planned:
    """A topic of a create request, checked and placed, to be recorded by the controller."""

    name: str
    topic_id: str
    assignments: list[list[int]]
    configs: dict[str, str]
    internal: bool

    def size(self) -> int:
        """What the topic adds to a controller command, roughly, in bytes."""
        configs = sum(len(k) + len(v) + 8 for k, v in self.configs.items())
        return (
            64
            + len(self.name)
            + len(self.topic_id)
            + configs
            + 16 * sum(len(replicas) + 1 for replicas in self.assignments)
        )


class TopicAdmin:
    def __init__(self, node: Node, view: ClusterView) -> None:
        self._node = node
        self._view = view

    async def create_topics(
        self, specs: list[TopicSpec], validate_only: bool, timeout_ms: int
    ) -> list[TopicResult]:
        """Kafka's controller refuses a request for more than MAX_RECORDS_PER_USER_OP
        partitions in all, whole (ReplicationControlManager.validateTotalNumberOfPartitions);
        so does this, before anything is proposed. Otherwise each topic is judged alone, in
        request order, the ones before it counted against the replica budget, and is created
        whole or not at all. The accepted ones go to the controller CREATE_BATCH_BYTES a
        command, and the whole request waits for their leaders once, not topic by topic (a
        request of 1,000 topics was one commit and up to LEADER_WAIT each, minutes)."""
        partitions = sum(map(self._partition_count, specs))
        if partitions > MAX_RECORDS_PER_USER_OP:
            message = (
                f"Excessively large number of partitions per request: {partitions}, at most "
                f"{MAX_RECORDS_PER_USER_OP}."
            )
            return [TopicResult(s.name, ErrorCode.policy_violation, message) for s in specs]
        loop = asyncio.get_running_loop()
        started = loop.time()
        racks = {b.node_id: b.rack for b in self._view.live_brokers()}
        held = self._replicas_per_node(list(racks))
        results: dict[str, TopicResult] = {}
        planned: dict[str, _Planned] = {}
        async for spec in _sliced(specs):
            outcome = await self._plan(spec, racks, held, planned)
            if isinstance(outcome, TopicResult):
                results.setdefault(spec.name, outcome)
                continue
            planned[spec.name] = outcome
            for replicas in outcome.assignments:
                for node_id in replicas:
                    held[node_id] += 1
        if validate_only:
            async for name, plan in _sliced(planned.items()):
                results[name] = TopicResult(name, topic=self._planned_topic(plan))
        else:
            created = await self._record(
                list(planned.values()), started + timeout_ms / 1000, results
            )
            await self._wait_for_leaders(created, started + min(timeout_ms / 1000, LEADER_WAIT))
            async for name in _sliced(created):
                results[name] = TopicResult(name, topic=self._view.topic(name))
        return [results[spec.name] for spec in specs]

    async def create_topic(
        self, spec: TopicSpec, validate_only: bool, timeout_ms: int
    ) -> TopicResult:
        return (await self.create_topics([spec], validate_only, timeout_ms))[0]

    async def _plan(
        self,
        spec: TopicSpec,
        racks: dict[int, str | None],
        held: dict[int, int],
        planned: dict[str, _Planned],
    ) -> _Planned | TopicResult:
        """The topic as it would be created, or why it may not be: `racks` holds every live
        node's rack, `held` the replicas each holds with the request's topics planned so far."""
        name = spec.name
        live = list(racks)
        if name in self._node.controller.state.topics or name in planned:
            return TopicResult(
                name, ErrorCode.topic_already_exists, f"Topic '{name}' already exists."
            )
        internal = name in _INTERNAL_SETTINGS
        if internal:
            spec = self._internal_topic_spec(spec)
        problem = topic_config.validate(spec.configs)
        if problem:
            return TopicResult(name, ErrorCode.invalid_config, problem)
        if spec.assignments:
            assignments = [list(spec.assignments[i]) for i in sorted(spec.assignments)]
            error = self._check_assignments(assignments, live)
            if error:
                return TopicResult(name, ErrorCode.invalid_replica_assignment, error)
        else:
            count = spec.num_partitions
            if count == -1:
                count = int(self._node.config.broker_setting("num.partitions"))
            rf = spec.replication_factor
            if rf == -1:
                rf = int(self._node.config.broker_setting("default.replication.factor"))
            # (the request's own are checked by the handler; these hold for the settings)
            if count < 1:
                return TopicResult(
                    name,
                    ErrorCode.invalid_partitions,
                    "Number of partitions must be larger than 0.",
                )
            if rf < 1:
                return TopicResult(
                    name,
                    ErrorCode.invalid_replication_factor,
                    "Replication factor must be larger than 0.",
                )
            if rf > len(live):
                return TopicResult(
                    name,
                    ErrorCode.invalid_replication_factor,
                    f"Replication factor: {rf} larger than available brokers: {len(live)}."
                    + (f" ({_INTERNAL_SETTINGS[name][1]}, KIP-115)" if internal else ""),
                )
            # Before anything the size of the request is built (2^31-1 partitions, even
            # validate_only, grew a node to 24 GB).
            problem = self._over_budget(count * rf, held)
            if problem:
                return TopicResult(name, ErrorCode.invalid_partitions, problem)
            assignments = [r async for r in _sliced(place(racks, count, rf))]
        problem = self._over_budget_per_node(assignments, held)
        if problem:
            return TopicResult(name, ErrorCode.invalid_partitions, problem)
        configs = {k: v for k, v in spec.configs.items() if v is not None}
        return _Planned(name, str(uuid.uuid4()), assignments, configs, internal)

    async def _record(
        self, planned: list[_Planned], deadline: float, results: dict[str, TopicResult]
    ) -> list[str]:
        """Proposes the planned topics, CREATE_BATCH_BYTES of them a controller command, all
        commands at once, and returns the names of those created. The others' results go
        into `results`: a topic whose command is not applied by the deadline (the loop's
        time) is REQUEST_TIMED_OUT (it may still be created, as in Kafka), one a racing
        request recorded first TOPIC_ALREADY_EXISTS."""
        wait = max(deadline - asyncio.get_running_loop().time(), MIN_CONTROLLER_WAIT)
        batches = list(_batches(planned))
        outcomes = await asyncio.gather(
            *(
                self._node.controller.call(
                    "update_topics_create",
                    [[p.name, p.topic_id, p.assignments, p.configs, p.internal] for p in batch],
                    timeout=wait,
                )
                for batch in batches
            ),
            return_exceptions=True,
        )
        created = []
        for batch, outcome in zip(batches, outcomes, strict=True):
            if isinstance(outcome, ControllerUnavailable):
                for plan in batch:
                    results[plan.name] = TopicResult(
                        plan.name, ErrorCode.request_timed_out, str(outcome)
                    )
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                for plan, refused in zip(batch, outcome, strict=True):
                    if refused == EXISTS:
                        results[plan.name] = TopicResult(
                            plan.name,
                            ErrorCode.topic_already_exists,
                            f"Topic '{plan.name}' already exists.",
                        )
                    else:
                        created.append(plan.name)
        return created

    def _partition_count(self, spec: TopicSpec) -> int:
        if spec.assignments:
            return len(spec.assignments)
        if spec.num_partitions != -1:
            return spec.num_partitions
        setting = _INTERNAL_SETTINGS.get(spec.name, ("num.partitions", ""))[0]
        return int(self._node.config.broker_setting(setting))

    def _internal_topic_spec(self, spec: TopicSpec) -> TopicSpec:
        """__consumer_offsets and __transaction_state get Kafka's settings unless the request
        names its own, and are always compacted: only the latest record per key matters."""
        setting = self._node.config.broker_setting
        count_setting, rf_setting = _INTERNAL_SETTINGS[spec.name]
        partitions, rf = spec.num_partitions, spec.replication_factor
        if partitions == -1:
            partitions = int(setting(count_setting))
        if rf == -1:
            rf = int(setting(rf_setting))
        configs = {**spec.configs, "cleanup.policy": "compact"}
        return TopicSpec(spec.name, partitions, rf, spec.assignments, configs)

    @staticmethod
    def _planned_topic(plan: _Planned) -> TopicInfo:
        partitions = tuple(
            PartitionInfo(plan.name, i, tuple(r)) for i, r in enumerate(plan.assignments)
        )
        # validate() has refused a None value (a deletion) in a new topic's configs
        return TopicInfo(plan.name, uuid.UUID(plan.topic_id), partitions, plan.configs)

    def _over_budget(self, replicas: int, held: dict[int, int]) -> str | None:
        """The request cannot fit even spread evenly over the live nodes (`held`: what each
        holds)."""
        free = sum(self._node.budget.replicas - n for n in held.values())
        if replicas > free:
            return (
                f"{replicas} more partition replicas do not fit: the live nodes have room for "
                f"{max(free, 0)} ({self._node.budget.describe()} each)"
            )
        return None

    def _over_budget_per_node(
        self, assignments: list[list[int]], held: dict[int, int]
    ) -> str | None:
        added: dict[int, int] = {}
        for replicas in assignments:
            for node_id in replicas:
                added[node_id] = added.get(node_id, 0) + 1
        for node_id, count in sorted(added.items()):
            if held[node_id] + count > self._node.budget.replicas:
                return (
                    f"node {node_id} would hold {held[node_id] + count} partition replicas; "
                    f"it has {self._node.budget.describe()}"
                )
        return None

    def _replicas_per_node(self, nodes: list[int]) -> dict[int, int]:
        held = dict.fromkeys(nodes, 0)
        for topic in self._node.controller.state.topics.values():
            for replicas in topic["partitions"]:
                for node_id in replicas:
                    if node_id in held:
                        held[node_id] += 1
        return held

    @staticmethod
    def _check_assignments(assignments: list[list[int]], live: list[int]) -> str | None:
        sizes = {len(r) for r in assignments}
        if not assignments or 0 in sizes:
            return "Every partition needs at least one replica."
        if len(sizes) != 1:
            return "All partitions must have the same number of replicas."
        for replicas in assignments:
            if len(set(replicas)) != len(replicas):
                return f"Duplicate replicas in assignment {replicas}."
            unknown = [r for r in replicas if r not in live]
            if unknown:
                return f"Unknown or offline brokers in assignment: {unknown}."
        return None

    async def _wait_for_leaders(self, names: list[str], deadline: float) -> None:
        """Until every partition of the topics is led, or the deadline (the loop's time). A
        topic found led is not looked at again, and the next look waits for a change and at
        least LOOK_SPACING times as long as this one took (LEADER_LOOK_S at the least):
        thousands of new groups electing change the leadership hundreds of times a second,
        and looking at a thousand topics each time was a third of the loop."""
        loop = asyncio.get_running_loop()
        waiting = list(names)
        while True:
            looked = loop.time()
            waiting = [name async for name in _sliced(waiting) if not self._led(name)]
            now = loop.time()
            if not waiting or now >= deadline:
                return
            await self._node.wait_changed(min(deadline - now, 0.2))
            spacing = max(LEADER_LOOK_S, LOOK_SPACING * (now - looked))
            await asyncio.sleep(max(0.0, min(now + spacing, deadline) - loop.time()))

    def _led(self, name: str) -> bool:
        topic = self._view.topic(name)
        return topic is None or all(p.leader >= 0 for p in topic.partitions)

    async def delete_topics(self, names: list[str], timeout_ms: int) -> list[TopicResult]:
        results = []
        for name in names:
            if name not in self._node.controller.state.topics:
                results.append(
                    TopicResult(
                        name,
                        ErrorCode.unknown_topic_or_partition,
                        "This server does not host this topic.",
                    )
                )
                continue
            if self._node.controller.state.topics[name]["internal"]:
                results.append(
                    TopicResult(
                        name,
                        ErrorCode.invalid_topic_exception,
                        f"Cannot delete internal topic {name}: it holds the coordinators' "
                        "state (committed offsets, transactions).",
                    )
                )
                continue
            try:
                outcome = await self._node.controller.call("delete_topic", name)
            except ControllerUnavailable as e:
                results.append(TopicResult(name, ErrorCode.request_timed_out, str(e)))
                continue
            if outcome is not None:
                results.append(TopicResult(name, ErrorCode.unknown_topic_or_partition))
            else:
                results.append(TopicResult(name))
        return results

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[tuple[int, ...]] | None,
        validate_only: bool,
        timeout_ms: int,
    ) -> TopicResult:
        topic = self._node.controller.state.topics.get(name)
        if topic is None:
            return TopicResult(name, ErrorCode.unknown_topic_or_partition, "Unknown topic.")
        if name in _INTERNAL_SETTINGS:
            return TopicResult(
                name,
                ErrorCode.policy_violation,
                f"The partition count of {name} cannot change: a coordinator is chosen by "
                f"hashing its {_KEYED_BY[name]} over the partitions, so every "
                f"{_KEYED_BY[name]} would move to a partition that does not hold its state.",
            )
        current = len(topic["partitions"])
        if count <= current:
            return TopicResult(
                name,
                ErrorCode.invalid_partitions,
                f"Topic currently has {current} partitions, {count} would not be an increase.",
            )
        racks = {b.node_id: b.rack for b in self._view.live_brokers()}
        live = list(racks)
        rf = len(moves.original_replicas(topic, 0))  # (partition 0 may be moving)
        if assignments:
            new = [list(r) for r in assignments]
            if len(new) != count - current:
                return TopicResult(
                    name,
                    ErrorCode.invalid_replica_assignment,
                    f"Expected {count - current} assignments, got {len(new)}.",
                )
            error = self._check_assignments(new, live) or (
                None if len(new[0]) == rf else f"Replica lists must have {rf} replicas."
            )
            if error:
                return TopicResult(name, ErrorCode.invalid_replica_assignment, error)
        else:
            if rf > len(live):
                return TopicResult(
                    name,
                    ErrorCode.invalid_replication_factor,
                    f"Replication factor: {rf} larger than available brokers: {len(live)}.",
                )
            problem = self._over_budget((count - current) * rf, self._replicas_per_node(live))
            if problem:
                return TopicResult(name, ErrorCode.invalid_partitions, problem)
            placed = place(racks, count - current, rf, existing=topic["partitions"])
            new = [r async for r in _sliced(placed)]
        problem = self._over_budget_per_node(new, self._replicas_per_node(live))
        if problem:
            return TopicResult(name, ErrorCode.invalid_partitions, problem)
        if validate_only:
            return TopicResult(name)
        try:
            outcome = await self._node.controller.call("add_partitions", name, count, new)
        except ControllerUnavailable as e:
            return TopicResult(name, ErrorCode.request_timed_out, str(e))
        if outcome is not None:
            return TopicResult(
                name, ErrorCode.invalid_partitions, "The partition count changed meanwhile."
            )
        deadline = asyncio.get_running_loop().time() + min(timeout_ms / 1000, LEADER_WAIT)
        await self._wait_for_leaders([name], deadline)
        return TopicResult(name, topic=self._view.topic(name))

    async def alter_reassignments(
        self, topics: list[tuple[str, list[tuple[int, tuple[int, ...] | None]]]], timeout_ms: int
    ) -> list[list[tuple[ErrorCode, str | None]]]:
        """AlterPartitionReassignments' entries the handler accepted, in one controller command
        (at most MAX_RECORDS_PER_USER_OP entries: the request's bound), judged again where it
        applies (raftlog/controller/moves.py): a move another request changed meanwhile is
        answered as it is then. A move that would put more replicas on a node than its budget
        holds is refused first (INVALID_REPLICA_ASSIGNMENT), the request's earlier moves
        counted, as creations are. REQUEST_TIMED_OUT for every entry proposed if no commit
        comes in time (the moves may still start, as in Kafka)."""
        state = self._node.controller.state
        held = self._replicas_per_node(list(state.nodes))
        answers: list[list[tuple[ErrorCode, str | None] | None]] = []
        command: list[list[Any]] = []
        async for name, changes in _sliced(topics):
            topic = state.topics.get(name)
            judged: list[tuple[ErrorCode, str | None] | None] = []
            sent: list[list[Any]] = []
            for index, target in changes:
                problem = self._over_budget_moving(topic, index, target, held)
                judged.append(problem)
                if problem is None:
                    sent.append([index, None if target is None else list(target)])
            answers.append(judged)
            command.append([name, sent])
        recorded: Iterator[tuple[ErrorCode, str | None]] = iter(())
        if any(sent for _, sent in command):
            wait = max(timeout_ms / 1000, MIN_CONTROLLER_WAIT)
            try:
                outcomes = await self._node.controller.call(
                    "update_topics_reassign", command, timeout=wait
                )
                recorded = (_reassignment_error(o) for topic in outcomes for o in topic)
            except ControllerUnavailable as e:
                recorded = itertools.repeat((ErrorCode.request_timed_out, str(e)))
        return [[a if a is not None else next(recorded) for a in judged] for judged in answers]

    def _over_budget_moving(
        self,
        topic: dict[str, Any] | None,
        index: int,
        target: tuple[int, ...] | None,
        held: dict[int, int],
    ) -> tuple[ErrorCode, str | None] | None:
        """Why a move may not start for the replica budget, else None and the replicas it
        adds counted in `held`."""
        if target is None or topic is None or not 0 <= index < len(topic["partitions"]):
            return None
        added = [n for n in target if n not in topic["partitions"][index]]
        for node_id in added:
            if held.get(node_id, 0) + 1 > self._node.budget.replicas:
                return (
                    ErrorCode.invalid_replica_assignment,
                    f"node {node_id} would hold {held.get(node_id, 0) + 1} partition replicas; "
                    f"it has {self._node.budget.describe()}",
                )
        for node_id in added:
            held[node_id] = held.get(node_id, 0) + 1
        return None

    async def alter_topic_configs(
        self, name: str, changes: dict[str, str | None], incremental: bool, validate_only: bool
    ) -> TopicResult:
        topic = self._node.controller.state.topics.get(name)
        if topic is None:
            return TopicResult(name, ErrorCode.unknown_topic_or_partition, "Unknown topic.")
        configs = topic_config.altered(topic["configs"], changes, incremental)
        problem = topic_config.validate(configs)
        if problem:
            return TopicResult(name, ErrorCode.invalid_config, problem)
        if validate_only:
            return TopicResult(name)
        try:
            outcome = await self._node.controller.call("set_topic_configs", name, configs)
        except ControllerUnavailable as e:
            return TopicResult(name, ErrorCode.request_timed_out, str(e))
        if outcome is not None:
            return TopicResult(name, ErrorCode.unknown_topic_or_partition, "Unknown topic.")
        return TopicResult(name, topic=self._view.topic(name))


def _reassignment_error(outcome: str | None) -> tuple[ErrorCode, str | None]:
    """A reassignment command's outcome for one partition, as Kafka's controller answers it."""
    if outcome is None:
        return ErrorCode.none, None
    if outcome == moves.NO_MOVE:
        return ErrorCode.no_reassignment_in_progress, "No partition reassignment is in progress."
    if outcome.startswith(moves.INVALID):
        return ErrorCode.invalid_replica_assignment, outcome.removeprefix(moves.INVALID)
    return ErrorCode.unknown_topic_or_partition, "The topic or partition does not exist."


T = TypeVar("T")


async def _sliced(items: Iterable[T]) -> AsyncIterator[T]:
    """The items, the loop handed back (a bare yield) each time the caller's work on them has
    run for SLICE_S: a request's per-topic work reads the controller's state, which only the
    loop may, so it stays there, in slices."""
    deadline = time.perf_counter() + SLICE_S
    for i, item in enumerate(items, 1):
        yield item
        if i % _CLOCK_EVERY == 0 and time.perf_counter() >= deadline:
            await asyncio.sleep(0)
            deadline = time.perf_counter() + SLICE_S


def _batches(planned: list[_Planned]) -> Iterator[list[_Planned]]:
    """The planned topics in request order, CREATE_BATCH_BYTES a batch (a larger topic alone)."""
    batch: list[_Planned] = []
    size = 0
    for plan in planned:
        if batch and size + plan.size() > CREATE_BATCH_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(plan)
        size += plan.size()
    if batch:
        yield batch
