"""The classic consumer group coordinator of the `__consumer_offsets` partitions this node
leads, with Kafka's GroupCoordinator semantics (join / sync / heartbeat / leave, static
membership, offsets) so every Kafka client's consumer works unchanged.

Everything runs on the node's event loop: state changes are synchronous, waits are futures and
loop timers. What must survive a coordinator move (assignments, offsets, deletions) is written to
the partition through `OffsetsLog.append`, and memory changes only once that append resolved, so
memory never claims more than the log holds; appends start in call order, so the log's order is
the order in which the coordinator decided.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from raftlog.errors import ErrorCode, KafkaError
from raftlog.groups.group import Group, GroupState, Member, Protocols, TopicPartition
from raftlog.groups.offsets_log import OffsetsLog
from raftlog.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    group_metadata_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
)
from raftlog.groups.results import (
    CommitOffset,
    DeletedGroup,
    DescribedGroup,
    DescribedMember,
    FetchedOffset,
    JoinMember,
    JoinResult,
    LeaveResult,
    LeavingMember,
    LeftMember,
    ListedGroup,
    ListGroupsResult,
    OffsetFetchResult,
    SyncResult,
)

log = logging.getLogger(__name__)

E = ErrorCode
EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

LOAD_YIELD_EVERY = 1000  # records replayed between yields to the loop while loading

Records = list[tuple[bytes, bytes | None]]


@dataclass
class GroupConfig:
    """Kafka's broker settings of the same names. Mutable: the node follows the real partition
    count of `__consumer_offsets` once the topic exists."""

    num_partitions: int = 16  # offsets.topic.num.partitions
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_minutes: int = 10080  # offsets.retention.minutes
    max_group_id_bytes: int = 32767  # a group id is an int16-length string in the record key
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    # Kafka's fixed 5 minutes: a new member's parked JoinGroup expires after it, so a client
    # that gave up on its request cannot hold every later rebalance for good.
    new_member_join_timeout_ms: int = 300_000


def java_string_hash(value: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, 32-bit signed."""
    data = value.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@dataclass(frozen=True, slots=True)
class _Join:
    """A JoinGroup's member description, carried through the join paths."""

    group_instance_id: str | None
    protocol_type: str
    protocols: Protocols
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str
    client_host: str
    supports_skip_assignment: bool


class _Shard:
    """One attached `__consumer_offsets` partition: its log and the groups hashed to it."""

    def __init__(self, index: int, offsets_log: OffsetsLog) -> None:
        self.index = index
        self.log = offsets_log
        self.groups: dict[str, Group] = {}
        self.loading = True
        self.attached = True
        self.tasks: set[asyncio.Task[None]] = set()
        self.writes: set[asyncio.Future[ErrorCode]] = set()  # answers awaiting an append


def _append_error(exc: BaseException | None, commit: bool) -> ErrorCode:
    """Kafka's mapping of a failed coordinator append to what the client is told."""
    code = exc.code if isinstance(exc, KafkaError) else E.unknown_server_error
    if code in (
        E.unknown_topic_or_partition,
        E.not_enough_replicas,
        E.not_enough_replicas_after_append,
        E.request_timed_out,
    ):
        return E.coordinator_not_available
    if code in (E.not_leader_or_follower, E.kafka_storage_error):
        return E.not_coordinator
    if code in (E.message_too_large, E.record_list_too_large, E.invalid_fetch_size):
        return E.invalid_commit_offset_size if commit else E.unknown_server_error
    return code


def _answer(waiter: asyncio.Future[Any] | None, result: Any) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(result)


def _cancel(timer: asyncio.TimerHandle | None) -> None:
    if timer is not None:
        timer.cancel()


