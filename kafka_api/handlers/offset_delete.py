"""OffsetDelete (47): removes a group's committed offsets of some partitions (kafka-consumer-
groups --delete-offsets, the admin clients' delete group offsets), as Kafka's KafkaApis and
group coordinator answer it.

DELETE on the group, else GROUP_AUTHORIZATION_FAILED for the request. Per topic: READ on it,
else TOPIC_AUTHORIZATION_FAILED; an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION.
The rest go to the group's coordinator (raftlog/groups/coordinator.py delete_offsets), whose
error for the group (NOT_COORDINATOR, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ...) replaces the
whole answer, as Kafka's OffsetDeleteResponse.Builder.merge does. A partition named twice is
INVALID_REQUEST.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from kafka_api.authz import Op, Resource, authorize, authorized
from kafka_api.codec import build, encode_off_loop, response_module
from kafka_api.common import NO_THROTTLE, duplicates
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0

E = ErrorCode


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not authorize(ctx, Op.DELETE, Resource.GROUP, request.group_id):
        return _refused(m, E.group_authorization_failed)
    broker = ctx.broker
    readable = authorized(ctx, Op.READ, Resource.TOPIC, (t.name for t in request.topics))
    repeated = duplicates((t.name, p.partition_index) for t in request.topics for p in t.partitions)
    answers: list[tuple[str, list[tuple[int, ErrorCode | None]]]] = []
    asked: list[tuple[str, int]] = []  # what the coordinator is asked, in request order
    for requested in request.topics:
        name = requested.name
        topic = broker.topic(name) if name in readable else None
        partitions: list[tuple[int, ErrorCode | None]] = []
        for p in requested.partitions:
            index = p.partition_index
            if (name, index) in repeated:
                partitions.append((index, E.invalid_request))
            elif name not in readable:
                partitions.append((index, E.topic_authorization_failed))
            elif topic is None or not 0 <= index < len(topic.partitions):
                partitions.append((index, E.unknown_topic_or_partition))
            else:
                partitions.append((index, None))  # the coordinator's answer
                asked.append((name, index))
        answers.append((name, partitions))
    error, deleted = await broker.groups.delete_offsets(request.group_id, asked)
    if error is not E.none:
        return _refused(m, error)
    outcome = iter(deleted)
    results = [
        (name, [(i, e if e is not None else next(outcome)) for i, e in partitions])
        for name, partitions in answers
    ]
    return await encode_off_loop(_answer, m, results)


def _refused(m: ModuleType, error: ErrorCode) -> Any:
    return build(m.OffsetDeleteResponse, error_code=error, throttle_time=NO_THROTTLE, topics=())


def _answer(m: ModuleType, results: list[tuple[str, list[tuple[int, ErrorCode]]]]) -> Any:
    return build(
        m.OffsetDeleteResponse,
        error_code=E.none,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            m.OffsetDeleteResponseTopic(
                name=name,
                partitions=tuple(
                    m.OffsetDeleteResponsePartition(partition_index=i, error_code=error)
                    for i, error in partitions
                ),
            )
            for name, partitions in results
        ),
    )
