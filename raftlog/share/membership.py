"""Share-group membership (KIP-932), in memory: who is in each share group, at which epoch,
and which partitions each member gets, as Kafka's GroupMetadataManager.shareGroupHeartbeat
decides it.

A share group has no join/sync rounds and no revocation step. One heartbeat keeps a member's
session, carries its subscription and answers its assignment: the group epoch moves when a
subscription, a subscribed topic's partition count or the membership changes; the next
heartbeat that sees the group epoch past the target assignment's epoch recomputes the target
(assignor.py); a member behind the target takes it at once, since members may share
partitions and nothing has to be released first.

Nothing here is persisted: after the coordinator moves, members get UNKNOWN_MEMBER_ID and
rejoin with epoch 0.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from raftlog.common.clock import LOOP_CLOCK, Clock, Timer
from raftlog.common.errors import ErrorCode
from raftlog.config.internal_topics import is_internal
from raftlog.share.assignor import assign

log = logging.getLogger(__name__)

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
ASSIGNOR_NAME = "simple"
STATE_EMPTY = "Empty"
STATE_STABLE = "Stable"
# Share groups one coordinator holds (Kafka's group.share.max.groups bounds them per
# coordinator too); each costs its members, their assignments and a session timer each.
MAX_GROUPS = 1000
# The client makes its member id up (a UUID: 22 characters in librdkafka and Kafka's client);
# a longer one would be kept per member and sent between nodes with every session opened.
MAX_MEMBER_ID_BYTES = 255

Assignment = dict[str, frozenset[int]]  # topic name -> partitions


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    heartbeat_interval_ms: int = 5000  # group.share.heartbeat.interval.ms
    session_timeout_ms: int = 45000  # group.share.session.timeout.ms
    max_size: int = 200  # group.share.max.size


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    # topic name -> partitions; None = no change (sent at join and whenever it changed)
    assignment: dict[str, tuple[int, ...]] | None = None


@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: dict[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    group_id: str
    state: str  # "Empty" or "Stable"
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[ShareMemberDescription, ...]  # in join order


@dataclass(slots=True)
class _Member:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None = None
    subscribed: frozenset[str] = frozenset()
    epoch: int = 0
    previous_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)
    timer: Timer | None = None
    session: int = 0  # which armed session timer is the live one


@dataclass(slots=True)
class _Group:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, _Member] = field(default_factory=dict)  # in join order
    target: dict[str, Assignment] = field(default_factory=dict)
    # the subscribed topics that exist -> their partition counts, as the target last saw them
    partition_counts: dict[str, int] = field(default_factory=dict)


def _frozen(assignment: Assignment) -> dict[str, tuple[int, ...]]:
    return {t: tuple(sorted(ps)) for t, ps in sorted(assignment.items()) if ps}


def _error(code: ErrorCode, message: str) -> HeartbeatResult:
    return HeartbeatResult(error=code, message=message)


def _is_blank(value: str | None) -> bool:
    """Kafka's throwIfEmptyString: null is allowed, empty or whitespace is not."""
    return value is not None and not value.strip()


