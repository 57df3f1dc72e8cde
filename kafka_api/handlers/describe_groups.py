"""DescribeGroups (15): state, protocol and members of groups this node coordinates.
v4 adds the members' instance ids; v6 reports an unknown group as GROUP_ID_NOT_FOUND where
earlier versions describe it as a "Dead" group without error (KIP-1043). Each group needs
DESCRIBE (else GROUP_AUTHORIZATION_FAILED, and nothing of it); v3+ may ask what else the
principal may do with each group described. Every copy of a group named twice is
INVALID_REQUEST and not described (Kafka describes each copy: members' metadata and
assignments, again and again)."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, Resource, authorized, authorized_operations
from kafka_api.codec import build, response_module
from kafka_api.common import (
    NO_THROTTLE,
    UNKNOWN_AUTHORIZED_OPERATIONS,
    duplicates,
    named_twice,
)
from kafka_api.context import RequestContext
from raftlog.errors import ErrorCode
from raftlog.groups.results import DescribedGroup

API_KEY = 15
MIN_VERSION = 0
MAX_VERSION = 6

GROUP_ID_NOT_FOUND_VERSION = 6


async def handle(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    m = response_module(API_KEY, version)
    include_operations = getattr(request, "include_authorized_operations", False)
    repeated = duplicates(request.groups)
    allowed = authorized(
        ctx, Op.DESCRIBE, Resource.GROUP, (g for g in request.groups if g not in repeated)
    )
    found = iter(
        await ctx.broker.groups.describe_groups([g for g in request.groups if g in allowed])
    )
    described = []
    for group_id in request.groups:
        if group_id in repeated:
            group = DescribedGroup(
                group_id, ErrorCode.invalid_request, "", error_message=named_twice("group")
            )
        elif group_id in allowed:
            group = next(found)
        else:
            group = DescribedGroup(group_id, ErrorCode.group_authorization_failed, state="")
        error, message = group.error, group.error_message
        if error is ErrorCode.group_id_not_found:
            if version < GROUP_ID_NOT_FOUND_VERSION:
                error = ErrorCode.none
            else:
                message = group.error_message or f"Group {group.group_id} not found."
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
        described.append(
            build(
                m.DescribedGroup,
                error_code=error,
                error_message=message,
                group_id=group.group_id,
                group_state=group.state,
                protocol_type=group.protocol_type,
                protocol_data=group.protocol_data,
                members=members,
                authorized_operations=(
                    authorized_operations(ctx, Resource.GROUP, group.group_id)
                    if include_operations and error is ErrorCode.none
                    else UNKNOWN_AUTHORIZED_OPERATIONS
                ),
            )
        )
    return build(m.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(described))
