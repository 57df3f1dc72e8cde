"""OffsetCommit (8): a consumer's committed positions, stored in `__consumer_offsets`.

From v1, as Redpanda serves it: Kafka 4 dropped v0-v1 (KIP-896), but sarama before 1.40
commits with v1 (kafka_api/legacy/offset_commit_v1.py, our model: kio has none). v0 has no
generation or member and stored offsets in ZooKeeper; no client of today sends it. v6 adds the
committed leader epoch, v7 the instance id. v10 names topics by id only and is not served.
Topics or partitions that do not exist get UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers; v1's
commit timestamps and the retention time of v2-v4 are ignored (offsets follow the group's
retention, as since Kafka 2.1).
Needs READ on the group (every partition is refused without it) and on each topic.
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

API_KEY = 8
MIN_VERSION = 1  # sarama < 1.40 (Kafka 3.9 and Redpanda serve it; Kafka 4 does not)
MAX_VERSION = 9

GROUP_ID_NOT_FOUND_VERSION = 9  # older versions report a missing group as ILLEGAL_GENERATION


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    count = sum(len(t.partitions) for t in request.topics)
    if not authorize(ctx, Op.READ, Resource.GROUP, request.group_id):
        errors = [ErrorCode.group_authorization_failed] * count
        return await answer(count, _answer, ctx.api_version, request, errors)
    errors, commits = await commit_entries(ctx, request.topics)
    if commits:
        results = iter(
            await broker.groups.offset_commit(
                request.group_id,
                request.generation_id_or_member_epoch,
                request.member_id,
                getattr(request, "group_instance_id", None),
                commits,
            )
        )
        errors = [next(results) if e is ErrorCode.none else e for e in errors]
    return await answer(count, _answer, ctx.api_version, request, errors)


def _answer(version: int, request: Any, errors: list[ErrorCode]) -> Any:
    """Each requested partition's error, in request order."""
    if version < GROUP_ID_NOT_FOUND_VERSION:
        errors = [
            ErrorCode.illegal_generation if e is ErrorCode.group_id_not_found else e for e in errors
        ]
    m = response_module(API_KEY, version)
    answers = iter(errors)
    topics = tuple(
        build(
            m.OffsetCommitResponseTopic,
            name=topic.name,
            partitions=tuple(
                build(
                    m.OffsetCommitResponsePartition,
                    partition_index=p.partition_index,
                    error_code=next(answers),
                )
                for p in topic.partitions
            ),
        )
        for topic in request.topics
    )
    return build(m.OffsetCommitResponse, throttle_time=NO_THROTTLE, topics=topics)
