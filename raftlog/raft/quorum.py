"""Majority rules of a Raft group, as pure functions over plain sets and maps.

Kept apart from the state machine so that the commit rule and the vote count each live in one
place and can be tested on their own (the pysyncobj fork had the commit rule in four).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from enum import Enum


class VoteResult(Enum):
    PENDING = "pending"
    WON = "won"
    LOST = "lost"


def majority(voters: Collection[int]) -> int:
    """How many voters make a quorum: more than half."""
    return len(voters) // 2 + 1


def committed_index(voters: Collection[int], match: Mapping[int, int]) -> int:
    """The highest index that a majority of voters hold (a voter missing from `match` holds 0).

    This is only the quorum half of the leader's commit rule: the caller must still check that
    the entry there is of its own term (Raft 5.4.2), see `Raft.leader_commit`.
    """
    if not voters:
        return 0
    held = sorted((match.get(v, 0) for v in voters), reverse=True)
    return held[majority(voters) - 1]


def vote_result(voters: Collection[int], votes: Mapping[int, bool]) -> VoteResult:
    """WON once a majority granted, LOST once a majority can no longer grant."""
    granted = sum(1 for v in voters if votes.get(v) is True)
    refused = sum(1 for v in voters if votes.get(v) is False)
    need = majority(voters)
    if granted >= need:
        return VoteResult.WON
    if len(voters) - refused < need:
        return VoteResult.LOST
    return VoteResult.PENDING


def has_quorum(voters: Collection[int], active: Collection[int]) -> bool:
    """CheckQuorum's test: did a majority of voters (the leader counts itself) answer lately?"""
    return sum(1 for v in voters if v in active) >= majority(voters)
