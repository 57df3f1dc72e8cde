"""A pure Raft state machine for one group, in the shape of etcd's raft (issue 27).

No I/O, no clock, no threads: `tick()` is one logical time unit, `step(message)` takes a peer's
message, `propose(data)` appends on the leader. Each only changes state; `ready()` then says
what to do (hard state and entries to persist, messages to send, committed entries to apply)
and `advance(ready)` tells the core they were made durable. The caller's one rule: a Ready's
messages leave only after its hard state and entries are durable.

Every rule of raftlog/raft/FORK.md that belongs to a core is a named method here, and each can
be switched off through `Rules` so the tests can show what breaks without it:
FORK 1 `follower_commit`, 2 `append_matching`, 3 `campaign` (PreVote) and `in_lease`
(stickiness; a transfer's requests pass it), 4 `stale_term_answer`, 5 `check_quorum` (and the
Ready's soft state, by which the caller fails a deposed leader's waiters), 6 `propose`
(refuses on a follower), 8 `reject_hint` / `handle_reject` / `find_conflict_by_term`,
9 `caught_up`, `quiesce`, `wake`, `concerns` (quiet groups; off with Config.quiesce_ticks=0),
10 `heard_from`, TimeoutNow `transfer_leadership`; Raft 5.4.2 `leader_commit`. FORK 7 is
`send_snapshot` / `handle_snapshot` / `install_done`: a follower that needs entries its leader
compacted installs the leader's snapshot point, which the caller fetches (for a partition, the
segment data up to that entry) while the core waits. FORK 11 (heartbeats without the handler)
is the driver's: one frame per peer per loop turn; the election budget (FORK 9's) is the
driver's too, asked through `wants_election` / `tick(may_stand)`.
"""

from __future__ import annotations

import random
from collections.abc import Container, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from raftlog.raft.membership import (
    Membership,
    command,
    joint_committed,
    joint_silence,
    joint_vote,
)
from raftlog.raft.quorum import VoteResult

NONE = 0
LEARNER_BURST = 10  # ticks of a learner's throttled rate it may be sent at once
"""Node ids are positive; 0 means "nobody" (no vote, no known leader)."""


