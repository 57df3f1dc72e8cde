"""DeleteAcls (31): removes the ACL bindings each filter matches, through the controller, and
names them per filter. Needs ALTER on the cluster; answers SECURITY_DISABLED while no
authorizer is configured."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import DENIED_MESSAGES, Op, authorize_cluster
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from kafka_api.handlers.acl_wire import NO_AUTHORIZER, binding_filter
from raftlog.errors import ErrorCode
from raftlog.security.acl import AclBinding

API_KEY = 31
MIN_VERSION = 1  # Kafka 4's baseline, the first with pattern types
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    filters = [binding_filter(entry) for entry in request.filters]
    if not authorize_cluster(ctx, Op.ALTER):
        error = ErrorCode.cluster_authorization_failed
        return _refused(m, len(filters), error, DENIED_MESSAGES[error])
    if ctx.broker.authorizer is None:
        return _refused(m, len(filters), ErrorCode.security_disabled, NO_AUTHORIZER)
    if not filters:
        return _answer(m, ())
    change = await ctx.broker.delete_acls(filters)
    if change.error is not ErrorCode.none:
        return _refused(m, len(filters), change.error, change.message)
    return _answer(
        m,
        tuple(
            build(
                m.DeleteAclsFilterResult,
                error_code=ErrorCode.none,
                error_message=None,
                matching_acls=tuple(_matching(m, b) for b in found),
            )
            for found in change.deleted
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


def _refused(m: Any, count: int, error: ErrorCode, message: str | None) -> Any:
    """Every filter answered with the same error and no matches (Kafka's error response)."""
    result = build(
        m.DeleteAclsFilterResult, error_code=error, error_message=message, matching_acls=()
    )
    return _answer(m, (result,) * count)


def _answer(m: Any, results: tuple[Any, ...]) -> Any:
    return build(m.DeleteAclsResponse, throttle_time=NO_THROTTLE, filter_results=results)
