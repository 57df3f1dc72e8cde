"""DeleteGroups (42): removes groups without members and their committed offsets
(NON_EMPTY_GROUP while members remain, GROUP_ID_NOT_FOUND for unknown groups)."""

from __future__ import annotations

from typing import Any

from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    results = await ctx.broker.groups.delete_groups(request.groups_names)
    return build(
        m.DeleteGroupsResponse,
        throttle_time=NO_THROTTLE,
        results=tuple(
            build(m.DeletableGroupResult, group_id=r.group_id, error_code=r.error) for r in results
        ),
    )
