"""JoinGroup (11): a consumer joins (or rejoins) a classic group and waits for the generation.

v4+ makes a new member without an instance id come back with an assigned id
(MEMBER_ID_REQUIRED), v5 adds static membership, v7 the protocol type in the answer, v9
skip_assignment for a static leader rejoining a Stable group. Needs READ on the group.
"""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, millis
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode
from raftlog.groups.results import JoinResult

API_KEY = 11
MIN_VERSION = 0
MAX_VERSION = 9

NULLABLE_PROTOCOL_VERSION = 7  # protocol_name is a plain string before


async def handle(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    session_timeout = millis(request.session_timeout)
    # v0 has no rebalance timeout: Kafka uses the session timeout for both.
    rebalance_timeout = millis(request.rebalance_timeout) if version >= 1 else session_timeout
    if not authorize(ctx, Op.READ, Resource.GROUP, request.group_id):
        return _answer(version, JoinResult(ErrorCode.group_authorization_failed))
    result = await ctx.broker.groups.join_group(
        request.group_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        request.protocol_type,
        [(p.name, p.metadata) for p in request.protocols],
        session_timeout,
        rebalance_timeout,
        ctx.client_id or "",
        f"/{ctx.client_host}",  # Kafka's form (Java's InetAddress.toString)
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
    )
    return _answer(version, result)


def _answer(version: int, result: JoinResult) -> Any:
    m = response_module(API_KEY, version)
    members = tuple(
        build(
            m.JoinGroupResponseMember,
            member_id=member.member_id,
            group_instance_id=member.group_instance_id,
            metadata=member.metadata,
        )
        for member in result.members
    )
    protocol_name = result.protocol_name
    if version < NULLABLE_PROTOCOL_VERSION:
        protocol_name = protocol_name or ""
    return build(
        m.JoinGroupResponse,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )
