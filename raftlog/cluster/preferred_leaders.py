"""Preferred leader elections (Kafka's ElectLeaders, election type PREFERRED) as Raft
leadership transfers.

A partition's preferred leader is the first replica of its assignment, as Metadata lists it.
Only a group's leader can hand its leadership over (TimeoutNow): the node asked finds who
leads, and that node's replica transfers to the preferred one once it holds the whole log.
The answer comes when the preferred replica leads, or when the time given runs out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raftlog.common.clock import LOOP_CLOCK, Clock
from raftlog.common.errors import ErrorCode
from raftlog.common.mesh_calls import MeshCalls

if TYPE_CHECKING:
    from raftlog.partition.partition import Partition

E = ErrorCode
CALL = "elect-preferred"  # [topic, partition, preferred replica, timeout ms] -> error code
# How often a wait looks again at who leads: a transfer takes a few heartbeats (50 ms each).
POLL_SECONDS = 0.02
IN_SYNC_GRACE_SECONDS = 1.0
# A mesh call waits this much longer than the leader's own transfer, to hear its answer.
CALL_MARGIN_SECONDS = 1.0
MAX_TIMEOUT_MS = 300_000

Result = tuple[ErrorCode, str | None]


class PreferredLeaders:
    """`replicas(topic, index)`: the assignment (None: no such partition); `leader(topic,
    index)`: the live node leading it, if known; `alive(node)`; `local(topic, index)`: this
    node's replica; `in_sync(partition)`: the replicas its leader counts in sync."""

    def __init__(
        self,
        node_id: int,
        calls: MeshCalls,
        replicas: Callable[[str, int], tuple[int, ...] | None],
        leader: Callable[[str, int], int | None],
        alive: Callable[[int], bool],
        local: Callable[[str, int], Partition | None],
        in_sync: Callable[[Partition], tuple[int, ...]],
        clock: Clock = LOOP_CLOCK,
    ) -> None:
        self._node_id = node_id
        self._calls = calls
        self._replicas = replicas
        self._leader = leader
        self._alive = alive
        self._local = local
        self._in_sync = in_sync
        self._clock = clock
        calls.serve(CALL, self._serve)

    def needed(self, topic: str, index: int) -> Result | None:
        """Why no election is to be held for the partition now (unknown, the preferred replica
        already leads or is down), or None when one is."""
        replicas = self._replicas(topic, index)
        if not replicas:
            return E.unknown_topic_or_partition, f"No such partition as {topic}-{index}"
        preferred = replicas[0]
        if self._leader(topic, index) == preferred:
            return E.election_not_needed, "The preferred replica already leads"
        if not self._alive(preferred):
            return E.preferred_leader_not_available, f"The preferred replica {preferred} is down"
        return None

    async def elect(self, topic: str, index: int, timeout_ms: int) -> Result:
        """Moves the partition's leadership to its preferred replica; NONE once it leads."""
        skip = self.needed(topic, index)
        if skip is not None:
            return skip
        clock = self._clock
        deadline = clock.now() + min(max(timeout_ms, 0), MAX_TIMEOUT_MS) / 1000
        while True:
            replicas = self._replicas(topic, index)
            if not replicas:
                return E.unknown_topic_or_partition, f"No such partition as {topic}-{index}"
            preferred = replicas[0]
            leader = self._leader(topic, index)
            if leader == preferred:
                return E.none, None
            if leader is not None:  # asked even out of time: a timeout of 0 starts it
                left = max(0.0, deadline - clock.now())
                error = await self._ask(leader, topic, index, preferred, left)
                if error is not E.not_leader_or_follower:  # else leadership moved: look again
                    if error is E.none:
                        return E.none, None
                    return error, _MESSAGES.get(error)
            if clock.now() >= deadline:
                return E.request_timed_out, "The preferred replica did not take over in time"
            await self._clock.sleep(POLL_SECONDS)  # no leader known yet

    async def _ask(
        self, leader: int, topic: str, index: int, preferred: int, seconds: float
    ) -> ErrorCode:
        if leader == self._node_id:
            return await self.transfer_here(topic, index, preferred, seconds)
        args = [topic, index, preferred, round(seconds * 1000)]
        answer = await self._calls.call(str(leader), CALL, args, seconds + CALL_MARGIN_SECONDS)
        if not isinstance(answer, int):
            return E.request_timed_out
        try:
            return ErrorCode(answer)
        except ValueError:
            return E.unknown_server_error

    async def transfer_here(self, topic: str, index: int, target: int, seconds: float) -> ErrorCode:
        """On the leader: hands the group to `target` (again if a transfer ran out of time
        before it caught up), and waits until `target` leads."""
        partition = self._local(topic, index)
        if partition is None or not partition.is_leader:
            return E.not_leader_or_follower
        group = partition.group
        clock = self._clock
        deadline = clock.now() + seconds
        # A leader elected a moment ago has heard from no follower yet: give the preferred
        # replica that long to show it is in sync before saying it is not.
        grace = clock.now() + min(seconds, IN_SYNC_GRACE_SECONDS)
        while target not in self._in_sync(partition):
            if not partition.is_leader:
                return E.not_leader_or_follower
            if clock.now() >= grace:
                return E.preferred_leader_not_available
            await self._clock.sleep(POLL_SECONDS)
        while group.leader_id != str(target):
            if not group.is_leader and group.leader_id is not None:
                return E.not_leader_or_follower  # another took over: the caller asks it
            starts = group.is_leader and not group.transferring
            if starts and not group.transfer_leadership(str(target)):
                return E.preferred_leader_not_available
            if clock.now() >= deadline:
                return E.request_timed_out
            await self._clock.sleep(POLL_SECONDS)
        return E.none

    async def _serve(self, _peer: str, args: list[Any]) -> int:
        match args:
            case [str(topic), int(index), int(target), int(timeout_ms)]:
                seconds = min(max(timeout_ms, 0), MAX_TIMEOUT_MS) / 1000
                return int(await self.transfer_here(topic, index, target, seconds))
        return int(E.invalid_request)


_MESSAGES = {
    E.preferred_leader_not_available: "The preferred replica is not in sync",
    E.request_timed_out: "The preferred replica did not take over in time",
}
