"""DeleteTopics (20): by name, or (v6+) by topic id. Authorization as Kafka's controller:
DELETE on the cluster, or else on each topic, and DESCRIBE to learn anything about one named
by name (an unknown name may be reported only to who may describe it); a topic named by id
that may not be deleted is refused, and its name kept back unless it may be described.
More topics than Kafka's controller deletes in one operation refuses the request whole."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka_api.authz import CLUSTER, Op, Resource, authorize, authorized
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, duplicates, millis
from kafka_api.context import RequestContext
from raftlog.api.values import TopicResult
from raftlog.common.errors import ErrorCode
from raftlog.common.limits import excessive

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
    too_large = excessive(len(wanted), "topics")
    for position, (name, topic_id) in enumerate(wanted):
        if too_large is not None:
            rejected[position] = TopicResult(name or "", ErrorCode.policy_violation, too_large)
        # kio reads the all-zero id, which means "no id", as None
        elif (name is None) == (topic_id is None):
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
    # Kafka's order: a name or an id given twice, then authorization, and only then a name
    # and an id that are the same topic (not told to who may not delete it).
    _refuse_repeated(names, rejected, lambda i: f"{wanted[i][0]}/{wanted[i][1]}")
    _authorize(ctx, wanted, names, rejected)
    _refuse_repeated(names, rejected, lambda i: names[i])
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
        shown = name if position not in rejected else result.name
        if not shown and ctx.api_version >= 6:
            shown = None  # a name kept back (v6+ only: before, the name is not nullable)
        responses.append(
            build(
                m.DeletableTopicResult,
                name=shown,
                topic_id=topic_id,
                error_code=result.error,
                error_message=result.message,
            )
        )
    return build(m.DeleteTopicsResponse, throttle_time=NO_THROTTLE, responses=tuple(responses))


def _refuse_repeated(
    names: list[str | None], rejected: dict[int, TopicResult], key: Callable[[int], str | None]
) -> None:
    """Refuses, in `rejected`, every topic whose key another one not refused shares."""
    positions = [i for i in range(len(names)) if i not in rejected]
    repeated = duplicates(key(i) for i in positions)
    for position in positions:
        if key(position) in repeated:
            name = names[position]
            rejected[position] = TopicResult(
                name or "", ErrorCode.invalid_request, f"Topic {name} is named more than once"
            )


def _authorize(
    ctx: RequestContext,
    wanted: list[tuple[str | None, Any]],
    names: list[str | None],
    rejected: dict[int, TopicResult],
) -> None:
    """Refuses, in `rejected`, each topic the principal may not delete (Kafka's order: an
    unknown id and a name given twice were refused already)."""
    if authorize(ctx, Op.DELETE, Resource.CLUSTER, CLUSTER):
        return
    candidates = [n for i, n in enumerate(names) if i not in rejected and n is not None]
    describable = authorized(ctx, Op.DESCRIBE, Resource.TOPIC, candidates)
    deletable = authorized(ctx, Op.DELETE, Resource.TOPIC, candidates)
    for position, (name, (_, topic_id)) in enumerate(zip(names, wanted, strict=True)):
        if position in rejected or name is None or name in deletable:
            continue
        if topic_id is not None:
            shown = name if name in describable else ""
            rejected[position] = TopicResult(shown, ErrorCode.topic_authorization_failed)
        elif name not in describable or ctx.broker.topic(name) is not None:
            rejected[position] = TopicResult(name, ErrorCode.topic_authorization_failed)
