"""DeleteAcls (31): removes the ACL bindings each filter matches, through the controller, and
names them per filter. Needs ALTER on the cluster; answers SECURITY_DISABLED while no
authorizer is configured. A request of more than MAX_PER_REQUEST filters is refused whole
(POLICY_VIOLATION) before any is read; a filter with a string longer than any binding holds
gets INVALID_REQUEST; the controller deletes nothing, and every filter gets its error, when
the filters match more than MAX_PER_REQUEST bindings (INVALID_REQUEST, as Kafka) or would
look at more than MAX_EXAMINED. Reading the filters and answering run in a thread. v0
(sarama 1.22's DeleteACL; kafka_api/legacy/delete_acls_v0.py) has no pattern type: each filter
matches LITERAL ACLs only, as Kafka 3.9 reads it, so its answer, which cannot say one, names
no other."""

from __future__ import annotations

import asyncio
from typing import Any

from kafka_api.codec import Encoded, build, encode_off_loop, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from kafka_api.handlers.acl_wire import (
    binding_filter,
    refusal,
    refused_alike,
    too_many,
    unread_refusal,
)
from raftlog.api.values import AclChange
from raftlog.common.errors import ErrorCode
from raftlog.security.acl import AclBinding, AclBindingFilter, filter_error

API_KEY = 31
MIN_VERSION = 0  # sarama 1.22 sends v0 (Kafka 3.9 and Redpanda serve it; Kafka 4 does not)
MAX_VERSION = 3
WHAT = "DeleteAcls filters"


async def handle(ctx: RequestContext, request: Any) -> Encoded:
    m = response_module(API_KEY, ctx.api_version)
    entries = request.filters
    oversized = too_many(len(entries), WHAT)
    checked = None if oversized else await asyncio.to_thread(_checked, entries)
    refused = refusal(ctx, oversized)
    if refused is not None:
        return _refused(m, len(entries), *refused)
    assert checked is not None
    valid = [f for f, problem in checked if problem is None]
    change = await ctx.broker.delete_acls(valid) if valid else AclChange()
    found = iter(change.deleted)
    results: list[tuple[ErrorCode, str | None, tuple[AclBinding, ...]]] = []
    for _, problem in checked:
        if problem is not None:
            results.append((ErrorCode.invalid_request, problem, ()))
        elif change.error is not ErrorCode.none:
            results.append((change.error, change.message, ()))
        else:
            results.append((ErrorCode.none, None, next(found)))
    return await encode_off_loop(_answer, m, results)


def _checked(entries: Any) -> list[tuple[AclBindingFilter, str | None]]:
    """Each entry as a filter, with why it is refused (None if it is not)."""
    return [(f, filter_error(f)) for f in map(binding_filter, entries)]


def _refused(m: Any, count: int, error: ErrorCode, message: str | None) -> Encoded:
    """Every filter answered with the same error and no matches (Kafka's error response)."""
    return refused_alike(
        m.DeleteAclsResponse,
        count,
        message,
        lambda text: build(
            m.DeleteAclsFilterResult, error_code=error, error_message=text, matching_acls=()
        ),
    )


refusal_unread = unread_refusal(API_KEY, WHAT, _refused)


def _answer(m: Any, results: list[tuple[ErrorCode, str | None, tuple[AclBinding, ...]]]) -> Any:
    return build(
        m.DeleteAclsResponse,
        throttle_time=NO_THROTTLE,
        filter_results=tuple(
            build(
                m.DeleteAclsFilterResult,
                error_code=error,
                error_message=message,
                matching_acls=tuple(_matching(m, b) for b in found),
            )
            for error, message, found in results
        ),
    )


def _matching(m: Any, found: AclBinding) -> Any:
    return build(
        m.DeleteAclsMatchingAcl,
        error_code=ErrorCode.none,
        error_message=None,
        resource_type=found.resource_type,
        resource_name=found.name,
        pattern_type=found.pattern_type,
        principal=found.principal,
        host=found.host,
        operation=found.operation,
        permission_type=found.permission,
    )
