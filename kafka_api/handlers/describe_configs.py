"""DescribeConfigs (32): topic, broker and group configs with their sources. Each resource
needs DESCRIBE_CONFIGS on it (a broker's: on the cluster), asked after the request's own
checks: at most MAX_RESOURCES resources (any group name is answered with every setting, so
an answer would otherwise grow with the request: 20,000 names built 23.5 MB and held the
node's loop 4.6 s), and each named once (every copy of one named twice is INVALID_REQUEST;
Kafka answers each copy in full). v0 (sarama 1.22's ListTopics and DescribeConfig;
kafka_api/legacy/describe_configs_v0.py) has no synonyms and says `is_default` where later versions
give the source: true where the source is DEFAULT_CONFIG, as Kafka before 2.7 answered (2.7 to
3.9 send false for every config, so sarama's ListTopics shows every one as set there)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafka_api.authz import CLUSTER, DENIED_MESSAGES, Op, Resource, authorize
from kafka_api.codec import build, encode_off_loop, response_module
from kafka_api.common import NO_THROTTLE, duplicates, named_twice, topic_name_error
from kafka_api.context import RequestContext
from raftlog.api.broker import Broker
from raftlog.api.values import ConfigEntry
from raftlog.common.errors import ErrorCode
from raftlog.config.topic_config import DEFAULT

API_KEY = 32
MIN_VERSION = 0  # sarama 1.22 sends v0 (Kafka 3.9 and Redpanda serve it; Kafka 4 does not)
MAX_VERSION = 4

TOPIC = 2
BROKER = 4
GROUP = 32

# What a full answer costs per resource, at most (a topic's 36 settings with documentation and
# synonyms): ~0.07 ms of the node's loop to read them, ~0.2 ms in a thread to build, 5.9 KB.
# 1,000 is ~70 ms of loop and ~6 MB at most, and covers every topic of a cluster at the scale
# raftlog holds well (docs/architecture.md).
MAX_RESOURCES = 1000

Outcome = tuple[ErrorCode, str | None, list[ConfigEntry]]


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    include_documentation = getattr(request, "include_documentation", False)
    resources = request.resources
    outcomes = _refused(ctx.broker, resources)
    # The configs are read here, on the loop, as the node has them now; the answer, up to
    # MAX_RESOURCES resources of every config, is built and encoded in a thread.
    found = [
        (resource, refused or _described(ctx, resource.resource_type, resource.resource_name))
        for resource, refused in zip(resources, outcomes, strict=True)
    ]
    include_synonyms = getattr(request, "include_synonyms", False)  # v1+
    return await encode_off_loop(_response, m, found, include_synonyms, include_documentation)


def _response(m: Any, found: list[tuple[Any, Outcome]], synonyms: bool, documentation: bool) -> Any:
    results = []
    alike: dict[tuple[int, str, ErrorCode], Any] = {}  # one answer for every copy refused alike
    for resource, (error, message, entries) in found:
        kind, name = resource.resource_type, resource.resource_name
        if error is not ErrorCode.none and not entries:
            if (kind, name, error) not in alike:
                alike[kind, name, error] = _result(m, kind, name, error, message, ())
            results.append(alike[kind, name, error])
            continue
        # Kafka: a null or empty key list means every key.
        keys = set(resource.configuration_keys or ())
        configs = tuple(
            _config(m, entry, synonyms, documentation)
            for entry in entries
            if not keys or entry.name in keys
        )
        results.append(_result(m, kind, name, error, message, configs))
    return build(m.DescribeConfigsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


def _refused(broker: Broker, resources: Sequence[Any]) -> list[Outcome | None]:
    """Per resource, the request's own refusal of it (before authorization), or None."""
    if len(resources) > MAX_RESOURCES:
        message = (
            f"DescribeConfigs names {len(resources)} resources, at most {MAX_RESOURCES} per request"
        )
        return [(ErrorCode.invalid_request, message, [])] * len(resources)
    identities = [_identity(broker, resource) for resource in resources]
    repeated = duplicates(identities)
    twice: Outcome = (ErrorCode.invalid_request, named_twice("resource"), [])
    return [twice if identity in repeated else None for identity in identities]


def _identity(broker: Broker, resource: Any) -> tuple[int, object]:
    """Which resource a name stands for: "", "1" and "01" all name broker 1 on node 1."""
    kind, name = resource.resource_type, resource.resource_name
    if kind == BROKER:
        try:
            return kind, int(name) if name else broker.node_id
        except ValueError:  # (int() refuses thousands of digits too)
            pass
    return kind, name


def _described(ctx: RequestContext, resource_type: int, name: str) -> Outcome:
    denied = _denied(ctx, resource_type, name)
    if denied is not None:
        return denied, DENIED_MESSAGES[denied], []
    return _lookup(ctx.broker, resource_type, name)


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


def _lookup(broker: Broker, resource_type: int, name: str) -> Outcome:
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


def _result(
    m: Any, kind: int, name: str, error: ErrorCode, message: str | None, configs: tuple[Any, ...]
) -> Any:
    return build(
        m.DescribeConfigsResult,
        error_code=error,
        error_message=message,
        resource_type=kind,
        resource_name=name,
        configs=configs,
    )


def _config(m: Any, entry: ConfigEntry, synonyms: bool, documentation: bool) -> Any:
    value = None if entry.sensitive else entry.value
    return build(
        m.DescribeConfigsResourceResult,
        name=entry.name,
        value=value,
        read_only=entry.read_only,
        config_source=entry.source,
        is_default=entry.source == DEFAULT,  # v0
        is_sensitive=entry.sensitive,
        synonyms=tuple(
            m.DescribeConfigsSynonym(
                name=name, value=None if entry.sensitive else text, source=source
            )
            for name, text, source in (entry.synonyms or ((entry.name, value, entry.source),))
        )
        if synonyms
        else (),
        config_type=entry.config_type,
        documentation=entry.documentation if documentation else None,
    )
