"""AlterConfigs (33): replaces every explicit config of a topic or of a group (GROUP, 32: share
group settings, raftlog.config.group_config). Broker configs live in each node's config file, so they
are not alterable over the protocol. A resource needs ALTER_CONFIGS on it, asked after the
request's own checks (Kafka's preprocessing) and before the resource's name and configs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from kafka_api.authz import DENIED_MESSAGES, Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, duplicates, topic_name_error
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode
from raftlog.common.limits import excessive

API_KEY = 33
MIN_VERSION = 0
MAX_VERSION = 2

TOPIC = 2
BROKER = 4
GROUP = 32  # Kafka's ConfigResource.Type.GROUP; librdkafka maps its ResourceType.GROUP (3) to it

Outcome = tuple[ErrorCode, str | None]


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    responses = await alter_each(ctx, request, _null_values, _alter, m.AlterConfigsResourceResponse)
    return build(m.AlterConfigsResponse, throttle_time=NO_THROTTLE, responses=responses)


async def alter_each(
    ctx: RequestContext,
    request: Any,
    null_values: Callable[[Any], Outcome | None],
    alter: Callable[[RequestContext, Any, bool], Awaitable[Outcome]],
    response_type: type,
) -> tuple[Any, ...]:
    """One answer per resource, in request order: a request over Kafka's bound on one
    controller operation refused whole, else the shared checks and `null_values` first, then
    authorization, then the resource's name, then `alter`. AlterConfigs and
    IncrementalAlterConfigs differ only in which null values they refuse and how they alter."""
    too_large = _too_large(request.resources)
    repeated = set() if too_large else repeated_resources(request.resources)
    responses = []
    for resource in request.resources:
        error, message = (
            too_large
            or resource_error(resource, repeated)
            or null_values(resource)
            or _denied(ctx, resource)
            or _name_error(resource)
            or await alter(ctx, resource, request.validate_only)
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


def _too_large(resources: Sequence[Any]) -> Outcome | None:
    """Kafka's controller writes a record per config changed, at most MAX_RECORDS_PER_USER_OP
    per request; here each resource is a controller command of its own, so both count."""
    problem = excessive(len(resources), "resources") or excessive(
        sum(len(resource.configs) for resource in resources), "configs"
    )
    return None if problem is None else (ErrorCode.policy_violation, problem)


def _null_values(resource: Any) -> Outcome | None:
    if resource.resource_type != GROUP:
        return None
    return null_values_error(config.name for config in resource.configs if config.value is None)


async def _alter(ctx: RequestContext, resource: Any, validate_only: bool) -> Outcome:
    changes = {config.name: config.value for config in resource.configs}
    if resource.resource_type == GROUP:
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
    """Why this resource's configs cannot be altered, before anyone is asked (shared with
    IncrementalAlterConfigs); None for a topic or group resource."""
    kind, name = resource.resource_type, resource.resource_name
    if (kind, name) in repeated:
        return ErrorCode.invalid_request, f"Duplicate resource {name!r} of type {kind}"
    if kind == BROKER:
        return ErrorCode.invalid_request, "broker configs are static; edit the node's config file"
    if kind not in (TOPIC, GROUP):
        return ErrorCode.invalid_request, f"Unsupported resource type {kind}"
    if duplicates(config.name for config in resource.configs):
        return ErrorCode.invalid_request, "Error due to duplicate config keys"
    return None


def _denied(ctx: RequestContext, resource: Any) -> Outcome | None:
    """ALTER_CONFIGS on the topic or group (the only kinds left here)."""
    topic = resource.resource_type == TOPIC
    if authorize(
        ctx,
        Op.ALTER_CONFIGS,
        Resource.TOPIC if topic else Resource.GROUP,
        resource.resource_name,
    ):
        return None
    error = ErrorCode.topic_authorization_failed if topic else ErrorCode.group_authorization_failed
    return error, DENIED_MESSAGES[error]


def _name_error(resource: Any) -> Outcome | None:
    if resource.resource_type != TOPIC:
        return None
    problem = topic_name_error(resource.resource_name)
    return None if problem is None else (ErrorCode.invalid_topic_exception, problem)
