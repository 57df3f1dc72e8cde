"""Time, and who is alive: ticks and election timeouts, the leader's lease (CheckQuorum,
FORK 5), followers' stickiness (FORK 3), what the driver hears of nodes (FORK 10), and quiet
groups, which tick nothing until something happens to them (FORK 9)."""

from __future__ import annotations

from collections.abc import Container

from raftlog.raft.core.values import NONE, Message, MsgType, Role
from raftlog.raft.core.votes import Votes
from raftlog.raft.membership import joint_committed


class Liveness(Votes):
    """Ticks, leases and quiet groups."""

    def wants_election(self) -> bool:
        """The next tick would stand for election: the driver asks its budget first."""
        return (
            self.role != Role.LEADER
            and not self.quiet
            and self.installing is None
            and self.election_elapsed + 1 >= self.randomized_timeout
            and self.promotable()
        )

    def tick(self, may_stand: bool = True, connected: Container[int] | None = None) -> bool:
        """One logical time unit. `may_stand` False (the node's election budget is spent, or
        a new group's first replica has the first go): an election due now waits another
        random timeout instead. `connected`: the nodes a leader waits for before it goes quiet
        (`caught_up`; None: all). True when the tick did more than count (a heartbeat, an
        election, a step-down, the quiet): only then can there be a Ready to take (asking
        `has_ready` after each of a thousand busy groups' ticks was 5 % of a node's CPU)."""
        if self.quiet:
            return False
        self.ticks += 1
        self.election_elapsed += 1
        if self.role == Role.LEADER:
            self.heartbeat_elapsed += 1
            if self.rules.check_quorum and not self.check_quorum():
                self.become_follower(self.term, NONE)
                return True
            acted = False
            if self.election_elapsed >= self.cfg.election_tick:
                self.election_elapsed = 0
                self.lead_transferee = NONE  # a transfer that did not happen in time is off
            if self.cfg.learner_bytes_per_tick and self.conf.learners:
                self._refill_learners()
            if self.heartbeat_elapsed >= self.cfg.heartbeat_tick:
                self.heartbeat_elapsed = 0
                for pr in self.progress.values():
                    pr.paused = False
                self.broadcast_append()
                acted = True
            if self.caught_up(connected):
                self.idle_ticks += 1
            else:
                self.idle_ticks = 0
                self.quiet_acks = None  # not going quiet after all
            if self.cfg.quiesce_ticks and self.idle_ticks >= self.cfg.quiesce_ticks:
                self.quiesce()
                acted = True
            return acted
        if self.election_elapsed >= self.randomized_timeout:
            # Installing, the log is the caller's to change: no campaign until it is done.
            if may_stand and self.installing is None and self.promotable():
                self.campaign(pre=self.rules.pre_vote)
                return True
            self.election_elapsed = 0
            self._reset_timeout()
        return False

    def check_quorum(self) -> bool:
        """FORK 5 (CheckQuorum): a leader keeps leading only while a majority was heard within
        the minimum election timeout, checked every tick. A cut-off leader would otherwise take
        proposals forever; checked once per timeout (etcd's way) it led on for up to two, and a
        new leader elected meanwhile left clients' requests in two places (librdkafka then saw
        skipped sequence numbers and bumped its producer epoch). No follower grants a vote, or
        starts an election, before a whole election timeout without the leader (stickiness),
        so by the time another can win, this one has stopped."""
        lease = self.lease_ticks()
        if self.ticks - self.lease_from < lease:
            return True
        self._renew_lease()
        return self.ticks - self.lease_from < lease

    def check_woken_lease(self) -> None:
        """FORK 5: a quiet leader woken (a client's write, a peer's message: driver.wake_to_lead;
        its keepalive finding a follower silent: driver.peer_changed) whose lease its
        followers' silences have already ended steps down at once, before it answers, as its
        next tick would. Left to that tick, it took a write meanwhile; and woken by its
        keepalive after its node's hold, a cut-off leader still led when, in that tick,
        another was elected (the simulation's held detection schedules, seed 58)."""
        if self.role == Role.LEADER and self.rules.woken_lease_checked and not self.check_quorum():
            self.become_follower(self.term, NONE)

    def held_silence(self, before: int, since: int) -> int:
        """FORK 5: the silence a quiet leader woken `since` ticks after its node's hold is
        woken with, its majority last heard `before` ticks before the hold began: its lease
        as `resume` leaves an awake leader's, from the hold's end (what was left when the hold
        began, at most half an election timeout). Its followers' timers on it ran through the
        hold; its own lease did not, as it was quiet."""
        return self.lease_ticks() - self._hold_grace(before) + since

    def _hold_grace(self, spent: int) -> int:
        """FORK 5: what a leader whose node was held keeps of its lease from the hold's end:
        what was left when the hold began (`spent` ticks of it gone), at most half an election
        timeout (`resume` for one awake through the hold, `held_silence` for a quiet one)."""
        return min(max(0, self.lease_ticks() - spent), self.cfg.election_tick // 2)

    def lease_ticks(self) -> int:
        """FORK 5: a leader's lease, a tick short of the minimum election timeout. A follower
        counts ticks, not time: the first after it heard the leader counts whole however soon
        it came, so its timer may run out up to a tick early, and on a LAN its election takes
        a few milliseconds. A whole timeout long, a cut-off leader whose node ticked at
        another phase than its followers' still led when one of them was elected (the
        simulation's detection schedules once their nodes ticked at phases of their own)."""
        shorter = self.rules.lease_inside_timers and self.cfg.election_tick > 1
        return self.cfg.election_tick - 1 if shorter else self.cfg.election_tick

    def lease_ending(self) -> bool:
        """The next tick checks the lease against the followers heard: the driver gives their
        nodes' last words first (`heard_from`)."""
        return self.role == Role.LEADER and self.ticks + 1 - self.lease_from >= self.lease_ticks()

    def resume(self, missed: int) -> None:
        """FORK 5 after a stall: the leader's node was held for `missed` ticks (SIGSTOP, a long
        loop turn). Its lease ages by the stall, but what is left of it is at least half an
        election timeout (or what was left before, if less), and it heartbeats on the next
        tick: the answers that waited through the stall are read, and a majority that answers
        keeps it.
        Deposed at once, every leader of a loaded node stepped down after each long turn (at
        3,000 partitions, an election storm that never settled); a leader that another
        replaced learns it from the first stale-term answer, and one cut off stops after
        that grace."""
        if self.role != Role.LEADER or self.quiet or missed <= 0:
            return
        grace = self._hold_grace(self.ticks - self.age_answers(missed))
        self.ticks += missed
        floor = self.ticks - self.lease_ticks() + grace
        self.lease_from = max(self.lease_from, floor)
        self.heartbeat_elapsed = max(self.heartbeat_elapsed, self.cfg.heartbeat_tick - 1)
        if self.cfg.learner_bytes_per_tick and self.conf.learners:
            # The throttle is a rate per second, not per tick run: a busy node whose ticks
            # came a few hundred ms apart sent its learner a sixth of it (issue 44).
            self._refill_learners(missed)

    def age_answers(self, missed: int) -> int:
        """FORK 5 (`resume`, its node held `missed` ticks from now): a follower's answer read
        before this leader's second tick after the hold counts as heard when the hold began.
        It answered what this leader sent before the hold (it may have waited in the socket
        through it), or was read with those (the first heartbeat after the hold goes out at
        the first tick, and what is read after that tick may still be what waited): its
        follower's timer on this leader runs from before the hold. Counted as heard when read,
        a leader held 0.3 s, cut off meanwhile, renewed its lease from them and led past its
        grace while its followers elected another (the simulation's held detection schedules
        with awake leaders, seed 705). Answers to its next heartbeat renew it as before.
        Returns the tick its lease ran from when the hold began: from when a majority was last
        heard (its next check would renew it from there), not the `lease_from` of its last
        check, up to a lease old. Without the first heartbeat's answers, a healthy leader
        held near the end of that lease's cycle kept too short a grace to hear the next."""
        if not self.rules.held_answers_aged:
            return self.lease_from
        self.aged_at = self.ticks
        self.aged_until = self.ticks + missed + 1
        return max(self.lease_from, self._quorum_heard())

    def _quorum_heard(self) -> int:
        """The latest tick by which a majority (this leader counting itself) was heard. A
        follower not heard (since the election, or the wake) counts as heard never, not at
        tick 0: ticks count from the replica's start, and a leader a few ticks old kept its
        lease for a whole timeout with nobody heard."""
        never = self.ticks - 2 * self.cfg.election_tick
        heard = {p: self.heard_at.get(p, never) for p in self.conf.voting()}
        heard[self.id] = self.ticks
        return joint_committed(self.conf, heard, self.rules.joint_majorities)

    def _renew_lease(self) -> None:
        self.lease_from = self._quorum_heard()

    def heard_from(self, peer: int, ago: int = 0) -> None:
        """FORK 10: the driver heard `peer`'s node `ago` ticks back. On a node busy with many
        groups a group's own answers can wait behind the others'; its node being heard counts
        for CheckQuorum so the leader is not deposed for that."""
        if self.role == Role.LEADER and peer in self.progress:
            # Its replica may have last heard this leader a heartbeat before its node spoke
            # (the heartbeats cut, the pings a moment later): its timer runs from then.
            late = self.cfg.heartbeat_tick if self.rules.lease_inside_timers else 0
            self._heard(peer, self.ticks - ago - late)

    def _heard(self, peer: int, at: int) -> None:
        if at > self.heard_at.get(peer, -1):
            self.heard_at[peer] = at

    def caught_up(self, connected: Container[int] | None = None) -> bool:
        """FORK 9: nothing is left to do in this group: every follower holds the whole log and
        knows it committed, a majority answered within the last two heartbeats (a leader cut
        off does not go quiet: CheckQuorum must depose it), and no transfer is under way.
        A follower on a node not `connected` (the driver holds no connection to it: killed,
        cut off, or silent past the mesh's DEAD_AFTER) is not waited for, as CockroachDB
        quiesces without a dead replica: its node's reconnection wakes the group
        (`concerns`). Waited for, one node's death kept every group it was in ticking on the
        others, thousands a tick at 3,000 partitions."""
        last = self.last_index()
        if self.commit != last or self.stable != last or self.lead_transferee != NONE:
            return False
        for p, pr in self.progress.items():
            behind = pr.match != last or pr.commit != last
            if behind and (connected is None or p in connected):
                return False
        return self.ticks - self._quorum_heard() <= 2 * self.cfg.heartbeat_tick

    def quiesce(self) -> None:
        """The leader's last heartbeat, marked: a follower holding exactly this log goes quiet
        too. A node with thousands of idle groups then spends nothing on them. The leader goes
        quiet once a majority of its voters did (`quiet_acked`); till then it ticks, and sends
        this again after as many idle ticks."""
        self.idle_ticks = 0
        last, term = self.last_index(), self.last_term()
        for p in self.progress:
            self._send(
                Message(
                    MsgType.APP, self.id, p, self.term, last, term, commit=self.commit, quiesce=True
                )
            )
        if not self.rules.quiet_after_majority:
            self.quiet = True
            return
        if self.quiet_acks is None:
            self.quiet_acks = set()
        self._quiet_if_acked()

    def quiet_acked(self, m: Message) -> None:
        """FORK 9 with FORK 5: a follower answered the quiesce heartbeat quiet. The leader goes
        quiet once it and such followers are a majority of (each half of) its voters, as they
        then refuse any other's (pre-)votes until the keepalive wakes them (FORK 3 and a
        follower's lag, `driver.peer_changed`). Quiet at once, a leader whose quiesce
        heartbeats a cut lost stopped its lease's check while its followers, awake, elected
        another after a plain election timeout: it still led, quiet, till its own keepalive
        round woke it (13 of 20,000 of the simulation's detection schedules with clients)."""
        acks = self.quiet_acks
        if acks is not None and m.index == self.last_index() and self.conf.votes(m.src):
            acks.add(m.src)
            self._quiet_if_acked()

    def _quiet_if_acked(self) -> None:
        acks = self.quiet_acks
        assert acks is not None
        quiet = {p: int(p in acks or p == self.id) for p in self.conf.voting()}
        if joint_committed(self.conf, quiet, self.rules.joint_majorities) >= 1:
            self.quiet = True
            self.quiet_acks = None

    def leader_gone(self) -> None:
        """The driver's connection to this follower's leader's node closed (its process died,
        or the link failed): a whole minimum election timeout counts as passed, so it stands
        within a random part of one and grants a fellow follower's vote at once. Counted from
        zero, a killed leader's partitions waited an extra timeout for their next leader.
        PreVote keeps a follower whose link alone failed from deposing a leader the others
        still hear: they refuse its pre-votes."""
        if self.role == Role.FOLLOWER and self.leader != NONE:
            self.wake()
            self.election_elapsed = max(self.election_elapsed, self.cfg.election_tick)

    def concerns(self, node: int) -> bool:
        """Whether a change in `node`'s liveness is this quiet replica's business: a leader's
        for every follower (CheckQuorum, catching it up), a follower's only for its leader.
        A follower woken for another follower's node would time out with its leader quiet."""
        return (
            node != self.id
            and node in self.conf.members()
            and (self.role == Role.LEADER or self.leader in (node, NONE))
        )

    def wakes_leader(self, m: Message) -> bool:
        """The message would wake this quiet leader (`step`): the driver wakes it first, its
        lease from its followers' nodes' silences (driver.wake_to_lead)."""
        return self.quiet and self.role == Role.LEADER and not self._keeps_quiet(m)

    def _keeps_quiet(self, m: Message) -> bool:
        """The two messages of the quiet exchange (the leader's quiesce heartbeat, a follower's
        success answer naming the leader's last index), a heartbeat that brings nothing new
        (one sent just before the quiesce heartbeat may arrive after it), and a vote request
        to a follower (other than its leader's own, or a transfer's): its leader was alive when
        it went quiet and, the driver says, still is (or this replica would have been woken),
        so stickiness refuses it. Woken by it, the follower's timer would run with its leader
        quiet and it would depose a healthy leader."""
        if m.type in (MsgType.VOTE, MsgType.PREVOTE):
            return self.role == Role.FOLLOWER and not self._passes_lease(m)
        if m.term != self.term:
            return False
        if m.type == MsgType.APP:  # the quiesce heartbeat, or a plain one that brings nothing new
            return m.quiesce or (
                not m.entries
                and m.index == self.last_index()
                and m.commit == self.commit
                and self.log.term_at(m.index) == m.log_term
            )
        return (
            m.type == MsgType.APP_RESP
            and self.role == Role.LEADER
            and not m.reject
            and m.index == self.last_index()
        )

    def _passes_lease(self, m: Message) -> bool:
        """FORK 3: the (pre-)vote requests stickiness does not refuse: a leadership transfer's,
        and the request of the leader this replica follows, which stepped down (CheckQuorum
        after a stall, say). Refused, a group whose followers were quiet never elected
        again: their leader's node was alive, so nothing woke them, and it was the only one
        standing (the simulation's seed 4263)."""
        return (m.transfer and self.rules.transfer_skips_lease) or (
            m.src == self.leader and self.rules.leader_may_stand_again
        )

    def in_lease(self) -> bool:
        """FORK 3 (leader stickiness): a leader was heard within the minimum election timeout."""
        return (
            self.rules.leader_stickiness
            and self.leader != NONE
            and self.election_elapsed < self.cfg.election_tick
        )
