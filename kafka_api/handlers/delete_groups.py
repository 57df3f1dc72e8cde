"""DeleteGroups (42): removes groups without members and their committed offsets
(NON_EMPTY_GROUP while members remain, GROUP_ID_NOT_FOUND for unknown groups); each needs
DELETE on the group. Every copy of a group named twice is INVALID_REQUEST and none is
deleted. The groups are authorized, then checked by the coordinator, on the loop a slice at a
time; repeats are counted, and the answer to more than a thousand built and encoded, in a
thread (kafka_api/entry_work.py)."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, duplicates
from kafka_api.context import RequestContext
from kafka_api.entry_work import answer, off_loop, sliced
from raftlog.common.errors import ErrorCode

API_KEY = 42
MIN_VERSION = 0
MAX_VERSION = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    names: tuple[str, ...] = request.groups_names
    repeated = await off_loop(len(names), duplicates, names)
    errors: list[ErrorCode | None] = []  # None: the coordinator's to answer
    async for g in sliced(names):  # the ACLs are the loop's
        if g in repeated:
            errors.append(ErrorCode.invalid_request)
        elif authorize(ctx, Op.DELETE, Resource.GROUP, g):
            errors.append(None)
        else:
            errors.append(ErrorCode.group_authorization_failed)
    deletable = [g for g, error in zip(names, errors, strict=True) if error is None]
    deleted = await ctx.broker.groups.delete_groups(deletable, sliced)
    return await answer(len(names), _answer, m, names, errors, [d.error for d in deleted])


def _answer(
    m: ModuleType,
    names: Sequence[str],
    errors: Sequence[ErrorCode | None],
    deleted: Sequence[ErrorCode],
) -> Any:
    outcomes = iter(deleted)
    return build(
        m.DeleteGroupsResponse,
        throttle_time=NO_THROTTLE,
        results=tuple(
            build(
                m.DeletableGroupResult,
                group_id=g,
                error_code=error if error is not None else next(outcomes),
            )
            for g, error in zip(names, errors, strict=True)
        ),
    )
