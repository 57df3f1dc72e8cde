"""One raftlog node: mesh, controller, partition replicas, group coordinator and the work
that keeps them. Its listeners are composed around it by raftlog_app.process."""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import dataclasses
import itertools
import logging
import time
import uuid

from epoch.history import HistoryJournal
from raftlog.cluster.controller_quorum import QuorumDescriber
from raftlog.cluster.leadership import LeadershipDirectory
from raftlog.cluster.preferred_leaders import PreferredLeaders
from raftlog.cluster.reassignment import Reassigner
from raftlog.common import limits
from raftlog.common.clock import LOOP_CLOCK
from raftlog.common.errors import ErrorCode
from raftlog.common.heap import HeapFreezer
from raftlog.common.memory_budget import MemoryBudget
from raftlog.common.mesh_calls import MeshCalls
from raftlog.config import group_config
from raftlog.config.node_config import NodeConfig
from raftlog.controller import Controller, ControllerUnavailable, moves
from raftlog.controller.ticker import Ticker
from raftlog.groups.coordinator import GroupConfig, GroupCoordinator
from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC
from raftlog.node.failure_streaks import FailureStreaks
from raftlog.node.loop_stall import LoopStallMonitor
from raftlog.node.producer_ids import ProducerIds
from raftlog.node.replicas import LocalReplicas, ToOpen
from raftlog.node.transactions import PRODUCER_HELD, VERIFY, TransactionCalls
from raftlog.partition import replica_dir
from raftlog.partition.base import NodeContext
from raftlog.partition.partition import Partition
from raftlog.raft.driver import Driver
from raftlog.raft.elections import ELECTION_BURST, ELECTIONS_PER_SECOND, ElectionBudget
from raftlog.raft.install import Installs
from raftlog.raft.mesh import Mesh
from raftlog.raft.timings import RaftTimings
from raftlog.security.authorizer import authorizer_for
from raftlog.share.manager import ShareManager
from raftlog.share.members import NO_GROUPS, ShareMembers
from raftlog.share.membership import ShareGroupSettings
from raftlog.txn.coordinator import TOPIC as TXN_TOPIC
from raftlog.txn.coordinator import TxnCoordinator, TxnSettings
from raftlog.txn.markers import Markers

log = logging.getLogger(__name__)

GOSSIP_INTERVAL = 1.0
SPREAD_VOTERS_EVERY = 2.0  # the controller leader's look at its voters' racks# Gossip rounds between two announcements of every led group. A (re)connected peer gets the
# whole view at once and every change goes out as it happens; repeated each second, the
# announcements and their decoding were a third of a node's idle CPU at 3,000 partitions.
ANNOUNCE_EVERY = 10


