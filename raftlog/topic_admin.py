"""Topic administration: creating topics and partitions, deleting topics, changing their
configs. Placement is checked against every node's replica budget before anything the size
of the request is built; changes go through the controller group, and creation waits (up
to LEADER_WAIT) for the new partitions to be led."""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import TYPE_CHECKING

from raftlog import topic_config
from raftlog.broker import PartitionInfo, TopicInfo, TopicResult, TopicSpec
from raftlog.controller import EXISTS, ControllerUnavailable
from raftlog.errors import ErrorCode
from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC
from raftlog.limits import MAX_RECORDS_PER_USER_OP
from raftlog.txn.coordinator import TOPIC as TXN_TOPIC

if TYPE_CHECKING:
    from raftlog.cluster_view import ClusterView
    from raftlog.node import Node

LEADER_WAIT = 10.0


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


class TopicAdmin:
    def __init__(self, node: Node, view: ClusterView) -> None:
        self._node = node
        self._view = view

    async def create_topics(
        self, specs: list[TopicSpec], validate_only: bool, timeout_ms: int
    ) -> list[TopicResult]:
        """Kafka's controller refuses a request for more than MAX_RECORDS_PER_USER_OP
        partitions in all, whole (ReplicationControlManager.validateTotalNumberOfPartitions);
        so does this, before anything is proposed."""
        partitions = sum(map(self._partition_count, specs))
        if partitions > MAX_RECORDS_PER_USER_OP:
            message = (
                f"Excessively large number of partitions per request: {partitions}, at most "
                f"{MAX_RECORDS_PER_USER_OP}."
            )
            return [TopicResult(s.name, ErrorCode.policy_violation, message) for s in specs]
        results = []
        for spec in specs:
            results.append(await self.create_topic(spec, validate_only, timeout_ms))
        return results

    async def create_topic(
        self, spec: TopicSpec, validate_only: bool, timeout_ms: int
    ) -> TopicResult:
        name = spec.name
        if name in self._node.controller.state.topics:
            return TopicResult(
                name, ErrorCode.topic_already_exists, f"Topic '{name}' already exists."
            )
        internal = name in _INTERNAL_SETTINGS
        if internal:
            spec = self._internal_topic_spec(spec)
        problem = topic_config.validate(spec.configs)
        if problem:
            return TopicResult(name, ErrorCode.invalid_config, problem)
        live = [b.node_id for b in self._view.live_brokers()]
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
            if rf > len(live):
                return TopicResult(
                    name,
                    ErrorCode.invalid_replication_factor,
                    f"Replication factor: {rf} larger than available brokers: {len(live)}."
                    + (f" ({_INTERNAL_SETTINGS[name][1]}, KIP-115)" if internal else ""),
                )
            # Before anything the size of the request is built (2^31-1 partitions, even
            # validate_only, grew a node to 24 GB).
            problem = self._over_budget(count * rf, live)
            if problem:
                return TopicResult(name, ErrorCode.invalid_partitions, problem)
            assignments = assign_replicas(sorted(live), count, rf)
        problem = self._over_budget_per_node(assignments)
        if problem:
            return TopicResult(name, ErrorCode.invalid_partitions, problem)
        topic_id = str(uuid.uuid4())
        if validate_only:
            return TopicResult(name, topic=self._planned_topic(name, topic_id, assignments, spec))
        try:
            outcome = await self._node.controller.call(
                "create_topic", name, topic_id, assignments, dict(spec.configs), internal
            )
        except ControllerUnavailable as e:
            return TopicResult(name, ErrorCode.request_timed_out, str(e))
        if outcome == EXISTS and self._node.controller.state.topics[name]["id"] != topic_id:
            return TopicResult(
                name, ErrorCode.topic_already_exists, f"Topic '{name}' already exists."
            )
        await self._wait_for_leaders(name, min(timeout_ms / 1000, LEADER_WAIT))
        return TopicResult(name, topic=self._view.topic(name))

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

    def _planned_topic(
        self, name: str, topic_id: str, assignments: list[list[int]], spec: TopicSpec
    ) -> TopicInfo:
        partitions = tuple(PartitionInfo(name, i, tuple(r)) for i, r in enumerate(assignments))
        # validate() has refused a None value (a deletion) in a new topic's configs
        configs = {k: v for k, v in spec.configs.items() if v is not None}
        return TopicInfo(name, uuid.UUID(topic_id), partitions, configs)

    def _over_budget(self, replicas: int, live: list[int]) -> str | None:
        """The request cannot fit even spread evenly over the live nodes."""
        free = sum(self._node.budget.replicas - n for n in self._replicas_per_node(live).values())
        if replicas > free:
            return (
                f"{replicas} more partition replicas do not fit: the live nodes have room for "
                f"{max(free, 0)} ({self._node.budget.describe()} each)"
            )
        return None

    def _over_budget_per_node(self, assignments: list[list[int]]) -> str | None:
        added: dict[int, int] = {}
        for replicas in assignments:
            for node_id in replicas:
                added[node_id] = added.get(node_id, 0) + 1
        held = self._replicas_per_node(list(added))
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

    async def _wait_for_leaders(self, name: str, timeout: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            topic = self._view.topic(name)
            if topic is None or all(p.leader >= 0 for p in topic.partitions):
                return
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            await self._node.wait_changed(min(remaining, 0.2))

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
        live = [b.node_id for b in self._view.live_brokers()]
        rf = len(topic["partitions"][0])
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
            problem = self._over_budget((count - current) * rf, live)
            if problem:
                return TopicResult(name, ErrorCode.invalid_partitions, problem)
            new = assign_replicas(sorted(live), count - current, rf, first_partition=current)
        problem = self._over_budget_per_node(new)
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
        await self._wait_for_leaders(name, min(timeout_ms / 1000, LEADER_WAIT))
        return TopicResult(name, topic=self._view.topic(name))

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


def assign_replicas(
    brokers: list[int], partitions: int, rf: int, first_partition: int = 0
) -> list[list[int]]:
    """Kafka's rack-unaware placement: replicas of successive partitions start on successive
    brokers from a random first one, so leaders and load spread evenly."""
    start = random.randrange(len(brokers))
    return [
        [brokers[(start + p + i) % len(brokers)] for i in range(rf)]
        for p in range(first_partition, first_partition + partitions)
    ]
