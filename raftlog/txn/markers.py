"""Writing a transaction's markers on its partitions (Kafka's WriteTxnMarkers, between
nodes): on this node when it leads the partition, else through the leader over the mesh.

A marker is retried, with a pause, while the partition has no leader, its leader is another
node that cannot be reached, or the write fails for a reason that passes (a leader change, a
timeout): a decided transaction must reach every partition. It is given up only when it
cannot be written at all: the topic is gone, or the producer was fenced by a newer epoch
there (Kafka's TransactionMarkerRequestCompletionHandler), or the partition holds a marker of
a newer coordinator epoch (TRANSACTION_COORDINATOR_FENCED: this coordinator's decision was
carried out by its successor, producer_state.py). It also stops once this node no longer
leads the decision's `__transaction_state` partition in the epoch it decided in, as Kafka's
coordinator drops its pending markers when it unloads the partition: the next leader loads
the decision and writes the markers itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, Protocol

from raftlog.api.values import ProduceResult
from raftlog.common.clock import LOOP_CLOCK, Clock
from raftlog.common.errors import ErrorCode
from raftlog.common.mesh_calls import MeshCalls

log = logging.getLogger(__name__)
E = ErrorCode

CALL = "txn-marker"  # a MarkerWrite's fields -> error code
CALL_TIMEOUT_S = 15.0
RETRY_S = 0.1
MAX_RETRY_S = 2.0
GIVE_UP = (
    E.unknown_topic_or_partition,
    E.invalid_producer_epoch,
    E.invalid_record,
    E.transaction_coordinator_fenced,
)
# given up as expected after a coordinator change: not worth a warning
SUPERSEDED = (E.transaction_coordinator_fenced, E.not_coordinator)


class MarkerPartition(Protocol):
    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_epoch(self) -> int: ...

    def write_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> Awaitable[ProduceResult]: ...


class MarkerWrite(NamedTuple):
    """One marker to write: where, for which producer, and the decision it carries out (its
    `__transaction_state` partition and offset, for the history)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    decision_partition: int
    decision_offset: int

    @classmethod
    def parse(cls, args: list[Any]) -> MarkerWrite | None:
        """From a mesh call's arguments; None if they are not one."""
        types = (str, int, int, int, bool, int, int, int)
        if len(args) != len(types) or not all(
            type(a) is t for a, t in zip(args, types, strict=True)
        ):
            return None
        return cls(*args)


class Markers:
    def __init__(
        self,
        node_id: int,
        calls: MeshCalls,
        local: Callable[[str, int], MarkerPartition | None],
        leader_of: Callable[[str, int], int | None],
        exists: Callable[[str, int], bool],
        written: Callable[[MarkerWrite, int, int], None],
        coordinating: Callable[[int, int], bool] = lambda _index, _epoch: True,
        clock: Clock = LOOP_CLOCK,
    ) -> None:
        """local(topic, index): this node's replica; leader_of: the node leading it, if known;
        exists: the controller still lists the partition; written(marker, offset, term): a
        marker this node led the partition for is committed at `offset` in `term` (the group
        coordinator applies a transaction's offsets then, and the history records it);
        coordinating(index, epoch): this node still leads `__transaction_state` partition
        `index` in term `epoch`, where the decision being carried out was taken."""
        self._node = node_id
        self._calls = calls
        self._local = local
        self._leader_of = leader_of
        self._exists = exists
        self._written = written
        self._coordinating = coordinating
        self._clock = clock
        calls.serve(CALL, self._serve)

    async def write(self, marker: MarkerWrite) -> ErrorCode:
        """NONE once written; else why it was given up (NOT_COORDINATOR: no longer this
        node's to write)."""
        pause = RETRY_S
        while True:
            if not self._coordinating(marker.decision_partition, marker.coordinator_epoch):
                log.info("%s given up: this node no longer coordinates its decision", marker)
                return E.not_coordinator
            if not self._exists(marker.topic, marker.partition):
                return E.unknown_topic_or_partition
            leader = self._leader_of(marker.topic, marker.partition)
            code: ErrorCode | None = None
            if leader == self._node:
                code = await self._write_here(marker)
            elif leader is not None:
                answer = await self._calls.call(str(leader), CALL, list(marker), CALL_TIMEOUT_S)
                code = _code(answer)
            if code == E.none or code in GIVE_UP:
                if code in SUPERSEDED:
                    log.info("%s given up: %s", marker, code.name)
                elif code != E.none:
                    log.warning("%s given up: %s", marker, code.name)
                return code
            await self._clock.sleep(pause)
            pause = min(pause * 2, MAX_RETRY_S)

    async def _write_here(self, marker: MarkerWrite) -> ErrorCode:
        partition = self._local(marker.topic, marker.partition)
        if partition is None or not partition.is_leader:
            return E.not_leader_or_follower
        try:
            result = await asyncio.wait_for(
                partition.write_marker(
                    marker.producer_id,
                    marker.producer_epoch,
                    marker.commit,
                    marker.coordinator_epoch,
                ),
                CALL_TIMEOUT_S,
            )
        except TimeoutError:
            return E.request_timed_out
        if result.error == E.none:
            self._written(marker, result.base_offset, partition.leader_epoch)
        return result.error

    async def _serve(self, _peer: str, args: list[Any]) -> int:
        marker = MarkerWrite.parse(args)
        if marker is None:
            return int(E.invalid_request)
        return int(await self._write_here(marker))


def _code(answer: Any) -> ErrorCode | None:
    try:
        return ErrorCode(answer) if isinstance(answer, int) else None
    except ValueError:
        return None
