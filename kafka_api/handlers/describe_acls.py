"""DescribeAcls (29): the ACL bindings a filter matches, grouped by resource pattern. Needs
DESCRIBE on the cluster; answers SECURITY_DISABLED while no authorizer is configured."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import DENIED_MESSAGES, Op, authorize_cluster
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from kafka_api.handlers.acl_wire import binding_filter
from raftlog.errors import ErrorCode
from raftlog.security.acl import AclBinding

API_KEY = 29
MIN_VERSION = 1  # Kafka 4's baseline, the first with pattern types
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    selected = binding_filter(request)
    if not authorize_cluster(ctx, Op.DESCRIBE):
        error = ErrorCode.cluster_authorization_failed
        return _answer(m, error, DENIED_MESSAGES[error], ())
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return _answer(
            m, ErrorCode.security_disabled, "No Authorizer is configured on the broker", ()
        )
    by_pattern: dict[tuple[int, str, int], list[AclBinding]] = {}
    for found in authorizer.bindings(selected):
        by_pattern.setdefault((found.resource_type, found.name, found.pattern_type), []).append(
            found
        )
    resources = tuple(
        build(
            m.DescribeAclsResource,
            resource_type=resource_type,
            resource_name=name,
            pattern_type=pattern_type,
            acls=tuple(
                build(
                    m.AclDescription,
                    principal=b.principal,
                    host=b.host,
                    operation=b.operation,
                    permission_type=b.permission,
                )
                for b in bindings
            ),
        )
        for (resource_type, name, pattern_type), bindings in by_pattern.items()
    )
    return _answer(m, ErrorCode.none, None, resources)


def _answer(m: Any, error: ErrorCode, message: str | None, resources: tuple[Any, ...]) -> Any:
    return build(
        m.DescribeAclsResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=message,
        resources=resources,
    )
