"""A Raft group's configuration and its majority rules, joint or simple (issue 44).

As in the Raft thesis (section 4) and etcd's `tracker`/`quorum`: while a group moves from one
voter set to another that differs by more than one server, it runs in a joint configuration
in which an election or a commit needs a majority of the old voters and a majority of the
new. Learners receive the log and never count in any majority.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import msgpack

from raftlog.raft.quorum import VoteResult, committed_index, quorum_silence, vote_result


@dataclass(frozen=True, slots=True)
class Membership:
    """Who votes and who only follows. `outgoing` is the old voter set while the group is
    joint (empty otherwise); a voter being made a learner is in `outgoing` and `learners`
    until the group leaves the joint configuration."""

    voters: frozenset[int]
    outgoing: frozenset[int] = frozenset()
    learners: frozenset[int] = frozenset()

    @classmethod
    def of(cls, voters: Iterable[int], learners: Iterable[int] = ()) -> Membership:
        return cls(frozenset(voters), frozenset(), frozenset(learners))

    @property
    def joint(self) -> bool:
        return bool(self.outgoing)

    def votes(self, node: int) -> bool:
        """Whether `node` counts in some majority (it may stand for election)."""
        return node in self.voters or node in self.outgoing

    def voting(self) -> frozenset[int]:
        return self.voters | self.outgoing

    def members(self) -> frozenset[int]:
        return self.voters | self.outgoing | self.learners

    def left(self) -> Membership:
        """The configuration a joint one leaves for: the new voters and the learners."""
        return Membership(self.voters, frozenset(), self.learners)

    def problem(self) -> str | None:
        """Why this cannot be a group's configuration, or None."""
        if not self.voters:
            return "a configuration needs a voter"
        if self.voters & self.learners:
            return f"{sorted(self.voters & self.learners)} both voters and learners"
        if any(n <= 0 for n in self.members()):
            return "node ids are positive"
        return None

    def __str__(self) -> str:
        out = ",".join(map(str, sorted(self.voters)))
        if self.outgoing:
            out += " & " + ",".join(map(str, sorted(self.outgoing)))
        if self.learners:
            out += " learners " + ",".join(map(str, sorted(self.learners)))
        return "{" + out + "}"


# A configuration entry's command, in the log and on the wire: this byte, then msgpack
# [voters, outgoing voters, learners]. Other commands start with other bytes (raft/journal.py).
CONF = 0x43  # b"C"


def command(m: Membership) -> bytes:
    packed: bytes = msgpack.packb([sorted(m.voters), sorted(m.outgoing), sorted(m.learners)])
    return bytes([CONF]) + packed


def parse(data: bytes) -> Membership:
    voters, outgoing, learners = msgpack.unpackb(data[1:])
    return Membership(frozenset(voters), frozenset(outgoing), frozenset(learners))


def joint_committed(m: Membership, match: Mapping[int, int], joint: bool = True) -> int:
    """The highest index a majority holds, in both halves of a joint configuration (only the
    new one with `joint` False: the rule switched off)."""
    index = committed_index(m.voters, match)
    if m.outgoing and joint:
        index = min(index, committed_index(m.outgoing, match))
    return index


def joint_vote(m: Membership, votes: Mapping[int, bool], joint: bool = True) -> VoteResult:
    """WON once both halves granted, LOST once either can no longer grant."""
    result = vote_result(m.voters, votes)
    if not m.outgoing or not joint:
        return result
    old = vote_result(m.outgoing, votes)
    if VoteResult.LOST in (result, old):
        return VoteResult.LOST
    if result == old == VoteResult.WON:
        return VoteResult.WON
    return VoteResult.PENDING


def joint_silence(m: Membership, own: int, silent: Mapping[int, int], unknown: int) -> int:
    """How long ago a majority of each half was last heard: a leader's lease runs from the
    later of the two silences."""
    return max(quorum_silence(h, own, silent, unknown) for h in (m.voters, m.outgoing) if h)
