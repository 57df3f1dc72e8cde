"""DescribeConfigs (32): topic, broker and group configs with their sources. Each resource
needs DESCRIBE_CONFIGS on it (a broker's: on the cluster), asked before anything else."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import CLUSTER, DENIED_MESSAGES, Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, topic_name_error
from kafka_api.context import RequestContext
from raftlog.broker import Broker, ConfigEntry
from raftlog.errors import ErrorCode

API_KEY = 32
MIN_VERSION = 1  # Kafka 4's baseline
MAX_VERSION = 4

TOPIC = 2
BROKER = 4
GROUP = 32


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    include_documentation = getattr(request, "include_documentation", False)
    results = []
    for resource in request.resources:
        denied = _denied(ctx, resource.resource_type, resource.resource_name)
        error, message, entries = (
            (denied, DENIED_MESSAGES[denied], [])
            if denied is not None
            else _lookup(ctx.broker, resource.resource_type, resource.resource_name)
        )
        # Kafka: a null or empty key list means every key.
        keys = set(resource.configuration_keys or ())
        configs = tuple(
            _config(m, entry, request.include_synonyms, include_documentation)
            for entry in entries
            if not keys or entry.name in keys
        )
        results.append(
            build(
                m.DescribeConfigsResult,
                error_code=error,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=configs,
            )
        )
    return build(m.DescribeConfigsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


# Config resource type -> the ACL resource its configs are authorized on, and the error.
_AUTHORIZED_ON = {
    TOPIC: (Resource.TOPIC, ErrorCode.topic_authorization_failed),
    BROKER: (Resource.CLUSTER, ErrorCode.cluster_authorization_failed),
    GROUP: (Resource.GROUP, ErrorCode.group_authorization_failed),
}


def _denied(ctx: RequestContext, resource_type: int, name: str) -> ErrorCode | None:
    """The authorization error of describing this resource's configs; None when allowed (or
    an unknown type, which _lookup refuses)."""
    authorized_on = _AUTHORIZED_ON.get(resource_type)
    if authorized_on is None:
        return None
    resource, error = authorized_on
    allowed = authorize(
        ctx, Op.DESCRIBE_CONFIGS, resource, CLUSTER if resource == Resource.CLUSTER else name
    )
    return None if allowed else error


def _lookup(
    broker: Broker, resource_type: int, name: str
) -> tuple[ErrorCode, str | None, list[ConfigEntry]]:
    if resource_type == TOPIC:
        problem = topic_name_error(name)
        if problem is not None:
            return ErrorCode.invalid_topic_exception, problem, []
        entries = broker.topic_configs(name)
        if entries is None:
            return ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist", []
        return ErrorCode.none, None, entries
    if resource_type == BROKER:
        try:
            node_id = int(name) if name else broker.node_id
        except ValueError:
            return ErrorCode.invalid_request, f"Broker id must be an integer, got {name!r}", []
        entries = broker.broker_configs(node_id)
        if entries is None:
            return ErrorCode.invalid_request, f"Unknown broker id {node_id}", []
        return ErrorCode.none, None, entries
    if resource_type == GROUP:
        # Kafka's ConfigHelper: any group may be described, existing or not, but not "".
        if not name:
            return ErrorCode.invalid_request, "Group name must not be empty", []
        return ErrorCode.none, None, broker.group_configs(name)
    return ErrorCode.invalid_request, f"Unsupported resource type {resource_type}", []


def _config(m: Any, entry: ConfigEntry, synonyms: bool, documentation: bool) -> Any:
    value = None if entry.sensitive else entry.value
    return build(
        m.DescribeConfigsResourceResult,
        name=entry.name,
        value=value,
        read_only=entry.read_only,
        config_source=entry.source,
        is_sensitive=entry.sensitive,
        # Only the effective value is known, so it is its own (single) synonym.
        synonyms=(
            (m.DescribeConfigsSynonym(name=entry.name, value=value, source=entry.source),)
            if synonyms
            else ()
        ),
        config_type=entry.config_type,
        documentation=entry.documentation if documentation else None,
    )
