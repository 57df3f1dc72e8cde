"""The controller quorum as Kafka's DescribeQuorum reports a KRaft metadata quorum: raftlog's
controller is a Raft group too (pysyncobj), so its leader, term, commit index (the high
watermark) and each voter's log end can be told. Only the leader knows how far each voter
got: any other node asks it over a mesh call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raftlog.mesh_calls import MeshCalls

if TYPE_CHECKING:
    from raftlog.controller.group import RaftGroup

CALL = "quorum"  # [] -> [leader, term, high watermark, [[voter, log end offset], ...]]
CALL_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class QuorumState:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[tuple[int, int], ...]  # (node id, log end offset; -1 when not known)


class QuorumDescriber:
    """`group()`: the controller's Raft group (made after this, hence a function)."""

    def __init__(self, node_id: int, calls: MeshCalls, group: Callable[[], RaftGroup]) -> None:
        self._node_id = node_id
        self._calls = calls
        self._group = group
        calls.serve(CALL, self._serve)

    async def describe(self) -> QuorumState | None:
        """None while no leader answers."""
        local = self._here()
        if local is not None:
            return local
        leader = self._group().leader_id
        if leader is None or leader == str(self._node_id):
            return None
        return _parsed(await self._calls.call(leader, CALL, [], CALL_TIMEOUT_S))

    def _here(self) -> QuorumState | None:
        group = self._group()
        if not group.is_leader:
            return None
        matches = group.match_indexes()
        voters = tuple(
            (int(m), group.journal.last_index if m == str(self._node_id) else matches.get(m, -1))
            for m in sorted(group.members(), key=int)
        )
        return QuorumState(self._node_id, group.term, group.commit_index, voters)

    async def _serve(self, _peer: str, _args: list[Any]) -> list[Any] | None:
        state = self._here()
        if state is None:
            return None
        return [
            state.leader_id,
            state.leader_epoch,
            state.high_watermark,
            [list(v) for v in state.voters],
        ]


def _parsed(answer: Any) -> QuorumState | None:
    match answer:
        case [int(leader), int(epoch), int(hw), list(voters)] if all(
            isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v)
            for v in voters
        ):
            return QuorumState(leader, epoch, hw, tuple((v[0], v[1]) for v in voters))
    return None
