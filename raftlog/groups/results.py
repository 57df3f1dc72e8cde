"""What the group coordinator takes and answers, as plain values: the Kafka handlers map these
onto the kio models of whichever API version they serve."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from epoch import NO_EPOCH
from raftlog.common.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class JoinMember:
    """One member in the leader's JoinGroup answer, with its metadata for the chosen protocol."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[JoinMember, ...] = ()  # only the leader's answer lists them
    skip_assignment: bool = False  # JoinGroup v9+: a static leader rejoined a Stable group


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str  # "" to remove a static member by its instance id alone
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error: ErrorCode
    members: tuple[LeftMember, ...] = ()


@dataclass(frozen=True, slots=True)
class CommitOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = NO_EPOCH
    metadata: str | None = None


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int = -1  # -1: nothing committed
    leader_epoch: int = NO_EPOCH
    metadata: str = ""
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class OffsetFetchResult:
    error: ErrorCode
    offsets: tuple[FetchedOffset, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class ListGroupsResult:
    error: ErrorCode  # COORDINATOR_LOAD_IN_PROGRESS while a partition loads (groups still listed)
    groups: tuple[ListedGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # empty unless the group is Stable
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error: ErrorCode  # GROUP_ID_NOT_FOUND for an unknown group (state "Dead")
    state: str = "Dead"
    protocol_type: str = ""
    protocol_data: str = ""  # the chosen protocol when Stable
    members: tuple[DescribedMember, ...] = ()
    error_message: str | None = None  # DescribeGroups v6+


@dataclass(frozen=True, slots=True)
class DeletedGroup:
    group_id: str
    error: ErrorCode


def answer(waiter: asyncio.Future[Any] | None, result: Any) -> None:
    """Gives a parked request its result, unless it was answered or abandoned meanwhile."""
    if waiter is not None and not waiter.done():
        waiter.set_result(result)
