"""DescribeGroups (15): state, protocol and members of groups this node coordinates.
v4 adds the members' instance ids; v6 reports an unknown group as GROUP_ID_NOT_FOUND where
earlier versions describe it as a "Dead" group without error (KIP-1043). Each group needs
DESCRIBE (else GROUP_AUTHORIZATION_FAILED, and nothing of it); v3+ may ask what else the
principal may do with each group described. Every copy of a group named twice is
INVALID_REQUEST and not described (Kafka describes each copy: members' metadata and
assignments, again and again). The groups are authorized and described on the loop a slice at
a time; repeats are counted, and the answer to more than a thousand built and encoded, in a
thread (kafka_api/entry_work.py)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from kafka_api.authz import Op, Resource, authorize, authorized_operations
from kafka_api.codec import build, response_module
from kafka_api.common import (
    NO_THROTTLE,
    UNKNOWN_AUTHORIZED_OPERATIONS,
    duplicates,
    named_twice,
)
from kafka_api.context import RequestContext
from kafka_api.entry_work import answer, off_loop, sliced
from raftlog.common.errors import ErrorCode
from raftlog.groups.results import DescribedGroup

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 6

GROUP_ID_NOT_FOUND_VERSION = 6


async def handle(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    m = response_module(API_KEY, version)
    include_operations = getattr(request, "include_authorized_operations", False)
    ids: tuple[str, ...] = request.groups
    repeated = await off_loop(len(ids), duplicates, ids)
    coordinator = ctx.broker.groups
    described: list[tuple[DescribedGroup, int]] = []  # each group, its authorized operations
    async for group_id in sliced(ids):  # the ACLs and the groups are the loop's
        if group_id in repeated:
            group = DescribedGroup(
                group_id, ErrorCode.invalid_request, "", error_message=named_twice("group")
            )
        elif authorize(ctx, Op.DESCRIBE, Resource.GROUP, group_id):
            group = coordinator.describe_group(group_id)
        else:
            group = DescribedGroup(group_id, ErrorCode.group_authorization_failed, state="")
        operations = UNKNOWN_AUTHORIZED_OPERATIONS
        if include_operations and _error(group, version)[0] is ErrorCode.none:
            operations = authorized_operations(ctx, Resource.GROUP, group_id)
        described.append((group, operations))
    # A DescribedGroup is a snapshot (members' metadata and assignments are bytes).
    return await answer(len(ids), _answer, m, version, described)


def _answer(m: ModuleType, version: int, described: list[tuple[DescribedGroup, int]]) -> Any:
    groups = []
    for group, operations in described:
        error, message = _error(group, version)
        members = tuple(
            build(
                m.DescribedGroupMember,
                member_id=x.member_id,
                group_instance_id=x.group_instance_id,
                client_id=x.client_id,
                client_host=x.client_host,
                member_metadata=x.metadata,
                member_assignment=x.assignment,
            )
            for x in group.members
        )
        groups.append(
            build(
                m.DescribedGroup,
                error_code=error,
                error_message=message,
                group_id=group.group_id,
                group_state=group.state,
                protocol_type=group.protocol_type,
                protocol_data=group.protocol_data,
                members=members,
                authorized_operations=operations,
            )
        )
    return build(m.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))


def _error(group: DescribedGroup, version: int) -> tuple[ErrorCode, str | None]:
    """The group's error and message as this version reports them."""
    if group.error is not ErrorCode.group_id_not_found:
        return group.error, group.error_message
    if version < GROUP_ID_NOT_FOUND_VERSION:
        return ErrorCode.none, group.error_message
    return group.error, group.error_message or f"Group {group.group_id} not found."
