"""LeaveGroup (13): members leave at once instead of waiting out their sessions. v3+ removes
several members per request, each by member id or, for static members, by instance id alone;
earlier versions name one member and carry its error at the top level. Needs READ on the group."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode
from raftlog.groups.results import LeaveResult, LeavingMember

API_KEY = 13
MIN_VERSION = 0
MAX_VERSION = 5

BATCHED_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    m = response_module(API_KEY, version)
    if version < BATCHED_VERSION:
        leaving = [LeavingMember(request.member_id)]
    else:
        leaving = [LeavingMember(x.member_id, x.group_instance_id) for x in request.members]
    result = (
        await ctx.broker.groups.leave_group(request.group_id, leaving)
        if authorize(ctx, Op.READ, Resource.GROUP, request.group_id)
        else LeaveResult(ErrorCode.group_authorization_failed)
    )
    if version < BATCHED_VERSION:
        error = result.error
        if error is ErrorCode.none and result.members:
            error = result.members[0].error
        return build(m.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error)
    members = tuple(
        build(
            m.MemberResponse,
            member_id=x.member_id,
            group_instance_id=x.group_instance_id,
            error_code=x.error,
        )
        for x in result.members
    )
    return build(
        m.LeaveGroupResponse,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        members=members,
    )
