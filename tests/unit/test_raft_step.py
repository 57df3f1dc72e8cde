"""The pure Raft core (raftlog/raft/core/) one message at a time: votes, pre-votes, appends,
conflicts and commits, and the quorum functions (issue 27)."""

from __future__ import annotations

from random import Random

from raftlog.raft.core.log import MemoryLog
from raftlog.raft.core.raft import Raft
from raftlog.raft.core.rules import Config, Rules
from raftlog.raft.core.values import (
    NONE,
    Entry,
    Forwarded,
    HardState,
    Message,
    MsgType,
    NotLeader,
    Role,
)
from raftlog.raft.quorum import VoteResult, committed_index, vote_result

PEERS = (1, 2, 3)


def replica(
    node: int = 1,
    terms: tuple[int, ...] = (),
    hs: HardState | None = None,
    rules: Rules | None = None,
) -> Raft:
    entries = [Entry(t, i + 1, f"e{i + 1}".encode()) for i, t in enumerate(terms)]
    config = Config(id=node, peers=PEERS, rules=rules or Rules())
    return Raft(config, MemoryLog(entries), hs or HardState(), Random(0))


def role(r: Raft) -> Role:
    """The role read afresh (mypy keeps a narrowed attribute across step())."""
    return r.role


def sent(r: Raft) -> list[Message]:
    out, r.outbox = r.outbox, []
    return out


def persist(r: Raft) -> None:
    """What the caller does: take the Ready and say it is durable."""
    r.advance(r.ready())


def elect(r: Raft) -> None:
    """Make r leader of the next term through a real election."""
    r.campaign(pre=False)
    for m in sent(r):
        r.step(Message(MsgType.VOTE_RESP, m.dst, r.id, r.term))
    assert r.role == Role.LEADER
    persist(r)


# ---- quorum -----------------------------------------------------------------------------------------


def test_committed_index_is_what_a_majority_holds() -> None:
    assert committed_index(PEERS, {1: 5, 2: 3, 3: 1}) == 3
    assert committed_index(PEERS, {1: 5}) == 0
    assert committed_index((1, 2, 3, 4, 5), {1: 9, 2: 9, 3: 2, 4: 7, 5: 1}) == 7
    assert committed_index((1,), {1: 4}) == 4


def test_vote_result() -> None:
    assert vote_result(PEERS, {1: True}) == VoteResult.PENDING
    assert vote_result(PEERS, {1: True, 2: True}) == VoteResult.WON
    assert vote_result(PEERS, {1: True, 2: False, 3: False}) == VoteResult.LOST


# ---- votes and pre-votes ----------------------------------------------------------------------------


def test_election_timeout_starts_a_prevote_without_raising_the_term() -> None:
    r = replica(hs=HardState(term=4))
    for _ in range(20):
        r.tick()
    assert r.role == Role.PRE_CANDIDATE and r.term == 4
    msgs = sent(r)
    assert {m.dst for m in msgs} == {2, 3}
    assert all(m.type == MsgType.PREVOTE and m.term == 5 for m in msgs)


def test_an_election_the_budget_refuses_waits_another_timeout() -> None:
    r = replica(hs=HardState(term=4))
    stood = 0
    for _ in range(100):
        if r.wants_election():
            stood += 1
            r.tick(may_stand=False)
        else:
            r.tick()
    assert stood >= 4 and r.role == Role.FOLLOWER and not sent(r)
    while not r.wants_election():
        r.tick()
    r.tick(may_stand=True)
    assert role(r) == Role.PRE_CANDIDATE


def test_prevote_majority_starts_the_real_election() -> None:
    r = replica(hs=HardState(term=4))
    r.campaign(pre=True)
    sent(r)
    r.step(Message(MsgType.PREVOTE_RESP, 2, 1, 5))
    assert r.role == Role.CANDIDATE and r.term == 5 and r.vote == 1
    assert {m.type for m in sent(r)} == {MsgType.VOTE}
    r.step(Message(MsgType.VOTE_RESP, 3, 1, 5))
    assert role(r) == Role.LEADER
    ready = r.ready()
    assert ready.hard_state == HardState(5, 1, 0)
    assert ready.entries == (Entry(5, 1),)  # the new term's empty entry


def test_vote_granted_once_per_term_and_only_to_an_up_to_date_log() -> None:
    r = replica(node=2, terms=(1, 2))
    r.step(Message(MsgType.VOTE, 1, 2, 3, index=1, log_term=2))  # shorter log of same last term
    assert sent(r)[0].reject and r.vote == NONE and r.term == 3
    r.step(Message(MsgType.VOTE, 3, 2, 3, index=2, log_term=2))
    assert not sent(r)[0].reject and r.vote == 3
    r.step(Message(MsgType.VOTE, 1, 2, 3, index=9, log_term=3))
    assert sent(r)[0].reject and r.vote == 3  # already voted in term 3
    assert r.ready().hard_state == HardState(3, 3, 0)


