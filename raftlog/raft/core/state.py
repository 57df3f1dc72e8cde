"""A replica's state, and the edits every rule makes through: term, vote and commit, the log
and the configuration it holds (issue 44), the role's bookkeeping. The layers above it add the
rules (raftlog/raft/core/__init__.py names them), each calling only down."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from raftlog.raft.core.log import RaftLog
from raftlog.raft.core.rules import Config
from raftlog.raft.core.values import NONE, Entry, HardState, Install, Message, Role, SoftState
from raftlog.raft.membership import Membership, joint_silence


@dataclass(slots=True)
class Progress:
    """The leader's view of one follower. In probe it sends one append per heartbeat until
    one matches; in replicate it sends optimistically and moves `next` on at once."""

    match: int = 0
    next: int = 1
    replicate: bool = False
    paused: bool = False
    commit: int = 0  # the follower's commit index, as its last success answer said
    budget: int = 0  # a learner's data it may still be sent (Config.learner_bytes_per_tick)


class State:
    """The state of one replica of one Raft group (`raft.Raft` is the whole replica). A
    proposal and a configuration change wake a quiet group, so `wake` is here, below them."""

    def __init__(
        self, config: Config, log: RaftLog, hard_state: HardState, rng: random.Random
    ) -> None:
        self.id = config.id
        self.cfg = config
        self.rules = config.rules
        self.log = log
        self.rng = rng
        self.term = hard_state.term
        self.vote = hard_state.vote
        self.commit = hard_state.commit
        self.role = Role.FOLLOWER
        self.leader = NONE
        self.applied = config.applied
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_timeout = 0
        self.progress: dict[int, Progress] = {}
        # FORK 5: a leader's lease. `ticks` counts this replica's ticks; `heard_at` is the tick
        # each follower was last heard at; `lease_from` the latest tick a majority was heard by.
        self.ticks = 0
        self.heard_at: dict[int, int] = {}
        self.lease_from = 0
        # FORK 5: a follower's answer stepped up to tick `aged_until` (the first after a hold,
        # `resume`) counts as heard at `aged_at`, the tick the hold began.
        self.aged_at = 0
        self.aged_until = -1
        self.votes: dict[int, bool] = {}
        self.lead_transferee = NONE
        # FORK 7: a snapshot this follower is installing; its log is the caller's until then.
        self.installing: Install | None = None
        self.install_wanted: Install | None = None  # not yet handed out in a Ready
        # FORK 9: a quiet group has no timers and sends nothing until something happens to it.
        self.quiet = False
        self.idle_ticks = 0  # a leader's ticks with its whole group caught up
        # A leader that sent its quiesce heartbeat: the voters that answered it quiet (None:
        # not going quiet); it goes quiet once they and it are a majority (`quiet_acked`).
        self.quiet_acks: set[int] | None = None
        self.outbox: list[Message] = []
        # Persistence bookkeeping: entries from `unsent_from` on were not yet handed out in a
        # Ready; `truncated_to` is a cut not yet handed out; `stable` is the durable prefix.
        last = log.last_index()
        self.unsent_from = last + 1
        self.truncated_to: int | None = None
        self.stable = last
        self.prev_hs = hard_state
        self.prev_soft = SoftState(NONE, Role.FOLLOWER)
        # Issue 44: (index, configuration) from the log's start on, the last one in force.
        # A replica need not be a member: a new one learns its configuration from the log.
        base = config.membership or Membership.of(config.peers)
        problem = base.problem()
        if problem is not None:
            raise ValueError(f"configuration {base}: {problem}")
        self.confs: list[tuple[int, Membership]] = [(0, base)]
        self.confs += [(e.index, e.conf) for e in config.conf_entries if e.conf is not None]
        self.conf = self.confs[-1][1]
        self._reset_timeout()

    # ---- small helpers -------------------------------------------------------------------

    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.commit)

    def soft_state(self) -> SoftState:
        return SoftState(self.leader, self.role)

    def last_index(self) -> int:
        return self.log.last_index()

    def last_term(self) -> int:
        t = self.log.term_at(self.log.last_index())
        return 0 if t is None else t

    def _term(self, index: int) -> int:
        t = self.log.term_at(index)
        if t is None:
            raise IndexError(
                f"no entry {index} (log {self.log.first_index()}..{self.last_index()})"
            )
        return t

    def _send(self, m: Message) -> None:
        self.outbox.append(m)

    def _reset_timeout(self) -> None:
        """An election timeout drawn from [election_tick, 2 * election_tick): staggers elections."""
        self.randomized_timeout = self.cfg.election_tick + self.rng.randrange(
            self.cfg.election_tick
        )

    def _cut(self, after: int, entries: Sequence[Entry] = ()) -> None:
        """Change the log, never below the commit index, and note what the caller must persist."""
        if after < self.commit:
            raise AssertionError(f"replica {self.id} would cut committed entry {after + 1}")
        if after < self.last_index():
            self.truncated_to = (
                after if self.truncated_to is None else min(self.truncated_to, after)
            )
            self.stable = min(self.stable, after)
        self.unsent_from = min(self.unsent_from, after + 1)
        self.log.truncate_and_append(after, entries)
        changed = self.confs[-1][0] > after and self.conf_follows_truncation(after)
        for e in entries:
            if e.conf is not None:
                self.confs.append((e.index, e.conf))
                changed = True
        if changed:
            self._use(self.confs[-1][1])

    def commit_to(self, index: int) -> None:
        if index > self.commit:
            self.commit = index

    # ---- the configuration the log holds (issue 44) --------------------------------------

    def promotable(self) -> bool:
        """Only a voter stands for election: a learner, or a replica removed (or not yet
        added), only follows; but see `stands_until_removal_commits`."""
        return self.conf.votes(self.id) or self.stands_until_removal_commits()

    def stands_until_removal_commits(self) -> bool:
        """Raft thesis 4.1: a replica its latest configuration removes still stands while
        that change is not known to have committed: it may be the vote the change needs. A
        leader of {2,3} that appended {3} and was stopped before 3 had it left 3 unable to
        win without 2's vote (2's log was longer) and 2 never standing: the group was
        leaderless for good (the membership simulation's seed 42)."""
        return (
            self.rules.stand_until_removal_commits
            and self.confs[-1][0] > self.commit
            and self.membership_at(self.commit).votes(self.id)
        )

    def membership_at(self, index: int) -> Membership:
        """The configuration in force at `index` (the caller saves it with a snapshot there)."""
        for at, conf in reversed(self.confs):
            if at <= index:
                return conf
        return self.confs[0][1]

    def quorum_silence(self, silent: dict[int, int], unknown: int) -> int:
        """Ticks since a majority of (each half of) the voters was heard, for a leader's wake."""
        return joint_silence(self.conf, self.id, silent, unknown)

    def conf_follows_truncation(self, after: int) -> bool:
        """A cut removes the configuration entries it cuts and their changes with them (the
        configuration is the log's latest, committed or not). Left in force, a replica counts
        votes and commits with members a deposed leader only proposed."""
        if not self.rules.conf_follows_truncation:
            return False
        while len(self.confs) > 1 and self.confs[-1][0] > after:
            self.confs.pop()
        return True

    def _use(self, conf: Membership) -> None:
        """The configuration is in force from now: a leader tracks exactly its members."""
        self.conf = conf
        if self.role != Role.LEADER:
            return
        last = self.last_index()
        members = conf.members()
        for p in members:
            if p != self.id and p not in self.progress:
                self.progress[p] = Progress(match=0, next=last + 1)
        for p in list(self.progress):
            if p not in members:
                del self.progress[p]
                self.heard_at.pop(p, None)
        if self.lead_transferee != NONE and not conf.votes(self.lead_transferee):
            self.lead_transferee = NONE

    # ---- role and quiet ------------------------------------------------------------------

    def become_follower(self, term: int, leader: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = NONE
        self.role = Role.FOLLOWER
        self.leader = leader
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.lead_transferee = NONE
        self.quiet = False
        self.quiet_acks = None
        self.progress = {}
        self.votes = {}
        self._reset_timeout()

    def wake(self, elapsed: int = 0) -> None:
        """Ends the quiet: timers run again, as if `elapsed` ticks had passed since the leader
        was last heard (a follower) or since a majority of its followers was (a leader). The
        driver calls this when a peer's node falls silent, goes or comes back (the group may
        have lost its leader or a follower), with those ticks as its nodes were heard; any
        message that is not the quiet exchange itself, and a proposal, wake it too. A leader
        going quiet goes no further."""
        self.quiet_acks = None
        if self.quiet:
            self.quiet = False
            self.election_elapsed = elapsed
            self.heartbeat_elapsed = 0
            self.idle_ticks = 0
            if self.role == Role.LEADER:
                # What its followers answered before the quiet is as old as the quiet: only
                # answers from now on count, and the lease runs from when the nodes were heard.
                self.heard_at = {}
                self.lease_from = self.ticks - elapsed