class Node(TransactionCalls, LocalReplicas):
    """The replicas this node holds and the work that keeps them. The Kafka handlers reach
    it through raftlog.broker.facade.BrokerFacade. Opening and dropping replicas as the
    controller assigns them is LocalReplicas' (replicas.py); transaction calls between nodes
    are TransactionCalls' (transactions.py)."""

    def __init__(
        self,
        config: NodeConfig,
        timings: RaftTimings | None = None,
        memory: MemoryBudget | None = None,
    ) -> None:
        """`memory`: the node's request memory, shared with its Kafka listeners (its own, of
        queued.max.request.bytes, if None)."""
        self.config = config
        self.memory = memory or MemoryBudget(int(config.broker_setting("queued.max.request.bytes")))
        self.node_id = config.node_id
        self.timings = dataclasses.replace(
            timings or RaftTimings(),
            learner_bytes_per_second=int(
                config.broker_setting("leader.replication.throttled.rate")
            ),
            compaction_seconds=int(config.broker_setting("raft.snapshot.interval.ms")) / 1000,
        )
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._heap = HeapFreezer()  # partitions opened are frozen out of full GC passes
        self._partition_ids: dict[tuple[str, int], str] = {}
        self._tasks: list[asyncio.Task] = []
        self._voter_change = asyncio.Lock()  # one change of the controller's voters at a time
        self._reconcile_pending = False
        # Replicas the last reconcile found missing, opened OPEN_PER_TURN a turn.
        self._to_open: ToOpen = collections.deque()
        self._opening = False  # an _open_some turn is scheduled
        self._changed = asyncio.Event()
        self._coordinating: set[int] = set()  # __consumer_offsets partitions attached to groups
        self._txn_coordinating: set[int] = set()  # __transaction_state partitions attached
        self._gossiped_quiet: set[tuple[str, int]] = set()  # led, quiet, observed since
        self.loop_stalls = LoopStallMonitor(LOOP_CLOCK)
        # Judges requests by the controller's ACLs; None without authorizer.class.name. Made
        # here so a bad setting stops the node before it starts anything.
        self.authorizer = authorizer_for(
            config.broker_setting, lambda: self.controller.state.acl_index()
        )

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.config
        self.open_files = limits.raise_open_files_limit()
        self.budget = limits.replica_budget(
            int(cfg.broker_setting("max.partition.replicas.per.node")), self.open_files
        )
        log.info("node %d: %s", self.node_id, self.budget.describe())
        if self.authorizer is None:
            log.warning(
                "no authorizer (authorizer.class.name is empty): any client that reaches a "
                "Kafka listener may read, write, delete and reconfigure every topic, group "
                "and setting, and write into another producer's transaction; set one, or "
                "start with `raftlog cluster up --secure` (docs/security.md)"
            )
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        (cfg.data_dir / "data").mkdir(exist_ok=True)
        swept = replica_dir.sweep_dropped(cfg.data_dir / "data")
        if swept:
            log.info("removed %d replicas dropped before a crash: %s", len(swept), swept)
        self.history = HistoryJournal(cfg.data_dir, self.node_id)
        peers = {str(n): addr for n, addr in cfg.peers.items()}
        self.mesh = Mesh(
            str(self.node_id),
            cfg.raft_listen,
            peers,
            cfg.cluster_secret.encode(),
            advertise=cfg.advertised_raft,
            tls=(
                (cfg.tls.server_context("required"), cfg.tls.client_context())
                if cfg.peer_tls and cfg.tls is not None
                else None
            ),
        )
        self.mesh.on_new_peer.append(self._peer_joined)
        await self.mesh.start()
        # One budget of elections for the node: its partitions' (the driver's) and the
        # controller's (its ticker's).
        self.elections = ElectionBudget(ELECTIONS_PER_SECOND, ELECTION_BURST, time.monotonic)
        self.ticker = Ticker(self.elections)
        self.ticker.start()
        self.leadership = LeadershipDirectory(self.node_id, self.mesh)
        driver = Driver(self.node_id, self.mesh, self.timings.election_min, self.elections)
        driver.start()
        self.ctx = NodeContext(
            self.node_id,
            self.mesh,
            self.timings,
            self.history,
            driver=driver,
            installs=Installs(self.mesh),
            memory=self.memory,
            heap=self._heap,
        )
        self.groups = GroupCoordinator(
            self.node_id,
            self._group_config(None),
            topic_partitions=self._partition_count,
            share_settings=self._share_settings,
            delete_share_state=self._delete_share_state,
        )
        self.share = ShareManager(
            self._group_settings,
            is_member=lambda group, member: self.share_members.check(group, member),
            incarnation=self._share_incarnation,
        )
        self.share_members = ShareMembers(
            self.node_id,
            self.mesh,
            self._coordinator_of,
            self.groups.share_member,
            self.share.member_left,
        )
        self.groups.share_groups.on_member_left.append(self.share_members.left)
        self.producer_ids = ProducerIds(lambda n: self.controller.call("allocate_producer_ids", n))
        self.calls = MeshCalls(self.mesh)
        self.markers = Markers(
            self.node_id,
            self.calls,
            lambda topic, index: self.partitions.get((topic, index)),
            self._leader_of,
            self._partition_exists,
            self._marker_written,
            self._coordinates_in,
        )
        self.transactions = TxnCoordinator(
            int(cfg.broker_setting("transaction.state.log.num.partitions")),
            self._allocate_producer_id,
            self.markers.write,
            TxnSettings(
                int(cfg.broker_setting("transaction.max.timeout.ms")),
                int(cfg.broker_setting("transactional.id.expiration.ms")),
                int(
                    cfg.broker_setting("transaction.remove.expired.transaction.cleanup.interval.ms")
                ),
                int(cfg.broker_setting("transactional.id.max.per.partition")),
            ),
            node_id=self.node_id,
            journal=self.history.write,
        )
        self.calls.serve(VERIFY, self._verify_here)
        self.calls.serve(PRODUCER_HELD, self._producer_held_here)
        self.quorum = QuorumDescriber(self.node_id, self.calls, lambda: self.controller.group)
        self.preferred_leaders = PreferredLeaders(
            self.node_id,
            self.calls,
            self._assignment,
            self._leader_of,
            lambda node_id: self.leadership.alive(node_id),
            lambda topic, index: self.partitions.get((topic, index)),
            self.in_sync_replicas,
        )
        self.controller = Controller(
            self.node_id,
            cfg.node_ids,
            cfg.data_dir / "controller",
            self.mesh,
            self.ticker,
            self.timings,
            self._controller_changed,
            int(cfg.broker_setting("controller.quorum.size")),
        )
        self.mover = Reassigner(
            self.node_id,
            lambda: self.partitions,
            lambda: self.controller.state.topics,
            self._finish_move,
        )
        self.loop_stalls.start()
        self._reconcile()
        self.mover.start()
        self._tasks = [
            asyncio.create_task(self._register()),
            asyncio.create_task(self._gossip()),
            asyncio.create_task(self._retention()),
            asyncio.create_task(self._compaction()),
            asyncio.create_task(self._spread_voters()),
        ]

    def _coordinator_of(self, group_id: str) -> int | None:
        """The node leading the group's `__consumer_offsets` partition, if it is known and up
        (NO_GROUPS: that topic does not exist yet, so no group has members)."""
        topic = self.controller.state.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return NO_GROUPS
        known = self.leadership.lookup(f"{topic['id']}/{self.groups.partition_for(group_id)}")
        if known is None or not self.leadership.alive(known.leader):
            return None
        return known.leader

    def _coordinates_in(self, index: int, epoch: int) -> bool:
        """This node leads `__transaction_state` partition `index` in term `epoch` (a marker of
        a decision taken then is still its to write: markers.py), and no newer term of it was
        announced: a leader cut off keeps its role until a newer leader reaches it, which a
        quiet partition's may not do for a while, but the newer leader's gossip comes as soon
        as the mesh reconnects (fault suite seed 2123: markers retried 3 s after the heal)."""
        partition = self.partitions.get((TXN_TOPIC, index))
        if partition is None or not partition.is_leader or partition.leader_epoch != epoch:
            return False
        known = self.controller.state.topics.get(TXN_TOPIC)
        seen = None if known is None else self.leadership.lookup(f"{known['id']}/{index}")
        return seen is None or seen.term <= epoch

    def _leader_of(self, topic: str, index: int) -> int | None:
        """The live node leading the partition, if this node knows one."""
        known = self.controller.state.topics.get(topic)
        if known is None:
            return None
        seen = self.leadership.lookup(f"{known['id']}/{index}")
        if seen is None or not self.leadership.alive(seen.leader):
            return None
        return seen.leader

    def _assignment(self, topic: str, index: int) -> tuple[int, ...] | None:
        known = self.controller.state.topics.get(topic)
        if known is None or not 0 <= index < len(known["partitions"]):
            return None
        return tuple(known["partitions"][index])

    def _partition_exists(self, topic: str, index: int) -> bool:
        known = self.controller.state.topics.get(topic)
        return known is not None and index < len(known["partitions"])

    def _share_incarnation(self, group_id: str) -> int:
        return int(self.controller.state.share_incarnations.get(group_id, 0))

    async def _delete_share_state(self, group_id: str) -> ErrorCode:
        """A deleted share group's partition states, on every leader: the controller moves
        its incarnation on, and a state of an older one is not taken up again."""
        try:
            await self.controller.call("store_share_group_deletion", group_id)
        except ControllerUnavailable:
            return ErrorCode.request_timed_out
        return ErrorCode.none

    async def _finish_move(self, topic: str, index: int, target: list[int]) -> None:
        outcome = await self.controller.call("finish_reassignment", topic, index, target)
        if outcome is not None:
            raise RuntimeError(outcome)

    async def stop(self) -> None:
        self.mover.close()
        self.loop_stalls.stop()
        for task in self._tasks:
            task.cancel()
        self.groups.close()
        self.transactions.close()
        self.calls.close()
        self.share_members.close()
        self.share.close()
        for partition in self.partitions.values():
            partition.close()
        self.controller.close()
        self.ticker.stop()
        self.ctx.driver.stop()
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
            self._tasks.append(asyncio.create_task(self.controller.admit(int(peer))))

    def _live_registered(self) -> set[int]:
        """The registered nodes this one is connected to, and itself."""
        live = {int(p) for p in self.mesh.connected_peers()} | {self.node_id}
        return live & set(self.controller.state.nodes)

    async def retire_controller_voter(self, node_id: int) -> list[str]:
        """Takes a node out of the controller's voters, a live observer taking its place
        first (`raftlog cluster decommission`); what was done, one line each."""
        async with self._voter_change:
            return await self.controller.retire_voter(node_id, self._live_registered())

    async def _spread_voters(self) -> None:
        """On the controller's leader, now and then: the voters spread over the racks, one
        swap at a time (controller/voters.py)."""
        while True:
            await asyncio.sleep(SPREAD_VOTERS_EVERY)
            if not self.controller.group.is_leader or self._voter_change.locked():
                continue
            async with self._voter_change:
                try:
                    after = await self.controller.spread_voters(self._live_registered())
                except ControllerUnavailable as e:
                    log.warning("controller voters not spread over racks yet: %s", e)
                    continue
            if after is not None:
                log.info("controller voters spread over racks: now %s", after)

    def _controller_changed(self) -> None:
        self._changed.set()
        for node_id, info in self.controller.state.nodes.items():
            if info.get("raft"):
                self.mesh.add_peer(str(node_id), tuple(info["raft"]))
        if not self._reconcile_pending:
            self._reconcile_pending = True
            asyncio.get_running_loop().call_soon(self._reconcile)

    def _group_settings(self, group_id: str) -> dict[str, str]:
        return group_config.values(
            self.controller.state.group_configs.get(group_id, {}), self.config.group_bounds()
        )

    def _share_settings(self, group_id: str) -> ShareGroupSettings:
        settings = self._group_settings(group_id)
        return ShareGroupSettings(
            heartbeat_interval_ms=int(settings[group_config.SHARE_HEARTBEAT_INTERVAL_MS]),
            session_timeout_ms=int(settings[group_config.SHARE_SESSION_TIMEOUT_MS]),
        )

    def _partition_count(self, topic: str) -> int | None:
        known = self.controller.state.topics.get(topic)
        return len(known["partitions"]) if known is not None else None

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

    def expected_in_sync(self, partition: Partition) -> tuple[int, ...]:
        """The replicas a partition is under-replicated without: its replicas as the
        controller has them now, less those a move is still adding (Kafka's KIP-352)."""
        topic = self.controller.state.topics.get(partition.topic)
        if topic is None or not 0 <= partition.index < len(topic["partitions"]):
            return partition.replicas
        adding = moves.adding_replicas(topic, partition.index)
        return tuple(r for r in topic["partitions"][partition.index] if r not in adding)

    def in_sync_replicas(self, partition: Partition) -> tuple[int, ...]:
        """The leader's view of which replicas hold everything committed; a follower's guess.
        Among the partition's replicas as the controller has them now (its full set while it
        moves), not as they were when the replica opened."""
        group = partition.group
        replicas = self._assignment(partition.topic, partition.index) or partition.replicas
        if not group.is_leader:
            return tuple(r for r in replicas if self.leadership.alive(r))
        matches = group.match_indexes()
        connected = group.connected_peers()
        commit = group.commit_index
        return tuple(
            r
            for r in replicas
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
                    {x.name: [x.advertised_host, x.advertised_port] for x in self.config.listeners},
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
        heard: set[str] = set()
        for rounds in itertools.count(1):
            await asyncio.sleep(GOSSIP_INTERVAL)
            if (now_heard := self.ctx.driver.heard()) != heard:
                # A quiet leader's in-sync replicas are the peers heard lately (a paused node
                # that resumes wakes no group): all are observed again.
                heard = now_heard
                self._gossiped_quiet.clear()
            for key, partition in self.partitions.items():
                if partition.is_leader and self._may_have_changed(key, partition):
                    self._partition_changed(partition)
            if rounds % ANNOUNCE_EVERY == 0:
                self.leadership.announce()

    def _may_have_changed(self, key: tuple[str, int], partition: Partition) -> bool:
        """A quiet group's leader, term and in-sync replicas stay as they are until something
        wakes it (a peer's node coming, going or falling silent does, FORK.md 9) or the peers
        heard change: once seen quiet it is skipped. Observing every led partition every
        second was two thirds of an idle node's CPU at 3,000 partitions (py-spy)."""
        if not partition.group.quiet:
            self._gossiped_quiet.discard(key)
            return True
        if key in self._gossiped_quiet:
            return False
        self._gossiped_quiet.add(key)
        return True

    async def _retention(self) -> None:
        interval = self.config.broker_setting("log.retention.check.interval.ms") / 1000
        failures = FailureStreaks(log, "retention")  # one line per streak, not per pass
        while True:
            await asyncio.sleep(interval)
            for key, partition in list(self.partitions.items()):
                try:
                    partition.apply_retention()
                except Exception as exc:
                    failures.failed(key, exc)
                else:
                    failures.succeeded(key)
            failures.keep(self.partitions)

    async def _compaction(self) -> None:
        interval = self.config.broker_setting("log.cleaner.backoff.ms") / 1000
        failures = FailureStreaks(log, "compaction")
        while True:
            await asyncio.sleep(interval)
            for key, partition in list(self.partitions.items()):
                try:
                    await partition.compact()
                except Exception as exc:
                    failures.failed(key, exc)
                else:
                    failures.succeeded(key)
            failures.keep(self.partitions)

    async def wait_changed(self, timeout: float) -> None:
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)
