"""AlterConfigs (33): replaces every explicit config of a topic or of a group (GROUP, 32: share
group settings, raftlog.group_config). Broker configs live in each node's config file, so they
are not alterable over the protocol."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, duplicates, topic_name_error
from kafka_api.context import RequestContext
from raftlog.errors import ErrorCode

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

TOPIC = 2
BROKER = 4
GROUP = 32  # Kafka's ConfigResource.Type.GROUP; librdkafka maps its ResourceType.GROUP (3) to it

Outcome = tuple[ErrorCode, str | None]


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    responses = await alter_each(ctx, request, _alter, m.AlterConfigsResourceResponse)
    return build(m.AlterConfigsResponse, throttle_time=NO_THROTTLE, responses=responses)


async def alter_each(
    ctx: RequestContext,
    request: Any,
    alter: Callable[[RequestContext, Any, bool], Awaitable[Outcome]],
    response_type: type,
) -> tuple[Any, ...]:
    """One answer per resource, in request order: the shared checks first, then `alter`.
    AlterConfigs and IncrementalAlterConfigs differ only in how they alter."""
    repeated = repeated_resources(request.resources)
    responses = []
    for resource in request.resources:
        error, message = resource_error(resource, repeated) or await alter(
            ctx, resource, request.validate_only
        )
        responses.append(
            build(
                response_type,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return tuple(responses)


async def _alter(ctx: RequestContext, resource: Any, validate_only: bool) -> Outcome:
    changes = {config.name: config.value for config in resource.configs}
    if resource.resource_type == GROUP:
        problem = null_values_error(name for name, value in changes.items() if value is None)
        if problem is not None:
            return problem
        result = await ctx.broker.alter_group_configs(
            resource.resource_name, changes, incremental=False, validate_only=validate_only
        )
    else:
        result = await ctx.broker.alter_topic_configs(
            resource.resource_name, changes, incremental=False, validate_only=validate_only
        )
    return result.error, result.message


def null_values_error(names: Iterable[str]) -> Outcome | None:
    """Kafka refuses a null value (other than an incremental DELETE's) before looking at the
    resource. Checked for groups only: topics keep raftlog's INVALID_CONFIG for it."""
    given = list(names)
    if given:
        return ErrorCode.invalid_request, f"Null value not supported for : {', '.join(given)}"
    return None


def repeated_resources(resources: Iterable[Any]) -> set[tuple[int, str]]:
    """Resources named more than once in one request; Kafka rejects each of them."""
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    return {key for key, count in counts.items() if count > 1}


def resource_error(resource: Any, repeated: set[tuple[int, str]]) -> Outcome | None:
    """Why this resource's configs cannot be altered (shared with IncrementalAlterConfigs);
    None for a well-formed topic or group resource."""
    kind, name = resource.resource_type, resource.resource_name
    if (kind, name) in repeated:
        return ErrorCode.invalid_request, f"Duplicate resource {name!r} of type {kind}"
    if kind == BROKER:
        return ErrorCode.invalid_request, "broker configs are static; edit the node's config file"
    if kind == TOPIC:
        problem = topic_name_error(name)
        if problem is not None:
            return ErrorCode.invalid_topic_exception, problem
    elif kind != GROUP:
        return ErrorCode.invalid_request, f"Unsupported resource type {kind}"
    if duplicates(config.name for config in resource.configs):
        return ErrorCode.invalid_request, "Error due to duplicate config keys"
    return None
