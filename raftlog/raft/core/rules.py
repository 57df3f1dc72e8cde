"""A replica's settings: its group, timers and limits (`Config`), and raftlog's Raft rules
(`Rules`, FORK.md), each switchable so the tests can show what breaks without it."""

from __future__ import annotations

from dataclasses import astuple, dataclass, field

from raftlog.raft.core.values import Entry
from raftlog.raft.membership import Membership


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
    lease_inside_timers: bool = True  # 5: its lease ends before a follower's timer can
    woken_lease_checked: bool = True  # 5: a leader woken with its lease spent steps down at once
    held_answers_aged: bool = True  # 5: answers read right after a hold count from its start
    no_forwarding: bool = True  # 6
    conflict_hint: bool = True  # 8: a refused append names and cuts what is divergent
    leader_commit_own_term: bool = True  # Raft 5.4.2: count replicas only in own term
    transfer_skips_lease: bool = True  # 3: a transfer's vote request passes stickiness
    leader_may_stand_again: bool = True  # 3: so does the request of the leader followed
    snapshot_keeps_log: bool = True  # 7: a log holding the snapshot's last entry keeps its tail
    drop_stale_appends: bool = True  # an append whose entries a cut removed is not sent
    quiet_after_majority: bool = True  # 9: a leader goes quiet once a majority of voters did
    # Membership change (issue 44; Raft thesis 4.1-4.3, etcd's confchange):
    conf_change_own_term: bool = True  # a leader changes members only once its term committed
    one_conf_change_at_a_time: bool = True  # and only with no other change uncommitted
    joint_consensus: bool = True  # more than one voter changes through a joint configuration
    joint_majorities: bool = True  # which needs a majority of both voter sets
    leave_joint_after_commit: bool = True  # left only once it committed
    conf_follows_truncation: bool = True  # a cut configuration entry takes its change back
    stand_until_removal_commits: bool = True  # a removed voter may still be needed
    removed_leader_steps_down: bool = True  # once the change that removed it committed

    def __reduce__(self) -> tuple[type[Rules], tuple[bool, ...]]:
        """Pickled as its constructor's arguments (the simulation's worker processes): a frozen
        dataclass compiled by mypyc cannot be rebuilt by setting its fields one by one."""
        return (Rules, astuple(self))


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
