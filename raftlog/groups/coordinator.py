"""The classic consumer group coordinator of the `__consumer_offsets` partitions this node
leads, with Kafka's GroupCoordinator semantics (join / sync / heartbeat / leave, static
membership, offsets) so every Kafka client's consumer works unchanged.

This is the API the Kafka handlers and the node call. As in Kafka, it checks who may do what
(membership, generations) and leaves the rest to its parts: the rebalance state machine and
its timers (rebalance.py, join.py) and the `__consumer_offsets` side, which holds the groups,
the offsets and the writes (metadata_manager.py, shard.py).

Everything runs on the node's event loop: state changes are synchronous, waits are futures and
the timers of the `Clock` it is given (raftlog/common/clock.py: the loop's, or a test's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from functools import partial

from raftlog.common.clock import LOOP_CLOCK, Clock, now_ms
from raftlog.common.errors import ErrorCode
from raftlog.groups.config import GroupConfig
from raftlog.groups.group import Group, GroupState, TopicPartition, cancel
from raftlog.groups.join import Join, Joiner
from raftlog.groups.metadata_manager import GroupMetadataManager, Paced, at_once
from raftlog.groups.offset_checks import commit_error, subscribed_topics
from raftlog.groups.offsets_log import OffsetsLog
from raftlog.groups.rebalance import Rebalancer, answer_sync
from raftlog.groups.records import (
    ShareGroupMetadataValue,
    share_group_metadata_key,
    share_group_metadata_value,
)
from raftlog.groups.results import (
    CommitOffset,
    DeletedGroup,
    DescribedGroup,
    DescribedMember,
    JoinResult,
    LeaveResult,
    LeavingMember,
    LeftMember,
    ListedGroup,
    ListGroupsResult,
    OffsetFetchResult,
    SyncResult,
)
from raftlog.share.membership import (
    HeartbeatResult,
    ShareGroupDescription,
    ShareGroups,
    ShareGroupSettings,
)

E = ErrorCode
EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


CONSUMER_PROTOCOL = "consumer"  # the protocol type of Kafka's consumers' groups
SHARE_TYPE = "share"  # ListGroups' group type and protocol type of a share group


async def _nothing_to_delete(_group_id: str) -> ErrorCode:
    return ErrorCode.none


class GroupCoordinator:
    def __init__(
        self,
        node_id: int,
        config: GroupConfig,
        *,
        clock: Clock = LOOP_CLOCK,
        topic_partitions: Callable[[str], int | None] = lambda _name: None,
        share_settings: Callable[[str], ShareGroupSettings] = lambda _g: ShareGroupSettings(),
        delete_share_state: Callable[[str], Awaitable[ErrorCode]] = _nothing_to_delete,
    ) -> None:
        """topic_partitions(name): a topic's partition count (None: no such topic), for the
        share groups' assignments; share_settings(group): their heartbeat and session;
        delete_share_state(group): drops a deleted share group's partition states, wherever
        their partitions are led."""
        self.node_id = node_id
        self.config = config
        self._clock = clock
        self._manager = GroupMetadataManager(config, clock=clock)
        self._rebalance = Rebalancer(config, clock)
        self._joins = Joiner(self._rebalance)
        # Share groups (KIP-932) share the classic groups' coordinators and id space. That a
        # group exists is written (ShareGroupMetadata); its membership is held in memory
        # (members rejoin a new coordinator).
        self.share_groups = ShareGroups(
            topic_partitions, clock, share_settings, is_classic_group=self._is_classic_group
        )
        self.share_groups.on_created.append(self._share_group_created)
        self._delete_share_state = delete_share_state

    # ------------------------------------------------------------------ partitions

    def partition_for(self, group_id: str) -> int:
        return self._manager.partition_for(group_id)

    def attach(self, index: int, offsets_log: OffsetsLog) -> None:
        """This node now leads `__consumer_offsets` partition `index`: rebuild its groups from
        the log; until that is done their requests get COORDINATOR_LOAD_IN_PROGRESS."""
        self.detach(index)
        self._manager.attach(
            index, offsets_log, self._rebalance.group_loaded, self.share_groups.restore
        )

    def detach(self, index: int) -> None:
        """Leadership of partition `index` is gone: forget its groups and answer every request
        still waiting on them with NOT_COORDINATOR, so clients look for the new coordinator."""
        self._manager.detach(index, self._rebalance.group_unloaded)
        for group_id in self.share_groups.group_ids():
            if self.partition_for(group_id) == index:
                self.share_groups.forget(group_id)

    def loaded_groups(self) -> list[Group]:
        """The classic groups of the partitions this node coordinates and has loaded."""
        return [
            group
            for shard in self._manager.shards()
            if not shard.loading
            for group in shard.groups.values()
            if group.state is not DEAD
        ]

    def close(self) -> None:
        """Node shutdown: detach every partition."""
        self._manager.close(self._rebalance.group_unloaded)
        self.share_groups.close()

    # ------------------------------------------------------------------ share groups

    def _share_group_created(self, group_id: str, epoch: int) -> None:
        """Written so a new coordinator knows the group (ListGroups, DeleteGroups) before any
        member rejoins it; a failed write costs only that."""
        shard = self._manager.lookup(group_id)
        if isinstance(shard, ErrorCode):
            return
        record = (
            share_group_metadata_key(group_id),
            share_group_metadata_value(ShareGroupMetadataValue(epoch)),
        )
        shard.append([record], lambda _error: None)

    async def _delete_share_group(self, group_id: str) -> ErrorCode:
        """Kafka's rules: only an empty group; its partition states go first, then its record."""
        shard = self._manager.lookup(group_id)
        if isinstance(shard, ErrorCode):
            return shard
        description = self.share_groups.describe(group_id)
        if description is None:
            return E.group_id_not_found
        if description.members:
            return E.non_empty_group
        error = await self._delete_share_state(group_id)
        if error is not E.none:
            return error
        if self.share_groups.delete(group_id) is not E.none:
            return E.non_empty_group  # a member joined meanwhile: its state starts afresh
        return await shard.append([(share_group_metadata_key(group_id), None)], lambda _e: None)

    def describe_share_group(
        self, group_id: str
    ) -> tuple[ErrorCode, str | None, ShareGroupDescription | None]:
        """ShareGroupDescribe of one group: (error, message, description)."""
        shard = self._manager.lookup(group_id)
        if isinstance(shard, ErrorCode):
            return shard, None, None
        description = self.share_groups.describe(group_id)
        if description is not None:
            return E.none, None, description
        if group_id in shard.groups:
            return E.group_id_not_found, f"Group {group_id} is not a share group.", None
        return E.group_id_not_found, f"Group {group_id} not found.", None

    def _is_classic_group(self, group_id: str) -> bool:
        shard = self._manager.lookup(group_id)
        return not isinstance(shard, ErrorCode) and group_id in shard.groups

    def share_heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed_topic_names: Sequence[str] | None,
        client_id: str,
        client_host: str,
    ) -> HeartbeatResult:
        """ShareGroupHeartbeat, where the group's classic coordinator would be."""
        shard = self._manager.lookup(group_id)
        if isinstance(shard, ErrorCode):
            return HeartbeatResult(shard)
        return self.share_groups.heartbeat(
            group_id,
            member_id,
            member_epoch,
            rack_id,
            subscribed_topic_names,
            client_id,
            client_host,
        )

    def share_member(self, group_id: str, member_id: str) -> ErrorCode:
        """Whether the member has joined the share group here (NONE or UNKNOWN_MEMBER_ID), or
        why this node cannot say (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...): what a
        partition leader asks before it opens a share session (raftlog/share/members.py)."""
        shard = self._manager.lookup(group_id)
        if isinstance(shard, ErrorCode):
            return shard
        if self.share_groups.is_member(group_id, member_id):
            return E.none
        return E.unknown_member_id

    # ------------------------------------------------------------------ JoinGroup

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        *,
        require_known_member_id: bool = True,
        supports_skip_assignment: bool = True,
    ) -> JoinResult:
        """Answers when the member is in a generation (or with an error). A new dynamic member
        gets MEMBER_ID_REQUIRED and an id first when `require_known_member_id` (v4+)."""
        shard = self._manager.lookup(group_id)
        if isinstance(shard, ErrorCode):
            return JoinResult(shard, member_id)
        if self.share_groups.has_group(group_id):
            return JoinResult(E.group_id_not_found, member_id)  # Kafka: not a classic group
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return JoinResult(E.invalid_session_timeout, member_id)
        join = Join(
            group_instance_id,
            protocol_type,
            tuple(protocols),
            session_timeout_ms,
            rebalance_timeout_ms,
            client_id,
            client_host,
            supports_skip_assignment,
        )
        group = shard.groups.get(group_id)
        if member_id:
            if group is None:
                return JoinResult(E.unknown_member_id, member_id)
            return await self._joins.known_member(shard, group, member_id, join)
        if group is None:
            group = shard.groups[group_id] = Group(group_id, now_ms(self._clock))
        try:
            return await self._joins.new_member(shard, group, join, require_known_member_id)
        finally:
            shard.discard_if_unused(group)

    # ------------------------------------------------------------------ SyncGroup

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        assignments: Mapping[str, bytes] | None = None,
    ) -> SyncResult:
        """Followers wait for the leader; the leader's assignments are persisted before anyone
        gets theirs. Missing assignments are empty."""
        shard = self._manager.lookup(group_id)
        if isinstance(shard, ErrorCode):
            return SyncResult(shard)
        group = shard.groups.get(group_id)
        if group is None:
            return SyncResult(E.unknown_member_id)
        if group.state is DEAD:
            return SyncResult(E.coordinator_not_available)
        error = group.validate_member(member_id, group_instance_id)
        if error is not E.none:
            return SyncResult(error)
        if generation_id != group.generation:
            return SyncResult(E.illegal_generation)
        if _inconsistent(protocol_type, group.protocol_type) or _inconsistent(
            protocol_name, group.protocol_name
        ):
            return SyncResult(E.inconsistent_group_protocol)
        if group.state is EMPTY:
            return SyncResult(E.unknown_member_id)
        if group.state is PREPARING:
            return SyncResult(E.rebalance_in_progress)
        member = group.members[member_id]
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            cancel(group.sync_timer)
            group.sync_timer = None
        if group.state is STABLE:
            self._rebalance.arm_session(shard, group, member)
            return SyncResult(E.none, group.protocol_type, group.protocol_name, member.assignment)
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        answer_sync(member, SyncResult(E.rebalance_in_progress))  # a superseded retry
        member.sync_waiter = waiter
        if member_id == group.leader_id:
            given = assignments or {}
            full = {m: given.get(m, b"") for m in group.members}
            stored = partial(
                self._rebalance.assignment_stored, shard, group, group.generation, full
            )
            shard.store_group(group, full, stored)
        return await waiter

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup

    async def heartbeat(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None = None,
    ) -> ErrorCode:
        """Extends the member's session; REBALANCE_IN_PROGRESS tells it to rejoin."""
        shard = self._manager.lookup(group_id)
        if isinstance(shard, ErrorCode):
            return shard
        group = shard.groups.get(group_id)
        if group is None:
            return E.unknown_member_id
        if group.state is DEAD:
            return E.coordinator_not_available
        error = group.validate_member(member_id, group_instance_id)
        if error is not E.none:
            return error
        if generation_id != group.generation:
            return E.illegal_generation
        if group.state is EMPTY:
            return E.unknown_member_id
        self._rebalance.arm_session(shard, group, group.members[member_id])
        return E.rebalance_in_progress if group.state is PREPARING else E.none

    async def leave_group(self, group_id: str, members: Sequence[LeavingMember]) -> LeaveResult:
        """Removes each member (by member id, or by group.instance.id alone) and rebalances."""
        shard = self._manager.lookup(group_id)
        if isinstance(shard, ErrorCode):
            return LeaveResult(shard)
        group = shard.groups.get(group_id)
        if group is None:
            return LeaveResult(
                E.none,
                tuple(
                    LeftMember(m.member_id, m.group_instance_id, E.unknown_member_id)
                    for m in members
                ),
            )
        if group.state is DEAD:
            return LeaveResult(E.coordinator_not_available)
        answers = []
        remove = self._rebalance.remove_member
        for leaving in members:
            error = E.none
            if not leaving.member_id:
                known = (
                    group.static_members.get(leaving.group_instance_id)
                    if leaving.group_instance_id is not None
                    else None
                )
                if known is None:
                    error = E.unknown_member_id
                else:
                    remove(group, group.members[known])
            elif leaving.member_id in group.pending_members:
                group.pending_members.pop(leaving.member_id).cancel()
            else:
                error = group.validate_member(leaving.member_id, leaving.group_instance_id)
                if error is E.none:
                    remove(group, group.members[leaving.member_id])
            answers.append(LeftMember(leaving.member_id, leaving.group_instance_id, error))
        if any(answer.error is E.none for answer in answers):
            self._rebalance.after_removal(shard, group)
        shard.discard_if_unused(group)
        return LeaveResult(E.none, tuple(answers))

    # ------------------------------------------------------------------ offsets

    async def offset_commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Sequence[CommitOffset],
        producer: tuple[int, int] | None = None,
    ) -> list[ErrorCode]:
        """One error per entry of `offsets`, in order. A group that does not exist gets
        GROUP_ID_NOT_FOUND unless this is a standalone commit (generation < 0), which creates
        it; a member's commit extends its session. `producer` (id, epoch): TxnOffsetCommit,
        whose offsets count only once the producer's transaction commits (KIP-447: a member's
        generation is checked when one is given; a missing group is ILLEGAL_GENERATION)."""
        shard = self._manager.lookup(group_id, allow_empty=True)
        if isinstance(shard, ErrorCode):
            return [shard] * len(offsets)
        txn = producer is not None
        group = shard.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return [E.illegal_generation if txn else E.group_id_not_found] * len(offsets)
            group = shard.groups[group_id] = Group(group_id, now_ms(self._clock))
        error = commit_error(group, generation_id, member_id, group_instance_id, txn)
        if error is not E.none:
            shard.discard_if_unused(group)
            return [error] * len(offsets)
        if producer is not None:
            return await self._manager.store_txn_offsets(shard, group, offsets, producer)
        member = group.members.get(member_id)
        if member is not None:
            self._rebalance.arm_session(shard, group, member)
        return await self._manager.store_offsets(shard, group, offsets)

    def end_transaction(self, index: int, producer_id: int, commit: bool) -> None:
        """A transaction's marker was written on `__consumer_offsets` partition `index`."""
        self._manager.end_transaction(index, producer_id, commit)

    async def offset_fetch(
        self,
        group_id: str,
        partitions: Sequence[tuple[str, int]] | None,
        require_stable: bool = False,
    ) -> OffsetFetchResult:
        return await self._manager.fetch_offsets(group_id, partitions, require_stable)

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """OffsetDelete, as Kafka's OffsetMetadataManager.deleteOffsets: (the group's error,
        one error per partition). A group with members may lose only the offsets of topics
        none of them subscribes to (GROUP_SUBSCRIBED_TO_TOPIC), and only if it is a consumer
        group (else NON_EMPTY_GROUP). The offsets go as tombstones in `__consumer_offsets`,
        so a coordinator that loads the partition after a failover has them gone too."""
        shard = self._manager.lookup(group_id)
        if isinstance(shard, ErrorCode):
            return shard, []
        group = shard.groups.get(group_id)
        if group is None or group.state is DEAD:
            return E.group_id_not_found, []
        active = group.state is not EMPTY
        if active and group.protocol_type != CONSUMER_PROTOCOL:
            return E.non_empty_group, []
        subscribed = subscribed_topics(group) if active else set()
        errors = [
            E.group_subscribed_to_topic if subscribed is None or tp[0] in subscribed else E.none
            for tp in partitions
        ]
        held = [
            tp
            for tp, error in zip(partitions, errors, strict=True)
            if error is E.none and (tp in group.offsets or group.unstable(tp))
        ]
        if held:
            written = await self._manager.delete_offsets(shard, group, held)
            errors = [written if e is E.none else e for e in errors]
        return E.none, errors

    async def delete_groups(
        self, group_ids: Sequence[str], paced: Paced = at_once
    ) -> list[DeletedGroup]:
        """DeleteGroups: one result per group, in order. Each group is checked and its
        tombstones built as `paced` hands it over (a caller may hand the loop back between
        groups, see GroupMetadataManager.delete_groups)."""
        share = [g for g in group_ids if self.share_groups.has_group(g)]
        shared = set(share)
        classic = [g for g in group_ids if g not in shared]
        deleted = {d.group_id: d for d in await self._manager.delete_groups(classic, paced)}
        for group_id in share:
            deleted[group_id] = DeletedGroup(group_id, await self._delete_share_group(group_id))
        return [deleted[g] for g in group_ids]

    # ------------------------------------------------------------------ ListGroups, DescribeGroups

    async def list_groups(
        self, states: Collection[str] = (), types: Collection[str] = ()
    ) -> ListGroupsResult:
        """Groups of every attached partition; filters match case-insensitively (states are
        DescribeGroups' names; every group here is of type "classic")."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        error = E.none
        groups = []
        if not wanted_types or SHARE_TYPE in wanted_types:
            for group_id in self.share_groups.group_ids():
                described = self.share_groups.describe(group_id)
                if described is None or (
                    wanted_states and described.state.lower() not in wanted_states
                ):
                    continue
                groups.append(ListedGroup(group_id, SHARE_TYPE, described.state, SHARE_TYPE))
        if wanted_types and "classic" not in wanted_types:
            return ListGroupsResult(error, tuple(groups))
        for shard in self._manager.shards():
            if shard.loading:
                error = E.coordinator_load_in_progress
                continue
            for group in shard.groups.values():
                state = group.state.value
                if group.state is DEAD or (wanted_states and state.lower() not in wanted_states):
                    continue
                groups.append(ListedGroup(group.group_id, group.protocol_type or "", state))
        return ListGroupsResult(error, tuple(groups))

    def describe_group(self, group_id: str) -> DescribedGroup:
        """DescribeGroups of one group. Members carry their metadata and assignment only while
        the group is Stable."""
        shard = self._manager.lookup(group_id, allow_empty=True)
        if isinstance(shard, ErrorCode):
            return DescribedGroup(group_id, shard)
        if self.share_groups.has_group(group_id):  # Kafka: ShareGroupDescribe is for it
            return DescribedGroup(
                group_id,
                E.group_id_not_found,
                error_message=f"Group {group_id} is not a classic group.",
            )
        group = shard.groups.get(group_id)
        if group is None or group.state is DEAD:
            return DescribedGroup(group_id, E.group_id_not_found)
        stable = group.state is STABLE
        members = tuple(
            DescribedMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(group.protocol_name) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return DescribedGroup(
            group_id,
            E.none,
            group.state.value,
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            members,
        )


def _inconsistent(given: str | None, expected: str | None) -> bool:
    return given is not None and expected is not None and given != expected
