"""DescribeUserScramCredentials (50): which SCRAM mechanisms each user has, with iteration
counts; never a salt or key."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, authorize_cluster
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from raftlog.errors import ErrorCode
from raftlog.security.scram import MECHANISMS

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not authorize_cluster(ctx, Op.DESCRIBE):
        return build(
            m.DescribeUserScramCredentialsResponse,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=None,
            results=(),
        )
    users = ctx.broker.users.describe()
    asked = list(users) if request.users is None else [u.name for u in request.users]
    repeated = {name for name in asked if asked.count(name) > 1}
    results = []
    infos: dict[str, int]
    for name in dict.fromkeys(asked):
        if name in repeated:
            error, message, infos = ErrorCode.duplicate_resource, "Cannot describe a user twice", {}
        elif name not in users:
            error, message, infos = (
                ErrorCode.resource_not_found,
                f"Attempt to describe a user credential that does not exist: {name}",
                {},
            )
        else:
            error, message, infos = ErrorCode.none, None, users[name]
        results.append(
            build(
                m.DescribeUserScramCredentialsResult,
                user=name,
                error_code=error,
                error_message=message,
                credential_infos=tuple(
                    build(m.CredentialInfo, mechanism=MECHANISMS[mech], iterations=iterations)
                    for mech, iterations in infos.items()
                ),
            )
        )
    return build(
        m.DescribeUserScramCredentialsResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        results=tuple(results),
    )
