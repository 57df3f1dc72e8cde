"""The mover's walk from a partition's Raft configuration to its target replicas
(raftlog/cluster/reassignment.py): learners first, then the voters, never two steps at once."""

from __future__ import annotations

from raftlog.cluster.reassignment import next_step
from raftlog.raft.membership import Membership


def test_new_replicas_join_as_learners_before_any_voter_changes() -> None:
    conf = Membership.of({1, 2, 3})
    step = next_step(conf, frozenset({2, 3, 4}))
    assert step == Membership.of({1, 2, 3}, learners={4})
    assert next_step(step, frozenset({2, 3, 4})) == Membership.of({2, 3, 4})
    assert next_step(Membership.of({2, 3, 4}), frozenset({2, 3, 4})) is None


def test_a_shrinking_move_changes_the_voters_at_once() -> None:
    assert next_step(Membership.of({1, 2, 3}), frozenset({1, 2})) == Membership.of({1, 2})


def test_a_cancelled_move_drops_learners_that_will_not_vote() -> None:
    """Cancelled while 4 was a learner: the walk back to 1-3 takes it out first."""
    conf = Membership.of({1, 2, 3}, learners={4})
    assert next_step(conf, frozenset({1, 2, 3})) == Membership.of({1, 2, 3})


def test_a_move_back_after_the_voters_switched_re_adds_the_old_replicas_as_learners() -> None:
    conf = Membership.of({2, 3, 4})
    assert next_step(conf, frozenset({1, 2, 3})) == Membership.of({2, 3, 4}, learners={1})
