"""ListGroups (16): the groups this node coordinates (admin clients ask every broker).
v4 filters by state, v5 by type; every group here is "classic". With DESCRIBE on the cluster
every group is listed, else only those the principal may DESCRIBE."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, Resource, authorize_cluster, authorized
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext

API_KEY = 16
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    result = await ctx.broker.groups.list_groups(
        getattr(request, "states_filter", ()), getattr(request, "types_filter", ())
    )
    listed = result.groups
    if not authorize_cluster(ctx, Op.DESCRIBE):
        shown = authorized(ctx, Op.DESCRIBE, Resource.GROUP, (g.group_id for g in listed))
        listed = tuple(g for g in listed if g.group_id in shown)
    groups = tuple(
        build(
            m.ListedGroup,
            group_id=g.group_id,
            protocol_type=g.protocol_type,
            group_state=g.state,
            group_type=g.group_type,
        )
        for g in listed
    )
    return build(
        m.ListGroupsResponse, throttle_time=NO_THROTTLE, error_code=result.error, groups=groups
    )
