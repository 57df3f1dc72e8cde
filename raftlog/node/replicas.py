"""The controller's state made local: the replicas it assigns here opened (a few a loop turn),
the ones it no longer does dropped with their files, settings applied as they change, and the
coordinators attached to the `__consumer_offsets` and `__transaction_state` partitions this node
leads."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path
from typing import Any

from epoch import history
from epoch.history import HistoryJournal
from raftlog.cluster.leadership import LeadershipDirectory
from raftlog.common.heap import HeapFreezer
from raftlog.config import topic_config
from raftlog.config.node_config import NodeConfig
from raftlog.controller import Controller, moves
from raftlog.groups.coordinator import GroupCoordinator
from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC
from raftlog.partition import replica_dir
from raftlog.partition.base import NodeContext
from raftlog.partition.offsets_partition import OffsetsPartition
from raftlog.partition.partition import Partition
from raftlog.raft.elections import ElectionBudget
from raftlog.share.manager import ShareManager
from raftlog.txn.coordinator import TOPIC as TXN_TOPIC
from raftlog.txn.coordinator import TxnCoordinator

# Replicas opened in one event-loop turn (a few ms each): a thousand-partition topic opened in
# one turn stalled the loop for 5 s, and the elections of every group with it (issue 12).
OPEN_PER_TURN = 16

PartitionSpec = tuple[str, tuple[int, ...], dict[str, str]]  # topic id, replicas, configs
ToOpen = collections.deque[tuple[tuple[str, int], PartitionSpec]]


def bootstrap_voters(topic: dict[str, Any], index: int) -> tuple[int, ...]:
    """The voters a replica of the partition's Raft group starts with when it opens with no
    Raft state of its own: the partition's replicas, or while it moves the replicas from
    before the move (its full set minus the replicas being added). A replica opened on a
    node the move adds so starts as a non-voter; only the leader's configuration change
    makes it a voter. (`topic`: the controller's topic dict.)"""
    return tuple(moves.original_replicas(topic, index))


class LocalReplicas:
    """Node's replicas (mixed into Node, which sets these parts up in __init__ and start)."""

    node_id: int
    config: NodeConfig
    partitions: dict[tuple[str, int], Partition]
    controller: Controller
    ctx: NodeContext
    history: HistoryJournal
    leadership: LeadershipDirectory
    elections: ElectionBudget
    groups: GroupCoordinator
    transactions: TxnCoordinator
    share: ShareManager
    _heap: HeapFreezer
    _partition_ids: dict[tuple[str, int], str]
    _to_open: ToOpen
    _opening: bool
    _reconcile_pending: bool
    _changed: asyncio.Event
    _coordinating: set[int]
    _txn_coordinating: set[int]
    _gossiped_quiet: set[tuple[str, int]]

    def in_sync_replicas(self, partition: Partition) -> tuple[int, ...]:
        raise NotImplementedError  # Node's

    def _reconcile(self) -> None:
        """Creates the replicas the controller assigns here and drops the ones it no longer does."""
        self._reconcile_pending = False
        self.groups.share_groups.topics_changed()  # a share group's topic grew or went
        offsets_topic = self.controller.state.topics.get(OFFSETS_TOPIC)
        if offsets_topic is not None:
            # a group's partition follows the topic's real partition count
            self.groups.config.num_partitions = len(offsets_topic["partitions"])
        txn_topic = self.controller.state.topics.get(TXN_TOPIC)
        if txn_topic is not None:
            self.transactions.num_partitions = len(txn_topic["partitions"])
        wanted: dict[tuple[str, int], PartitionSpec] = {}
        for name, topic in self.controller.state.topics.items():
            for index, replicas in enumerate(topic["partitions"]):
                if self.node_id in replicas:
                    wanted[(name, index)] = (topic["id"], tuple(replicas), topic["configs"])
        for key in list(self.partitions):
            if key not in wanted or wanted[key][0] != self._partition_ids[key]:
                self._drop_partition(key)
        to_open: ToOpen = collections.deque()
        for key, spec in wanted.items():
            if key not in self.partitions:
                to_open.append((key, spec))
            else:
                partition = self.partitions[key]
                partition.replicas = spec[
                    1
                ]  # a move changes the set (raftlog/cluster/reassignment.py)
                settings = self._settings(spec[2])
                if settings != partition.settings:
                    partition.apply_settings(settings)
        self._to_open = to_open
        if not self._opening:  # else the turn already scheduled takes the new list
            self._open_some()

    def _open_some(self) -> None:
        """Opens the next OPEN_PER_TURN missing replicas, and the rest in later loop turns
        (elections held meanwhile). Each turn once went over every replica the controller
        assigns, open or not, and compared its settings: at 3,000 partitions that was 190
        turns over 3,000 replicas, seconds of the loop while the new groups elected."""
        self._opening = False
        opened = 0
        while self._to_open:
            if opened == OPEN_PER_TURN:
                self.elections.held = True
                self._opening = True
                asyncio.get_running_loop().call_soon(self._open_some)
                return
            key, (topic_id, replicas, configs) = self._to_open.popleft()
            topic = self.controller.state.topics.get(key[0])
            if topic is not None and topic["id"] == topic_id and key not in self.partitions:
                voters = bootstrap_voters(topic, key[1])
                self._open_partition(key, topic_id, replicas, voters, configs)
                opened += 1
        if self.elections.held or opened:
            self._heap.opened()
        self.elections.held = False

    def _partition_dir(self, key: tuple[str, int]) -> Path:
        return self.config.data_dir / "data" / f"{key[0]}-{key[1]}"

    def _open_partition(
        self,
        key: tuple[str, int],
        topic_id: str,
        replicas: tuple[int, ...],
        voters: tuple[int, ...],
        configs: dict[str, str],
    ) -> None:
        """`replicas`: the partition's replica set (its full set while it moves); `voters`:
        its group's bootstrap voters (bootstrap_voters), for the Partition to start its Raft
        configuration from once it takes them."""
        directory = self._partition_dir(key)
        reason = "new" if not directory.exists() else None
        if directory.exists() and not replica_dir.reusable(directory, topic_id):
            replica_dir.remove(directory)  # of a deleted topic of the same name, or dropped
            reason = "stale"
        if reason is not None:
            # A replica that starts from nothing: the audit follows it apart from any
            # earlier one this node dropped (its high watermark starts again from 0).
            self.history.write(
                history.ReplicaCreated(history.now_ms(), self.node_id, *key, 0, reason)
            )
        directory.mkdir(parents=True, exist_ok=True)
        (directory / replica_dir.TOPIC_ID).write_text(topic_id)
        self.partitions[key] = Partition(
            self.ctx,
            key[0],
            key[1],
            f"{topic_id}/{key[1]}",
            directory,
            replicas,
            self._settings(configs),
            self._partition_changed,
            voters,
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
        self._gossiped_quiet.discard(key)
        self._heap.dropped()
        self.share.forget_partition(key)
        if key[0] == OFFSETS_TOPIC and key[1] in self._coordinating:
            self._coordinating.discard(key[1])
            self.groups.detach(key[1])
        if key[0] == TXN_TOPIC and key[1] in self._txn_coordinating:
            self._txn_coordinating.discard(key[1])
            self.transactions.detach(key[1])
        group = partition.group.name
        term = partition.group.term
        log_end, last_epoch = partition.log.log_end_offset, partition.group.raft.last_term()
        partition.close()
        topic = self.controller.state.topics.get(key[0])
        moved = topic is not None and topic["id"] == self._partition_ids[key]
        if moved:
            # Moved off this node, the partition lives on: what is known of its leader stays.
            self.leadership.not_hosted(group)
        else:
            self.leadership.forget(group)
        del self._partition_ids[key]
        directory = self._partition_dir(key)
        replica_dir.mark_dropped(directory)
        # Before the files go: a replica opened here later is a new one (epoch/history.py).
        self.history.write(
            history.ReplicaDropped(
                history.now_ms(),
                self.node_id,
                *key,
                term,
                "moved" if moved else "deleted",
                log_end,
                last_epoch,
            )
        )
        replica_dir.remove(directory)

    def _partition_changed(self, partition: Partition) -> None:
        group = partition.group
        if not partition.is_leader:
            self.share.forget_partition((partition.topic, partition.index))
        leader = int(group.leader_id) if group.leader_id is not None else None
        self.leadership.observe(group.name, leader, group.term, self.in_sync_replicas(partition))
        if partition.topic == OFFSETS_TOPIC:
            self._coordinate(partition)
        elif partition.topic == TXN_TOPIC:
            self._coordinate_transactions(partition)
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

    def _coordinate_transactions(self, partition: Partition) -> None:
        """The coordinator of a transactional id is the leader of its `__transaction_state`
        partition, once its term is committed (its log then holds every decision)."""
        index = partition.index
        if partition.term_committed and index not in self._txn_coordinating:
            self._txn_coordinating.add(index)
            self.transactions.attach(index, OffsetsPartition(partition))
        elif not partition.is_leader and index in self._txn_coordinating:
            self._txn_coordinating.discard(index)
            self.transactions.detach(index)
