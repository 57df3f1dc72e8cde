"""AlterUserScramCredentials (51): the client sends salt and salted password (never the
password); the broker keeps only the keys derived from them (raftlog/security/scram.py)."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, authorize_cluster
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from raftlog.errors import ErrorCode
from raftlog.security.users import Upsertion, UserResult

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not authorize_cluster(ctx, Op.ALTER):
        named = [change.name for change in (*request.deletions, *request.upsertions)]
        results = [
            UserResult(name, ErrorCode.cluster_authorization_failed)
            for name in dict.fromkeys(named)
        ]
    else:
        results = await ctx.broker.users.alter(
            [(d.name, int(d.mechanism)) for d in request.deletions],
            [
                Upsertion(u.name, int(u.mechanism), int(u.iterations), u.salt, u.salted_password)
                for u in request.upsertions
            ],
        )
    return build(
        m.AlterUserScramCredentialsResponse,
        throttle_time=NO_THROTTLE,
        results=tuple(
            build(
                m.AlterUserScramCredentialsResult,
                user=r.name,
                error_code=r.error,
                error_message=r.message,
            )
            for r in results
        ),
    )
