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


def quorum_silence(
    voters: Collection[int], own: int, silent: Mapping[int, int], unknown: int
) -> int:
    """How long ago (in ticks) a majority of voters was last heard, `own` counting as heard
    now if it is one of them and a voter missing from `silent` as silent for `unknown`: a
    leader's lease runs from then."""
    ages = sorted(0 if v == own else silent.get(v, unknown) for v in voters)
    return ages[majority(voters) - 1] if voters else 0
