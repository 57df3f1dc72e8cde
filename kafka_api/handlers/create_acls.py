"""CreateAcls (30): new ACL bindings, stored by the controller. Needs ALTER on the cluster;
answers SECURITY_DISABLED while no authorizer is configured; each binding Kafka would refuse
gets INVALID_REQUEST and the others are created."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import DENIED_MESSAGES, Op, authorize_cluster
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from kafka_api.handlers.acl_wire import NO_AUTHORIZER, binding
from raftlog.broker import AclChange
from raftlog.errors import ErrorCode
from raftlog.security.acl import creation_error

API_KEY = 30
MIN_VERSION = 1  # Kafka 4's baseline, the first with pattern types
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    bindings = [binding(creation) for creation in request.creations]
    if not authorize_cluster(ctx, Op.ALTER):
        error = ErrorCode.cluster_authorization_failed
        return _answer(m, [(error, DENIED_MESSAGES[error])] * len(bindings))
    if ctx.broker.authorizer is None:
        return _answer(m, [(ErrorCode.security_disabled, NO_AUTHORIZER)] * len(bindings))
    problems = [creation_error(b) for b in bindings]
    valid = [b for b, problem in zip(bindings, problems, strict=True) if problem is None]
    change = await ctx.broker.create_acls(valid) if valid else AclChange()
    return _answer(
        m,
        [
            (change.error, change.message)
            if problem is None
            else (ErrorCode.invalid_request, problem)
            for problem in problems
        ],
    )


def _answer(m: Any, results: list[tuple[ErrorCode, str | None]]) -> Any:
    return build(
        m.CreateAclsResponse,
        throttle_time=NO_THROTTLE,
        results=tuple(
            build(m.AclCreationResult, error_code=error, error_message=message)
            for error, message in results
        ),
    )
