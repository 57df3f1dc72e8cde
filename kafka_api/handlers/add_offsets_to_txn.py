"""AddOffsetsToTxn (25): the producer's transaction will commit a consumer group's offsets
(TxnOffsetCommit), so the group's `__consumer_offsets` partition joins it and gets its
marker. Kafka's checks: WRITE on the transactional id, then READ on the group. Below v2 a
fenced producer is told INVALID_PRODUCER_EPOCH."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, fenced_as
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode
from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 3
FENCED_SINCE = 2


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not authorize(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, request.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed
    elif not authorize(ctx, Op.READ, Resource.GROUP, request.group_id):
        error = ErrorCode.group_authorization_failed
    else:
        index = ctx.broker.groups.partition_for(request.group_id)
        error = await ctx.broker.transactions.add_partitions(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            {OFFSETS_TOPIC: frozenset({index})},
        )
        error = fenced_as(error, ctx.api_version, FENCED_SINCE)
    return build(m.AddOffsetsToTxnResponse, throttle_time=NO_THROTTLE, error_code=error)
