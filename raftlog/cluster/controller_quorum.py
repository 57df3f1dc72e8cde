"""The controller quorum as Kafka's DescribeQuorum reports a KRaft metadata quorum: raftlog's
controller is a Raft group too (pysyncobj), so its leader, term, commit index (the high
watermark) and each voter's and observer's log end can be told (controller/voters.py: the
nodes beyond the voters observe). Only the leader knows how far each got: any other node asks
it over a mesh call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raftlog.common.mesh_calls import MeshCalls

if TYPE_CHECKING:
    from raftlog.controller.group import RaftGroup

# [] -> [leader, term, high watermark, [[voter, log end offset], ...], [[observer, ...], ...]]
CALL = "quorum"
CALL_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class QuorumState:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[tuple[int, int], ...]  # (node id, log end offset; -1 when not known)
    observers: tuple[tuple[int, int], ...] = ()  # the connected nodes that do not vote


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
        observers = tuple((int(m), matches.get(m, -1)) for m in sorted(group.observers(), key=int))
        return QuorumState(self._node_id, group.term, group.commit_index, voters, observers)

    async def _serve(self, _peer: str, _args: list[Any]) -> list[Any] | None:
        state = self._here()
        if state is None:
            return None
        return [
            state.leader_id,
            state.leader_epoch,
            state.high_watermark,
            [list(v) for v in state.voters],
            [list(o) for o in state.observers],
        ]


def _parsed(answer: Any) -> QuorumState | None:
    """A leader's answer; one of a release before observers has no fifth element."""
    match answer:
        case [int(leader), int(epoch), int(hw), list(voters), *rest] if (
            len(rest) <= 1 and all(isinstance(r, list) for r in rest) and _pairs(voters, *rest)
        ):
            observers = tuple((o[0], o[1]) for o in rest[0]) if rest else ()
            return QuorumState(leader, epoch, hw, tuple((v[0], v[1]) for v in voters), observers)
    return None


def _pairs(*lists: list[Any]) -> bool:
    return all(
        isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v)
        for items in lists
        for v in items
    )
