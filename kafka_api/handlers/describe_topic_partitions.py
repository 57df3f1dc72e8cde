"""DescribeTopicPartitions (75): topics and their partitions a page at a time, what Kafka
3.9+/4.x kafka-topics --describe and the Java admin's describeTopics ask instead of Metadata.

As Kafka's DescribeTopicPartitionsRequestHandler: no topics named means every topic the
principal may DESCRIBE (the others left out); named topics the principal may not describe
are TOPIC_AUTHORIZATION_FAILED (with no id, after the others), unknown ones
UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name). Topics are answered
in name order from the cursor's topic and partition on, at most response_partition_limit
partitions (held to 1..MAX_PARTITIONS); where that cuts a topic or the list, next_cursor names
the first partition left. A cursor on a topic the request does not name, or with a negative
partition, is INVALID_REQUEST on every topic named. The partitions read as Metadata reports
them (the same PartitionInfo); there are no eligible leader replicas (KIP-966) to list.
Linear in the names asked: they are sorted in a thread, authorized and looked up on the loop
a slice at a time (kafka_api/entry_work.py), and the answer is built and encoded in a thread.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from kafka_api.authz import Op, Resource, authorize, authorized_operations
from kafka_api.codec import build, encode_off_loop, response_module
from kafka_api.common import NO_THROTTLE, UNKNOWN_AUTHORIZED_OPERATIONS, topic_name_error
from kafka_api.context import RequestContext
from kafka_api.entry_work import answer, off_loop, sliced
from raftlog.api.values import PartitionInfo
from raftlog.common.errors import ErrorCode
from raftlog.config.internal_topics import is_internal

API_KEY = 75
MIN_VERSION = 0
MAX_VERSION = 0

E = ErrorCode
# Kafka's max.request.partition.size.limit default: the most partitions one answer carries.
MAX_PARTITIONS = 2000

# (error, name, topic id, internal, partitions, authorized operations) of each topic answered
Answered = tuple[ErrorCode, str, Any, bool, Sequence[PartitionInfo], int]


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    broker = ctx.broker
    cursor = request.cursor
    after = cursor.topic_name if cursor is not None else ""
    every = not request.topics
    if every:
        names = sorted(n for n in broker.topics() if n >= after)
    else:
        names = await off_loop(len(request.topics), _named, request.topics, after)
        if cursor is not None and not _holds(names, cursor.topic_name):
            return await answer(len(request.topics), _refused, m, request)  # not one named
    if cursor is not None and cursor.partition_index < 0:
        return await answer(len(request.topics), _refused, m, request)
    # Each name is authorized and looked up on the loop (the ACLs and topics are the loop's),
    # a slice at a time; a set of the allowed names was once built again for every name
    # (100,000 unknown names: 533 s).
    allowed: list[str] = []
    denied: list[str] = []
    async for name in sliced(names):
        (allowed if authorize(ctx, Op.DESCRIBE, Resource.TOPIC, name) else denied).append(name)
    if every:
        denied = []  # every topic: those the principal may not describe are left out
    remaining = max(min(MAX_PARTITIONS, request.response_partition_limit), 1)
    answered: list[Answered] = []
    next_cursor: tuple[str, int] | None = None
    async for name in sliced(allowed):
        if remaining == 0:
            next_cursor = (name, 0)
            break
        topic = broker.topic(name)
        if topic is None:
            if not every:
                error = E.unknown_topic_or_partition
                if topic_name_error(name) is not None:
                    error = E.invalid_topic_exception
                answered.append((error, name, None, is_internal(name), (), _operations(ctx, name)))
            continue
        first = cursor.partition_index if cursor is not None and name == after else 0
        count = len(topic.partitions)
        end = min(count, first + remaining)
        partitions = list(topic.partitions[first:end])  # one look-up of who is up for all
        answered.append(
            (E.none, name, topic.topic_id, topic.internal, partitions, _operations(ctx, name))
        )
        if end < count:
            next_cursor = (name, end)
            break
        remaining -= len(partitions)
    for name in denied:
        answered.append(
            (E.topic_authorization_failed, name, None, False, (), UNKNOWN_AUTHORIZED_OPERATIONS)
        )
    return await encode_off_loop(_answer, m, answered, next_cursor)


def _named(topics: Sequence[Any], after: str) -> list[str]:
    """The names asked for from the cursor's on, once each, in order."""
    return sorted({t.name for t in topics if t.name >= after})


def _holds(names: list[str], name: str) -> bool:
    """Is `name` in the sorted `names`?"""
    at = bisect.bisect_left(names, name)
    return at < len(names) and names[at] == name


def _operations(ctx: RequestContext, name: str) -> int:
    return authorized_operations(ctx, Resource.TOPIC, name)


def _refused(m: ModuleType, request: Any) -> Any:
    """Kafka's getErrorResponse for an InvalidRequestException: INVALID_REQUEST on every topic
    named (the response has no message field)."""
    return build(
        m.DescribeTopicPartitionsResponse,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            m.DescribeTopicPartitionsResponseTopic(
                error_code=E.invalid_request,
                name=t.name,
                topic_id=None,
                is_internal=False,
                partitions=(),
            )
            for t in request.topics
        ),
        next_cursor=None,
    )


def _answer(m: ModuleType, answered: list[Answered], next_cursor: tuple[str, int] | None) -> Any:
    return build(
        m.DescribeTopicPartitionsResponse,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            m.DescribeTopicPartitionsResponseTopic(
                error_code=error,
                name=name,
                topic_id=topic_id,
                is_internal=internal,
                partitions=tuple(
                    m.DescribeTopicPartitionsResponsePartition(
                        error_code=E.none,
                        partition_index=p.index,
                        leader_id=p.leader,
                        leader_epoch=p.leader_epoch,
                        replica_nodes=p.replicas,
                        isr_nodes=p.isr,
                        eligible_leader_replicas=(),
                        last_known_elr=(),
                        offline_replicas=p.offline,
                    )
                    for p in partitions
                ),
                topic_authorized_operations=operations,
            )
            for error, name, topic_id, internal, partitions, operations in answered
        ),
        next_cursor=(
            None
            if next_cursor is None
            else m.Cursor(topic_name=next_cursor[0], partition_index=next_cursor[1])
        ),
    )
