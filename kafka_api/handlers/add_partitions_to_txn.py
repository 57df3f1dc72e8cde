"""AddPartitionsToTxn (24): a transactional producer names the partitions it is about to
write, before it writes them (its coordinator then sends them its markers). v0-v3, the
versions clients send; v4+ are Kafka's broker-to-broker verification, which raftlog's nodes
do over their mesh instead.

Kafka's checks first: WRITE on the transactional id, then WRITE on each topic and the
partition's existence; a partition failing them fails the request, the others answered
OPERATION_NOT_ATTEMPTED. Below v2 a fenced producer is told INVALID_PRODUCER_EPOCH.
"""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, fenced_as
from kafka_api.context import RequestContext
from raftlog.errors import ErrorCode

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 3
FENCED_SINCE = 2

E = ErrorCode


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    txn_id = request.v3_and_below_transactional_id
    asked = [(t.name, tuple(t.partitions)) for t in request.v3_and_below_topics]
    checked: dict[tuple[str, int], ErrorCode] = {}
    if not authorize(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, txn_id):
        error = E.transactional_id_authorization_failed
    else:
        for name, indexes in asked:
            topic = ctx.broker.topic(name)
            allowed = authorize(ctx, Op.WRITE, Resource.TOPIC, name)
            for index in indexes:
                if not allowed:
                    checked[name, index] = E.topic_authorization_failed
                elif topic is None or not 0 <= index < len(topic.partitions):
                    checked[name, index] = E.unknown_topic_or_partition
        if checked:
            error = E.operation_not_attempted
        else:
            partitions = {name: frozenset(indexes) for name, indexes in asked}
            error = await ctx.broker.transactions.add_partitions(
                txn_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                partitions,
            )
            error = fenced_as(error, ctx.api_version, FENCED_SINCE)
    return build(
        m.AddPartitionsToTxnResponse,
        throttle_time=NO_THROTTLE,
        results_by_topic_v3_and_below=tuple(
            m.AddPartitionsToTxnTopicResult(
                name=name,
                results_by_partition=tuple(
                    m.AddPartitionsToTxnPartitionResult(
                        partition_index=index,
                        partition_error_code=checked.get((name, index), error),
                    )
                    for index in indexes
                ),
            )
            for name, indexes in asked
        ),
    )
