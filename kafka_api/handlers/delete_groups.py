"""DeleteGroups (42): removes groups without members and their committed offsets
(NON_EMPTY_GROUP while members remain, GROUP_ID_NOT_FOUND for unknown groups); each needs
DELETE on the group. Every copy of a group named twice is INVALID_REQUEST and none is
deleted."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, Resource, authorized
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, duplicates
from kafka_api.context import RequestContext
from raftlog.errors import ErrorCode

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    names = request.groups_names
    repeated = duplicates(names)
    deletable = authorized(ctx, Op.DELETE, Resource.GROUP, (g for g in names if g not in repeated))
    deleted = iter(await ctx.broker.groups.delete_groups([g for g in names if g in deletable]))
    errors = []
    for g in names:
        if g in repeated:
            errors.append(ErrorCode.invalid_request)
        elif g in deletable:
            errors.append(next(deleted).error)
        else:
            errors.append(ErrorCode.group_authorization_failed)
    return build(
        m.DeleteGroupsResponse,
        throttle_time=NO_THROTTLE,
        results=tuple(
            build(m.DeletableGroupResult, group_id=g, error_code=error)
            for g, error in zip(names, errors, strict=True)
        ),
    )
