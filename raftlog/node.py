"""One raftlog node: mesh, controller, partition replicas, group coordinator and the work
that keeps them. Its listeners are composed around it by raftlog_app.process."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import random
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from epoch.history import HistoryJournal
from raftlog import limits, topic_config
from raftlog.broker import (
    BrokerInfo,
    ConfigEntry,
    Coordinator,
    LazyPartitions,
    LogDirInfo,
    PartitionInfo,
    ReplicaDirInfo,
    TopicInfo,
    TopicResult,
    TopicSpec,
)
from raftlog.config import BROKER_DEFAULTS, NodeConfig
from raftlog.controller import EXISTS, Controller, ControllerUnavailable
from raftlog.errors import ErrorCode
from raftlog.groups.coordinator import GroupConfig, GroupCoordinator
from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC
from raftlog.heap import HeapFreezer
from raftlog.leadership import LeadershipDirectory
from raftlog.offsets_partition import OffsetsPartition
from raftlog.partition import NodeContext, Partition
from raftlog.raft.group import RaftTimings
from raftlog.raft.mesh import Mesh
from raftlog.raft.ticker import Ticker

log = logging.getLogger(__name__)

GOSSIP_INTERVAL = 1.0
# Replicas opened in one event-loop turn (a few ms each): a thousand-partition topic opened in
# one turn stalled the loop for 5 s, and the elections of every group with it (issue 12).
OPEN_PER_TURN = 16
PRODUCER_ID_BLOCK = 1000
MAX_PRODUCER_EPOCH = 32767
STALL_WARNING = 0.3
LEADER_WAIT = 10.0


class Node:
    """Implements raftlog.broker.Broker for the Kafka handlers."""

    def __init__(self, config: NodeConfig, timings: RaftTimings | None = None) -> None:
        self.config = config
        self.node_id = config.node_id
        self.timings = timings or RaftTimings()
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._heap = HeapFreezer()  # partitions opened are frozen out of full GC passes
        self._partition_ids: dict[tuple[str, int], str] = {}
        self._tasks: list[asyncio.Task] = []
        self._reconcile_pending = False
        self._changed = asyncio.Event()
        self._producer_ids: tuple[int, int] | None = None  # [next, end) of this node's block
        self._coordinating: set[int] = set()  # __consumer_offsets partitions attached to groups

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.config
        self.budget = limits.replica_budget(
            int(cfg.broker_setting("max.partition.replicas.per.node")),
            limits.raise_open_files_limit(),
        )
        log.info("node %d: %s", self.node_id, self.budget.describe())
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        (cfg.data_dir / "data").mkdir(exist_ok=True)
        self.history = HistoryJournal(cfg.data_dir, self.node_id)
        peers = {str(n): addr for n, addr in cfg.peers.items()}
        self.mesh = Mesh(
            str(self.node_id),
            cfg.raft_listen,
            peers,
            cfg.cluster_secret.encode(),
            advertise=cfg.advertised_raft,
        )
        self.mesh.on_new_peer.append(self._peer_joined)
        await self.mesh.start()
        self.ticker = Ticker()
        self.ticker.start()
        self.leadership = LeadershipDirectory(self.node_id, self.mesh)
        self.ctx = NodeContext(self.node_id, self.mesh, self.ticker, self.timings, self.history)
        self.groups = GroupCoordinator(self.node_id, self._group_config(None))
        self.controller = Controller(
            self.node_id,
            cfg.node_ids,
            cfg.data_dir / "controller",
            self.mesh,
            self.ticker,
            self.timings,
            self._controller_changed,
        )
        self._reconcile()
        self._tasks = [
            asyncio.create_task(self._register()),
            asyncio.create_task(self._gossip()),
            asyncio.create_task(self._retention()),
            asyncio.create_task(self._compaction()),
            asyncio.create_task(self._lag_monitor()),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.groups.close()
        for partition in self.partitions.values():
            partition.close()
        self.controller.close()
        self.ticker.stop()
        await self.mesh.close()
        self.history.close()

    async def hand_over_leadership(self, timeout: float = 5.0) -> None:
        """Transfers every group this node leads to a caught-up follower before leaving, so
        clients see one clean leader change instead of an election timeout."""
        groups = [p.group for p in self.partitions.values()] + [self.controller.group]
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            leading = [g for g in groups if g.is_leader and g.connected_peers()]
            if not leading:
                return
            for group in leading:
                group.transfer_leadership()
            await asyncio.sleep(0.2)
        log.warning("still leading %d groups after %.0fs; leaving anyway", len(leading), timeout)

    # --- controller state -> local replicas ----------------------------------------------------

    def _peer_joined(self, peer: str, address: tuple[str, int]) -> None:
        """A node this one did not know connected with the cluster secret: it is joining."""
        if peer not in self.controller.group.members():
            log.info("node %s (%s:%d) is joining the cluster", peer, *address)
            self._tasks.append(asyncio.create_task(self._admit(int(peer))))

    async def _admit(self, node_id: int) -> None:
        for _ in range(30):
            if str(node_id) in self.controller.group.members():
                return
            try:
                await self.controller.add_member(node_id)
                return
            except ControllerUnavailable:
                await asyncio.sleep(1.0)
        log.warning("node %d could not be added to the controller group", node_id)

    def _controller_changed(self) -> None:
        self._changed.set()
        for node_id, info in self.controller.state.nodes.items():
            if info.get("raft"):
                self.mesh.add_peer(str(node_id), tuple(info["raft"]))
        if not self._reconcile_pending:
            self._reconcile_pending = True
            asyncio.get_running_loop().call_soon(self._reconcile)

    def _reconcile(self) -> None:
        """Creates the replicas the controller assigns here and drops the ones it no longer does."""
        self._reconcile_pending = False
        offsets_topic = self.controller.state.topics.get(OFFSETS_TOPIC)
        if offsets_topic is not None:
            # a group's partition follows the topic's real partition count
            self.groups.config.num_partitions = len(offsets_topic["partitions"])
        wanted: dict[tuple[str, int], tuple[str, tuple[int, ...], dict[str, str]]] = {}
        for name, topic in self.controller.state.topics.items():
            for index, replicas in enumerate(topic["partitions"]):
                if self.node_id in replicas:
                    wanted[(name, index)] = (topic["id"], tuple(replicas), topic["configs"])
        for key in list(self.partitions):
            if key not in wanted or wanted[key][0] != self._partition_ids[key]:
                self._drop_partition(key)
        opened = 0
        for key, (topic_id, replicas, configs) in wanted.items():
            if key not in self.partitions:
                if opened == OPEN_PER_TURN:  # the rest in later loop turns
                    self._reconcile_pending = True
                    self.ticker.elections.held = True
                    asyncio.get_running_loop().call_soon(self._reconcile)
                    return
                self._open_partition(key, topic_id, replicas, configs)
                opened += 1
            else:
                settings = self._settings(configs)
                if settings != self.partitions[key].settings:
                    self.partitions[key].apply_settings(settings)
        if self.ticker.elections.held or opened:
            self._heap.opened()
        self.ticker.elections.held = False

    def _partition_dir(self, key: tuple[str, int]) -> Path:
        return self.config.data_dir / "data" / f"{key[0]}-{key[1]}"

    def _open_partition(
        self,
        key: tuple[str, int],
        topic_id: str,
        replicas: tuple[int, ...],
        configs: dict[str, str],
    ) -> None:
        directory = self._partition_dir(key)
        id_file = directory / "topic_id"
        if directory.exists() and (not id_file.exists() or id_file.read_text() != topic_id):
            shutil.rmtree(directory)  # left over from a deleted topic of the same name
        directory.mkdir(parents=True, exist_ok=True)
        id_file.write_text(topic_id)
        self.partitions[key] = Partition(
            self.ctx,
            key[0],
            key[1],
            f"{topic_id}/{key[1]}",
            directory,
            replicas,
            self._settings(configs),
            self._partition_changed,
        )
        self._partition_ids[key] = topic_id

    def _settings(self, configs: dict[str, str]) -> dict[str, str]:
        defaults = self.config.topic_defaults()
        return {
            name: topic_config.value(name, configs, defaults)
            for name in topic_config.TOPIC_SETTINGS
        }

    def _drop_partition(self, key: tuple[str, int]) -> None:
        partition = self.partitions.pop(key)
        self._heap.dropped()
        if key[0] == OFFSETS_TOPIC and key[1] in self._coordinating:
            self._coordinating.discard(key[1])
            self.groups.detach(key[1])
        group = partition.group.name
        partition.close()
        self.leadership.forget(group)
        del self._partition_ids[key]
        shutil.rmtree(self._partition_dir(key), ignore_errors=True)

    def _partition_changed(self, partition: Partition) -> None:
        group = partition.group
        leader = int(group.leader_id) if group.leader_id is not None else None
        self.leadership.observe(group.name, leader, group.term, self._isr(partition))
        if partition.topic == OFFSETS_TOPIC:
            self._coordinate(partition)
        self._changed.set()

    def _coordinate(self, partition: Partition) -> None:
        """The coordinator of a group is the leader of its __consumer_offsets partition."""
        index = partition.index
        if partition.term_committed and index not in self._coordinating:
            self._coordinating.add(index)
            self.groups.attach(index, OffsetsPartition(partition))
        elif not partition.is_leader and index in self._coordinating:
            self._coordinating.discard(index)
            self.groups.detach(index)

    def _group_config(self, offsets_topic: dict | None) -> GroupConfig:
        setting = self.config.broker_setting
        partitions = (
            len(offsets_topic["partitions"])
            if offsets_topic is not None
            else int(setting("offsets.topic.num.partitions"))
        )
        return GroupConfig(
            num_partitions=partitions,
            initial_rebalance_delay_ms=int(setting("group.initial.rebalance.delay.ms")),
            min_session_timeout_ms=int(setting("group.min.session.timeout.ms")),
            max_session_timeout_ms=int(setting("group.max.session.timeout.ms")),
            offset_metadata_max_bytes=int(setting("offset.metadata.max.bytes")),
            offsets_retention_minutes=int(setting("offsets.retention.minutes")),
        )

    def _isr(self, partition: Partition) -> tuple[int, ...]:
        """The leader's view of which replicas hold everything committed; a follower's guess."""
        group = partition.group
        if not group.is_leader:
            return tuple(r for r in partition.replicas if self.leadership.alive(r))
        matches = group.match_indexes()
        connected = group.connected_peers()
        commit = group.commit_index
        return tuple(
            r
            for r in partition.replicas
            if r == self.node_id or (str(r) in connected and matches.get(str(r), 0) >= commit)
        )

    # --- background work -------------------------------------------------------------------------

    async def _register(self) -> None:
        host, port = self.config.advertised_kafka
        while True:
            try:
                await self.controller.call(
                    "register_node",
                    self.node_id,
                    host,
                    port,
                    self.config.rack,
                    list(self.config.advertised_raft),
                )
                break
            except ControllerUnavailable:
                await asyncio.sleep(0.5)
        while not self.controller.state.cluster_id:
            try:
                cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
                await self.controller.call("init_cluster", cluster_id)
            except ControllerUnavailable:
                await asyncio.sleep(0.5)

    async def _gossip(self) -> None:
        while True:
            await asyncio.sleep(GOSSIP_INTERVAL)
            for partition in self.partitions.values():
                if partition.is_leader:
                    self._partition_changed(partition)
            self.leadership.announce()

    async def _retention(self) -> None:
        interval = self.config.broker_setting("log.retention.check.interval.ms") / 1000
        while True:
            await asyncio.sleep(interval)
            for partition in list(self.partitions.values()):
                try:
                    partition.apply_retention()
                except Exception:
                    log.exception("retention of %s-%d failed", partition.topic, partition.index)

    async def _compaction(self) -> None:
        interval = self.config.broker_setting("log.cleaner.backoff.ms") / 1000
        while True:
            await asyncio.sleep(interval)
            for partition in list(self.partitions.values()):
                try:
                    await partition.compact()
                except Exception:
                    log.exception("compaction of %s-%d failed", partition.topic, partition.index)

    async def _lag_monitor(self) -> None:
        """Warns when the event loop stalls: everything here shares it, and a stall near the
        election timeout costs leaderships."""
        loop = asyncio.get_running_loop()
        last_warning = 0.0
        while True:
            start = loop.time()
            await asyncio.sleep(0.1)
            lag = loop.time() - start - 0.1
            if lag > STALL_WARNING and loop.time() - last_warning > 10:
                last_warning = loop.time()
                log.warning("event loop stalled for %.2fs", lag)

    async def wait_changed(self, timeout: float) -> None:
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    # --- Broker facade ---------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self.controller.state.cluster_id

    def controller_id(self) -> int:
        return self.controller.leader_id

    def registered_nodes(self) -> dict[int, dict]:
        return dict(self.controller.state.nodes)

    def live_brokers(self) -> list[BrokerInfo]:
        return self._brokers(self.leadership.alive)

    def client_brokers(self) -> list[BrokerInfo]:
        if self.leadership.in_majority(self.controller.state.nodes):
            return self.live_brokers()
        # Cut off from its majority: it names the others and not itself, so a client that
        # asks only the brokers it is connected to drops this one and asks them who leads
        # (librdkafka kept asking the isolated old leader, which answered "no leader",
        # until the heal: fault suite, isolate_leader).
        return self._brokers(lambda node_id: node_id != self.node_id)

    def _brokers(self, wanted: Callable[[int], bool]) -> list[BrokerInfo]:
        return [
            BrokerInfo(node_id, info["host"], info["port"], info.get("rack"))
            for node_id, info in sorted(self.controller.state.nodes.items())
            if wanted(node_id)
        ]

    def topics(self) -> dict[str, TopicInfo]:
        return {name: self._topic_info(name, t) for name, t in self.controller.state.topics.items()}

    def topic(self, name: str) -> TopicInfo | None:
        topic = self.controller.state.topics.get(name)
        return self._topic_info(name, topic) if topic is not None else None

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        wanted = str(topic_id)
        for name, topic in self.controller.state.topics.items():
            if topic["id"] == wanted:
                return self._topic_info(name, topic)
        return None

    def local_partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    @property
    def fetch_max_bytes(self) -> int:
        return int(self.config.broker_setting("fetch.max.bytes"))

    @property
    def auto_create_topics(self) -> bool:
        return bool(self.config.broker_setting("auto.create.topics.enable"))

    def _topic_info(self, name: str, topic: dict) -> TopicInfo:
        assigned = tuple(topic["partitions"])
        topic_id = topic["id"]
        partitions = LazyPartitions(
            lambda i: self.partition_info(name, topic_id, i, tuple(assigned[i])), len(assigned)
        )
        return TopicInfo(
            name, uuid.UUID(topic_id), partitions, dict(topic["configs"]), topic["internal"]
        )

    def partition_info(
        self, name: str, topic_id: str, index: int, replicas: tuple[int, ...]
    ) -> PartitionInfo:
        group = f"{topic_id}/{index}"
        known = self.leadership.lookup(group)
        local = self.partitions.get((name, index))
        offline = tuple(r for r in replicas if not self.leadership.alive(r))
        if known is None:
            return PartitionInfo(name, index, replicas, offline=offline)
        leader = known.leader
        electing = local is not None and local.group.leader_id is None
        if electing or not self.leadership.alive(leader):
            leader = -1
        isr = tuple(r for r in known.isr if r not in offline) or tuple(
            r for r in replicas if r not in offline
        )
        return PartitionInfo(name, index, replicas, leader, known.term, isr, offline)

    async def create_topics(
        self, specs: list[TopicSpec], validate_only: bool, timeout_ms: int
    ) -> list[TopicResult]:
        results = []
        for spec in specs:
            results.append(await self._create_topic(spec, validate_only, timeout_ms))
        return results

    async def _create_topic(
        self, spec: TopicSpec, validate_only: bool, timeout_ms: int
    ) -> TopicResult:
        name = spec.name
        if name in self.controller.state.topics:
            return TopicResult(
                name, ErrorCode.topic_already_exists, f"Topic '{name}' already exists."
            )
        internal = name == OFFSETS_TOPIC
        if internal:
            spec = self._offsets_topic_spec(spec)
        problem = topic_config.validate(spec.configs)
        if problem:
            return TopicResult(name, ErrorCode.invalid_config, problem)
        live = [b.node_id for b in self.live_brokers()]
        if spec.assignments:
            assignments = [list(spec.assignments[i]) for i in sorted(spec.assignments)]
            error = self._check_assignments(assignments, live)
            if error:
                return TopicResult(name, ErrorCode.invalid_replica_assignment, error)
        else:
            count = spec.num_partitions
            if count == -1:
                count = int(self.config.broker_setting("num.partitions"))
            rf = spec.replication_factor
            if rf == -1:
                rf = int(self.config.broker_setting("default.replication.factor"))
            if rf > len(live):
                return TopicResult(
                    name,
                    ErrorCode.invalid_replication_factor,
                    f"Replication factor: {rf} larger than available brokers: {len(live)}."
                    + (" (offsets.topic.replication.factor, KIP-115)" if internal else ""),
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
            outcome = await self.controller.call(
                "create_topic", name, topic_id, assignments, dict(spec.configs), internal
            )
        except ControllerUnavailable as e:
            return TopicResult(name, ErrorCode.request_timed_out, str(e))
        if outcome == EXISTS and self.controller.state.topics[name]["id"] != topic_id:
            return TopicResult(
                name, ErrorCode.topic_already_exists, f"Topic '{name}' already exists."
            )
        await self._wait_for_leaders(name, min(timeout_ms / 1000, LEADER_WAIT))
        return TopicResult(name, topic=self.topic(name))

    def _offsets_topic_spec(self, spec: TopicSpec) -> TopicSpec:
        """__consumer_offsets gets Kafka's settings unless the request names its own, and is
        always compacted: only the latest record per key matters."""
        setting = self.config.broker_setting
        partitions, rf = spec.num_partitions, spec.replication_factor
        if partitions == -1:
            partitions = int(setting("offsets.topic.num.partitions"))
        if rf == -1:
            rf = int(setting("offsets.topic.replication.factor"))
        configs = {**spec.configs, "cleanup.policy": "compact"}
        return TopicSpec(spec.name, partitions, rf, spec.assignments, configs)

    def _planned_topic(
        self, name: str, topic_id: str, assignments: list[list[int]], spec: TopicSpec
    ) -> TopicInfo:
        partitions = tuple(PartitionInfo(name, i, tuple(r)) for i, r in enumerate(assignments))
        # topic_config.validate refused null values: every config has one
        return TopicInfo(name, uuid.UUID(topic_id), partitions, dict(spec.configs))  # type: ignore[arg-type]

    def _over_budget(self, replicas: int, live: list[int]) -> str | None:
        """The request cannot fit even spread evenly over the live nodes."""
        free = sum(self.budget.replicas - n for n in self._replicas_per_node(live).values())
        if replicas > free:
            return (
                f"{replicas} more partition replicas do not fit: the live nodes have room for "
                f"{max(free, 0)} ({self.budget.describe()} each)"
            )
        return None

    def _over_budget_per_node(self, assignments: list[list[int]]) -> str | None:
        added: dict[int, int] = {}
        for replicas in assignments:
            for node_id in replicas:
                added[node_id] = added.get(node_id, 0) + 1
        held = self._replicas_per_node(list(added))
        for node_id, count in sorted(added.items()):
            if held[node_id] + count > self.budget.replicas:
                return (
                    f"node {node_id} would hold {held[node_id] + count} partition replicas; "
                    f"it has {self.budget.describe()}"
                )
        return None

    def _replicas_per_node(self, nodes: list[int]) -> dict[int, int]:
        held = dict.fromkeys(nodes, 0)
        for topic in self.controller.state.topics.values():
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
            topic = self.topic(name)
            if topic is None or all(p.leader >= 0 for p in topic.partitions):
                return
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            await self.wait_changed(min(remaining, 0.2))

    async def delete_topics(self, names: list[str], timeout_ms: int) -> list[TopicResult]:
        results = []
        for name in names:
            if name not in self.controller.state.topics:
                results.append(
                    TopicResult(
                        name,
                        ErrorCode.unknown_topic_or_partition,
                        "This server does not host this topic.",
                    )
                )
                continue
            if self.controller.state.topics[name]["internal"]:
                results.append(
                    TopicResult(
                        name,
                        ErrorCode.invalid_topic_exception,
                        f"Cannot delete internal topic {name}: it holds every group's "
                        "committed offsets.",
                    )
                )
                continue
            try:
                outcome = await self.controller.call("delete_topic", name)
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
        topic = self.controller.state.topics.get(name)
        if topic is None:
            return TopicResult(name, ErrorCode.unknown_topic_or_partition, "Unknown topic.")
        if name == OFFSETS_TOPIC:
            return TopicResult(
                name,
                ErrorCode.policy_violation,
                f"The partition count of {OFFSETS_TOPIC} cannot change: a group's coordinator "
                "is chosen by hashing its id over the partitions, so every group would move "
                "to a partition that does not hold its offsets.",
            )
        current = len(topic["partitions"])
        if count <= current:
            return TopicResult(
                name,
                ErrorCode.invalid_partitions,
                f"Topic currently has {current} partitions, {count} would not be an increase.",
            )
        live = [b.node_id for b in self.live_brokers()]
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
            outcome = await self.controller.call("add_partitions", name, count, new)
        except ControllerUnavailable as e:
            return TopicResult(name, ErrorCode.request_timed_out, str(e))
        if outcome is not None:
            return TopicResult(
                name, ErrorCode.invalid_partitions, "The partition count changed meanwhile."
            )
        await self._wait_for_leaders(name, min(timeout_ms / 1000, LEADER_WAIT))
        return TopicResult(name, topic=self.topic(name))

    async def init_producer_id(
        self, transactional_id: str | None, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        if transactional_id is not None:
            return ErrorCode.invalid_request, -1, -1
        if producer_id >= 0 and 0 <= producer_epoch < MAX_PRODUCER_EPOCH:
            return ErrorCode.none, producer_id, producer_epoch + 1
        if self._producer_ids is None or self._producer_ids[0] >= self._producer_ids[1]:
            try:
                first = await self.controller.call("allocate_producer_ids", PRODUCER_ID_BLOCK)
            except ControllerUnavailable:
                return ErrorCode.coordinator_not_available, -1, -1
            self._producer_ids = (first, first + PRODUCER_ID_BLOCK)
        pid = self._producer_ids[0]
        self._producer_ids = (pid + 1, self._producer_ids[1])
        return ErrorCode.none, pid, 0

    async def find_coordinator(self, key: str, key_type: int) -> Coordinator:
        if key_type != 0:
            return Coordinator(
                ErrorCode.invalid_request, message="transactions are not supported by raftlog"
            )
        if not key:
            return Coordinator(ErrorCode.invalid_request, message="empty group id")
        topic = self.controller.state.topics.get(OFFSETS_TOPIC)
        if topic is None:
            result = await self._create_topic(TopicSpec(OFFSETS_TOPIC), False, 5000)
            topic = self.controller.state.topics.get(OFFSETS_TOPIC)
            if topic is None:
                return Coordinator(ErrorCode.coordinator_not_available, message=result.message)
        index = self.groups.partition_for(key)
        info = self.partition_info(
            OFFSETS_TOPIC, topic["id"], index, tuple(topic["partitions"][index])
        )
        node = self.controller.state.nodes.get(info.leader)
        if info.leader < 0 or node is None:
            return Coordinator(
                ErrorCode.coordinator_not_available,
                message=f"{OFFSETS_TOPIC} partition {index} has no leader yet",
            )
        return Coordinator(ErrorCode.none, info.leader, node["host"], node["port"])

    async def alter_topic_configs(
        self, name: str, changes: dict[str, str | None], incremental: bool, validate_only: bool
    ) -> TopicResult:
        topic = self.controller.state.topics.get(name)
        if topic is None:
            return TopicResult(name, ErrorCode.unknown_topic_or_partition, "Unknown topic.")
        configs: dict[str, str | None] = dict(topic["configs"]) if incremental else {}
        for key, value in changes.items():
            if value is None and incremental:
                configs.pop(key, None)
            else:
                configs[key] = value
        problem = topic_config.validate(configs)
        if problem:
            return TopicResult(name, ErrorCode.invalid_config, problem)
        if validate_only:
            return TopicResult(name)
        try:
            outcome = await self.controller.call("set_topic_configs", name, configs)
        except ControllerUnavailable as e:
            return TopicResult(name, ErrorCode.request_timed_out, str(e))
        if outcome is not None:
            return TopicResult(name, ErrorCode.unknown_topic_or_partition, "Unknown topic.")
        return TopicResult(name, topic=self.topic(name))

    def log_dirs(self) -> list[LogDirInfo]:
        path = self.config.data_dir / "data"
        usage = shutil.disk_usage(path)
        replicas = tuple(
            ReplicaDirInfo(
                topic,
                index,
                sum(s.size for s in p.log.segments()),
                max(0, p.high_watermark - p.log_end_offset),
            )
            for (topic, index), p in sorted(self.partitions.items())
        )
        return [LogDirInfo(str(path), replicas, usage.total, usage.free)]

    def topic_configs(self, name: str) -> list[ConfigEntry] | None:
        topic = self.controller.state.topics.get(name)
        if topic is None:
            return None
        return topic_config.effective(topic["configs"], self.config.topic_defaults())

    def broker_configs(self, node_id: int) -> list[ConfigEntry] | None:
        if node_id not in self.controller.state.nodes and node_id != self.node_id:
            return None
        entries = [
            ConfigEntry("broker.id", str(node_id), topic_config.STATIC_BROKER, read_only=True)
        ]
        for name, default in BROKER_DEFAULTS.items():
            value = self.config.broker.get(name, default)
            source = (
                topic_config.STATIC_BROKER if name in self.config.broker else topic_config.DEFAULT
            )
            text = str(value).lower() if isinstance(value, bool) else str(value)
            entries.append(ConfigEntry(name, text, source, read_only=True))
        return entries


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
