"""Writing a transaction's markers on its partitions (Kafka's WriteTxnMarkers, between
nodes): on this node when it leads the partition, else through the leader over the mesh.

A marker is retried, with a pause, while the partition has no leader, its leader is another
node that cannot be reached, or the write fails for a reason that passes (a leader change, a
timeout): a decided transaction must reach every partition. It is given up only when it
cannot be written at all: the topic is gone, or the producer was fenced by a newer epoch
there (Kafka's TransactionMarkerRequestCompletionHandler).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, Protocol

from raftlog.broker import ProduceResult
from raftlog.clock import LOOP_CLOCK, Clock
from raftlog.errors import ErrorCode
from raftlog.mesh_calls import MeshCalls

log = logging.getLogger(__name__)
E = ErrorCode

# [topic, partition, producer id, epoch, commit, coordinator epoch, decision partition,
# decision offset] -> error code
CALL = "txn-marker"
CALL_TIMEOUT_S = 15.0
RETRY_S = 0.1
MAX_RETRY_S = 2.0
GIVE_UP = (E.unknown_topic_or_partition, E.invalid_producer_epoch, E.invalid_record)


class MarkerPartition(Protocol):
    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_epoch(self) -> int: ...

    def write_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> Awaitable[ProduceResult]: ...


class WrittenMarker(NamedTuple):
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    commit: bool
    offset: int
    term: int  # of the partition's leader that wrote it
    decision_partition: int
    decision_offset: int


class Markers:
    def __init__(
        self,
        node_id: int,
        calls: MeshCalls,
        local: Callable[[str, int], MarkerPartition | None],
        leader_of: Callable[[str, int], int | None],
        exists: Callable[[str, int], bool],
        written: Callable[[WrittenMarker], None],
        clock: Clock = LOOP_CLOCK,
    ) -> None:
        """local(topic, index): this node's replica; leader_of: the node leading it, if known;
        exists: the controller still lists the partition; written: a marker this node led the
        partition for is committed (the group coordinator applies a transaction's offsets
        then, and the history records it)."""
        self._node = node_id
        self._calls = calls
        self._local = local
        self._leader_of = leader_of
        self._exists = exists
        self._written = written
        self._clock = clock
        calls.serve(CALL, self._serve)

    async def write(
        self,
        topic: str,
        index: int,
        producer_id: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
        decision: tuple[int, int],
    ) -> ErrorCode:
        """`decision`: the `__transaction_state` partition and offset of the decision this
        marker carries out (for the history)."""
        pause = RETRY_S
        while True:
            if not self._exists(topic, index):
                return E.unknown_topic_or_partition
            leader = self._leader_of(topic, index)
            code: ErrorCode | None = None
            if leader == self._node:
                code = await self._write_here(
                    topic, index, producer_id, epoch, commit, coordinator_epoch, *decision
                )
            elif leader is not None:
                args = [topic, index, producer_id, epoch, commit, coordinator_epoch, *decision]
                code = _code(await self._calls.call(str(leader), CALL, args, CALL_TIMEOUT_S))
            if code == E.none or code in GIVE_UP:
                if code != E.none:
                    log.warning(
                        "%s marker of producer %d on %s-%d given up: %s",
                        "commit" if commit else "abort",
                        producer_id,
                        topic,
                        index,
                        code.name,
                    )
                return code
            await self._clock.sleep(pause)
            pause = min(pause * 2, MAX_RETRY_S)

    async def _write_here(
        self,
        topic: str,
        index: int,
        producer_id: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
        decision_partition: int,
        decision_offset: int,
    ) -> ErrorCode:
        partition = self._local(topic, index)
        if partition is None or not partition.is_leader:
            return E.not_leader_or_follower
        try:
            result = await asyncio.wait_for(
                partition.write_marker(producer_id, epoch, commit, coordinator_epoch),
                CALL_TIMEOUT_S,
            )
        except TimeoutError:
            return E.request_timed_out
        if result.error == E.none:
            self._written(
                WrittenMarker(
                    topic,
                    index,
                    producer_id,
                    epoch,
                    commit,
                    result.base_offset,
                    partition.leader_epoch,
                    decision_partition,
                    decision_offset,
                )
            )
        return result.error

    async def _serve(self, _peer: str, args: list[Any]) -> int:
        match args:
            case [
                str(topic),
                int(index),
                int(pid),
                int(epoch),
                bool(commit),
                int(coord_epoch),
                int(decision_partition),
                int(decision_offset),
            ]:
                return int(
                    await self._write_here(
                        topic,
                        index,
                        pid,
                        epoch,
                        commit,
                        coord_epoch,
                        decision_partition,
                        decision_offset,
                    )
                )
        return int(E.invalid_request)


def _code(answer: Any) -> ErrorCode | None:
    try:
        return ErrorCode(answer) if isinstance(answer, int) else None
    except ValueError:
        return None
