"""DescribeUserScramCredentials (50): which SCRAM mechanisms each user has, with iteration
counts; never a salt or key. No users named (null or empty) means every user, as in Kafka.
A request naming more users than a cluster may hold (scram.MAX_USERS) is refused whole with
POLICY_VIOLATION; the listing and the answer are built in a thread."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, authorize_cluster
from kafka_api.codec import build, encode_off_loop, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode
from raftlog.security.scram import MAX_USERS, MECHANISMS
from raftlog.security.users import Described

API_KEY = 50
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not authorize_cluster(ctx, Op.DESCRIBE):
        return _refused(m, ErrorCode.cluster_authorization_failed, None)
    if request.users is not None and len(request.users) > MAX_USERS:
        return _refused(
            m,
            ErrorCode.policy_violation,
            f"At most {MAX_USERS} users per request (a cluster holds no more); "
            f"this one names {len(request.users)}",
        )
    names = None if request.users is None else (user.name for user in request.users)
    described = await ctx.broker.users.describe(names)
    return await encode_off_loop(_response, m, described)


def _refused(m: Any, error: ErrorCode, message: str | None) -> Any:
    return build(
        m.DescribeUserScramCredentialsResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=message,
        results=(),
    )


def _response(m: Any, described: list[Described]) -> Any:
    return build(
        m.DescribeUserScramCredentialsResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        results=tuple(
            build(
                m.DescribeUserScramCredentialsResult,
                user=d.name,
                error_code=d.error,
                error_message=d.message,
                credential_infos=tuple(
                    build(m.CredentialInfo, mechanism=MECHANISMS[mechanism], iterations=count)
                    for mechanism, count in d.mechanisms.items()
                ),
            )
            for d in described
        ),
    )
