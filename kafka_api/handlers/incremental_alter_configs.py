"""IncrementalAlterConfigs (44): SET, DELETE, APPEND and SUBTRACT on topic configs; APPEND and
SUBTRACT only for list configs (cleanup.policy), computed here from the current value. Group
configs (GROUP, 32) take SET and DELETE: none of them is a list."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from kafka_api.handlers.alter_configs import GROUP, Outcome, alter_each, null_values_error
from raftlog.common.errors import ErrorCode
from raftlog.config.config_def import LIST, split_list

API_KEY = 44
MIN_VERSION = 0
MAX_VERSION = 1

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    responses = await alter_each(ctx, request, _null_values, _alter, m.AlterConfigsResourceResponse)
    return build(m.IncrementalAlterConfigsResponse, throttle_time=NO_THROTTLE, responses=responses)


async def _alter(ctx: RequestContext, resource: Any, validate_only: bool) -> Outcome:
    if resource.resource_type == GROUP:
        return await _alter_group(ctx, resource, validate_only)
    name = resource.resource_name
    changes = _changes(resource, lambda config, append: _list_change(ctx, name, config, append))
    if isinstance(changes, tuple):
        return changes
    result = await ctx.broker.alter_topic_configs(
        name, changes, incremental=True, validate_only=validate_only
    )
    return result.error, result.message


def _null_values(resource: Any) -> Outcome | None:
    """A null value of anything but DELETE, refused for groups by the broker before anything
    else (topics keep raftlog's INVALID_CONFIG for it, after authorization)."""
    if resource.resource_type != GROUP:
        return None
    return null_values_error(
        config.name
        for config in resource.configs
        if config.value is None and config.config_operation != DELETE
    )


async def _alter_group(ctx: RequestContext, resource: Any, validate_only: bool) -> Outcome:
    """Kafka's order, after the null values (alter_each): each operation (its controller's
    check), then the names and values of the resulting configs."""
    changes = _changes(resource, _no_list_configs)
    if isinstance(changes, tuple):
        return changes
    result = await ctx.broker.alter_group_configs(
        resource.resource_name, changes, incremental=True, validate_only=validate_only
    )
    return result.error, result.message


def _changes(
    resource: Any, list_change: Callable[[Any, bool], str | Outcome]
) -> dict[str, str | None] | Outcome:
    """The resource's operations as {name: new value, or None to delete}; APPEND and SUBTRACT
    computed by `list_change(config, append)`, which may refuse them instead."""
    changes: dict[str, str | None] = {}
    for config in resource.configs:
        operation = config.config_operation
        if operation == SET:
            changes[config.name] = config.value
        elif operation == DELETE:
            changes[config.name] = None
        elif operation in (APPEND, SUBTRACT):
            outcome = list_change(config, operation == APPEND)
            if isinstance(outcome, tuple):
                return outcome
            changes[config.name] = outcome
        else:
            return ErrorCode.invalid_request, f"Unknown config operation {operation}"
    return changes


def _no_list_configs(config: Any, append: bool) -> Outcome:
    """No group config is a list: Kafka's controller refuses APPEND and SUBTRACT on them."""
    verb = "APPEND" if append else "SUBTRACT"
    return (
        ErrorCode.invalid_config,
        f"Can't {verb} to key {config.name} because its type is not LIST.",
    )


def _list_change(ctx: RequestContext, topic: str, config: Any, append: bool) -> str | Outcome:
    """The new value of a list config, or why there is none. Like Kafka, APPEND adds the items
    not there yet and SUBTRACT removes every occurrence, keeping the current order."""
    entries = ctx.broker.topic_configs(topic)
    if entries is None:
        return ErrorCode.unknown_topic_or_partition, f"Topic {topic} does not exist"
    current = next((entry for entry in entries if entry.name == config.name), None)
    if current is None:
        return ErrorCode.invalid_config, f"Unknown topic config name: {config.name}"
    if current.config_type != LIST:
        verb = "append" if append else "subtract"
        return ErrorCode.invalid_config, (
            f"Config value {verb} is not allowed for config key: {config.name}"
        )
    if config.value is None:
        return ErrorCode.invalid_config, f"Null value not supported for topic config {config.name}"
    items = split_list(current.value or "")
    given = split_list(config.value)
    if append:
        return ",".join(items + [item for item in dict.fromkeys(given) if item not in items])
    return ",".join(item for item in items if item not in given)
