"""DeleteTopics (20): by name, or (v6+) by topic id."""

from __future__ import annotations

from typing import Any

from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, duplicates, millis
from kafka_api.context import RequestContext
from raftlog.broker import TopicResult
from raftlog.errors import ErrorCode

API_KEY = 20
MIN_VERSION = 1  # Kafka 4's baseline
MAX_VERSION = 6


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    if ctx.api_version >= 6:
        wanted = [(topic.name, topic.topic_id) for topic in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    # Ids become names first, so a topic named twice is caught however it was named.
    names: list[str | None] = []
    rejected: dict[int, TopicResult] = {}
    for position, (name, topic_id) in enumerate(wanted):
        # kio reads the all-zero id, which means "no id", as None
        if (name is None) == (topic_id is None):
            rejected[position] = TopicResult(
                name or "", ErrorCode.invalid_request, "Name a topic by its name or by its id"
            )
        elif topic_id is not None:
            topic = broker.topic_by_id(topic_id)
            if topic is None:
                rejected[position] = TopicResult("", ErrorCode.unknown_topic_id)
            else:
                name = topic.name
        names.append(name)
    repeated = duplicates(name for i, name in enumerate(names) if i not in rejected)
    for position, name in enumerate(names):
        if name in repeated and position not in rejected:
            rejected[position] = TopicResult(
                name, ErrorCode.invalid_request, f"Topic {name} is named more than once"
            )
    # (names of topics not rejected are known: a missing one was rejected)
    to_delete = [name for i, name in enumerate(names) if i not in rejected and name is not None]
    deleted: dict[str | None, TopicResult] = {}
    if to_delete:
        results = await broker.delete_topics(to_delete, millis(request.timeout))
        deleted = {result.name: result for result in results}
    m = response_module(API_KEY, ctx.api_version)
    responses = []
    for position, (name, (_, topic_id)) in enumerate(zip(names, wanted, strict=True)):
        result = rejected.get(position) or deleted[name]
        if topic_id is None and result.topic is not None:
            topic_id = result.topic.topic_id
        responses.append(
            build(
                m.DeletableTopicResult,
                name=name,
                topic_id=topic_id,
                error_code=result.error,
                error_message=result.message,
            )
        )
    return build(m.DeleteTopicsResponse, throttle_time=NO_THROTTLE, responses=tuple(responses))
