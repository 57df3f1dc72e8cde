"""JoinGroup: how a member gets into a generation. A new dynamic member first gets an id
(MEMBER_ID_REQUIRED), a known one rejoins, and a static member (KIP-345) that comes back with a
new id replaces its old one, without a rebalance when nothing else changed."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any

from raftlog.common.errors import ErrorCode
from raftlog.groups.group import Group, GroupState, Member, Protocols, cancel
from raftlog.groups.rebalance import Rebalancer, answer_join, answer_sync, generation
from raftlog.groups.results import JoinResult, SyncResult, answer
from raftlog.groups.shard import Shard

E = ErrorCode
EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


@dataclass(frozen=True, slots=True)
class Join:
    """A JoinGroup's member description, carried through the join paths."""

    group_instance_id: str | None
    protocol_type: str
    protocols: Protocols
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    supports_skip_assignment: bool


class Joiner:
    def __init__(self, rebalance: Rebalancer) -> None:
        self._rebalance = rebalance

    async def new_member(
        self, shard: Shard, group: Group, join: Join, require_known_member_id: bool
    ) -> JoinResult:
        if group.state is DEAD:
            return JoinResult(E.coordinator_not_available)
        if not group.supports_protocols(join.protocol_type, join.protocols):
            return JoinResult(E.inconsistent_group_protocol)
        member_id = f"{join.group_instance_id or join.client_id}-{uuid.uuid4()}"
        if join.group_instance_id is not None:
            known = group.static_members.get(join.group_instance_id)
            if known is not None:
                return await self._rejoin_static_member(
                    shard, group, group.members[known], member_id, join
                )
        elif require_known_member_id:
            self._rebalance.park_pending_member(shard, group, member_id, join.session_timeout_ms)
            return JoinResult(E.member_id_required, member_id)
        return await self._add_member(shard, group, member_id, join)

    async def known_member(
        self, shard: Shard, group: Group, member_id: str, join: Join
    ) -> JoinResult:
        if group.state is DEAD:
            return JoinResult(E.coordinator_not_available, member_id)
        if not group.supports_protocols(join.protocol_type, join.protocols):
            return JoinResult(E.inconsistent_group_protocol, member_id)
        if join.group_instance_id is None and member_id in group.pending_members:
            group.pending_members.pop(member_id).cancel()
            return await self._add_member(shard, group, member_id, join)
        error = group.validate_member(member_id, join.group_instance_id)
        if error is not E.none:
            return JoinResult(error, member_id)
        member = group.members[member_id]
        unchanged = member.protocols == join.protocols
        if group.state is COMPLETING and unchanged:
            # The member missed its JoinGroup answer: give it the current generation again.
            self._rebalance.arm_session(shard, group, member)
            return generation(group, member_id, group.leader_id == member_id)
        if group.state is STABLE and unchanged and group.leader_id != member_id:
            self._rebalance.arm_session(shard, group, member)
            return generation(group, member_id, False)
        if group.state is EMPTY:
            return JoinResult(E.unknown_member_id, member_id)
        # A changed member, or the leader rejoining (it may know of topic changes): rebalance.
        waiter = asyncio.get_running_loop().create_future()
        _update_member(
            member, join.protocols, join.rebalance_timeout_ms, join.session_timeout_ms, waiter
        )
        self._rebalance.rebalance_or_complete_join(shard, group)
        return await waiter

    async def _add_member(
        self, shard: Shard, group: Group, member_id: str, join: Join
    ) -> JoinResult:
        waiter = asyncio.get_running_loop().create_future()
        member = Member(
            member_id,
            join.group_instance_id,
            join.client_id,
            join.client_host,
            join.rebalance_timeout_ms,
            join.session_timeout_ms,
            join.protocols,
            is_new=True,
            join_waiter=waiter,
        )
        if group.state is PREPARING and group.previous_state is EMPTY:
            group.new_member_added = True
        group.add(member, join.protocol_type)
        rebalance = self._rebalance
        rebalance.arm_session(shard, group, member, rebalance.config.new_member_join_timeout_ms)
        rebalance.rebalance_or_complete_join(shard, group)
        return await waiter

    async def _rejoin_static_member(
        self, shard: Shard, group: Group, old: Member, member_id: str, join: Join
    ) -> JoinResult:
        """KIP-345: the instance's new member id replaces the old one, which is fenced. In a
        Stable group whose protocol would not change, no rebalance: the member gets the current
        generation (and its assignment through SyncGroup) once the new id is persisted."""
        previous_leader = group.leader_id or ""
        cancel(old.session_timer)
        answer_join(old, JoinResult(E.fenced_instance_id, old.member_id))
        answer_sync(old, SyncResult(E.fenced_instance_id))
        member = group.replace_static_member(old, member_id)
        self._rebalance.arm_session(shard, group, member)
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        before = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        _update_member(
            member, join.protocols, join.rebalance_timeout_ms, join.session_timeout_ms, waiter
        )
        if group.state is STABLE and group.select_protocol() == group.protocol_name:
            assignments = {m.member_id: m.assignment for m in group.members.values()}
            shard.store_group(
                group,
                assignments,
                partial(
                    self._static_member_stored,
                    shard,
                    group,
                    member,
                    old.member_id,
                    before,
                    previous_leader,
                    join,
                ),
            )
        elif group.state is COMPLETING:
            # The leader may already be assigning to the old id: assign again.
            self._rebalance.prepare_rebalance(shard, group)
        else:
            self._rebalance.rebalance_or_complete_join(shard, group)
        return await waiter

    def _static_member_stored(
        self,
        shard: Shard,
        group: Group,
        member: Member,
        old_member_id: str,
        before: tuple[Protocols, int, int],
        previous_leader: str,
        join: Join,
        error: ErrorCode,
    ) -> None:
        waiter = member.join_waiter
        if group.members.get(member.member_id) is not member or waiter is None:
            return  # a rebalance or a removal answered it meanwhile
        if error is not E.none:
            # Not persisted: the old member id stays the valid one.
            member.join_waiter = None
            _update_member(member, *before, None)
            cancel(member.session_timer)
            restored = group.replace_static_member(member, old_member_id)
            self._rebalance.arm_session(shard, group, restored)
            answer(waiter, generation(group, "", False, error=error, leader=previous_leader))
            return
        member.join_waiter = None
        if join.supports_skip_assignment:
            is_leader = group.leader_id == member.member_id
            result = generation(group, member.member_id, is_leader, skip=is_leader)
        else:
            # Older clients would reassign with an empty member list if told they lead.
            result = generation(group, member.member_id, False, leader=previous_leader)
        answer(waiter, result)


def _update_member(
    member: Member,
    protocols: Protocols,
    rebalance_timeout_ms: int,
    session_timeout_ms: int,
    waiter: asyncio.Future[Any] | None,
) -> None:
    member.protocols = protocols
    member.rebalance_timeout_ms = rebalance_timeout_ms
    member.session_timeout_ms = session_timeout_ms
    if member.join_waiter is not None and member.join_waiter is not waiter:
        # Superseded by a newer JoinGroup of the same member: that one gets the answer.
        answer_join(member, JoinResult(E.rebalance_in_progress, member.member_id))
    member.join_waiter = waiter
