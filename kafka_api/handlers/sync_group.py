"""SyncGroup (14): the leader hands in the assignments, every member gets its own once they
are stored. v3 adds the instance id (static membership), v5 the protocol type and name, which
the coordinator checks against the group's; without them v5 is INCONSISTENT_GROUP_PROTOCOL,
as in Kafka, before READ on the group is asked."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode
from raftlog.groups.results import SyncResult

API_KEY = 14
MIN_VERSION = 0
MAX_VERSION = 5

MANDATORY_PROTOCOL_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    protocol_type = getattr(request, "protocol_type", None)
    protocol_name = getattr(request, "protocol_name", None)
    if ctx.api_version >= MANDATORY_PROTOCOL_VERSION and (
        protocol_type is None or protocol_name is None
    ):
        result = SyncResult(ErrorCode.inconsistent_group_protocol)
    elif not authorize(ctx, Op.READ, Resource.GROUP, request.group_id):
        result = SyncResult(ErrorCode.group_authorization_failed)
    else:
        result = await ctx.broker.groups.sync_group(
            request.group_id,
            request.generation_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            protocol_type,
            protocol_name,
            {a.member_id: a.assignment for a in request.assignments},
        )
    return build(
        response_module(API_KEY, ctx.api_version).SyncGroupResponse,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )
