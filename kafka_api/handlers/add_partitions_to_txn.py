"""AddPartitionsToTxn (24): a transactional producer names the partitions it is about to
write, before it writes them (its coordinator then sends them its markers). v0-v3, the
versions clients send; v4+ are Kafka's broker-to-broker verification, which raftlog's nodes
do over their mesh instead.

Kafka's checks first: WRITE on the transactional id, then WRITE on each topic and the
partition's existence; a partition failing them fails the request, the others answered
OPERATION_NOT_ATTEMPTED. Below v2 a fenced producer is told INVALID_PRODUCER_EPOCH.
Topics are judged on the loop a slice at a time (kafka_api/entry_work.py); an answer of more
than a thousand partitions is built and encoded in a thread.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, fenced_as
from kafka_api.context import RequestContext
from kafka_api.entry_work import answer, sliced
from raftlog.common.errors import ErrorCode

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 3
FENCED_SINCE = 2

E = ErrorCode


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    txn_id = request.v3_and_below_transactional_id
    asked = request.v3_and_below_topics
    count = sum(len(t.partitions) for t in asked)
    checked: dict[tuple[str, int], ErrorCode] = {}
    if not authorize(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, txn_id):
        error = E.transactional_id_authorization_failed
    else:
        # The ACLs and topics are the loop's: each topic is judged here, a slice at a time.
        async for asked_topic in sliced(asked):
            name = asked_topic.name
            topic = ctx.broker.topic(name)
            allowed = authorize(ctx, Op.WRITE, Resource.TOPIC, name)
            for index in asked_topic.partitions:
                if not allowed:
                    checked[name, index] = E.topic_authorization_failed
                elif topic is None or not 0 <= index < len(topic.partitions):
                    checked[name, index] = E.unknown_topic_or_partition
        if checked:
            error = E.operation_not_attempted
        else:  # every partition named exists: as many as the cluster holds
            partitions = {t.name: frozenset(t.partitions) for t in asked}
            error = await ctx.broker.transactions.add_partitions(
                txn_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                partitions,
            )
            error = fenced_as(error, ctx.api_version, FENCED_SINCE)
    return await answer(count, _answer, m, asked, checked, error)


def _answer(
    m: ModuleType, asked: Any, checked: dict[tuple[str, int], ErrorCode], error: ErrorCode
) -> Any:
    """Each partition's error in `checked`, else `error`."""
    return build(
        m.AddPartitionsToTxnResponse,
        throttle_time=NO_THROTTLE,
        results_by_topic_v3_and_below=tuple(
            m.AddPartitionsToTxnTopicResult(
                name=t.name,
                results_by_partition=tuple(
                    m.AddPartitionsToTxnPartitionResult(
                        partition_index=index,
                        partition_error_code=checked.get((t.name, index), error),
                    )
                    for index in t.partitions
                ),
            )
            for t in asked
        ),
    )
