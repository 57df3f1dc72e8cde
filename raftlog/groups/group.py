"""One classic consumer group's state, as Kafka's ClassicGroup keeps it: members, generation,
protocol, leader and committed offsets. Pure bookkeeping: the coordinator owns the timers,
the waiting requests' futures and the writes to `__consumer_offsets`."""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raftlog.common.clock import Timer
from raftlog.common.errors import ErrorCode
from raftlog.groups.records import GroupMetadataValue, MemberMetadata, OffsetCommitValue

Protocols = tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's preference order
TopicPartition = tuple[str, int]


def cancel(timer: Timer | None) -> None:
    if timer is not None:
        timer.cancel()


class GroupState(enum.Enum):
    """The names are what DescribeGroups and ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(eq=False, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: Protocols
    assignment: bytes = b""
    # Joined during the current rebalance: expires after the new-member join timeout even while
    # its JoinGroup waits, since a client that gave up on it would otherwise stall every rebalance.
    is_new: bool = False
    join_waiter: asyncio.Future[Any] | None = None  # a parked JoinGroup
    sync_waiter: asyncio.Future[Any] | None = None  # a parked SyncGroup
    session_timer: Timer | None = None

    def metadata(self, protocol: str | None) -> bytes:
        return next((data for name, data in self.protocols if name == protocol), b"")

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol that every member supports."""
        return next(name for name, _ in self.protocols if name in candidates)


