"""Heartbeat (12): keeps a member's session alive and tells it when to rejoin
(REBALANCE_IN_PROGRESS). v3 adds the instance id (static membership). Needs READ on the group."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode

API_KEY = 12
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    error = (
        await ctx.broker.groups.heartbeat(
            request.group_id,
            request.generation_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
        )
        if authorize(ctx, Op.READ, Resource.GROUP, request.group_id)
        else ErrorCode.group_authorization_failed
    )
    return build(
        response_module(API_KEY, ctx.api_version).HeartbeatResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,
    )