class GroupCoordinator:
    def __init__(
        self, node_id: int, config: GroupConfig, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.node_id = node_id
        self.config = config
        self._clock = clock  # wall clock (seconds) for the timestamps written to records
        self._shards: dict[int, _Shard] = {}

    # ------------------------------------------------------------------ partitions

    def partition_for(self, group_id: str) -> int:
        """Kafka's placement: abs(hashCode) % partitions, where abs(Integer.MIN_VALUE) is 0."""
        h = java_string_hash(group_id)
        return (0 if h == -(2**31) else abs(h)) % self.config.num_partitions

    def attach(self, index: int, offsets_log: OffsetsLog) -> None:
        """This node now leads `__consumer_offsets` partition `index`: rebuild its groups from
        the log; until that is done their requests get COORDINATOR_LOAD_IN_PROGRESS."""
        self.detach(index)
        shard = _Shard(index, offsets_log)
        self._shards[index] = shard
        self._spawn(shard, self._load(shard))

    def detach(self, index: int) -> None:
        """Leadership of partition `index` is gone: forget its groups and answer every request
        still waiting on them with NOT_COORDINATOR, so clients look for the new coordinator."""
        shard = self._shards.pop(index, None)
        if shard is None:
            return
        shard.attached = False
        for task in list(shard.tasks):
            task.cancel()
        for write in shard.writes:
            _answer(write, E.not_coordinator)
        for group in shard.groups.values():
            for member in group.members.values():
                _cancel(member.session_timer)
                self._answer_join(member, JoinResult(E.not_coordinator, member.member_id))
                self._answer_sync(member, SyncResult(E.not_coordinator))
            self._cancel_group_timers(group)
        shard.groups.clear()

    def close(self) -> None:
        """Node shutdown: detach every partition."""
        for index in list(self._shards):
            self.detach(index)

    def _spawn(self, shard: _Shard, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        shard.tasks.add(task)
        task.add_done_callback(partial(self._task_done, shard))

    @staticmethod
    def _task_done(shard: _Shard, task: asyncio.Task[None]) -> None:
        shard.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "group coordinator task for partition %d failed",
                shard.index,
                exc_info=task.exception(),
            )

    async def _load(self, shard: _Shard) -> None:
        """Replays the partition: the latest record per key wins, a tombstone deletes."""
        started = time.monotonic()
        metadata: dict[str, GroupMetadataValue] = {}
        value: bytes | GroupMetadataValue | None  # a record's value, then a group's metadata
        offsets: defaultdict[str, dict[TopicPartition, OffsetCommitValue]] = defaultdict(dict)
        for count, (offset, key, value) in enumerate(shard.log.read_committed(), 1):
            if count % LOAD_YIELD_EVERY == 0:
                await asyncio.sleep(0)
            try:
                parsed = decode_key(key)
                if isinstance(parsed, OffsetCommitKey):
                    tp = (parsed.topic, parsed.partition)
                    if value is None:
                        offsets[parsed.group].pop(tp, None)
                    else:
                        offsets[parsed.group][tp] = decode_offset_commit_value(value)
                elif isinstance(parsed, GroupMetadataKey):
                    if value is None:
                        metadata.pop(parsed.group, None)
                    else:
                        metadata[parsed.group] = decode_group_metadata_value(value)
            except RecordError as exc:
                log.warning(
                    "__consumer_offsets-%d offset %d: skipping an undecodable record: %s",
                    shard.index,
                    offset,
                    exc,
                )
        now = self._now_ms()
        for group_id in metadata.keys() | {g for g, committed in offsets.items() if committed}:
            value = metadata.get(group_id)
            group = (
                Group.from_record(group_id, value, now)
                if value is not None
                else Group(group_id, now)
            )
            group.offsets = offsets.get(group_id, {})
            shard.groups[group_id] = group
            for member in group.members.values():
                self._arm_session(shard, group, member)
        shard.loading = False
        log.info(
            "coordinating __consumer_offsets-%d: %d groups loaded in %.3fs",
            shard.index,
            len(shard.groups),
            time.monotonic() - started,
        )
        self._spawn(shard, self._expire_periodically(shard))

    def _lookup(self, group_id: str, allow_empty: bool = False) -> _Shard | ErrorCode:
        """The attached partition of a group, or why it cannot be served here. Offset and admin
        APIs accept the empty group id, as Kafka does for old clients."""
        too_long = len(group_id.encode()) > self.config.max_group_id_bytes
        if too_long or not (group_id or allow_empty):
            return E.invalid_group_id
        shard = self._shards.get(self.partition_for(group_id))
        if shard is None:
            return E.not_coordinator
        if shard.loading:
            return E.coordinator_load_in_progress
        return shard

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
        shard = self._lookup(group_id)
        if isinstance(shard, ErrorCode):
            return JoinResult(shard, member_id)
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return JoinResult(E.invalid_session_timeout, member_id)
        join = _Join(
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
            return await self._join_known_member(shard, group, member_id, join)
        if group is None:
            group = shard.groups[group_id] = Group(group_id, self._now_ms())
        try:
            return await self._join_new_member(shard, group, join, require_known_member_id)
        finally:
            self._discard_if_unused(shard, group)

    async def _join_new_member(
        self, shard: _Shard, group: Group, join: _Join, require_known_member_id: bool
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
            group.pending_members[member_id] = asyncio.get_running_loop().call_later(
                join.session_timeout_ms / 1000,
                self._pending_member_expired,
                shard,
                group,
                member_id,
            )
            return JoinResult(E.member_id_required, member_id)
        return await self._add_member(shard, group, member_id, join)

    async def _join_known_member(
        self, shard: _Shard, group: Group, member_id: str, join: _Join
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
            self._arm_session(shard, group, member)
            return self._generation(group, member_id, group.leader_id == member_id)
        if group.state is STABLE and unchanged and group.leader_id != member_id:
            self._arm_session(shard, group, member)
            return self._generation(group, member_id, False)
        if group.state is EMPTY:
            return JoinResult(E.unknown_member_id, member_id)
        # A changed member, or the leader rejoining (it may know of topic changes): rebalance.
        waiter = asyncio.get_running_loop().create_future()
        self._update_member(
            member, join.protocols, join.rebalance_timeout_ms, join.session_timeout_ms, waiter
        )
        self._rebalance_or_complete_join(shard, group)
        return await waiter

    async def _add_member(
        self, shard: _Shard, group: Group, member_id: str, join: _Join
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
        self._arm_session(shard, group, member, self.config.new_member_join_timeout_ms)
        self._rebalance_or_complete_join(shard, group)
        return await waiter

    async def _rejoin_static_member(
        self, shard: _Shard, group: Group, old: Member, member_id: str, join: _Join
    ) -> JoinResult:
        """KIP-345: the instance's new member id replaces the old one, which is fenced. In a
        Stable group whose protocol would not change, no rebalance: the member gets the current
        generation (and its assignment through SyncGroup) once the new id is persisted."""
        previous_leader = group.leader_id or ""
        _cancel(old.session_timer)
        self._answer_join(old, JoinResult(E.fenced_instance_id, old.member_id))
        self._answer_sync(old, SyncResult(E.fenced_instance_id))
        member = group.replace_static_member(old, member_id)
        self._arm_session(shard, group, member)
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        before = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        self._update_member(
            member, join.protocols, join.rebalance_timeout_ms, join.session_timeout_ms, waiter
        )
        if group.state is STABLE and group.select_protocol() == group.protocol_name:
            assignments = {m.member_id: m.assignment for m in group.members.values()}
            self._append(
                shard,
                [self._group_record(group, assignments)],
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
            self._prepare_rebalance(shard, group)
        else:
            self._rebalance_or_complete_join(shard, group)
        return await waiter

    def _static_member_stored(
        self,
        shard: _Shard,
        group: Group,
        member: Member,
        old_member_id: str,
        before: tuple[Protocols, int, int],
        previous_leader: str,
        join: _Join,
        error: ErrorCode,
    ) -> None:
        waiter = member.join_waiter
        if group.members.get(member.member_id) is not member or waiter is None:
            return  # a rebalance or a removal answered it meanwhile
        if error is not E.none:
            # Not persisted: the old member id stays the valid one.
            member.join_waiter = None
            self._update_member(member, *before, None)
            _cancel(member.session_timer)
            restored = group.replace_static_member(member, old_member_id)
            self._arm_session(shard, group, restored)
            _answer(waiter, self._generation(group, "", False, error=error, leader=previous_leader))
            return
        member.join_waiter = None
        if join.supports_skip_assignment:
            is_leader = group.leader_id == member.member_id
            result = self._generation(group, member.member_id, is_leader, skip=is_leader)
        else:
            # Older clients would reassign with an empty member list if told they lead.
            result = self._generation(group, member.member_id, False, leader=previous_leader)
        _answer(waiter, result)

    def _generation(
        self,
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

    def _update_member(
        self,
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
            self._answer_join(member, JoinResult(E.rebalance_in_progress, member.member_id))
        member.join_waiter = waiter

    # ------------------------------------------------------------------ rebalancing

    def _rebalance_or_complete_join(self, shard: _Shard, group: Group) -> None:
        if group.state in (STABLE, COMPLETING, EMPTY):
            self._prepare_rebalance(shard, group)
        else:
            self._maybe_complete_join(shard, group)

    def _maybe_complete_join(self, shard: _Shard, group: Group) -> None:
        """Everyone is in; the initial rebalance still waits out its delay, so consumers that
        start together land in one generation."""
        if group.state is PREPARING and group.all_joined() and group.previous_state is not EMPTY:
            self._complete_join(shard, group)

    def _prepare_rebalance(self, shard: _Shard, group: Group) -> None:
        if group.state is COMPLETING:
            self._propagate_assignment(shard, group, E.rebalance_in_progress)
        _cancel(group.sync_timer)
        group.sync_timer = None
        group.pending_sync.clear()
        initial = group.state is EMPTY
        group.transition(PREPARING, self._now_ms())
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
        shard: _Shard,
        group: Group,
        delay_ms: int,
        callback: Callable[..., None],
        *args: int,
    ) -> None:
        _cancel(group.join_timer)
        group.join_timer = asyncio.get_running_loop().call_later(
            delay_ms / 1000, callback, shard, group, *args
        )

    def _initial_delay_over(self, shard: _Shard, group: Group, delay: int, remaining: int) -> None:
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

    def _complete_join(self, shard: _Shard, group: Group) -> None:
        """Ends the join phase: dynamic members that did not rejoin are out, the generation
        moves on and every rejoined member gets its answer."""
        _cancel(group.join_timer)
        group.join_timer = None
        if group.state is not PREPARING:
            return
        for member in list(group.members.values()):
            if member.join_waiter is None and member.group_instance_id is None:
                self._remove_member(group, member)
        if not group.elect_joined_leader() and group.members:
            # Only absent static members are left: wait for them or their session timeouts.
            self._schedule_join(shard, group, group.rebalance_timeout_ms, self._complete_join)
            return
        group.init_next_generation(self._now_ms())
        if group.state is EMPTY:
            self._append(shard, [self._group_record(group, {})], partial(self._empty_stored, group))
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
            result = self._generation(group, member.member_id, member.member_id == group.leader_id)
            self._answer_join(member, result)
            member.is_new = False
            self._arm_session(shard, group, member)
            group.pending_sync.add(member.member_id)
        group.sync_timer = asyncio.get_running_loop().call_later(
            group.rebalance_timeout_ms / 1000,
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

    def _sync_overdue(self, shard: _Shard, group: Group, generation: int) -> None:
        """Members that never sent SyncGroup within the rebalance timeout are removed."""
        group.sync_timer = None
        if generation != group.generation or group.state not in (COMPLETING, STABLE):
            return
        if not group.pending_sync:
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                self._remove_member(group, member)
        self._prepare_rebalance(shard, group)

    def _propagate_assignment(self, shard: _Shard, group: Group, error: ErrorCode) -> None:
        """Answers every parked SyncGroup: the stored assignment, or the error and none."""
        for member in group.members.values():
            if error is not E.none:
                member.assignment = b""
            if member.sync_waiter is not None:
                self._answer_sync(
                    member,
                    SyncResult(error, group.protocol_type, group.protocol_name, member.assignment)
                    if error is E.none
                    else SyncResult(error),
                )
                self._arm_session(shard, group, member)

    # ------------------------------------------------------------------ members

    def _arm_session(
        self, shard: _Shard, group: Group, member: Member, timeout_ms: int | None = None
    ) -> None:
        """(Re)starts the member's session: it is removed if nothing extends it in time."""
        _cancel(member.session_timer)
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.session_timer = asyncio.get_running_loop().call_later(
            timeout / 1000, self._session_expired, shard, group, member
        )

    def _session_expired(self, shard: _Shard, group: Group, member: Member) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is not member:
            return
        if not member.is_new and (member.join_waiter is not None or member.sync_waiter is not None):
            return  # a parked request counts as alive; answering it restarts the session
        log.info("group %s: member %s session expired", group.group_id, member.member_id)
        self._remove_member(group, member)
        self._after_removal(shard, group)

    def _pending_member_expired(self, shard: _Shard, group: Group, member_id: str) -> None:
        """A member told MEMBER_ID_REQUIRED never came back with its id."""
        if group.pending_members.pop(member_id, None) is None:
            return
        self._maybe_complete_join(shard, group)
        self._discard_if_unused(shard, group)

    def _remove_member(self, group: Group, member: Member) -> None:
        _cancel(member.session_timer)
        self._answer_join(member, JoinResult(E.unknown_member_id))
        self._answer_sync(member, SyncResult(E.unknown_member_id))
        group.remove(member.member_id)

    def _after_removal(self, shard: _Shard, group: Group) -> None:
        if group.state in (STABLE, COMPLETING):
            self._prepare_rebalance(shard, group)
        elif group.state is PREPARING:
            self._maybe_complete_join(shard, group)

    @staticmethod
    def _answer_join(member: Member, result: JoinResult) -> None:
        waiter, member.join_waiter = member.join_waiter, None
        _answer(waiter, result)

    @staticmethod
    def _answer_sync(member: Member, result: SyncResult) -> None:
        waiter, member.sync_waiter = member.sync_waiter, None
        _answer(waiter, result)

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
        shard = self._lookup(group_id)
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
            _cancel(group.sync_timer)
            group.sync_timer = None
        if group.state is STABLE:
            self._arm_session(shard, group, member)
            return SyncResult(E.none, group.protocol_type, group.protocol_name, member.assignment)
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        self._answer_sync(member, SyncResult(E.rebalance_in_progress))  # a superseded retry
        member.sync_waiter = waiter
        if member_id == group.leader_id:
            given = assignments or {}
            full = {m: given.get(m, b"") for m in group.members}
            self._append(
                shard,
                [self._group_record(group, full)],
                partial(self._assignment_stored, shard, group, group.generation, full),
            )
        return await waiter

    def _assignment_stored(
        self,
        shard: _Shard,
        group: Group,
        generation: int,
        assignments: dict[str, bytes],
        error: ErrorCode,
    ) -> None:
        if group.state is not COMPLETING or group.generation != generation:
            return  # a new rebalance started meanwhile and answered the waiting members
        if error is not E.none:
            self._propagate_assignment(shard, group, error)
            self._rebalance_or_complete_join(shard, group)
            return
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        self._propagate_assignment(shard, group, E.none)
        group.transition(STABLE, self._now_ms())

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup

    async def heartbeat(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None = None,
    ) -> ErrorCode:
        """Extends the member's session; REBALANCE_IN_PROGRESS tells it to rejoin."""
        shard = self._lookup(group_id)
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
        self._arm_session(shard, group, group.members[member_id])
        return E.rebalance_in_progress if group.state is PREPARING else E.none

    async def leave_group(self, group_id: str, members: Sequence[LeavingMember]) -> LeaveResult:
        """Removes each member (by member id, or by group.instance.id alone) and rebalances."""
        shard = self._lookup(group_id)
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
                    self._remove_member(group, group.members[known])
            elif leaving.member_id in group.pending_members:
                group.pending_members.pop(leaving.member_id).cancel()
            else:
                error = group.validate_member(leaving.member_id, leaving.group_instance_id)
                if error is E.none:
                    self._remove_member(group, group.members[leaving.member_id])
            answers.append(LeftMember(leaving.member_id, leaving.group_instance_id, error))
        if any(answer.error is E.none for answer in answers):
            self._after_removal(shard, group)
        self._discard_if_unused(shard, group)
        return LeaveResult(E.none, tuple(answers))

    # ------------------------------------------------------------------ offsets

    async def offset_commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Sequence[CommitOffset],
    ) -> list[ErrorCode]:
        """One error per entry of `offsets`, in order. Accepted offsets are written in one
        append and answered (and visible to OffsetFetch) only once it resolved. A group that
        does not exist gets GROUP_ID_NOT_FOUND unless this is a standalone commit
        (generation < 0), which creates it."""
        shard = self._lookup(group_id, allow_empty=True)
        if isinstance(shard, ErrorCode):
            return [shard] * len(offsets)
        group = shard.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return [E.group_id_not_found] * len(offsets)
            group = shard.groups[group_id] = Group(group_id, self._now_ms())
        error = self._commit_error(group, generation_id, member_id, group_instance_id)
        if error is not E.none:
            self._discard_if_unused(shard, group)
            return [error] * len(offsets)
        member = group.members.get(member_id)
        if member is not None:
            self._arm_session(shard, group, member)
        now = self._now_ms()
        errors: list[ErrorCode] = []
        accepted: dict[TopicPartition, OffsetCommitValue] = {}
        for entry in offsets:
            metadata = entry.metadata or ""
            # Kafka compares the string's length in characters, despite the setting's name.
            if len(metadata) > self.config.offset_metadata_max_bytes:
                errors.append(E.offset_metadata_too_large)
                continue
            errors.append(E.none)
            accepted[(entry.topic, entry.partition)] = OffsetCommitValue(
                entry.offset, entry.leader_epoch, metadata, now
            )
        if not accepted:
            self._discard_if_unused(shard, group)
            return errors
        records: Records = [
            (offset_commit_key(group_id, topic, partition), offset_commit_value(value))
            for (topic, partition), value in accepted.items()
        ]
        group.pending_commits.update(accepted.keys())
        written = await self._append(
            shard, records, partial(self._offsets_written, shard, group, accepted), commit=True
        )
        return [written if e is E.none else e for e in errors]

    def _offsets_written(
        self,
        shard: _Shard,
        group: Group,
        accepted: dict[TopicPartition, OffsetCommitValue],
        error: ErrorCode,
    ) -> None:
        group.pending_commits -= Counter(accepted.keys())
        if error is E.none:
            group.offsets.update(accepted)
        else:
            self._discard_if_unused(shard, group)

    @staticmethod
    def _commit_error(
        group: Group, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        """Kafka's order: only members of the current generation may commit, except a
        standalone consumer (generation < 0) while the group is Empty."""
        if group.state is DEAD:
            return E.coordinator_not_available
        if group_instance_id is not None:
            known = group.static_members.get(group_instance_id)
            if known is not None and known != member_id:
                return E.fenced_instance_id
        if generation_id < 0 and group.state is EMPTY:
            return E.none
        if group.state is COMPLETING:
            return E.rebalance_in_progress
        if member_id not in group.members:
            return E.unknown_member_id
        if generation_id != group.generation:
            return E.illegal_generation
        return E.none

    async def offset_fetch(
        self, group_id: str, partitions: Sequence[tuple[str, int]] | None
    ) -> OffsetFetchResult:
        """Committed offsets of the given partitions (-1 for none), or of every partition the
        group committed when `partitions` is None. Answers mid-rebalance too."""
        shard = self._lookup(group_id, allow_empty=True)
        if isinstance(shard, ErrorCode):
            return OffsetFetchResult(shard)
        group = shard.groups.get(group_id)
        committed = group.offsets if group is not None and group.state is not DEAD else {}
        if partitions is None:
            wanted: Collection[TopicPartition] = sorted(committed)
        else:
            wanted = partitions
        return OffsetFetchResult(E.none, tuple(_fetched(tp, committed.get(tp)) for tp in wanted))

    # ------------------------------------------------------------------ admin

    async def list_groups(
        self, states: Collection[str] = (), types: Collection[str] = ()
    ) -> ListGroupsResult:
        """Groups of every attached partition; filters match case-insensitively (states are
        DescribeGroups' names; every group here is of type "classic")."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        if wanted_types and "classic" not in wanted_types:
            return ListGroupsResult(E.none)
        error = E.none
        groups = []
        for shard in self._shards.values():
            if shard.loading:
                error = E.coordinator_load_in_progress
                continue
            for group in shard.groups.values():
                state = group.state.value
                if group.state is DEAD or (wanted_states and state.lower() not in wanted_states):
                    continue
                groups.append(ListedGroup(group.group_id, group.protocol_type or "", state))
        return ListGroupsResult(error, tuple(groups))

    async def describe_groups(self, group_ids: Sequence[str]) -> list[DescribedGroup]:
        """Members carry their metadata and assignment only while the group is Stable."""
        described = []
        for group_id in group_ids:
            shard = self._lookup(group_id, allow_empty=True)
            group = None if isinstance(shard, ErrorCode) else shard.groups.get(group_id)
            if isinstance(shard, ErrorCode):
                described.append(DescribedGroup(group_id, shard))
            elif group is None or group.state is DEAD:
                described.append(DescribedGroup(group_id, E.group_id_not_found))
            else:
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
                described.append(
                    DescribedGroup(
                        group_id,
                        E.none,
                        group.state.value,
                        group.protocol_type or "",
                        (group.protocol_name or "") if stable else "",
                        members,
                    )
                )
        return described

    async def delete_groups(self, group_ids: Sequence[str]) -> list[DeletedGroup]:
        """Deletes Empty groups: a GroupMetadata tombstone and one per committed offset, one
        append per partition. The group is Dead (refusing requests) while that is written."""
        errors: dict[int, ErrorCode] = {}
        batches: defaultdict[int, list[tuple[int, Group, int]]] = defaultdict(list)
        shards: dict[int, _Shard] = {}
        for position, group_id in enumerate(group_ids):
            shard = self._lookup(group_id, allow_empty=True)
            group = None if isinstance(shard, ErrorCode) else shard.groups.get(group_id)
            if isinstance(shard, ErrorCode):
                errors[position] = shard
            elif group is None or group.state is DEAD:
                errors[position] = E.group_id_not_found
            elif group.state is not EMPTY:
                errors[position] = E.non_empty_group
            else:
                batches[shard.index].append((position, group, group.state_timestamp))
                shards[shard.index] = shard
                group.transition(DEAD, self._now_ms())
        writes = []
        for index, batch in batches.items():
            records: Records = []
            for _, group, _ in batch:
                committed = set(group.offsets) | set(group.pending_commits)
                records += [
                    (offset_commit_key(group.group_id, topic, partition), None)
                    for topic, partition in sorted(committed)
                ]
                records.append((group_metadata_key(group.group_id), None))
            effect = partial(self._groups_deleted, shards[index], batch)
            writes.append(self._append(shards[index], records, effect))
        for batch, error in zip(batches.values(), await asyncio.gather(*writes), strict=True):
            for position, _, _ in batch:
                errors[position] = error
        return [DeletedGroup(group_id, errors[i]) for i, group_id in enumerate(group_ids)]

    def _groups_deleted(
        self, shard: _Shard, batch: list[tuple[int, Group, int]], error: ErrorCode
    ) -> None:
        for _, group, state_timestamp in batch:
            if error is E.none:
                self._forget(shard, group)
            else:
                group.transition(EMPTY, state_timestamp)

    # ------------------------------------------------------------------ retention

    async def _expire_periodically(self, shard: _Shard) -> None:
        while True:
            await asyncio.sleep(self.config.offsets_retention_check_interval_ms / 1000)
            self._expire_offsets(shard)

    def _expire_offsets(self, shard: _Shard) -> None:
        """Kafka's offset retention for groups without members: a consumer group's offsets go
        once it has been Empty for the retention period, a standalone group's each retention
        period after its commit. A group left with nothing is deleted (tombstone)."""
        now = self._now_ms()
        retention = self.config.offsets_retention_minutes * 60_000
        records: Records = []
        expired: list[tuple[Group, dict[TopicPartition, OffsetCommitValue]]] = []
        dead: list[tuple[Group, int]] = []
        for group in shard.groups.values():
            if group.state is not EMPTY:
                continue
            gone = {
                tp: value
                for tp, value in group.offsets.items()
                if tp not in group.pending_commits and _is_expired(group, value, now, retention)
            }
            if gone:
                expired.append((group, gone))
                records += [
                    (offset_commit_key(group.group_id, topic, partition), None)
                    for topic, partition in gone
                ]
            if len(gone) == len(group.offsets) and not (
                group.pending_commits or group.members or group.pending_members
            ):
                dead.append((group, group.state_timestamp))
                group.transition(DEAD, now)
                records.append((group_metadata_key(group.group_id), None))
        if records:
            self._append(shard, records, partial(self._expiry_written, shard, expired, dead))

    def _expiry_written(
        self,
        shard: _Shard,
        expired: list[tuple[Group, dict[TopicPartition, OffsetCommitValue]]],
        dead: list[tuple[Group, int]],
        error: ErrorCode,
    ) -> None:
        if error is not E.none:
            log.warning(
                "__consumer_offsets-%d: offset expiry not written: %s", shard.index, error.name
            )
            for group, state_timestamp in dead:
                group.transition(EMPTY, state_timestamp)
            return
        for group, gone in expired:
            for tp, value in gone.items():
                if group.offsets.get(tp) is value:  # not recommitted meanwhile
                    del group.offsets[tp]
        for group, _ in dead:
            self._forget(shard, group)

    # ------------------------------------------------------------------ helpers

    def _append(
        self,
        shard: _Shard,
        records: Records,
        effect: Callable[[ErrorCode], None],
        *,
        commit: bool = False,
    ) -> asyncio.Future[ErrorCode]:
        """Starts the append now, so the log's order is the order of these calls. `effect`
        applies the outcome to memory when the append resolves, even if nobody awaits the
        answer any more (a client that disconnected must not leave memory behind the log)."""
        answer: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        shard.writes.add(answer)

        def resolved(write: asyncio.Future[int]) -> None:
            shard.writes.discard(answer)
            if write.cancelled():
                error = E.coordinator_not_available
            else:
                exc = write.exception()
                error = E.none if exc is None else _append_error(exc, commit)
            try:
                if shard.attached:
                    effect(error)
                else:
                    error = E.not_coordinator
            finally:
                _answer(answer, error)

        asyncio.ensure_future(shard.log.append(records)).add_done_callback(resolved)
        return answer

    def _group_record(self, group: Group, assignments: Mapping[str, bytes]) -> tuple[bytes, bytes]:
        return group_metadata_key(group.group_id), group_metadata_value(group.record(assignments))

    def _discard_if_unused(self, shard: _Shard, group: Group) -> None:
        """Failed joins and commits must not leave empty groups behind."""
        if shard.groups.get(group.group_id) is group and group.is_unused():
            self._forget(shard, group)

    def _forget(self, shard: _Shard, group: Group) -> None:
        if shard.groups.get(group.group_id) is group:
            del shard.groups[group.group_id]
        self._cancel_group_timers(group)

    @staticmethod
    def _cancel_group_timers(group: Group) -> None:
        _cancel(group.join_timer)
        _cancel(group.sync_timer)
        for timer in group.pending_members.values():
            timer.cancel()
        group.join_timer = group.sync_timer = None
        group.pending_members.clear()

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)


def _inconsistent(given: str | None, expected: str | None) -> bool:
    return given is not None and expected is not None and given != expected


def _fetched(tp: TopicPartition, value: OffsetCommitValue | None) -> FetchedOffset:
    if value is None:
        return FetchedOffset(tp[0], tp[1])
    return FetchedOffset(tp[0], tp[1], value.offset, value.leader_epoch, value.metadata)


def _is_expired(group: Group, value: OffsetCommitValue, now: int, retention_ms: int) -> bool:
    if value.expire_timestamp >= 0:  # an old v1 record chose its own expiry
        return now >= value.expire_timestamp
    since = (
        group.state_timestamp
        if group.protocol_type is not None and group.state_timestamp >= 0
        else value.commit_timestamp
    )
    return now - since >= retention_ms
