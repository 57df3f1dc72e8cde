"""OffsetForLeaderEpoch (23): where a leader epoch ends on the leader (KIP-101/KIP-279), which
clients use to detect log truncation after a leader change."""

from __future__ import annotations

from typing import Any

from epoch import NO_EPOCH
from kafka_api.authz import Op, Resource, authorize_cluster, authorized
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, leader_partition
from kafka_api.context import RequestContext
from raftlog.broker import TopicInfo
from raftlog.broker_api import Broker
from raftlog.errors import ErrorCode, KafkaError

API_KEY = 23
MIN_VERSION = 2  # Kafka 4's baseline; the first with current_leader_epoch
MAX_VERSION = 4

_UNDEFINED = (NO_EPOCH, -1)  # (epoch, end offset)


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    names = [t.topic for t in request.topics]
    # CLUSTER_ACTION (replicas, once its only callers) or DESCRIBE on the topic (KIP-320)
    describable = (
        set(names)
        if authorize_cluster(ctx, Op.CLUSTER_ACTION)
        else authorized(ctx, Op.DESCRIBE, Resource.TOPIC, names)
    )
    topics = []
    for requested_topic in request.topics:
        topic = ctx.broker.topic(requested_topic.topic)
        partitions = []
        for requested in requested_topic.partitions:
            error, (epoch, end_offset) = (
                _end_offset(
                    ctx.broker,
                    topic,
                    requested.partition,
                    requested.current_leader_epoch,
                    requested.leader_epoch,
                )
                if requested_topic.topic in describable
                else (ErrorCode.topic_authorization_failed, _UNDEFINED)
            )
            partitions.append(
                build(
                    m.EpochEndOffset,
                    error_code=error,
                    partition=requested.partition,
                    leader_epoch=epoch,
                    end_offset=end_offset,
                )
            )
        topics.append(
            build(
                m.OffsetForLeaderTopicResult,
                topic=requested_topic.topic,
                partitions=tuple(partitions),
            )
        )
    return build(m.OffsetForLeaderEpochResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


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
