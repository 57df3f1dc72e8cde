"""DeleteRecords (21): moves partitions' log start offsets (KIP-107), as Kafka's
KafkaApis.handleDeleteRecordsRequest and ReplicaManager.deleteRecords answer it: DELETE on each
topic, then the partition must exist, internal topics are refused (INVALID_TOPIC_EXCEPTION),
and only the leader moves the start, through its Raft log (raftlog.partition.partition.delete_records).
A partition named twice is one deletion, as in Kafka's map of them: the last offset wins.
Topics are judged on the loop a slice at a time (kafka_api/entry_work.py); a request of more
than a thousand partitions is gathered and answered in a thread."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from types import ModuleType
from typing import Any

from epoch import NO_EPOCH
from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, leader_partition, millis
from kafka_api.context import RequestContext
from kafka_api.entry_work import answer, off_loop, sliced
from raftlog.common.errors import ErrorCode
from raftlog.config.internal_topics import is_internal

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2  # flexible from v2

_Answer = tuple[ErrorCode, int]  # (error, low watermark)


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    timeout_ms = max(0, millis(request.timeout))
    count = sum(len(t.partitions) for t in request.topics)
    wanted = await off_loop(count, _wanted, request.topics)
    pending: dict[tuple[str, int], Awaitable[_Answer]] = {}
    answers: dict[tuple[str, int], _Answer] = {}
    # The ACLs, topics and leaders are the loop's: each topic is judged here, a slice at a time.
    async for name, partitions in sliced(wanted.items()):
        info = broker.topic(name)
        deletable = authorize(ctx, Op.DELETE, Resource.TOPIC, name)
        for index, offset in partitions.items():
            if not deletable:
                answers[name, index] = (ErrorCode.topic_authorization_failed, -1)
            elif info is None or not 0 <= index < len(info.partitions):
                answers[name, index] = (ErrorCode.unknown_topic_or_partition, -1)
            elif is_internal(name):
                answers[name, index] = (ErrorCode.invalid_topic_exception, -1)
            else:
                partition, error = leader_partition(broker, info, index, NO_EPOCH)
                if partition is None:
                    answers[name, index] = (error, -1)
                else:  # proposed now, so every partition's deletion commits in parallel
                    pending[name, index] = partition.delete_records(offset, timeout_ms)
    if pending:
        results = await asyncio.gather(*pending.values())
        answers.update(zip(pending, results, strict=True))
    m = response_module(API_KEY, ctx.api_version)
    return await answer(count, _answer, m, wanted, answers)


def _wanted(topics: Sequence[Any]) -> dict[str, dict[int, int]]:
    """topic -> partition -> offset, in the request's order; a partition named twice is one
    deletion, the last offset."""
    wanted: dict[str, dict[int, int]] = {}
    for topic in topics:
        partitions = wanted.setdefault(topic.name, {})
        for requested in topic.partitions:
            partitions[requested.partition_index] = requested.offset
    return wanted


def _answer(
    m: ModuleType, wanted: dict[str, dict[int, int]], answers: dict[tuple[str, int], _Answer]
) -> Any:
    topics = tuple(
        build(
            m.DeleteRecordsTopicResult,
            name=name,
            partitions=tuple(
                build(
                    m.DeleteRecordsPartitionResult,
                    partition_index=index,
                    low_watermark=answers[name, index][1],
                    error_code=answers[name, index][0],
                )
                for index in partitions
            ),
        )
        for name, partitions in wanted.items()
    )
    return build(m.DeleteRecordsResponse, throttle_time=NO_THROTTLE, topics=topics)
