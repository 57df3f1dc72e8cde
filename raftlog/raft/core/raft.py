"""The whole replica: messages in (`step`, by role), proposals and leadership transfer, and the
caller's loop (`has_ready`, `ready`, `advance`)."""

from __future__ import annotations

from raftlog.raft.core.liveness import Liveness
from raftlog.raft.core.values import (
    NONE,
    Entry,
    Forwarded,
    Message,
    MsgType,
    NotLeader,
    Payload,
    ProposeResult,
    Ready,
    Role,
)
from raftlog.raft.quorum import VoteResult


class Raft(Liveness):
    """One replica of one Raft group."""

    # ---- proposals -----------------------------------------------------------------------

    def propose(self, data: Payload) -> ProposeResult:
        """Append `data` if this replica leads. FORK 6: a follower refuses and the caller
        redirects: a forwarded proposal's index is unknown to whoever judged it."""
        if self.role != Role.LEADER or self.lead_transferee != NONE:
            if self.rules.no_forwarding or self.leader in (NONE, self.id):
                return NotLeader(self.leader if self.role != Role.LEADER else NONE)
            self._send(
                Message(MsgType.PROP, self.id, self.leader, self.term, entries=(Entry(0, 0, data),))
            )
            return Forwarded(self.leader)
        self.wake()
        index = self.last_index() + 1
        self._cut(index - 1, [Entry(self.term, index, data)])
        self.broadcast_append()
        self.leader_commit()
        return index

    def transfer_leadership(self, target: int) -> bool:
        """Hand leadership to `target` once it holds the whole log (TimeoutNow)."""
        if self.role != Role.LEADER or target == self.id or target not in self.progress:
            return False
        if not self.conf.votes(target):
            return False
        self.wake()
        self.lead_transferee = target
        self.election_elapsed = 0
        if self.progress[target].match == self.last_index():
            self._send(Message(MsgType.TIMEOUT_NOW, self.id, target, self.term))
        else:
            self.send_append(target)
        return True

    # ---- messages ------------------------------------------------------------------------

    def step(self, m: Message) -> None:
        if m.dst != self.id:
            raise ValueError(f"message for {m.dst} stepped into {self.id}")
        if self.quiet and not self._keeps_quiet(m):
            self.wake()
        if m.term > self.term:
            vote = m.type in (MsgType.VOTE, MsgType.PREVOTE)
            if vote and self.in_lease() and not self._passes_lease(m):
                return  # FORK 3: a live leader was heard; do not even take the term
            if m.type == MsgType.PREVOTE or (m.type == MsgType.PREVOTE_RESP and not m.reject):
                pass  # a pre-vote never changes terms
            else:
                leads = m.type in (MsgType.APP, MsgType.SNAP)
                self.become_follower(m.term, m.src if leads else NONE)
        elif m.term < self.term:
            self.stale_term_answer(m)
            return
        if m.type in (MsgType.VOTE, MsgType.PREVOTE):
            self.handle_vote(m)
        elif self.role == Role.LEADER:
            self._step_leader(m)
        elif self.role in (Role.CANDIDATE, Role.PRE_CANDIDATE):
            self._step_candidate(m)
        else:
            self._step_follower(m)

    def stale_term_answer(self, m: Message) -> None:
        """FORK 4: answer a lower-term append or pre-vote with our term so a stale leader or
        candidate steps up to it. Without it a replica whose term ran ahead ignores the leader
        forever (PreVote keeps the others from following it)."""
        if not self.rules.stale_term_answer:
            return
        if m.type in (MsgType.APP, MsgType.SNAP):
            self._send(Message(MsgType.APP_RESP, self.id, m.src, self.term))
        elif m.type == MsgType.PREVOTE:
            self._send(Message(MsgType.PREVOTE_RESP, self.id, m.src, self.term, reject=True))

    def _step_candidate(self, m: Message) -> None:
        mine = MsgType.PREVOTE_RESP if self.role == Role.PRE_CANDIDATE else MsgType.VOTE_RESP
        if m.type in (MsgType.APP, MsgType.SNAP):
            self.become_follower(m.term, m.src)
            self._step_follower(m)
        elif m.type == mine:
            self.votes[m.src] = not m.reject
            result = self._vote_result()
            if result == VoteResult.WON:
                self._won(self.role == Role.PRE_CANDIDATE)
            elif result == VoteResult.LOST:
                self.become_follower(self.term, NONE)

    def _step_follower(self, m: Message) -> None:
        if m.type in (MsgType.APP, MsgType.SNAP):
            self.election_elapsed = 0
            self.leader = m.src
            if self.installing is not None:
                return  # the log is the installer's; the answer goes when it is done
            if m.type == MsgType.SNAP:
                self.handle_snapshot(m)
                return
            self.handle_append(m)
            if m.quiesce and self.commit == m.commit == self.last_index() == m.index:
                self.quiet = True  # FORK 9: this log is exactly the quiet leader's
                if self.rules.quiet_after_majority:  # and says so: its leader goes quiet then
                    self._send(
                        Message(
                            MsgType.APP_RESP,
                            self.id,
                            m.src,
                            self.term,
                            index=m.index,
                            commit=self.commit,
                            quiesce=True,
                        )
                    )
        elif m.type == MsgType.TIMEOUT_NOW and self.installing is None:
            self.campaign(pre=False, transfer=True)

    def _step_leader(self, m: Message) -> None:
        if m.type == MsgType.PROP:
            if self.rules.no_forwarding or self.lead_transferee != NONE:
                return  # FORK 6: forwarded proposals are refused
            for e in m.entries:
                self.propose(e.data)
            return
        if m.type != MsgType.APP_RESP or m.src not in self.progress:
            return
        pr = self.progress[m.src]
        at = self.ticks
        if at <= self.aged_until:  # read right after this node's hold (`resume`)
            at = self.aged_at
        self._heard(m.src, at)
        if m.reject:
            self.handle_reject(pr, m)
            return
        if m.quiesce:
            self.quiet_acked(m)
        pr.paused = False
        pr.commit = max(pr.commit, min(m.commit, m.index))
        if m.index > pr.match:
            pr.match = m.index
            pr.next = max(pr.next, m.index + 1)
            if not pr.replicate:
                pr.replicate = True
                pr.next = m.index + 1
            self.leader_commit()
            if self.progress.get(m.src) is not pr:
                return  # the commit changed the members (or this replica stepped down)
        if pr.next <= self.last_index():
            self.send_append(m.src)
        if m.src == self.lead_transferee and pr.match == self.last_index():
            self._send(Message(MsgType.TIMEOUT_NOW, self.id, m.src, self.term))

    # ---- the caller's loop ---------------------------------------------------------------

    def has_ready(self) -> bool:
        """Asked for every awake group every tick: compares fields, builds nothing."""
        soft, last = self.prev_soft, self.last_index()
        return bool(
            self.outbox
            or self.unsent_from <= last
            or self.truncated_to is not None
            or self._hard_state_moved()
            or self.leader != soft.leader
            or self.role != soft.role
            or min(self.commit, last) > self.applied
            or self.install_wanted is not None
        )

    def _hard_state_moved(self) -> bool:
        """Term, vote or commit moved since the last Ready: fields compared, as HardState's
        == is the interpreted one that dataclasses generates (py-spy, small writes)."""
        hs = self.prev_hs
        return self.term != hs.term or self.vote != hs.vote or self.commit != hs.commit

    def ready(self) -> Ready:
        changed = self._hard_state_moved()
        hs = self.hard_state() if changed else self.prev_hs
        last = self.last_index()
        hi = min(self.commit, last)
        # Most Readies of an awake group carry a heartbeat or its answer and no entries: the
        # log is not asked for empty ranges.
        rd = Ready(
            hard_state=hs if changed else None,
            truncate_after=None if self.truncated_to is None else self.unsent_from - 1,
            entries=tuple(self.log.entries(self.unsent_from, last + 1))
            if self.unsent_from <= last
            else (),
            messages=tuple(m for m in self.outbox if self._still_holds(m)),
            committed=tuple(self.log.entries(self.applied + 1, hi + 1))
            if self.applied < hi
            else (),
            soft_state=self.soft_state(),
            install=self.install_wanted,
        )
        self.install_wanted = None
        self.outbox = []
        self.prev_hs = hs
        self.prev_soft = rd.soft_state
        self.truncated_to = None
        self.unsent_from = last + 1
        self.applied = max(self.applied, hi)
        return rd

    def _still_holds(self, m: Message) -> bool:
        """An append carries entries as the log handed them out when it was built; a cut or a
        compaction before this Ready may have removed them (a leader held by SIGSTOP reads, in
        one loop turn, a late refusal that makes it send its tail again and the new leader's
        append that cuts that tail: the lazy payload then lay past the end of its segment,
        issue 43). Such an append is not sent, as a lost one: its term is stale, or the
        heartbeat sends again from the log as it is. By log matching, the first entry still
        held and the last one of the same term mean the log still holds them all."""
        if m.type != MsgType.APP or not m.entries or not self.rules.drop_stale_appends:
            return True
        first, last = m.entries[0].index, m.entries[-1]
        return first >= self.log.first_index() and self.log.term_at(last.index) == last.term

    def advance(self, rd: Ready) -> None:
        """The caller made `rd` durable: its entries now count as this replica's own match."""
        if rd.entries:
            last = rd.entries[-1]
            if self.log.term_at(last.index) == last.term:
                self.stable = max(self.stable, last.index)
        if self.role == Role.LEADER:
            self.leader_commit()
