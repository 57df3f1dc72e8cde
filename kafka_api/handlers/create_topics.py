"""CreateTopics (19): Kafka's request validation here, creation by the controller. Each topic
needs CREATE on the cluster or on itself, asked before anything but duplicates; a created
topic's configs are reported only to a principal that may DESCRIBE_CONFIGS it."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import CLUSTER, Op, Resource, authorize, authorized
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, duplicates, millis, topic_name_error
from kafka_api.context import RequestContext
from kafka_api.entry_work import answer, sliced
from raftlog.api.broker import Broker
from raftlog.api.values import ConfigEntry, TopicInfo, TopicResult, TopicSpec
from raftlog.common.errors import ErrorCode

API_KEY = 19
MIN_VERSION = 2  # Kafka 4's baseline
MAX_VERSION = 7

_DEFAULT = -1
DYNAMIC_TOPIC_CONFIG = 1  # Kafka ConfigSource of a config set on the topic itself


async def handle(ctx: RequestContext, request: Any) -> Any:
    repeated = duplicates(topic.name for topic in request.topics)
    names = [topic.name for topic in request.topics if topic.name not in repeated]
    creatable = (
        set(names)
        if authorize(ctx, Op.CREATE, Resource.CLUSTER, CLUSTER)
        else authorized(ctx, Op.CREATE, Resource.TOPIC, names)
    )
    describable = authorized(ctx, Op.DESCRIBE_CONFIGS, Resource.TOPIC, names)
    results: dict[int, TopicResult] = {}
    specs: list[TopicSpec] = []
    positions: list[int] = []
    async for position, topic in sliced(enumerate(request.topics)):
        if topic.name in repeated:
            results[position] = TopicResult(
                topic.name,
                ErrorCode.invalid_request,
                f"Create topics request contains topic {topic.name} more than once",
            )
            continue
        if topic.name not in creatable:
            results[position] = TopicResult(
                topic.name, ErrorCode.topic_authorization_failed, "Authorization failed."
            )
            continue
        spec_or_error = _spec(topic)
        if isinstance(spec_or_error, TopicResult):
            results[position] = spec_or_error
        else:
            specs.append(spec_or_error)
            positions.append(position)
    if specs:
        created = await ctx.broker.create_topics(
            specs, request.validate_only, millis(request.timeout)
        )
        by_name = {result.name: result for result in created}
        for position, spec in zip(positions, specs, strict=True):
            results[position] = by_name[spec.name]
    m = response_module(API_KEY, ctx.api_version)
    # A created topic's configs, read on the loop (they are the controller's) a slice at a
    # time: some 36 entries a topic, a quarter of a second for 1,000 topics all at once.
    configs: dict[int, list[ConfigEntry]] = {}
    if hasattr(m, "CreatableTopicConfigs"):
        async for position in sliced(range(len(results))):
            result, info = results[position], results[position].topic
            if result.error is ErrorCode.none and info is not None and result.name in describable:
                configs[position] = _configs(ctx.broker, result.name, info)
    return await answer(len(results), _response, m, results, configs)


def _response(
    m: Any, results: dict[int, TopicResult], configs: dict[int, list[ConfigEntry]]
) -> Any:
    return build(
        m.CreateTopicsResponse,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            _topic_result(m, results[position], configs.get(position))
            for position in range(len(results))
        ),
    )


def _spec(topic: Any) -> TopicSpec | TopicResult:
    """The spec to hand to the controller, or the result that rejects the entry. Config names
    and values, and the replicas of a manual assignment, are the facade's to check (one table
    of topic configs, raftlog.config.topic_config; it knows the brokers)."""
    name = topic.name
    problem = topic_name_error(name)
    if problem is not None:
        return TopicResult(name, ErrorCode.invalid_topic_exception, problem)
    assignments = None
    if topic.assignments:
        if topic.num_partitions != _DEFAULT or topic.replication_factor != _DEFAULT:
            return TopicResult(
                name,
                ErrorCode.invalid_request,
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time.",
            )
        assignments = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
        if sorted(assignments) != list(range(len(topic.assignments))):
            return TopicResult(
                name,
                ErrorCode.invalid_replica_assignment,
                "partitions should be a consecutive 0-based integer sequence",
            )
    elif topic.num_partitions == 0 or topic.num_partitions < _DEFAULT:
        return TopicResult(
            name,
            ErrorCode.invalid_partitions,
            "Number of partitions was set to an invalid non-positive value.",
        )
    elif topic.replication_factor == 0 or topic.replication_factor < _DEFAULT:
        return TopicResult(
            name,
            ErrorCode.invalid_replication_factor,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    return TopicSpec(
        name=name,
        num_partitions=topic.num_partitions,
        replication_factor=topic.replication_factor,
        assignments=assignments,
        configs={config.name: config.value for config in topic.configs},
    )


def _topic_result(m: Any, result: TopicResult, entries: list[ConfigEntry] | None) -> Any:
    """v5+ reports what was created: partition count, replication factor and every config
    (`entries`), the configs only if the principal may describe them (else, with no
    entries, their error says why not)."""
    info = result.topic
    values: dict[str, Any] = {
        "num_partitions": _DEFAULT,
        "replication_factor": _DEFAULT,
        "configs": None,
        "topic_config_error_code": ErrorCode.none,
    }
    if result.error is ErrorCode.none and info is not None and hasattr(m, "CreatableTopicConfigs"):
        values["num_partitions"] = len(info.partitions)
        if info.partitions:
            values["replication_factor"] = len(info.partitions[0].replicas)
        if entries is None:
            values["configs"] = ()
            values["topic_config_error_code"] = ErrorCode.topic_authorization_failed
            return _build_result(m, result, info, values)
        values["configs"] = tuple(
            m.CreatableTopicConfigs(
                name=entry.name,
                value=None if entry.sensitive else entry.value,
                read_only=entry.read_only,
                config_source=entry.source,
                is_sensitive=entry.sensitive,
            )
            for entry in entries
        )
    return _build_result(m, result, info, values)


def _build_result(m: Any, result: TopicResult, info: TopicInfo | None, values: Any) -> Any:
    return build(
        m.CreatableTopicResult,
        name=result.name,
        topic_id=info.topic_id if info is not None else None,
        error_code=result.error,
        error_message=result.message,
        **values,
    )


def _configs(broker: Broker, name: str, info: TopicInfo) -> list[ConfigEntry]:
    """Every config of the new topic; a validate-only "creation" has only what was asked for."""
    entries = broker.topic_configs(name)
    if entries is not None:
        return entries
    return [ConfigEntry(key, value, DYNAMIC_TOPIC_CONFIG) for key, value in info.configs.items()]