class Group:
    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.previous_state = GroupState.EMPTY
        self.state_timestamp = now_ms  # -1 when loaded from a record older than v2
        self.generation = 0
        self.protocol_type: str | None = None  # None: offsets only, never a managed group
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}  # join order: the leader falls back to the first
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: dict[str, Timer] = {}  # told MEMBER_ID_REQUIRED
        self.pending_sync: set[str] = set()  # members that have not sent SyncGroup yet
        self.new_member_added = False  # extends the initial rebalance delay
        self.join_timer: Timer | None = None
        self.sync_timer: Timer | None = None
        self.offsets: dict[TopicPartition, OffsetCommitValue] = {}
        self.pending_commits: Counter[TopicPartition] = Counter()  # appends in flight
        # offsets of open transactions, by producer id: in the log, applied by the commit
        # marker (TxnOffsetCommit)
        self.txn_offsets: dict[int, dict[TopicPartition, OffsetCommitValue]] = {}
        self.rebalances = 0  # started since this coordinator loaded the group (a metric)

    @classmethod
    def from_record(cls, group_id: str, value: GroupMetadataValue, now_ms: int) -> Group:
        """A group as its last GroupMetadata record left it: Stable with its members, or Empty."""
        group = cls(group_id, now_ms)
        group.generation = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.state_timestamp = value.current_state_timestamp
        for m in value.members:
            group.add(
                Member(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms if m.rebalance_timeout_ms >= 0 else m.session_timeout_ms,
                    m.session_timeout_ms,
                    ((value.protocol or "", m.subscription),),
                    m.assignment,
                ),
                value.protocol_type,
            )
        if value.leader in group.members:
            group.leader_id = value.leader
        if group.members:
            group.state = group.previous_state = GroupState.STABLE
        return group

    def record(self, assignments: Mapping[str, bytes]) -> GroupMetadataValue:
        """The GroupMetadata record of the current generation with these assignments."""
        return GroupMetadataValue(
            self.protocol_type or "",
            self.generation,
            self.protocol_name,
            self.leader_id,
            self.state_timestamp,
            tuple(
                MemberMetadata(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata(self.protocol_name),
                    assignments.get(m.member_id, b""),
                )
                for m in self.members.values()
            ),
        )

    def transition(self, state: GroupState, now_ms: int) -> None:
        self.previous_state, self.state = self.state, state
        self.state_timestamp = now_ms

    def add(self, member: Member, protocol_type: str) -> None:
        if not self.members:
            self.protocol_type = protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        instance_id = member.group_instance_id if member is not None else None
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_sync.discard(member_id)
        return member

    def replace_static_member(self, old: Member, new_member_id: str) -> Member:
        """A static member rejoining with a new member id takes over the old one's place,
        assignment and leadership; the old id is fenced from then on."""
        del self.members[old.member_id]
        self.pending_sync.discard(old.member_id)
        new = Member(
            new_member_id,
            old.group_instance_id,
            old.client_id,
            old.client_host,
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
            old.protocols,
            old.assignment,
        )
        self.members[new_member_id] = new
        if old.group_instance_id is not None:
            self.static_members[old.group_instance_id] = new_member_id
        if self.leader_id == old.member_id:
            self.leader_id = new_member_id
        return new

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """Kafka's check of a request's member identity (KIP-345 fencing first)."""
        if group_instance_id is not None:
            known = self.static_members.get(group_instance_id)
            if known is None:
                return ErrorCode.unknown_member_id
            if known != member_id:
                return ErrorCode.fenced_instance_id
        elif member_id not in self.members:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    @property
    def sync_timeout_ms(self) -> int:
        """How long a new generation's members have to send SyncGroup: the rebalance timeout,
        as in Kafka, but never less than the longest session timeout. Kafka 3.0+ holds them to
        the rebalance timeout alone, so a member that joins with 0 (kafkajs's protocol tests,
        which leave it unset) is out before its SyncGroup can arrive; before 3.0 its session
        alone bounded the wait."""
        return max(
            self.rebalance_timeout_ms,
            max((m.session_timeout_ms for m in self.members.values()), default=0),
        )

    def all_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_waiter is not None for m in self.members.values()
        )

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        counts = Counter(name for m in self.members.values() for name, _ in m.protocols)
        return {name for name, count in counts.items() if count == len(self.members)}

    def supports_protocols(self, protocol_type: str, protocols: Protocols) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocols)
        candidates = self.candidate_protocols()
        return protocol_type == self.protocol_type and any(
            name in candidates for name, _ in protocols
        )

    def select_protocol(self) -> str:
        """Each member votes for its preferred common protocol; ties go to the leader's order."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        most = max(votes.values())
        first = (
            self.members[self.leader_id] if self.leader_id else next(iter(self.members.values()))
        )
        return next(name for name, _ in first.protocols if votes.get(name) == most)

    def elect_joined_leader(self) -> bool:
        """The leader must be among the members that rejoined: it alone gets the member list."""
        leader = self.members.get(self.leader_id) if self.leader_id else None
        if leader is not None and leader.join_waiter is not None:
            return True
        for member in self.members.values():
            if member.join_waiter is not None:
                self.leader_id = member.member_id
                return True
        return False

    def init_next_generation(self, now_ms: int) -> None:
        self.generation += 1
        self.pending_sync.clear()
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition(GroupState.EMPTY, now_ms)

    def cancel_timers(self) -> None:
        """The group's own timers (not its members' sessions): it is being forgotten."""
        cancel(self.join_timer)
        cancel(self.sync_timer)
        for timer in self.pending_members.values():
            timer.cancel()
        self.join_timer = self.sync_timer = None
        self.pending_members.clear()

    def is_unused(self) -> bool:
        """Nothing to keep in memory: no members, offsets or writes, and never rebalanced."""
        return (
            self.state is GroupState.EMPTY
            and self.generation == 0
            and not self.members
            and not self.pending_members
            and not self.offsets
            and not self.pending_commits
            and not self.txn_offsets
        )

    def unstable(self, tp: TopicPartition) -> bool:
        """An open transaction holds an offset for the partition (OffsetFetch require_stable
        answers UNSTABLE_OFFSET_COMMIT until it ends)."""
        return any(tp in pending for pending in self.txn_offsets.values())

    def end_transaction(self, producer_id: int, commit: bool) -> None:
        """The transaction's marker is in the log: its offsets become the group's, or go."""
        pending = self.txn_offsets.pop(producer_id, None)
        if pending and commit:
            self.offsets.update(pending)
