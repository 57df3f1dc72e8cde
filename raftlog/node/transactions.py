"""A node's part in transactions that span nodes: KIP-890's verification of a transactional
batch's partition, and what the coordinators hold of a producer id (for a client's
WriteTxnMarkers), answered here or asked of the coordinator's node over the mesh; producer
ids from the controller's blocks; and the markers this node writes, in its history."""

from __future__ import annotations

import asyncio
from typing import Any

from epoch import history
from epoch.history import HistoryJournal
from raftlog.common.errors import ErrorCode
from raftlog.common.mesh_calls import MeshCalls
from raftlog.controller import Controller, ControllerUnavailable
from raftlog.groups.coordinator import GroupCoordinator
from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC
from raftlog.node.producer_ids import ProducerIds
from raftlog.partition.partition import Partition
from raftlog.txn.coordinator import TOPIC as TXN_TOPIC
from raftlog.txn.coordinator import Held, TxnCoordinator
from raftlog.txn.markers import MarkerWrite

VERIFY = "txn-verify"  # [txn id, producer id, epoch, topic, partition] -> error code
VERIFY_TIMEOUT_S = 5.0
# [producer id, topic, partition, [__transaction_state partitions]] -> None (cannot say),
# [] (no id of theirs uses the producer) or [epoch, running] (TxnCoordinator.producer_held)
PRODUCER_HELD = "txn-producer"


class TransactionCalls:
    """Node's transaction calls (mixed into Node, which sets these parts up in start)."""

    node_id: int
    partitions: dict[tuple[str, int], Partition]
    controller: Controller
    history: HistoryJournal
    groups: GroupCoordinator
    transactions: TxnCoordinator
    calls: MeshCalls
    producer_ids: ProducerIds

    def _leader_of(self, topic: str, index: int) -> int | None:
        raise NotImplementedError  # Node's

    def _marker_written(self, marker: MarkerWrite, offset: int, term: int) -> None:
        if marker.topic == OFFSETS_TOPIC:
            self.groups.end_transaction(marker.partition, marker.producer_id, marker.commit)
        self.history.write(
            history.TxnMarker(
                time_ms=history.now_ms(),
                node=self.node_id,
                topic=marker.topic,
                partition=marker.partition,
                term=term,
                producer_id=marker.producer_id,
                producer_epoch=marker.producer_epoch,
                commit=int(marker.commit),
                marker_offset=offset,
                decision_partition=marker.decision_partition,
                decision_offset=marker.decision_offset,
                coordinator_epoch=marker.coordinator_epoch,
            )
        )

    def transaction_coordinator(self, transactional_id: str) -> int | None:
        """The node leading the transactional id's `__transaction_state` partition."""
        return self._leader_of(TXN_TOPIC, self.transactions.partition_for(transactional_id))

    async def _allocate_producer_id(self) -> int | None:
        try:
            return await self.producer_ids.allocate()
        except ControllerUnavailable:
            return None

    async def verify_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str, index: int
    ) -> ErrorCode:
        """KIP-890's check before a transactional batch goes into a log: its coordinator, here
        or asked over the mesh, says whether the producer's transaction includes the
        partition. Asked only for a producer's first batch of a transaction on the partition
        (Kafka's verification guard): once one is in the log, the transaction is open there
        under that epoch until its marker, and the coordinator had vouched for it."""
        local = self.partitions.get((topic, index))
        if local is not None and local.is_leader and local.transaction_open(producer_id, epoch):
            return ErrorCode.none
        coordinator = self.transaction_coordinator(transactional_id)
        if coordinator == self.node_id:
            return self.transactions.verify(transactional_id, producer_id, epoch, topic, index)
        if coordinator is None:
            return ErrorCode.coordinator_not_available
        args = [transactional_id, producer_id, epoch, topic, index]
        answer = await self.calls.call(str(coordinator), VERIFY, args, VERIFY_TIMEOUT_S)
        if not isinstance(answer, int):
            return ErrorCode.coordinator_not_available
        try:
            return ErrorCode(answer)
        except ValueError:
            return ErrorCode.unknown_server_error

    async def _verify_here(self, _peer: str, args: list[Any]) -> int:
        match args:
            case [str(txn_id), int(pid), int(epoch), str(topic), int(index)]:
                return int(self.transactions.verify(txn_id, pid, epoch, topic, index))
        return int(ErrorCode.invalid_request)

    async def producer_held(
        self, producer_id: int, topic: str, index: int
    ) -> tuple[ErrorCode, Held | None]:
        """What the transaction coordinators hold of a producer id (for a client's
        WriteTxnMarkers): every `__transaction_state` partition's leader is asked, here or
        over the mesh, since the marker names the producer and not its transactional id.
        COORDINATOR_NOT_AVAILABLE when one cannot say (no leader, not loaded, no answer)."""
        txn_topic = self.controller.state.topics.get(TXN_TOPIC)
        if txn_topic is None:
            return ErrorCode.none, None  # no transaction was ever coordinated
        by_leader: dict[int, list[int]] = {}
        for i in range(len(txn_topic["partitions"])):
            leader = self._leader_of(TXN_TOPIC, i)
            if leader is None:
                return ErrorCode.coordinator_not_available, None
            by_leader.setdefault(leader, []).append(i)
        answers = await asyncio.gather(
            *(
                self._producer_held_at(leader, indexes, producer_id, topic, index)
                for leader, indexes in by_leader.items()
            )
        )
        if not all(answered for answered, _ in answers):
            return ErrorCode.coordinator_not_available, None
        found = [held for _, held in answers if held is not None]
        if not found:
            return ErrorCode.none, None
        # one id holds a producer id; were there two, the marker must satisfy both
        return ErrorCode.none, Held(max(h.epoch for h in found), any(h.running for h in found))

    async def _producer_held_at(
        self, leader: int, indexes: list[int], producer_id: int, topic: str, index: int
    ) -> tuple[bool, Held | None]:
        if leader == self.node_id:
            return self.transactions.producer_held(producer_id, indexes, topic, index)
        args = [producer_id, topic, index, indexes]
        match await self.calls.call(str(leader), PRODUCER_HELD, args, VERIFY_TIMEOUT_S):
            case []:
                return True, None
            case [int(epoch), bool(running)]:
                return True, Held(epoch, running)
        return False, None

    async def _producer_held_here(self, _peer: str, args: list[Any]) -> list[Any] | None:
        match args:
            case [int(pid), str(topic), int(index), list(indexes)] if all(
                type(i) is int for i in indexes
            ):
                answered, held = self.transactions.producer_held(pid, indexes, topic, index)
                if not answered:
                    return None
                return [] if held is None else [held.epoch, held.running]
        return None