class Role(Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class MsgType(Enum):
    APP = "app"  # append entries; with none it is the heartbeat
    APP_RESP = "app-resp"
    VOTE = "vote"
    VOTE_RESP = "vote-resp"
    PREVOTE = "prevote"
    PREVOTE_RESP = "prevote-resp"
    TIMEOUT_NOW = "timeout-now"  # leadership transfer: the target stands at once
    SNAP = "snap"  # install the leader's snapshot point: index/log_term name its last entry
    PROP = "prop"  # a forwarded proposal: only sent when Rules.no_forwarding is off


class Payload(Protocol):
    """An entry's data as the core sees it: opaque, sized. A log may hand out a lazy payload
    that reads its bytes only when a message carrying it is encoded (the segment journal does:
    a leader's append is read back from its segment only if it is sent)."""

    def __len__(self) -> int: ...

    def __bytes__(self) -> bytes: ...


# The values the core hands out (entries, messages, states, Readies) are never changed once
# made; they are plain slotted dataclasses, not frozen ones, because a frozen dataclass's
# __init__ costs about six times as much and the per-entry path makes several of them.


@dataclass(slots=True)
class Entry:
    """`conf`: the group's configuration from this entry on (a configuration entry, issue 44);
    it is used from when it is appended, not committed (Raft thesis 4.1)."""

    term: int
    index: int
    data: Payload = b""
    conf: Membership | None = None


@dataclass(slots=True)
class Message:
    """One message between replicas of a group. Field meanings follow etcd's raftpb.Message:

    APP: index/log_term = the entry just before `entries`, commit = leader's commit.
    APP_RESP: index = last index matched (success) or the rejected prev index (reject);
    reject_hint/log_term = the follower's conflict hint (index, term there).
    VOTE/PREVOTE: index/log_term = the candidate's last entry.
    SNAP: index/log_term = the snapshot's last entry (the leader's first held entry), conf =
    the configuration in force there.
    """

    type: MsgType
    src: int
    dst: int
    term: int
    index: int = 0
    log_term: int = 0
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    reject: bool = False
    reject_hint: int = 0
    transfer: bool = False
    quiesce: bool = False  # APP: the leader's last heartbeat before its group goes quiet
    conf: Membership | None = None


@dataclass(slots=True)
class HardState:
    """What must be durable before any message that depends on it leaves."""

    term: int = 0
    vote: int = NONE
    commit: int = 0


@dataclass(slots=True)
class SoftState:
    """Volatile, for the caller: who leads (to redirect clients) and this replica's role."""

    leader: int
    role: Role


@dataclass(slots=True)
class Install:
    """A snapshot to install: the caller fetches what the log holds up to (index, term) from
    `source`, replaces the log with that entry alone and calls `install_done`, or gives up
    and calls `install_failed`. Until then the core leaves its log alone."""

    index: int
    term: int
    source: int
    membership: Membership | None = None  # the configuration at the snapshot point


@dataclass(slots=True)
class Ready:
    """What the caller does, in order: cut the durable log after `truncate_after` (if not
    None), append `entries`, persist `hard_state` (if not None), sync; then send `messages`,
    apply `committed`, start `install` (if not None), and call `advance(ready)`."""

    hard_state: HardState | None
    truncate_after: int | None
    entries: tuple[Entry, ...]
    messages: tuple[Message, ...]
    committed: tuple[Entry, ...]
    soft_state: SoftState
    install: Install | None = None


@dataclass(slots=True)
class NotLeader:
    """A proposal refused: the caller redirects its client to `leader` (NONE if unknown)."""

    leader: int


@dataclass(slots=True)
class Forwarded:
    """A proposal sent on to the leader (only with Rules.no_forwarding off): its index is
    unknown to the caller, which is exactly why partitions refuse instead."""

    leader: int


@dataclass(slots=True)
class ConfRefused:
    """A configuration change the leader will not append now, and why."""

    reason: str


ProposeResult = int | NotLeader | Forwarded


class RaftLog(Protocol):
    """The narrow seam to the log the core reads and extends. Indexes start at 1. Entries
    before `first_index()` were compacted by the caller (only committed, applied ones); the
    entry at `first_index()` stays and is the snapshot point a lagging follower installs."""

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def term_at(self, index: int) -> int | None:
        """The term at `index`; 0 for index 0; None when outside the log."""

    def entries(self, lo: int, hi: int) -> list[Entry]:
        """Entries with lo <= index < hi."""

    def truncate_and_append(self, after: int, entries: Sequence[Entry]) -> None:
        """Drop every entry after `after`, then append `entries` (starting at after + 1)."""


class MemoryLog:
    """An in-memory RaftLog: the simulation's and the unit tests' log. `entries` start at
    index `first` (1 unless the log was compacted)."""

    def __init__(self, entries: Sequence[Entry] = (), first: int = 1) -> None:
        self._entries: list[Entry] = list(entries)
        self._first = first

    def first_index(self) -> int:
        return self._first

    def last_index(self) -> int:
        return self._first + len(self._entries) - 1

    def term_at(self, index: int) -> int | None:
        if index == 0:
            return 0
        if self._first <= index <= self.last_index():
            return self._entries[index - self._first].term
        return None

    def entries(self, lo: int, hi: int) -> list[Entry]:
        first = self._first
        return self._entries[max(lo, first) - first : max(hi, first) - first]

    def truncate_and_append(self, after: int, entries: Sequence[Entry]) -> None:
        if after < self._first - 1:
            raise ValueError(f"cut after {after}, below the compacted log's start {self._first}")
        del self._entries[after + 1 - self._first :]
        for i, e in enumerate(entries):
            if e.index != after + 1 + i:
                raise ValueError(f"entry {e.index} appended at {after + 1 + i}")
        self._entries.extend(entries)

    def compact(self, to: int) -> None:
        """Drops the entries before `to` (a snapshot was taken at `to`)."""
        if to > self._first:
            del self._entries[: to - self._first]
            self._first = to

    def reset(self, snapshot: Entry) -> None:
        """The log after a snapshot install: the snapshot's last entry alone."""
        self._entries = [snapshot]
        self._first = snapshot.index


@dataclass(frozen=True, slots=True)
class Rules:
    """raftlog's rules (FORK.md numbers), all on by default. Switches exist only so the tests
    can show what each rule prevents; production never turns one off."""

    follower_commit_rule: bool = True  # 1: commit to min(leaderCommit, last new entry)
    keep_matching_entries: bool = True  # 2: only a conflicting entry and after it are cut
    pre_vote: bool = True  # 3
    leader_stickiness: bool = True  # 3: no (pre)vote while a leader was heard lately
    stale_term_answer: bool = True  # 4
    check_quorum: bool = True  # 5: a leader without a majority's answers steps down
    no_forwarding: bool = True  # 6
    conflict_hint: bool = True  # 8: a refused append names and cuts what is divergent
    leader_commit_own_term: bool = True  # Raft 5.4.2: count replicas only in own term
    transfer_skips_lease: bool = True  # 3: a transfer's vote request passes stickiness
    leader_may_stand_again: bool = True  # 3: so does the request of the leader followed
    snapshot_keeps_log: bool = True  # 7: a log holding the snapshot's last entry keeps its tail
    drop_stale_appends: bool = True  # an append whose entries a cut removed is not sent
    # Membership change (issue 44; Raft thesis 4.1-4.3, etcd's confchange):
    conf_change_own_term: bool = True  # a leader changes members only once its term committed
    one_conf_change_at_a_time: bool = True  # and only with no other change uncommitted
    joint_consensus: bool = True  # more than one voter changes through a joint configuration
    joint_majorities: bool = True  # which needs a majority of both voter sets
    leave_joint_after_commit: bool = True  # left only once it committed
    conf_follows_truncation: bool = True  # a cut configuration entry takes its change back
    stand_until_removal_commits: bool = True  # a removed voter may still be needed
    removed_leader_steps_down: bool = True  # once the change that removed it committed


@dataclass(frozen=True, slots=True)
class Config:
    id: int
    peers: tuple[int, ...]  # the voters a new group starts with
    election_tick: int = 10  # minimum election timeout, in ticks
    heartbeat_tick: int = 1
    max_append: int = 64  # entries per append message
    max_append_bytes: int = 1 << 20  # data per append message (at least one entry goes)
    max_batches: int = 8  # append messages per send to one follower in replicate
    # Ticks a leader's group must be wholly caught up before it goes quiet (FORK 9); 0: never.
    quiesce_ticks: int = 4
    applied: int = 0  # the caller's state machine holds entries up to here
    # A learner catching up gets at most this much entry data per tick (a burst of up to
    # LEARNER_BURST ticks' worth), so a move's copy leaves the leader room for its writes;
    # 0: unthrottled (Kafka's leader.replication.throttled.rate, per learner).
    learner_bytes_per_tick: int = 0
    rules: Rules = field(default_factory=Rules)
    # The configuration in force at the log's first entry, as the caller saved it with its
    # snapshot (None: `peers` vote), and the configuration entries its log holds after that.
    membership: Membership | None = None
    conf_entries: tuple[Entry, ...] = ()


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


class Raft:
    """One replica of one Raft group."""

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
        self.votes: dict[int, bool] = {}
        self.lead_transferee = NONE
        # FORK 7: a snapshot this follower is installing; its log is the caller's until then.
        self.installing: Install | None = None
        self.install_wanted: Install | None = None  # not yet handed out in a Ready
        # FORK 9: a quiet group has no timers and sends nothing until something happens to it.
        self.quiet = False
        self.idle_ticks = 0  # a leader's ticks with its whole group caught up
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

    # ---- membership (issue 44) -------------------------------------------------------------

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

    # ---- roles -----------------------------------------------------------------------------

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
        self.progress = {}
        self.votes = {}
        self._reset_timeout()

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

    # ---- time ------------------------------------------------------------------------------

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
            self.idle_ticks = self.idle_ticks + 1 if self.caught_up(connected) else 0
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
        if self.ticks - self.lease_from < self.cfg.election_tick:
            return True
        self._renew_lease()
        return self.ticks - self.lease_from < self.cfg.election_tick

    def lease_ending(self) -> bool:
        """The next tick checks the lease against the followers heard: the driver gives their
        nodes' last words first (`heard_from`)."""
        return (
            self.role == Role.LEADER and self.ticks + 1 - self.lease_from >= self.cfg.election_tick
        )

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
        left = max(0, self.cfg.election_tick - (self.ticks - self.lease_from))
        self.ticks += missed
        floor = self.ticks - self.cfg.election_tick + min(left, self.cfg.election_tick // 2)
        self.lease_from = max(self.lease_from, floor)
        self.heartbeat_elapsed = max(self.heartbeat_elapsed, self.cfg.heartbeat_tick - 1)
        if self.cfg.learner_bytes_per_tick and self.conf.learners:
            # The throttle is a rate per second, not per tick run: a busy node whose ticks
            # came a few hundred ms apart sent its learner a sixth of it (issue 44).
            self._refill_learners(missed)

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
            self._heard(peer, self.ticks - ago)

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
        too. A node with thousands of idle groups then spends nothing on them."""
        self.quiet = True
        self.idle_ticks = 0
        last, term = self.last_index(), self.last_term()
        for p in self.progress:
            self._send(
                Message(
                    MsgType.APP, self.id, p, self.term, last, term, commit=self.commit, quiesce=True
                )
            )

    def wake(self, elapsed: int = 0) -> None:
        """Ends the quiet: timers run again, as if `elapsed` ticks had passed since the leader
        was last heard (a follower) or since a majority of its followers was (a leader). The
        driver calls this when a peer's node falls silent, goes or comes back (the group may
        have lost its leader or a follower), with those ticks as its nodes were heard; any
        message that is not the quiet exchange itself, and a proposal, wake it too."""
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

    # ---- proposals ---------------------------------------------------------------------------

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

    # ---- messages ----------------------------------------------------------------------------

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

    def _vote_result(self) -> VoteResult:
        return joint_vote(self.conf, self.votes, self.rules.joint_majorities)

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
        elif m.type == MsgType.TIMEOUT_NOW and self.installing is None:
            self.campaign(pre=False, transfer=True)

    # ---- snapshots (FORK 7) ------------------------------------------------------------------

    def handle_snapshot(self, m: Message) -> None:
        """FORK 7: a snapshot confirms its last entry only. A log that already holds that entry
        keeps it and everything after it (Raft's InstallSnapshot rule: cutting them removed
        committed, acknowledged entries until they came again) and answers that index, not its
        own last one; a log that lacks it asks the caller to install it."""
        if m.index <= self.commit:
            self._accept(m.src, self.commit)
        elif self.rules.snapshot_keeps_log and self.log.term_at(m.index) == m.log_term:
            self.commit_to(m.index)  # the leader's snapshot holds only committed entries
            self._accept(m.src, m.index)
        else:
            wanted = Install(m.index, m.log_term, m.src, m.conf)
            self.installing = self.install_wanted = wanted

    def install_done(self, index: int, term: int) -> None:
        """The caller installed the snapshot: the log is now entry `index` (of `term`) alone,
        durable, and the state machine holds everything up to it."""
        if self.log.first_index() != index or self.log.term_at(index) != term:
            raise ValueError(f"install_done({index}, {term}) but the log starts elsewhere")
        wanted = self.installing
        if wanted is not None and wanted.membership is not None:
            self.confs = [(0, wanted.membership)]
            self._use(wanted.membership)
        self.installing = self.install_wanted = None
        self.commit = max(self.commit, index)
        self.applied = max(self.applied, index)
        self.stable = self.last_index()
        self.unsent_from = self.last_index() + 1
        self.truncated_to = None
        if self.role == Role.FOLLOWER and self.leader != NONE:
            self._accept(self.leader, index)

    def install_failed(self) -> None:
        """The caller gave up (its source went away): the next snapshot message starts over."""
        self.installing = self.install_wanted = None

    # ---- the follower's side of appends -------------------------------------------------------

    def handle_append(self, m: Message) -> None:
        if m.index < self.commit:
            # Everything up to our commit matches any leader's log: say so, the leader moves on.
            self._accept(m.src, self.commit)
            return
        if self.log.term_at(m.index) == m.log_term:
            last_new = self.append_matching(m.index, m.entries)
            self.commit_to(self.follower_commit(m.commit, last_new))
            self._accept(m.src, last_new)
            return
        hint, hint_term = self.reject_hint(m.index, m.log_term)
        self._send(
            Message(
                MsgType.APP_RESP,
                self.id,
                m.src,
                self.term,
                index=m.index,
                log_term=hint_term,
                reject=True,
                reject_hint=hint,
            )
        )

    def _accept(self, leader: int, matched: int) -> None:
        """A success answer: this log matches the leader's up to `matched`; our commit with it
        (a leader goes quiet only once every follower knows its commit)."""
        self._send(
            Message(MsgType.APP_RESP, self.id, leader, self.term, index=matched, commit=self.commit)
        )

    def append_matching(self, prev: int, entries: Sequence[Entry]) -> int:
        """FORK 2: after a matching prev entry, keep entries whose index and term match (log
        matching says they are the same) and cut only from the first conflicting one. Cutting
        after prev on every append let a late, reordered append remove entries this replica
        had already acknowledged (and the leader counted). Returns the last new entry's index."""
        last_new = prev + len(entries)
        if not self.rules.keep_matching_entries:
            self._cut(prev, entries)  # upstream pysyncobj: delete everything after prev
            return last_new
        for i, e in enumerate(entries):
            if self.log.term_at(e.index) != e.term:
                self._cut(e.index - 1, entries[i:])
                break
        return last_new

    def follower_commit(self, leader_commit: int, last_new: int) -> int:
        """FORK 1: min(leaderCommit, the last entry this message showed to match the leader's).
        Our own last index may be a deposed leader's divergent tail: never count it."""
        if not self.rules.follower_commit_rule:
            return min(leader_commit, self.last_index())
        return min(leader_commit, last_new)

    def commit_to(self, index: int) -> None:
        if index > self.commit:
            self.commit = index

    def reject_hint(self, prev: int, prev_term: int) -> tuple[int, int]:
        """FORK 8: a refused append proves divergent the entry at prev (when we have one) and
        all after it, and every entry before it of a term above prev_term (the leader's terms
        there are at most prev_term). Cut exactly those (never at or below commit) and name
        where the leader should probe next: (index, term there), as etcd's findConflictByTerm."""
        last = self.last_index()
        if not self.rules.conflict_hint:
            return min(prev - 1, last), 0  # upstream: back off one entry per round trip
        j = min(prev - 1, last)
        while j > self.commit and self._term(j) > prev_term:
            j -= 1
        if max(j, self.commit) < last:
            self._cut(max(j, self.commit))
        return j, self.log.term_at(j) or 0  # 0: compacted, the leader probes back from j

    # ---- the leader's side -----------------------------------------------------------------

    def _refill_learners(self, ticks: int = 1) -> None:
        per_tick = self.cfg.learner_bytes_per_tick
        for p in self.conf.learners:
            pr = self.progress.get(p)
            if pr is not None:
                pr.budget = min(pr.budget + ticks * per_tick, LEARNER_BURST * per_tick)

    def learner_budget(self, peer: int) -> int | None:
        """FORK 7 under the learner throttle: what a snapshot install may send learner `peer`
        now, from the budget its appends draw on (<= 0: nothing until ticks refill it), so a
        move's copy is paced the same whichever way it goes. None: `peer` is not throttled
        (no throttle, or it votes). A replica that does not lead refills no budget: 0."""
        if not self.cfg.learner_bytes_per_tick or peer not in self.conf.learners:
            return None
        pr = self.progress.get(peer) if self.role == Role.LEADER else None
        return 0 if pr is None else pr.budget

    def learner_sent(self, peer: int, size: int) -> None:
        """A snapshot install sent learner `peer` `size` bytes (see learner_budget)."""
        pr = self.progress.get(peer) if self.role == Role.LEADER else None
        if pr is not None and self.learner_budget(peer) is not None:
            pr.budget -= size

    def send_append(self, peer: int) -> None:
        """Probe: one append, then wait for its answer or the next heartbeat. Replicate: send
        everything `next` has not reached, up to `max_batches` appends, so a follower that fell
        behind catches up faster than a busy leader appends. A throttled learner whose budget
        is spent gets a heartbeat at what it holds."""
        pr = self.progress[peer]
        throttled = self.cfg.learner_bytes_per_tick > 0 and peer in self.conf.learners
        for _ in range(self.cfg.max_batches):
            if pr.paused:
                return
            if throttled and pr.budget <= 0:
                held = self.log.term_at(pr.match)
                if held is not None:
                    beat = Message(MsgType.APP, self.id, peer, self.term, pr.match, held)
                    beat.commit = min(self.commit, pr.match)
                    self._send(beat)
                return
            prev = pr.next - 1
            prev_term = self.log.term_at(prev)
            if prev_term is None or pr.next < self.log.first_index():
                self.send_snapshot(peer, pr)  # compacted: only the snapshot catches it up
                return
            entries = self._append_batch(pr.next)
            if throttled:
                pr.budget -= sum(len(e.data) for e in entries)
            self._send(
                Message(
                    MsgType.APP, self.id, peer, self.term, prev, prev_term, entries, self.commit
                )
            )
            if not pr.replicate:
                pr.paused = True
                return
            pr.next += len(entries)
            if pr.next > self.last_index():
                return

    def send_snapshot(self, peer: int, pr: Progress) -> None:
        """FORK 7: the follower needs entries this log compacted. It is told the snapshot point
        (the first entry held) once per heartbeat until it answers; the data is the caller's
        to move."""
        first = self.log.first_index()
        pr.replicate = False
        pr.paused = True
        self._send(
            Message(
                MsgType.SNAP,
                self.id,
                peer,
                self.term,
                first,
                self._term(first),
                commit=self.commit,
                conf=self.membership_at(first),
            )
        )

    def _append_batch(self, lo: int) -> tuple[Entry, ...]:
        """Entries from `lo` for one append: up to max_append of them and max_append_bytes of
        data, at least one."""
        hi = min(self.last_index() + 1, lo + self.cfg.max_append)
        if lo >= hi:
            return ()  # a heartbeat: most appends of an awake group carry nothing
        entries = self.log.entries(lo, hi)
        budget = self.cfg.max_append_bytes
        for i, e in enumerate(entries):
            budget -= len(e.data)
            if budget < 0 and i > 0:
                return tuple(entries[:i])
        return tuple(entries)

    def broadcast_append(self) -> None:
        for p in self.progress:
            self.send_append(p)

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
        self._heard(m.src, self.ticks)
        if m.reject:
            self.handle_reject(pr, m)
            return
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

    def handle_reject(self, pr: Progress, m: Message) -> None:
        """Move `next` back as far as the hint proves, ignoring stale refusals (an answer to an
        append sent before a newer one matched) so they cannot pull `next` back past it."""
        if m.index <= pr.match:
            return
        if not pr.replicate and m.index != pr.next - 1:
            return
        probe = m.reject_hint
        if self.rules.conflict_hint and m.log_term > 0:
            probe = self.find_conflict_by_term(m.reject_hint, m.log_term)
        pr.replicate = False
        pr.paused = False
        pr.next = max(pr.match + 1, min(m.index, probe + 1))
        self.send_append(m.src)

    def find_conflict_by_term(self, index: int, term: int) -> int:
        """The last index <= `index` whose term here is <= `term`: where both logs may agree."""
        index = min(index, self.last_index())
        while index > 0:
            here = self.log.term_at(index)
            if here is None or here <= term:  # None: compacted; send_append finds it behind
                return index
            index -= 1
        return index

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
        # Followers learn it from the next append or heartbeat (as Redpanda's and Kafka's
        # followers do), not from an empty append of its own: etcd's broadcast here doubled the
        # messages of every small entry (an append and an answer to each follower).

    # ---- the caller's loop -------------------------------------------------------------------

    def has_ready(self) -> bool:
        """Asked for every awake group every tick: compares fields, builds nothing."""
        hs, soft, last = self.prev_hs, self.prev_soft, self.last_index()
        return bool(
            self.outbox
            or self.unsent_from <= last
            or self.truncated_to is not None
            or self.term != hs.term
            or self.vote != hs.vote
            or self.commit != hs.commit
            or self.leader != soft.leader
            or self.role != soft.role
            or min(self.commit, last) > self.applied
            or self.install_wanted is not None
        )

    def ready(self) -> Ready:
        hs = self.hard_state()
        last = self.last_index()
        hi = min(self.commit, last)
        # Most Readies of an awake group carry a heartbeat or its answer and no entries: the
        # log is not asked for empty ranges.
        rd = Ready(
            hard_state=hs if hs != self.prev_hs else None,
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
