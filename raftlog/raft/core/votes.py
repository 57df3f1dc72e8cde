"""Elections (Raft 5.2, with PreVote: FORK 3): standing, granting votes and counting them,
and the new leader's first entry."""

from __future__ import annotations

from raftlog.raft.core.conf_change import ConfChange
from raftlog.raft.core.state import Progress
from raftlog.raft.core.values import NONE, Entry, Message, MsgType, Role
from raftlog.raft.membership import joint_vote
from raftlog.raft.quorum import VoteResult


class Votes(ConfChange):
    """A replica standing for election, and voting in others'."""

    def campaign(self, pre: bool, transfer: bool = False) -> None:
        """Stand for election. With PreVote first ask, without raising the term, whether a
        majority would vote: an isolated node cannot inflate terms and depose a live leader.
        `transfer` (TimeoutNow) marks the vote requests so voters skip leader stickiness."""
        if self.role == Role.LEADER or not self.promotable():
            return
        self.election_elapsed = 0
        self._reset_timeout()
        if pre:
            self.role = Role.PRE_CANDIDATE
            self.leader = NONE
            term = self.term + 1
            kind = MsgType.PREVOTE
        else:
            self.become_follower(self.term + 1, NONE)
            self.role = Role.CANDIDATE
            self.vote = self.id
            term = self.term
            kind = MsgType.VOTE
        self.votes = {self.id: True}
        if self._vote_result() == VoteResult.WON:
            self._won(pre)
            return
        for p in sorted(self.conf.voting()):
            if p != self.id:
                self._send(
                    Message(
                        kind,
                        self.id,
                        p,
                        term,
                        self.last_index(),
                        self.last_term(),
                        transfer=transfer,
                    )
                )

    def _won(self, pre: bool) -> None:
        if pre:
            self.campaign(pre=False)  # the real election, PreVote passed
        else:
            self.become_leader()

    def become_leader(self) -> None:
        self.role = Role.LEADER
        self.leader = self.id
        self.lead_transferee = NONE
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        last = self.last_index()
        self.progress = {
            p: Progress(match=0, next=last + 1) for p in self.conf.members() if p != self.id
        }
        self.heard_at = {}  # not caught up, so not quiet, before its followers answer
        self.lease_from = self.ticks  # a majority just voted for it
        # An empty entry of the new term: it lets earlier terms' entries commit (Raft 5.4.2).
        self._cut(last, [Entry(self.term, last + 1)])
        self.broadcast_append()
        self.leader_commit()

    def log_up_to_date(self, index: int, term: int) -> bool:
        """Raft 5.4.1: vote only for a log at least as up to date as ours."""
        return term > self.last_term() or (term == self.last_term() and index >= self.last_index())

    def handle_vote(self, m: Message) -> None:
        pre = m.type == MsgType.PREVOTE
        resp = MsgType.PREVOTE_RESP if pre else MsgType.VOTE_RESP
        can_vote = (
            self.vote == m.src
            or (self.vote == NONE and self.leader == NONE)
            or (pre and m.term > self.term)
        )
        if self.role == Role.LEADER and not m.transfer:
            can_vote = can_vote and m.term > self.term and not self.rules.leader_stickiness
        if can_vote and self.log_up_to_date(m.index, m.log_term):
            self._send(Message(resp, self.id, m.src, m.term))
            if not pre:
                self.election_elapsed = 0
                self.vote = m.src
        else:
            self._send(Message(resp, self.id, m.src, self.term, reject=True))

    def _vote_result(self) -> VoteResult:
        return joint_vote(self.conf, self.votes, self.rules.joint_majorities)
