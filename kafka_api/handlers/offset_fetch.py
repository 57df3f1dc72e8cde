"""OffsetFetch (9): a group's committed positions. v1 (the first kio models; v0 read ZooKeeper)
names partitions, v2+ may ask for all of them (null topics) and reports coordinator errors at
the top, v5 returns the committed leader epoch, v7 adds require_stable (a partition an open
transaction committed an offset for is UNSTABLE_OFFSET_COMMIT until it ends), v8 asks for
several groups at once. v10 names topics by id only and is not served. A group needs
DESCRIBE; so does each topic, whose offsets are otherwise left out of an answer for every
topic and refused (TOPIC_AUTHORIZATION_FAILED) when asked for. Every copy of a group named
twice in one v8+ request is INVALID_REQUEST and not read (Kafka reads each copy: all of a
group's offsets, again and again). The groups are authorized and read on the loop a slice at
a time; the partitions asked for are listed, and the answer to more than a thousand entries
built and encoded, in a thread (kafka_api/entry_work.py)."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from kafka_api.authz import Op, Resource, authorize, authorized
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, duplicates
from kafka_api.context import RequestContext
from kafka_api.entry_work import answer, off_loop, sliced
from raftlog.common.errors import ErrorCode
from raftlog.groups.results import FetchedOffset, OffsetFetchResult

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 9

TOP_LEVEL_ERROR_VERSION = 2
MULTI_GROUP_VERSION = 8


async def handle(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    m = response_module(API_KEY, version)
    if version >= MULTI_GROUP_VERSION:
        groups: tuple[Any, ...] = request.groups
        count = len(groups) + sum(_entries(g.topics) for g in groups)
        repeated, wanted = await off_loop(count, _each_group, groups)
        results: list[OffsetFetchResult] = []
        # Each group is authorized and read on the loop (the ACLs and the groups are its).
        async for group, partitions in sliced(zip(groups, wanted, strict=True)):
            if group.group_id in repeated:
                results.append(OffsetFetchResult(ErrorCode.invalid_request))
            else:
                stable = request.require_stable
                results.append(await _fetch(ctx, group.group_id, partitions, stable))
        return await answer(count, _answer_groups, m, groups, results)
    count = _entries(request.topics)
    named = await off_loop(count, _partitions, request.topics)
    result = await _fetch(ctx, request.group_id, named, getattr(request, "require_stable", False))
    if version < TOP_LEVEL_ERROR_VERSION and result.error is not ErrorCode.none:
        # No top-level error field yet: every requested partition carries it.
        failed = tuple(FetchedOffset(t, p, error=result.error) for t, p in named or ())
        result = OffsetFetchResult(ErrorCode.none, failed)
    return await answer(count, _answer, m, result)


def _answer_groups(m: ModuleType, groups: Sequence[Any], results: list[OffsetFetchResult]) -> Any:
    answers = tuple(
        build(
            m.OffsetFetchResponseGroup,
            group_id=g.group_id,
            topics=_topics(m.OffsetFetchResponseTopics, m.OffsetFetchResponsePartitions, r),
            error_code=r.error,
        )
        for g, r in zip(groups, results, strict=True)
    )
    return build(m.OffsetFetchResponse, throttle_time=NO_THROTTLE, groups=answers)


def _answer(m: ModuleType, result: OffsetFetchResult) -> Any:
    return build(
        m.OffsetFetchResponse,
        throttle_time=NO_THROTTLE,
        topics=_topics(m.OffsetFetchResponseTopic, m.OffsetFetchResponsePartition, result),
        error_code=result.error,
    )


async def _fetch(
    ctx: RequestContext, group_id: str, wanted: list[tuple[str, int]] | None, stable: bool
) -> OffsetFetchResult:
    """The group's offsets as this principal may see them (Kafka's order: the group, then the
    coordinator with the describable topics only, then the refused topics appended)."""
    if not authorize(ctx, Op.DESCRIBE, Resource.GROUP, group_id):
        return OffsetFetchResult(ErrorCode.group_authorization_failed)
    groups = ctx.broker.groups
    if ctx.broker.authorizer is None:
        return await groups.offset_fetch(group_id, wanted, stable)
    if wanted is None:
        result = await groups.offset_fetch(group_id, None, stable)
        if result.error is not ErrorCode.none:
            return result
        shown = authorized(ctx, Op.DESCRIBE, Resource.TOPIC, (o.topic for o in result.offsets))
        return OffsetFetchResult(result.error, tuple(o for o in result.offsets if o.topic in shown))
    shown = authorized(ctx, Op.DESCRIBE, Resource.TOPIC, (topic for topic, _ in wanted))
    result = await groups.offset_fetch(group_id, [(t, p) for t, p in wanted if t in shown], stable)
    if result.error is not ErrorCode.none:
        return result
    refused = tuple(
        FetchedOffset(t, p, error=ErrorCode.topic_authorization_failed)
        for t, p in wanted
        if t not in shown
    )
    return OffsetFetchResult(result.error, result.offsets + refused)


def _entries(topics: Any) -> int:
    """The topics and partitions named (none: every partition)."""
    return 0 if topics is None else len(topics) + sum(len(t.partition_indexes) for t in topics)


def _each_group(groups: Sequence[Any]) -> tuple[set[str], list[list[tuple[str, int]] | None]]:
    """The groups named more than once, and each group's partitions asked for."""
    return duplicates(g.group_id for g in groups), [_partitions(g.topics) for g in groups]


def _partitions(topics: Any) -> list[tuple[str, int]] | None:
    if topics is None:
        return None
    return [(t.name, p) for t in topics for p in t.partition_indexes]


def _topics(topic_type: type, partition_type: type, result: OffsetFetchResult) -> tuple[Any, ...]:
    by_topic: dict[str, list[Any]] = {}
    for o in result.offsets:
        by_topic.setdefault(o.topic, []).append(
            build(
                partition_type,
                partition_index=o.partition,
                committed_offset=o.offset,
                committed_leader_epoch=o.leader_epoch,
                metadata=o.metadata,
                error_code=o.error,
            )
        )
    return tuple(
        build(topic_type, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()
    )
