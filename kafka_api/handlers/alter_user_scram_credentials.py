"""AlterUserScramCredentials (51): the client sends salt and salted password (never the
password); the broker keeps only the keys derived from them (raftlog/security/scram.py).
A request may hold up to its frame's size in changes: the users are listed and the answer
built in a thread (raftlog/security/users.py bounds and checks the changes)."""

from __future__ import annotations

import asyncio
from typing import Any

from kafka_api.authz import Op, authorize_cluster
from kafka_api.codec import build, encode_off_loop, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode
from raftlog.security.users import UserResult, refuse_all

API_KEY = 51
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not authorize_cluster(ctx, Op.ALTER):
        results = await asyncio.to_thread(
            refuse_all,
            request.deletions,
            request.upsertions,
            ErrorCode.cluster_authorization_failed,
            None,
        )
    else:
        # kio's deletions and upsertions have the fields users.Deletion and Upsertion name.
        results = await ctx.broker.users.alter(request.deletions, request.upsertions)
    return await encode_off_loop(_response, m, results)


def _response(m: Any, results: list[UserResult]) -> Any:
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