class ShareGroups:
    """The share groups of one coordinator. Everything runs on the event loop; the only
    asynchrony is the session timers of `clock`."""

    def __init__(
        self,
        topic_partitions: Callable[[str], int | None],
        clock: Clock = LOOP_CLOCK,
        settings: Callable[[str], ShareGroupSettings] = lambda _g: ShareGroupSettings(),
        is_classic_group: Callable[[str], bool] = lambda _g: False,
        max_groups: int = MAX_GROUPS,
    ) -> None:
        self._topic_partitions = topic_partitions
        self._max_groups = max_groups
        self._clock = clock
        self._settings = settings
        self._is_classic_group = is_classic_group
        self._groups: dict[str, _Group] = {}
        self._sessions = itertools.count(1)
        # (group_id, member_id) when a member leaves or its session expires, so the share
        # partitions can release what it had acquired
        self.on_member_left: list[Callable[[str, str], None]] = []
        # (group_id, epoch) when a group comes into being, so its existence can be written
        self.on_created: list[Callable[[str, int], None]] = []

    # ---- the heartbeat

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed_topic_names: Sequence[str] | None,
        client_id: str,
        client_host: str,
    ) -> HeartbeatResult:
        """One ShareGroupHeartbeat: a join (epoch 0), a leave (-1) or a heartbeat at the
        member's epoch; `subscribed_topic_names` None means unchanged."""
        invalid = self._invalid(group_id, member_id, member_epoch, rack_id, subscribed_topic_names)
        if invalid is not None:
            return _error(ErrorCode.invalid_request, invalid)
        if member_epoch == LEAVE_EPOCH:
            return self._leave(group_id, member_id)

        group = self._groups.get(group_id)
        if group is None:
            if self._is_classic_group(group_id):
                return _not_share_group(group_id)
            if member_epoch != JOIN_EPOCH:
                # Kafka answers an internal error here; UNKNOWN_MEMBER_ID makes the client
                # rejoin, which is what it must do after the coordinator moved
                return _error(ErrorCode.unknown_member_id, _unknown(group_id, member_id))
            if len(self._groups) >= self._max_groups:
                return _error(
                    ErrorCode.group_max_size_reached,
                    f"This coordinator holds its maximum of {self._max_groups} share groups.",
                )
            group = _Group(group_id)
        settings = self._settings(group_id)

        member = group.members.get(member_id)
        if member is None and len(group.members) >= settings.max_size:
            return _error(
                ErrorCode.group_max_size_reached,
                f"The share group has reached its maximum capacity of {settings.max_size} members.",
            )
        if member is None:
            if member_epoch != JOIN_EPOCH:
                return _error(ErrorCode.unknown_member_id, _unknown(group_id, member_id))
            member = _Member(member_id, client_id, client_host)
            log.info("[GroupId %s] Member %s joins the share group.", group_id, member_id)
        elif member_epoch != JOIN_EPOCH:  # epoch 0 rejoins, keeping the id (KAFKA-19233)
            fenced = _fenced(member, member_epoch)
            if fenced is not None:
                return _error(ErrorCode.fenced_member_epoch, fenced)

        created = group_id not in self._groups
        self._groups.setdefault(group_id, group)
        group.members.setdefault(member_id, member)
        before = member.assigned

        member.client_id, member.client_host = client_id, client_host
        if rack_id is not None:
            member.rack_id = rack_id
        bump = False
        if subscribed_topic_names is not None:
            subscribed = frozenset(subscribed_topic_names)
            if subscribed != member.subscribed:
                member.subscribed = subscribed
                bump = True
        if self._refresh_partition_counts(group) or bump:
            group.epoch += 1

        if group.epoch > group.assignment_epoch:
            subscriptions = {m.member_id: m.subscribed for m in group.members.values()}
            group.target = assign(subscriptions, group.partition_counts, group.target)
            group.assignment_epoch = group.epoch
        if member.epoch != group.assignment_epoch:
            # no revocation step: the member jumps to its target
            member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
            member.assigned = group.target.get(member_id, {})

        self._arm_session(group_id, member, settings)
        if created:
            for hook in self.on_created:
                hook(group_id, group.epoch)
        # Kafka sends the assignment at a (re)join and when it changed; also when the request
        # came with an older epoch, so an answer that was lost does not leave the client on
        # its old assignment until the next change
        send = (
            member_epoch == JOIN_EPOCH or member.assigned != before or member_epoch != member.epoch
        )
        return HeartbeatResult(
            error=ErrorCode.none,
            member_id=member_id,
            member_epoch=member.epoch,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            assignment=_frozen(member.assigned) if send else None,
        )

    @staticmethod
    def _invalid(
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed_topic_names: Sequence[str] | None,
    ) -> str | None:
        """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid. The client makes up its member
        id, so an empty or overlong one is refused too; and an internal topic (its share
        state would be written into that topic's own Raft log, and it holds no data)."""
        if _is_blank(member_id):
            return "MemberId can't be empty."
        if len(member_id.encode()) > MAX_MEMBER_ID_BYTES:
            return f"MemberId can't be longer than {MAX_MEMBER_ID_BYTES} bytes."
        if _is_blank(group_id):
            return "GroupId can't be empty."
        if _is_blank(rack_id):
            return "RackId can't be empty."
        if member_epoch == JOIN_EPOCH and not subscribed_topic_names:
            return "SubscribedTopicNames must be set in first request."
        if member_epoch < LEAVE_EPOCH:
            return "MemberEpoch is invalid."
        internal = sorted(t for t in subscribed_topic_names or () if is_internal(t))
        if internal:
            return f"Share groups cannot subscribe to internal topics: {', '.join(internal)}."
        return None

    def _leave(self, group_id: str, member_id: str) -> HeartbeatResult:
        group = self._groups.get(group_id)
        if group is None:
            if self._is_classic_group(group_id):
                return _not_share_group(group_id)
            return _error(ErrorCode.group_id_not_found, f"Share group {group_id} not found.")
        member = group.members.get(member_id)
        if member is None:
            return _error(ErrorCode.unknown_member_id, _unknown(group_id, member_id))
        log.info("[GroupId %s] Member %s left the share group.", group_id, member_id)
        self._remove(group, member)
        return HeartbeatResult(error=ErrorCode.none, member_id=member_id, member_epoch=LEAVE_EPOCH)

    # ---- sessions and removal

    def _arm_session(self, group_id: str, member: _Member, settings: ShareGroupSettings) -> None:
        if member.timer is not None:
            member.timer.cancel()
        member.session = next(self._sessions)
        member.timer = self._clock.call_later(
            settings.session_timeout_ms / 1000,
            self._session_expired,
            group_id,
            member.member_id,
            member.session,
        )

    def _session_expired(self, group_id: str, member_id: str, session: int) -> None:
        group = self._groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None or member.session != session:
            return  # left, rejoined or deleted meanwhile
        log.info(
            "[GroupId %s] Member %s fenced from the group because its session expired.",
            group_id,
            member_id,
        )
        member.timer = None
        self._remove(group, member)

    def _remove(self, group: _Group, member: _Member) -> None:
        """Kafka's shareGroupFenceMember: the member and its target go, the group epoch moves
        on; the others get the new target at their next heartbeat."""
        if member.timer is not None:
            member.timer.cancel()
            member.timer = None
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        self._refresh_partition_counts(group)
        group.epoch += 1
        for callback in list(self.on_member_left):
            try:
                callback(group.group_id, member.member_id)
            except Exception:
                log.exception("on_member_left callback failed for %s", member.member_id)

    def _refresh_partition_counts(self, group: _Group) -> bool:
        """Re-reads the partition counts of the group's subscribed topics; True if they changed
        (a topic appeared, went, or grew)."""
        counts: dict[str, int] = {}
        for topic in sorted({t for m in group.members.values() for t in m.subscribed}):
            count = self._topic_partitions(topic)
            if count is not None:
                counts[topic] = count
        if counts == group.partition_counts:
            return False
        group.partition_counts = counts
        return True

    # ---- what the rest of the broker asks

    def topics_changed(self) -> None:
        """Topics were created, deleted or given more partitions: groups subscribed to them
        move their epoch, and their members get a new target at their next heartbeat."""
        for group in self._groups.values():
            if self._refresh_partition_counts(group):
                group.epoch += 1

    def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self._groups.get(group_id)
        return group is not None and member_id in group.members

    def members_of(self, group_id: str, topic: str, partition: int) -> set[str]:
        """The members whose current assignment has the partition."""
        group = self._groups.get(group_id)
        if group is None:
            return set()
        return {
            m.member_id
            for m in group.members.values()
            if partition in m.assigned.get(topic, frozenset())
        }

    def describe(self, group_id: str) -> ShareGroupDescription | None:
        group = self._groups.get(group_id)
        if group is None:
            return None
        return ShareGroupDescription(
            group_id=group_id,
            state=STATE_STABLE if group.members else STATE_EMPTY,
            group_epoch=group.epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=ASSIGNOR_NAME,
            members=tuple(
                ShareMemberDescription(
                    member_id=m.member_id,
                    rack_id=m.rack_id,
                    member_epoch=m.epoch,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    subscribed_topic_names=tuple(sorted(m.subscribed)),
                    assignment=_frozen(m.assigned),
                )
                for m in group.members.values()
            ),
        )

    def delete(self, group_id: str) -> ErrorCode:
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        del self._groups[group_id]
        return ErrorCode.none

    def restore(self, group_id: str, epoch: int) -> None:
        """A share group found in `__consumer_offsets` by a new coordinator: it exists, empty,
        until its members rejoin (they get UNKNOWN_MEMBER_ID here first)."""
        if group_id not in self._groups:
            self._groups[group_id] = _Group(group_id, epoch=epoch, assignment_epoch=epoch)

    def forget(self, group_id: str) -> None:
        """This node no longer coordinates the group: its members rejoin the new coordinator
        (their next heartbeat here gets UNKNOWN_MEMBER_ID)."""
        group = self._groups.pop(group_id, None)
        if group is not None:
            _stop_timers(group)

    def close(self) -> None:
        """Cancels every session timer (the coordinator is going away)."""
        for group in self._groups.values():
            _stop_timers(group)


def _stop_timers(group: _Group) -> None:
    for member in group.members.values():
        if member.timer is not None:
            member.timer.cancel()
            member.timer = None


def _not_share_group(group_id: str) -> HeartbeatResult:
    """The id belongs to a classic group; Kafka does not convert between group types."""
    return _error(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")


def _unknown(group_id: str, member_id: str) -> str:
    return f"Member {member_id} is not a member of group {group_id}."


def _fenced(member: _Member, received: int) -> str | None:
    """Kafka's throwIfShareGroupMemberEpochIsInvalid: a smaller epoch passes only if it is
    the member's previous one (the answer that bumped it was lost)."""
    if received > member.epoch:
        return (
            f"The share group member has a greater member epoch ({received}) than the one "
            f"known by the group coordinator ({member.epoch}). The member must abandon all "
            "its partitions and rejoin."
        )
    if received < member.epoch and received != member.previous_epoch:
        return (
            f"The share group member has a smaller member epoch ({received}) than the one "
            f"known by the group coordinator ({member.epoch}). The member must abandon all "
            "its partitions and rejoin."
        )
    return None
