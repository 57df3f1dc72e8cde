"""The classic group's rebalance state machine and its timers, as Kafka's GroupCoordinator runs
them: Empty -> PreparingRebalance (members rejoin; the initial delay, the rebalance timeout)
-> CompletingRebalance (members sync; the leader's assignment is stored) -> Stable, and every
member's session, which removes it when nothing extends it in time.

Requests get here through the coordinator; what they wait on are futures in the members,
answered from here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from raftlog.common.clock import Clock, now_ms
from raftlog.common.errors import ErrorCode
from raftlog.groups.config import GroupConfig
from raftlog.groups.group import Group, GroupState, Member, cancel
from raftlog.groups.results import JoinMember, JoinResult, SyncResult, answer
from raftlog.groups.shard import Shard

log = logging.getLogger(__name__)

# A member told MEMBER_ID_REQUIRED comes back with its id within a round trip; one that has not
# by then is forgotten, whatever its session timeout (up to group.max.session.timeout.ms, 30
# min): 100,000 JoinGroups of one client, answered in 16 s, were each kept that long (750 B
# each), and a group's rebalance waits for its pending members.
PENDING_MEMBER_MAX_MS = 10_000

E = ErrorCode
EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE


class Rebalancer:
    def __init__(self, config: GroupConfig, clock: Clock) -> None:
        self.config = config
        self._clock = clock

    # ------------------------------------------------------------------ joining

    def rebalance_or_complete_join(self, shard: Shard, group: Group) -> None:
        if group.state in (STABLE, COMPLETING, EMPTY):
            self.prepare_rebalance(shard, group)
        else:
            self.maybe_complete_join(shard, group)

    def maybe_complete_join(self, shard: Shard, group: Group) -> None:
        """Everyone is in; the initial rebalance still waits out its delay, so consumers that
        start together land in one generation."""
        if group.state is PREPARING and group.all_joined() and group.previous_state is not EMPTY:
            self._complete_join(shard, group)

    def prepare_rebalance(self, shard: Shard, group: Group) -> None:
        if group.state is COMPLETING:
            self._propagate_assignment(shard, group, E.rebalance_in_progress)
        cancel(group.sync_timer)
        group.sync_timer = None
        group.pending_sync.clear()
        initial = group.state is EMPTY
        group.transition(PREPARING, now_ms(self._clock))
        group.rebalances += 1
        if initial:
            group.new_member_added = False
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms - delay, 0)
            self._schedule_join(shard, group, delay, self._initial_delay_over, delay, remaining)
        elif group.all_joined():
            self._complete_join(shard, group)
        else:
            self._schedule_join(shard, group, group.rebalance_timeout_ms, self._complete_join)

    def _schedule_join(
        self,
        shard: Shard,
        group: Group,
        delay_ms: int,
        callback: Callable[..., None],
        *args: int,
    ) -> None:
        cancel(group.join_timer)
        group.join_timer = self._clock.call_later(delay_ms / 1000, callback, shard, group, *args)

    def _initial_delay_over(self, shard: Shard, group: Group, delay: int, remaining: int) -> None:
        """Kafka's InitialDelayedJoin: wait again while new members keep arriving, in steps of
        the initial delay, up to the rebalance timeout."""
        group.join_timer = None
        if group.new_member_added and remaining:
            group.new_member_added = False
            step = min(self.config.initial_rebalance_delay_ms, remaining)
            self._schedule_join(
                shard, group, step, self._initial_delay_over, step, max(remaining - delay, 0)
            )
        else:
            self._complete_join(shard, group)

    def _complete_join(self, shard: Shard, group: Group) -> None:
        """Ends the join phase: dynamic members that did not rejoin are out, the generation
        moves on and every rejoined member gets its answer."""
        cancel(group.join_timer)
        group.join_timer = None
        if group.state is not PREPARING:
            return
        for member in list(group.members.values()):
            if member.join_waiter is None and member.group_instance_id is None:
                self.remove_member(group, member)
        if not group.elect_joined_leader() and group.members:
            # Only absent static members are left: wait for them or their session timeouts.
            self._schedule_join(shard, group, group.rebalance_timeout_ms, self._complete_join)
            return
        group.init_next_generation(now_ms(self._clock))
        if group.state is EMPTY:
            shard.store_group(group, {}, partial(self._empty_stored, group))
            return
        log.info(
            "group %s generation %d: %d members, protocol %s, leader %s",
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )
        for member in group.members.values():
            result = generation(group, member.member_id, member.member_id == group.leader_id)
            answer_join(member, result)
            member.is_new = False
            self.arm_session(shard, group, member)
            group.pending_sync.add(member.member_id)
        group.sync_timer = self._clock.call_later(
            group.sync_timeout_ms / 1000,
            self._sync_overdue,
            shard,
            group,
            group.generation,
        )

    @staticmethod
    def _empty_stored(group: Group, error: ErrorCode) -> None:
        # Harmless if lost: the previous generation's members will simply time out again.
        if error is not E.none:
            log.warning(
                "group %s: could not persist its empty generation: %s", group.group_id, error.name
            )

    # ------------------------------------------------------------------ syncing

    def _sync_overdue(self, shard: Shard, group: Group, generation: int) -> None:
        """Members that never sent SyncGroup in time (Group.sync_timeout_ms) are removed."""
        group.sync_timer = None
        if generation != group.generation or group.state not in (COMPLETING, STABLE):
            return
        if not group.pending_sync:
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                self.remove_member(group, member)
        self.prepare_rebalance(shard, group)

    def assignment_stored(
        self,
        shard: Shard,
        group: Group,
        generation: int,
        assignments: dict[str, bytes],
        error: ErrorCode,
    ) -> None:
        """The leader's assignment is in the log (or not): answer every parked SyncGroup."""
        if group.state is not COMPLETING or group.generation != generation:
            return  # a new rebalance started meanwhile and answered the waiting members
        if error is not E.none:
            self._propagate_assignment(shard, group, error)
            self.rebalance_or_complete_join(shard, group)
            return
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        self._propagate_assignment(shard, group, E.none)
        group.transition(STABLE, now_ms(self._clock))

    def _propagate_assignment(self, shard: Shard, group: Group, error: ErrorCode) -> None:
        """Answers every parked SyncGroup: the stored assignment, or the error and none."""
        for member in group.members.values():
            if error is not E.none:
                member.assignment = b""
            if member.sync_waiter is not None:
                answer_sync(
                    member,
                    SyncResult(error, group.protocol_type, group.protocol_name, member.assignment)
                    if error is E.none
                    else SyncResult(error),
                )
                self.arm_session(shard, group, member)

    # ------------------------------------------------------------------ members

    def arm_session(
        self, shard: Shard, group: Group, member: Member, timeout_ms: int | None = None
    ) -> None:
        """(Re)starts the member's session: it is removed if nothing extends it in time."""
        cancel(member.session_timer)
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.session_timer = self._clock.call_later(
            timeout / 1000, self._session_expired, shard, group, member
        )

    def _session_expired(self, shard: Shard, group: Group, member: Member) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is not member:
            return
        if not member.is_new and (member.join_waiter is not None or member.sync_waiter is not None):
            return  # a parked request counts as alive; answering it restarts the session
        log.info("group %s: member %s session expired", group.group_id, member.member_id)
        self.remove_member(group, member)
        self.after_removal(shard, group)

    def park_pending_member(
        self, shard: Shard, group: Group, member_id: str, timeout_ms: int
    ) -> None:
        """A new member told MEMBER_ID_REQUIRED: the group waits for it to come back with its
        id, within its session timeout or PENDING_MEMBER_MAX_MS, whichever is shorter."""
        group.pending_members[member_id] = self._clock.call_later(
            min(timeout_ms, PENDING_MEMBER_MAX_MS) / 1000,
            self._pending_member_expired,
            shard,
            group,
            member_id,
        )

    def _pending_member_expired(self, shard: Shard, group: Group, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is None:
            return
        self.maybe_complete_join(shard, group)
        shard.discard_if_unused(group)

    @staticmethod
    def remove_member(group: Group, member: Member) -> None:
        cancel(member.session_timer)
        answer_join(member, JoinResult(E.unknown_member_id))
        answer_sync(member, SyncResult(E.unknown_member_id))
        group.remove(member.member_id)

    def after_removal(self, shard: Shard, group: Group) -> None:
        if group.state in (STABLE, COMPLETING):
            self.prepare_rebalance(shard, group)
        elif group.state is PREPARING:
            self.maybe_complete_join(shard, group)

    # ------------------------------------------------------------------ leadership

    def group_loaded(self, shard: Shard, group: Group) -> None:
        """Members loaded from the log have sessions too: silence removes them."""
        for member in group.members.values():
            self.arm_session(shard, group, member)

    @staticmethod
    def group_unloaded(group: Group) -> None:
        """Another node coordinates the group now: its waiting requests are told so."""
        for member in group.members.values():
            cancel(member.session_timer)
            answer_join(member, JoinResult(E.not_coordinator, member.member_id))
            answer_sync(member, SyncResult(E.not_coordinator))
        group.cancel_timers()


def generation(
    group: Group,
    member_id: str,
    with_members: bool,
    *,
    error: ErrorCode = E.none,
    leader: str | None = None,
    skip: bool = False,
) -> JoinResult:
    """The current generation as a JoinGroup answer; only the leader's lists the members."""
    members = (
        tuple(
            JoinMember(m.member_id, m.group_instance_id, m.metadata(group.protocol_name))
            for m in group.members.values()
        )
        if with_members
        else ()
    )
    return JoinResult(
        error,
        member_id,
        group.generation,
        group.protocol_type,
        group.protocol_name,
        (group.leader_id or "") if leader is None else leader,
        members,
        skip,
    )


def answer_join(member: Member, result: JoinResult) -> None:
    waiter, member.join_waiter = member.join_waiter, None
    answer(waiter, result)


def answer_sync(member: Member, result: SyncResult) -> None:
    waiter, member.sync_waiter = member.sync_waiter, None
    answer(waiter, result)
