"""Metadata (3): brokers, controller and topic/partition leadership, with auto-creation of
topics a client asks for by name when both it and the broker allow it.

Authorization as Kafka's: a topic the principal may not DESCRIBE is left out of a full listing
and answered TOPIC_AUTHORIZATION_FAILED when asked for by name, whether it exists or not (by
id, with the id but not the name); auto-creation needs CREATE on the cluster or the topic."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka_api.authz import (
    CLUSTER,
    Op,
    Resource,
    authorize,
    authorize_cluster,
    authorized,
    authorized_operations,
)
from kafka_api.codec import build, response_module
from kafka_api.common import (
    NO_THROTTLE,
    UNKNOWN_AUTHORIZED_OPERATIONS,
    topic_name_error,
)
from kafka_api.context import RequestContext
from kafka_api.entry_work import sliced
from kafka_api.errors import CloseConnection
from raftlog.api.values import TopicInfo, TopicSpec
from raftlog.common.errors import ErrorCode
from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC

API_KEY = 3
MIN_VERSION = 0
MAX_VERSION = 13

# How long a Metadata request waits for the controller to record an auto-created topic.
AUTO_CREATE_TIMEOUT_MS = 5000
# Creation recorded (or already done by a racing request): the client retries and finds it.
_BEING_CREATED = (ErrorCode.none, ErrorCode.topic_already_exists, ErrorCode.request_timed_out)
_LAST_CLUSTER_OPERATIONS_VERSION = 10  # v11 moved them to DescribeCluster

Operations = Callable[[str], int]  # a topic's authorized operations, as the answer reports them


async def handle(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    broker = ctx.broker
    m = response_module(API_KEY, version)
    operations = _operations(ctx, request)
    if request.topics is None or (version == 0 and not request.topics):
        every = broker.topics()
        if broker.authorizer is not None:
            shown = authorized(ctx, Op.DESCRIBE, Resource.TOPIC, every)
            every = {name: topic for name, topic in every.items() if name in shown}
        topics = [_topic(m, topic, operations) for topic in every.values()]
    else:
        allow_create = broker.auto_create_topics and getattr(
            request, "allow_auto_topic_creation", True
        )
        topics = await _requested_topics(
            ctx, m, request.topics, allow_create, operations, by_id=version >= 12
        )
    brokers = tuple(
        build(m.MetadataResponseBroker, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
        for b in broker.client_brokers()
    )
    cluster_operations = UNKNOWN_AUTHORIZED_OPERATIONS
    if version <= _LAST_CLUSTER_OPERATIONS_VERSION and getattr(
        request, "include_cluster_authorized_operations", False
    ):
        cluster_operations = (
            authorized_operations(ctx, Resource.CLUSTER, CLUSTER)
            if authorize_cluster(ctx, Op.DESCRIBE)
            else 0
        )
    return build(
        m.MetadataResponse,
        throttle_time=NO_THROTTLE,
        brokers=brokers,
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id(),
        topics=tuple(topics),
        cluster_authorized_operations=cluster_operations,
        error_code=ErrorCode.none,
    )


def _operations(ctx: RequestContext, request: Any) -> Operations:
    """What each described topic's topic_authorized_operations says: the operations the
    principal may do on it when the client asks (v8+), else Kafka's "not asked" marker."""
    if getattr(request, "include_topic_authorized_operations", False):
        return lambda name: authorized_operations(ctx, Resource.TOPIC, name)
    return lambda name: UNKNOWN_AUTHORIZED_OPERATIONS


async def _requested_topics(
    ctx: RequestContext,
    m: Any,
    requested: Any,
    allow_create: bool,
    operations: Operations,
    *,
    by_id: bool,
) -> list[Any]:
    """Answers in request order, a topic named again answered once (Kafka reads the names
    into a set: 20,000 copies of a 1,000-partition topic would be 20,000 listings of it);
    unknown valid names are auto-created in one request to the topic administration, which
    judges each against the replica budget. Looked at on the loop a slice at a time."""
    broker = ctx.broker
    answers: list[Any] = []
    to_create: dict[str, int] = {}  # name -> its position in answers
    may_create_any: bool | None = None  # CREATE on the cluster, asked once when needed
    seen: set[object] = set()
    async for entry in sliced(requested):
        name = entry.name
        key = name if name is not None else entry.topic_id
        if key in seen:
            continue
        seen.add(key)
        if name is None:
            # v10+ make the name nullable, but only v12+ may name a topic by id instead.
            topic_id = entry.topic_id
            if not by_id or topic_id is None:  # kio reads the all-zero id as None
                raise CloseConnection("Metadata request has a topic without a usable name or id")
            topic = broker.topic_by_id(topic_id)
            if topic is None:
                answers.append(_error_topic(m, ErrorCode.unknown_topic_id, None, topic_id))
            elif not authorize(ctx, Op.DESCRIBE, Resource.TOPIC, topic.name):
                # an id is not secret; the name it stands for is
                answers.append(
                    _error_topic(m, ErrorCode.topic_authorization_failed, None, topic_id, False)
                )
            else:
                answers.append(_topic(m, topic, operations))
            continue
        if not authorize(ctx, Op.DESCRIBE, Resource.TOPIC, name):
            # not even whether it exists
            answers.append(_error_topic(m, ErrorCode.topic_authorization_failed, name, None, False))
            continue
        topic = broker.topic(name)
        if topic is not None:
            answers.append(_topic(m, topic, operations))
            continue
        if allow_create:
            if may_create_any is None:
                may_create_any = authorize_cluster(ctx, Op.CREATE)
            if not may_create_any and not authorize(ctx, Op.CREATE, Resource.TOPIC, name):
                answers.append(_error_topic(m, ErrorCode.topic_authorization_failed, name))
                continue
        if topic_name_error(name) is not None:
            answers.append(
                _error_topic(m, ErrorCode.invalid_topic_exception, name, ops=operations(name))
            )
        elif allow_create or name == OFFSETS_TOPIC:
            # Kafka creates its internal topic on Metadata whatever the client allows, and
            # answers INVALID_REPLICATION_FACTOR while too few brokers live (KIP-115).
            to_create[name] = len(answers)
            answers.append(None)
        else:
            answers.append(
                _error_topic(m, ErrorCode.unknown_topic_or_partition, name, ops=operations(name))
            )
    if to_create:
        results = await broker.create_topics(
            [TopicSpec(name=name) for name in to_create], False, AUTO_CREATE_TIMEOUT_MS
        )
        errors = {result.name: result.error for result in results}
        async for name, position in sliced(to_create.items()):
            error = errors.get(name, ErrorCode.unknown_topic_or_partition)
            answers[position] = _error_topic(
                m,
                ErrorCode.leader_not_available if error in _BEING_CREATED else error,
                name,
                ops=operations(name),
            )
    return answers


def _topic(m: Any, topic: TopicInfo, operations: Operations) -> Any:
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
        topic_authorized_operations=operations(topic.name),
    )


def _error_topic(
    m: Any,
    error: ErrorCode,
    name: str | None,
    topic_id: Any = None,
    internal: bool | None = None,
    ops: int = UNKNOWN_AUTHORIZED_OPERATIONS,
) -> Any:
    return build(
        m.MetadataResponseTopic,
        error_code=error,
        name=name,
        topic_id=topic_id,
        is_internal=name == OFFSETS_TOPIC if internal is None else internal,
        partitions=(),
        topic_authorized_operations=ops,
    )
