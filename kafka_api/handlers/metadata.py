"""Metadata (3): brokers, controller and topic/partition leadership, with auto-creation of
topics a client asks for by name when both it and the broker allow it."""

from __future__ import annotations

from typing import Any

from kafka_api.codec import build, response_module
from kafka_api.common import (
    NO_THROTTLE,
    UNKNOWN_AUTHORIZED_OPERATIONS,
    topic_name_error,
)
from kafka_api.context import RequestContext
from kafka_api.errors import CloseConnection
from raftlog.broker import Broker, TopicInfo, TopicSpec
from raftlog.errors import ErrorCode
from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 13

# How long a Metadata request waits for the controller to record an auto-created topic.
AUTO_CREATE_TIMEOUT_MS = 5000
# Creation recorded (or already done by a racing request): the client retries and finds it.
_BEING_CREATED = (ErrorCode.none, ErrorCode.topic_already_exists, ErrorCode.request_timed_out)


async def handle(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    broker = ctx.broker
    m = response_module(API_KEY, version)
    if request.topics is None or (version == 0 and not request.topics):
        topics = [_topic(m, topic) for topic in broker.topics().values()]
    else:
        allow_create = broker.auto_create_topics and getattr(
            request, "allow_auto_topic_creation", True
        )
        topics = await _requested_topics(
            broker, m, request.topics, allow_create, by_id=version >= 12
        )
    brokers = tuple(
        build(m.MetadataResponseBroker, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
        for b in broker.client_brokers()
    )
    return build(
        m.MetadataResponse,
        throttle_time=NO_THROTTLE,
        brokers=brokers,
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id(),
        topics=tuple(topics),
        cluster_authorized_operations=UNKNOWN_AUTHORIZED_OPERATIONS,
        error_code=ErrorCode.none,
    )


async def _requested_topics(
    broker: Broker, m: Any, requested: Any, allow_create: bool, *, by_id: bool
) -> list[Any]:
    """Answers in request order; unknown valid names are auto-created in one controller call."""
    answers: list[Any] = []
    to_create: dict[str, list[int]] = {}  # name -> its positions in answers
    for entry in requested:
        name = entry.name
        if name is None:
            # v10+ make the name nullable, but only v12+ may name a topic by id instead.
            topic_id = entry.topic_id
            if not by_id or topic_id is None:  # kio reads the all-zero id as None
                raise CloseConnection("Metadata request has a topic without a usable name or id")
            topic = broker.topic_by_id(topic_id)
            answers.append(
                _topic(m, topic)
                if topic is not None
                else _error_topic(m, ErrorCode.unknown_topic_id, None, topic_id)
            )
            continue
        topic = broker.topic(name)
        if topic is not None:
            answers.append(_topic(m, topic))
        elif topic_name_error(name) is not None:
            answers.append(_error_topic(m, ErrorCode.invalid_topic_exception, name))
        elif allow_create or name == OFFSETS_TOPIC:
            # Kafka creates its internal topic on Metadata whatever the client allows, and
            # answers INVALID_REPLICATION_FACTOR while too few brokers live (KIP-115).
            to_create.setdefault(name, []).append(len(answers))
            answers.append(None)
        else:
            answers.append(_error_topic(m, ErrorCode.unknown_topic_or_partition, name))
    if to_create:
        results = await broker.create_topics(
            [TopicSpec(name=name) for name in to_create], False, AUTO_CREATE_TIMEOUT_MS
        )
        errors = {result.name: result.error for result in results}
        for name, positions in to_create.items():
            error = errors.get(name, ErrorCode.unknown_topic_or_partition)
            answer = _error_topic(
                m, ErrorCode.leader_not_available if error in _BEING_CREATED else error, name
            )
            for position in positions:
                answers[position] = answer
    return answers


def _topic(m: Any, topic: TopicInfo) -> Any:
    partitions = tuple(
        build(
            m.MetadataResponsePartition,
            error_code=(ErrorCode.leader_not_available if p.leader == -1 else ErrorCode.none),
            partition_index=p.index,
            leader_id=p.leader,
            leader_epoch=p.leader_epoch,
            replica_nodes=p.replicas,
            isr_nodes=p.isr,
            offline_replicas=p.offline,
        )
        for p in topic.partitions
    )
    return build(
        m.MetadataResponseTopic,
        error_code=ErrorCode.none,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=partitions,
        topic_authorized_operations=UNKNOWN_AUTHORIZED_OPERATIONS,
    )


def _error_topic(m: Any, error: ErrorCode, name: str | None, topic_id: Any = None) -> Any:
    return build(
        m.MetadataResponseTopic,
        error_code=error,
        name=name,
        topic_id=topic_id,
        is_internal=name == OFFSETS_TOPIC,
        partitions=(),
        topic_authorized_operations=UNKNOWN_AUTHORIZED_OPERATIONS,
    )
