"""EndTxn (26): commit or abort the producer's transaction. Answered once the coordinator's
decision is in `__transaction_state`; the markers follow, and the producer's next
transaction waits (CONCURRENT_TRANSACTIONS) until they are all written. v0-v4: v5 is
KIP-890's per-transaction epoch bump, which no pinned client sends and raftlog does not
offer. WRITE on the transactional id; below v2 a fenced producer is told
INVALID_PRODUCER_EPOCH."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, fenced_as
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 4
FENCED_SINCE = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not authorize(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, request.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed
    else:
        error = await ctx.broker.transactions.end_transaction(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.committed,
        )
        error = fenced_as(error, ctx.api_version, FENCED_SINCE)
    return build(m.EndTxnResponse, throttle_time=NO_THROTTLE, error_code=error)
