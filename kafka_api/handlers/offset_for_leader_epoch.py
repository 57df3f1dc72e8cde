"""OffsetForLeaderEpoch (23): where a leader epoch ends on the leader (KIP-101/KIP-279), which
clients use to detect log truncation after a leader change. The partitions are judged on the
loop a slice at a time (kafka_api/entry_work.py); an answer of more than a thousand is built
and encoded in a thread."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from epoch import NO_EPOCH
from kafka_api.authz import Op, Resource, authorize, authorize_cluster
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, leader_partition
from kafka_api.context import RequestContext
from kafka_api.entry_work import answer, by_topic
from raftlog.api.broker import Broker
from raftlog.api.values import TopicInfo
from raftlog.common.errors import ErrorCode, KafkaError

API_KEY = 23
MIN_VERSION = 2  # Kafka 4's baseline; the first with current_leader_epoch
MAX_VERSION = 4

_UNDEFINED = (NO_EPOCH, -1)  # (epoch, end offset)


# Per partition asked: its error and (epoch, end offset)
Found = tuple[ErrorCode, tuple[int, int]]


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    # CLUSTER_ACTION (replicas, once its only callers) or DESCRIBE on the topic (KIP-320)
    replica = authorize_cluster(ctx, Op.CLUSTER_ACTION)
    results: list[Found] = []

    def judge(requested_topic: Any) -> tuple[bool, Any]:
        name = requested_topic.topic
        return replica or authorize(ctx, Op.DESCRIBE, Resource.TOPIC, name), ctx.broker.topic(name)

    # The ACLs and partitions are the loop's: the partitions are judged here, a slice at a time.
    async for _, requested, (describable, topic) in by_topic(request.topics, judge):
        if not describable:
            results.append((ErrorCode.topic_authorization_failed, _UNDEFINED))
            continue
        results.append(
            _end_offset(
                ctx.broker,
                topic,
                requested.partition,
                requested.current_leader_epoch,
                requested.leader_epoch,
            )
        )
    return await answer(len(results), _answer, m, request.topics, results)


def _answer(m: ModuleType, topics: Any, results: list[Found]) -> Any:
    found = iter(results)
    return build(
        m.OffsetForLeaderEpochResponse,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            build(
                m.OffsetForLeaderTopicResult,
                topic=t.topic,
                partitions=tuple(_partition(m, p.partition, *next(found)) for p in t.partitions),
            )
            for t in topics
        ),
    )


def _partition(m: ModuleType, index: int, error: ErrorCode, found: tuple[int, int]) -> Any:
    epoch, end_offset = found
    return build(
        m.EpochEndOffset,
        error_code=error,
        partition=index,
        leader_epoch=epoch,
        end_offset=end_offset,
    )


def _end_offset(
    broker: Broker, topic: TopicInfo | None, index: int, client_epoch: int, epoch: int
) -> tuple[ErrorCode, tuple[int, int]]:
    if topic is None:
        return ErrorCode.unknown_topic_or_partition, _UNDEFINED
    partition, error = leader_partition(broker, topic, index, client_epoch)
    if partition is None:
        return error, _UNDEFINED
    try:
        return ErrorCode.none, partition.end_offset_for_epoch(epoch)
    except KafkaError as exc:
        return exc.code, _UNDEFINED
