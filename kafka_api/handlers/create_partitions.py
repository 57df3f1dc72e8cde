"""CreatePartitions (37): grows a topic's partition count through the controller; needs ALTER
on the topic, asked after the duplicate check and before anything else. More new partitions
in all than Kafka's controller writes for one operation refuses the request whole."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, Resource, authorized
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, duplicates, millis
from kafka_api.context import RequestContext
from raftlog.api.broker import Broker
from raftlog.api.values import TopicResult
from raftlog.common.errors import ErrorCode
from raftlog.common.limits import excessive

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    repeated = duplicates(topic.name for topic in request.topics)
    alterable = authorized(
        ctx, Op.ALTER, Resource.TOPIC, (t.name for t in request.topics if t.name not in repeated)
    )
    timeout_ms = millis(request.timeout)
    too_large = excessive(
        sum(_new_partitions(ctx.broker, t) for t in request.topics if t.name in alterable),
        "new partitions",
    )
    results = []
    for topic in request.topics:
        if too_large is not None:
            result = TopicResult(topic.name, ErrorCode.policy_violation, too_large)
        elif topic.name in repeated:
            result = TopicResult(
                topic.name,
                ErrorCode.invalid_request,
                f"Create partitions request contains topic {topic.name} more than once",
            )
        elif topic.name not in alterable:
            result = TopicResult(topic.name, ErrorCode.topic_authorization_failed)
        else:
            assignments = (
                None
                if topic.assignments is None
                else [tuple(a.broker_ids) for a in topic.assignments]
            )
            result = await ctx.broker.create_partitions(
                topic.name, topic.count, assignments, request.validate_only, timeout_ms
            )
        results.append(result)
    m = response_module(API_KEY, ctx.api_version)
    return build(
        m.CreatePartitionsResponse,
        throttle_time=NO_THROTTLE,
        results=tuple(
            build(
                m.CreatePartitionsTopicResult,
                name=result.name,
                error_code=result.error,
                error_message=result.message,
            )
            for result in results
        ),
    )


def _new_partitions(broker: Broker, topic: Any) -> int:
    """The partitions a topic's entry asks to add (Kafka's controller writes a record each)."""
    if topic.assignments is not None:
        return len(topic.assignments)
    info = broker.topic(topic.name)
    return max(0, topic.count - len(info.partitions)) if info is not None else 0
