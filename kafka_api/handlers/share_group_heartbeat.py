"""ShareGroupHeartbeat (76, KIP-932): joins, keeps and leaves a share group; the answer
carries the member's epoch and, when it changed, its partitions. The coordinator is the
group's `__consumer_offsets` leader, as for classic groups (librdkafka finds it with
FindCoordinator key type 0). Needs READ on the group, and DESCRIBE on every topic it subscribes
to (KAFKA-18817, Kafka 4.1)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kafka_api.authz import Op, Resource, authorize, authorized
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode
from raftlog.share.membership import HeartbeatResult

API_KEY = 76
MIN_VERSION = 1  # the first version librdkafka and Kafka 4.1+ speak
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    subscribed = set(request.subscribed_topic_names or ())
    if not authorize(ctx, Op.READ, Resource.GROUP, request.group_id):
        result = HeartbeatResult(ErrorCode.group_authorization_failed)
    elif len(authorized(ctx, Op.DESCRIBE, Resource.TOPIC, subscribed)) < len(subscribed):
        result = HeartbeatResult(ErrorCode.topic_authorization_failed)
    else:
        result = ctx.broker.groups.share_heartbeat(
            request.group_id,
            request.member_id,
            request.member_epoch,
            request.rack_id,
            request.subscribed_topic_names,
            ctx.client_id or "",
            ctx.client_host,
        )
    assignment = None
    if result.assignment is not None:
        topics = []
        for name, partitions in sorted(result.assignment.items()):
            topic = ctx.broker.topic(name)
            if topic is not None:  # deleted since: the next heartbeat's assignment drops it
                topics.append(
                    m.TopicPartitions(topic_id=topic.topic_id, partitions=tuple(partitions))
                )
        assignment = m.Assignment(topic_partitions=tuple(topics))
    return build(
        m.ShareGroupHeartbeatResponse,
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        error_message=result.message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval=timedelta(milliseconds=result.heartbeat_interval_ms),
        assignment=assignment,
    )
