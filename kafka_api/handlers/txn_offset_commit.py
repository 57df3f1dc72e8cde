"""TxnOffsetCommit (28): a transactional producer commits a consumer group's offsets inside
its transaction (read-process-write, `send_offsets_to_transaction`). Sent to the group's
coordinator; the offsets go into `__consumer_offsets` in the transaction and count once its
commit marker lands there (an abort drops them). The producer must have added the group's
partition to its transaction first (AddOffsetsToTxn): its transaction coordinator is asked,
as for a transactional produce.

Kafka's checks: WRITE on the transactional id, READ on the group, READ on each topic. Below
v2 COORDINATOR_LOAD_IN_PROGRESS is told as COORDINATOR_NOT_AVAILABLE, and a fenced producer
INVALID_PRODUCER_EPOCH. The partitions are judged on the loop a slice at a time
(kafka_api/commit_entries.py); an answer of more than a thousand is built in a thread.
"""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.commit_entries import commit_entries
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from kafka_api.entry_work import answer
from raftlog.common.errors import ErrorCode
from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 3
LOAD_IN_PROGRESS_SINCE = 2

E = ErrorCode
# the transaction coordinator's word on the group's partition, as this API's clients know it
_VERIFY_ANSWERS = {
    E.producer_fenced: E.invalid_producer_epoch,
    E.invalid_producer_epoch: E.invalid_producer_epoch,
    E.concurrent_transactions: E.concurrent_transactions,
    E.coordinator_load_in_progress: E.coordinator_not_available,
    E.coordinator_not_available: E.coordinator_not_available,
    E.not_coordinator: E.coordinator_not_available,
}


async def handle(ctx: RequestContext, request: Any) -> Any:
    count = sum(len(t.partitions) for t in request.topics)
    if not authorize(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, request.transactional_id):
        errors = [E.transactional_id_authorization_failed] * count
        return await answer(count, _answer, ctx.api_version, request, errors)
    if not authorize(ctx, Op.READ, Resource.GROUP, request.group_id):
        errors = [E.group_authorization_failed] * count
        return await answer(count, _answer, ctx.api_version, request, errors)
    errors, commits = await commit_entries(ctx, request.topics)
    if commits:
        groups = ctx.broker.groups
        verified = await ctx.broker.verify_transaction(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            OFFSETS_TOPIC,
            groups.partition_for(request.group_id),
        )
        if verified != E.none:
            refused = _VERIFY_ANSWERS.get(verified, E.invalid_txn_state)
            errors = [refused if e is E.none else e for e in errors]
        else:
            results = iter(
                await groups.offset_commit(
                    request.group_id,
                    getattr(request, "generation_id", -1),
                    getattr(request, "member_id", ""),
                    getattr(request, "group_instance_id", None),
                    commits,
                    producer=(request.producer_id, request.producer_epoch),
                )
            )
            errors = [next(results) if e is E.none else e for e in errors]
    return await answer(count, _answer, ctx.api_version, request, errors)


def _answer(version: int, request: Any, errors: list[ErrorCode]) -> Any:
    if version < LOAD_IN_PROGRESS_SINCE:
        errors = [
            E.coordinator_not_available if e is E.coordinator_load_in_progress else e
            for e in errors
        ]
    m = response_module(API_KEY, version)
    answers = iter(errors)
    return build(
        m.TxnOffsetCommitResponse,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            m.TxnOffsetCommitResponseTopic(
                name=t.name,
                partitions=tuple(
                    m.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=next(answers)
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
        ),
    )