def test_prevote_does_not_change_the_voters_term_or_vote() -> None:
    r = replica(node=2, hs=HardState(term=3))
    r.step(Message(MsgType.PREVOTE, 1, 2, 4))
    (resp,) = sent(r)
    assert resp.type == MsgType.PREVOTE_RESP and not resp.reject and resp.term == 4
    assert (r.term, r.vote) == (3, NONE)


def test_a_follower_that_heard_its_leader_ignores_votes() -> None:
    r = replica(node=2, hs=HardState(term=3))
    r.step(Message(MsgType.APP, 1, 2, 3))
    sent(r)
    for kind in (MsgType.PREVOTE, MsgType.VOTE):
        r.step(Message(kind, 3, 2, 4))
        assert sent(r) == [] and r.term == 3
    r.step(Message(MsgType.VOTE, 3, 2, 4, transfer=True))  # a leadership transfer's
    assert not sent(r)[0].reject and r.term == 4


def test_lower_term_append_and_prevote_get_the_higher_term() -> None:
    r = replica(node=2, hs=HardState(term=7))
    r.step(Message(MsgType.APP, 1, 2, 5))
    r.step(Message(MsgType.PREVOTE, 3, 2, 6))
    a, p = sent(r)
    assert (a.type, a.term) == (MsgType.APP_RESP, 7)
    assert (p.type, p.term, p.reject) == (MsgType.PREVOTE_RESP, 7, True)
    leader = replica(node=1, hs=HardState(term=4))
    elect(leader)
    leader.step(a)
    assert leader.role == Role.FOLLOWER and leader.term == 7
    assert leader.ready().soft_state.role == Role.FOLLOWER  # the caller fails its waiters


# ---- appends ---------------------------------------------------------------------------------------------


def test_append_keeps_matching_entries_and_cuts_from_the_first_conflict() -> None:
    r = replica(node=2, terms=(1, 1, 1, 1), hs=HardState(term=1, commit=1))
    persist(r)
    entries = (Entry(1, 2, b"e2"), Entry(2, 3, b"x"))
    r.step(Message(MsgType.APP, 1, 2, 2, 1, 1, entries, commit=3))
    assert [r.log.term_at(i) for i in (1, 2, 3, 4)] == [1, 1, 2, None]
    assert r.commit == 3
    rd = r.ready()
    assert rd.truncate_after == 2 and rd.entries == (Entry(2, 3, b"x"),)
    assert rd.messages[0].index == 3 and not rd.messages[0].reject
    assert [e.index for e in rd.committed] == [2, 3]  # 1 was applied after the first Ready


def test_append_below_the_commit_index_is_answered_with_it() -> None:
    r = replica(node=2, terms=(1, 1, 1), hs=HardState(term=1, commit=3))
    r.step(Message(MsgType.APP, 1, 2, 1, 1, 1, (Entry(1, 2, b"e2"),), commit=2))
    (resp,) = sent(r)
    assert resp.index == 3 and not resp.reject and r.last_index() == 3


def test_refused_append_hints_the_conflicting_terms_start() -> None:
    leader = replica(node=1, terms=(1, 2, 3, 3, 3, 3), hs=HardState(term=3))
    elect(leader)  # term 4, empty entry at 7
    leader.tick()  # a heartbeat: the probe again
    (app,) = (m for m in sent(leader) if m.dst == 2)
    assert (app.index, app.log_term) == (6, 3)
    r = replica(node=2, terms=(1, 2, 2, 2), hs=HardState(term=2))
    r.step(app)  # beyond our log
    (resp,) = sent(r)
    assert resp.reject and resp.index == 6 and (resp.reject_hint, resp.log_term) == (4, 2)
    leader.step(resp)
    (probe,) = (m for m in sent(leader) if m.dst == 2)
    assert (probe.index, probe.log_term) == (2, 2)  # straight to where the terms agree
    r.step(probe)
    assert not sent(r)[0].reject
    assert [r.log.term_at(i) for i in range(1, 9)] == [1, 2, 3, 3, 3, 3, 4, None]


def test_leader_ignores_a_stale_refusal() -> None:
    leader = replica(node=1, terms=(1, 1, 1), hs=HardState(term=1))
    elect(leader)
    sent(leader)
    leader.step(Message(MsgType.APP_RESP, 2, 1, 2, index=4))  # 2 holds all
    assert leader.progress[2].match == 4
    leader.step(Message(MsgType.APP_RESP, 2, 1, 2, index=3, reject=True, reject_hint=0))
    assert leader.progress[2].next == 5  # an old answer does not pull next back


