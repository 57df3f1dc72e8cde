"""Membership change (issue 44; Raft thesis 4.1-4.3) and the leader's commit rule: a change's
entry commits through `leader_commit`, and a commit takes a change its next step (out of a
joint configuration; a removed leader hands over), so the two call each other."""

from __future__ import annotations

from raftlog.raft.core.replication import Replication
from raftlog.raft.core.values import NONE, ConfRefused, Entry, Message, MsgType, NotLeader, Role
from raftlog.raft.membership import Membership, command, joint_committed


class ConfChange(Replication):
    """The leader's commit, and the configuration changes it proposes and completes."""

    def propose_conf(self, target: Membership) -> int | NotLeader | ConfRefused:
        """Change the group's members to `target` (a simple configuration: voters and
        learners). A change of one voter is one entry; more go through a joint configuration
        that the leader leaves once it commits. The caller adds a replica as a learner and
        promotes it once caught up, so the group's majority never waits on an empty log."""
        if self.role != Role.LEADER or self.lead_transferee != NONE:
            return NotLeader(NONE if self.role == Role.LEADER else self.leader)
        problem = target.problem()
        if problem is None and target.joint:
            problem = "a target configuration cannot be joint"
        problem = problem or self.conf_change_blocked()
        if problem is not None:
            return ConfRefused(problem)
        return self._append_conf(self.joint_consensus(target))

    def conf_change_blocked(self) -> str | None:
        """Why a change cannot start now. One at a time: with two in flight, two majorities
        that do not overlap can form. And only once an entry of this leader's term committed
        (Ongaro's fix to single-server changes, 2015): a change proposed before that can
        be overwritten by a leader of an earlier configuration's majority after a change it
        never saw had committed."""
        if self.rules.one_conf_change_at_a_time and (
            self.confs[-1][0] > self.commit or self.conf.joint
        ):
            return "a configuration change is still in flight"
        if self.rules.conf_change_own_term and self.log.term_at(self.commit) != self.term:
            return "no entry of this leader's term has committed yet"
        return None

    def joint_consensus(self, target: Membership) -> Membership:
        """Raft thesis 4.3: a change of more than one voter enters a joint configuration
        (both voter sets' majorities) first. Applied at once, the old set's majority and the
        new set's can each elect a leader and commit without the other."""
        changed = target.voters ^ self.conf.voters
        if len(changed) <= 1 or not self.rules.joint_consensus:
            return target
        return Membership(target.voters, self.conf.voters, target.learners)

    def _append_conf(self, conf: Membership) -> int:
        self.wake()
        index = self.last_index() + 1
        self._cut(index - 1, [Entry(self.term, index, command(conf), conf)])
        if conf.joint and not self.rules.leave_joint_after_commit:
            left = conf.left()
            self._cut(index, [Entry(self.term, index + 1, command(left), left)])
        self.broadcast_append()
        self.leader_commit()
        return index

    def conf_committed(self) -> None:
        """The leader's configuration committed: a joint one is left (leave_joint_after_commit:
        left before, the new voters alone decide while the old ones may not yet know of the
        change), and a leader no longer among the voters hands over (TimeoutNow to its most
        caught-up voter) and steps down; it led the change without counting itself."""
        if self.role != Role.LEADER or self.confs[-1][0] > self.commit:
            return
        if self.conf.joint:
            if self.rules.leave_joint_after_commit:
                self._append_conf(self.conf.left())
            return
        if self.promotable() or not self.rules.removed_leader_steps_down:
            return
        last = self.last_index()
        ready = [p for p, pr in self.progress.items() if pr.match == last and self.conf.votes(p)]
        if ready:
            self._send(Message(MsgType.TIMEOUT_NOW, self.id, min(ready), self.term))
        self.become_follower(self.term, NONE)

    def leader_commit(self) -> None:
        """Raft's leader commit: the index a majority holds (the leader counts only what it has
        made durable), and only if that entry is of the leader's own term (Raft 5.4.2: counting
        replicas of an older term's entry can commit what a later leader overwrites)."""
        match = {p: pr.match for p, pr in self.progress.items()}
        match[self.id] = self.stable
        index = joint_committed(self.conf, match, self.rules.joint_majorities)
        if index <= self.commit:
            return
        if self.rules.leader_commit_own_term and self._term(index) != self.term:
            return
        self.commit_to(index)
        self.conf_committed()