# ---- commit and proposals -----------------------------------------------------------------------------


def test_leader_commits_a_majority_index_only_in_its_own_term() -> None:
    leader = replica(node=1, terms=(1, 1), hs=HardState(term=1))
    elect(leader)  # term 2, empty entry at 3
    leader.step(Message(MsgType.APP_RESP, 2, 1, 2, index=2))
    assert leader.commit == 0  # entry 2 is of term 1
    leader.step(Message(MsgType.APP_RESP, 2, 1, 2, index=3))
    assert leader.commit == 3


def test_leader_counts_its_own_entries_only_once_durable() -> None:
    leader = replica(node=1)
    elect(leader)
    index = leader.propose(b"p")
    assert index == 2
    leader.step(Message(MsgType.APP_RESP, 2, 1, 1, index=2))
    assert leader.commit == 1  # 2 is on 2 but not yet durable here
    persist(leader)
    assert leader.commit == 2


def test_a_follower_refuses_a_proposal_and_names_the_leader() -> None:
    r = replica(node=2)
    r.step(Message(MsgType.APP, 1, 2, 1))
    assert r.propose(b"p") == NotLeader(1)
    assert r.last_index() == 0
    fwd = replica(node=2, rules=Rules(no_forwarding=False))
    fwd.step(Message(MsgType.APP, 1, 2, 1))
    sent(fwd)
    assert fwd.propose(b"p") == Forwarded(1)
    assert sent(fwd)[0].type == MsgType.PROP


def test_check_quorum_steps_a_leader_down_without_answers() -> None:
    leader = replica(node=1)
    elect(leader)
    for _ in range(2 * leader.cfg.election_tick):
        leader.tick()
    assert leader.role == Role.FOLLOWER


def test_check_quorum_steps_down_a_tick_short_of_an_election_timeout_after_the_majority_was_heard() -> (
    None
):
    """A follower counts its first tick after it heard the leader whole, so its timer may run
    out a tick early: the lease ends a tick short of the timeout (Rules.lease_inside_timers;
    a whole timeout without it)."""
    for rules, short in ((Rules(), 1), (Rules(lease_inside_timers=False), 0)):
        leader = replica(node=1, rules=rules)
        elect(leader)
        lease = leader.cfg.election_tick - short
        for _ in range(5):
            leader.tick()
        leader.step(Message(MsgType.APP_RESP, 3, 1, 1, index=1))  # heard at tick 5
        for _ in range(lease - 1):
            leader.tick()
        assert role(leader) == Role.LEADER
        leader.tick()  # tick 5 + lease: no follower can have elected another before this
        assert role(leader) == Role.FOLLOWER


def test_check_quorum_counts_a_followers_node_heard_as_of_a_heartbeat_before() -> None:
    """The driver heard a follower's node (FORK 10), but its replica may have last heard this
    leader a heartbeat before (the heartbeats cut, a ping a moment later): the lease runs
    from then (Rules.lease_inside_timers)."""
    for rules, early in ((Rules(), 1), (Rules(lease_inside_timers=False), 0)):
        leader = replica(node=1, rules=rules)
        elect(leader)
        for _ in range(5):
            leader.tick()
        leader.heard_from(2)
        leader.heard_from(3)
        lease = leader.lease_ticks() - early * leader.cfg.heartbeat_tick
        for _ in range(lease - 1):
            leader.tick()
        assert role(leader) == Role.LEADER
        leader.tick()
        assert role(leader) == Role.FOLLOWER


def test_check_quorum_counts_a_followers_node_heard_by_the_driver() -> None:
    leader = replica(node=1)
    elect(leader)
    for _ in range(3 * leader.cfg.election_tick):
        leader.heard_from(2)
        leader.tick()
    assert role(leader) == Role.LEADER
    for _ in range(leader.cfg.election_tick - 2):
        leader.tick()
    leader.heard_from(2, ago=leader.cfg.election_tick)  # the node, heard too long ago
    leader.tick()
    assert role(leader) == Role.FOLLOWER


def test_transfer_sends_timeout_now_once_the_target_is_caught_up() -> None:
    leader = replica(node=1)
    elect(leader)
    sent(leader)
    assert leader.transfer_leadership(2)
    assert all(m.type == MsgType.APP for m in sent(leader))
    leader.step(Message(MsgType.APP_RESP, 2, 1, 1, index=1))
    assert any(m.type == MsgType.TIMEOUT_NOW and m.dst == 2 for m in sent(leader))
    assert isinstance(leader.propose(b"p"), NotLeader)  # no proposals while handing over
    target = replica(node=2, hs=HardState(term=1))
    target.step(Message(MsgType.TIMEOUT_NOW, 1, 2, 1))
    votes = sent(target)
    assert target.role == Role.CANDIDATE and all(m.transfer for m in votes)
