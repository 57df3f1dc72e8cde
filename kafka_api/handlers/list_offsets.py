"""ListOffsets (2): offsets by timestamp, including Kafka's special timestamps.

v0 (Kafka 3.9 serves it; kio has no model of it, kafka_api/legacy/list_offsets_v0.py) answers each
partition with a list of up to max_num_offsets offsets, newest first, as Kafka's
legacyFetchOffsetsBefore does for a log of one segment: LATEST gives the high watermark then
the log start offset, EARLIEST the log start offset, and a timestamp the first offset whose
record is at or after it (every record before it is older), or the high watermark when no
record is that new, then the log start offset. Kafka answers a timestamp by its segments'
modification times; raftlog by the records' own timestamps.

The partitions are judged on the loop a slice at a time (kafka_api/entry_work.py); repeats are
counted, and an answer of more than a thousand built and encoded, in a thread."""

from __future__ import annotations

from collections import Counter
from types import ModuleType
from typing import Any

from epoch import NO_EPOCH
from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, leader_partition
from kafka_api.context import RequestContext
from kafka_api.entry_work import answer, by_topic, off_loop
from raftlog.api.broker import Broker
from raftlog.api.values import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, TimestampOffset, TopicInfo
from raftlog.common.errors import ErrorCode, KafkaError

API_KEY = 2
MIN_VERSION = 0  # v0: Kafka 3.9 still serves it, Kafka 4 does not
MAX_VERSION = 11

# Tiered-storage timestamps (KIP-1005 and later). Without tiered storage the local log is the
# whole log, so EARLIEST_LOCAL is EARLIEST, and Kafka answers "nothing tiered" (offset -1,
# timestamp -1, epoch -1) for LATEST_TIERED and EARLIEST_PENDING_UPLOAD.
EARLIEST_LOCAL = -4
NOTHING_TIERED = (-5, -6)
READ_COMMITTED = 1  # isolation_level: LATEST is the last stable offset, lookups stay below it
_NOT_FOUND = TimestampOffset(timestamp=-1, offset=-1, leader_epoch=NO_EPOCH)


# Per partition asked: its error, what was found, and v0's list of offsets (None above v0)
Found = tuple[ErrorCode, TimestampOffset, tuple[int, ...] | None]


async def handle(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    m = response_module(API_KEY, version)
    count = sum(len(t.partitions) for t in request.topics)
    named = await off_loop(count, _named, request.topics)
    committed = version >= 2 and request.isolation_level == READ_COMMITTED
    results: list[Found] = []

    def judge(requested_topic: Any) -> tuple[bool, Any]:
        """DESCRIBE on each topic, asked first: an unauthorized one is answered whatever it
        holds."""
        name = requested_topic.name
        return authorize(ctx, Op.DESCRIBE, Resource.TOPIC, name), ctx.broker.topic(name)

    # The ACLs and partitions are the loop's: the partitions are judged here, a slice at a time.
    async for requested_topic, requested, (describable, topic) in by_topic(request.topics, judge):
        index = requested.partition_index
        if not describable:
            results.append((ErrorCode.topic_authorization_failed, _NOT_FOUND, None))
        elif named[requested_topic.name, index] > 1:
            # Kafka answers every copy of a partition named twice INVALID_REQUEST, and does
            # no work for it (5,000 copies of one froze a node for 7 s).
            results.append((ErrorCode.invalid_request, _NOT_FOUND, None))
        elif version == 0:
            error, offsets = await _old_style(ctx.broker, topic, index, requested.timestamp)
            results.append((error, _NOT_FOUND, offsets[: max(requested.max_num_offsets, 0)]))
        else:
            epoch = requested.current_leader_epoch if version >= 4 else NO_EPOCH
            error, found = await _lookup(
                ctx.broker, topic, index, epoch, requested.timestamp, committed
            )
            results.append((error, found, None))
    return await answer(count, _answer, m, request.topics, results)


def _named(topics: Any) -> Counter[tuple[str, int]]:
    """How many times each partition is named."""
    return Counter((t.name, p.partition_index) for t in topics for p in t.partitions)


def _answer(m: ModuleType, topics: Any, results: list[Found]) -> Any:
    found = iter(results)
    return build(
        m.ListOffsetsResponse,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            build(
                m.ListOffsetsTopicResponse,
                name=t.name,
                partitions=tuple(
                    _partition(m, p.partition_index, *next(found)) for p in t.partitions
                ),
            )
            for t in topics
        ),
    )


def _partition(
    m: ModuleType,
    index: int,
    error: ErrorCode,
    found: TimestampOffset,
    offsets: tuple[int, ...] | None,
) -> Any:
    if offsets is not None:
        return build(
            m.ListOffsetsPartitionResponse,
            partition_index=index,
            error_code=error,
            old_style_offsets=offsets,
        )
    return build(
        m.ListOffsetsPartitionResponse,
        partition_index=index,
        error_code=error,
        timestamp=found.timestamp,
        offset=found.offset,
        leader_epoch=found.leader_epoch,
    )


async def _lookup(
    broker: Broker,
    topic: TopicInfo | None,
    index: int,
    client_epoch: int,
    timestamp: int,
    committed: bool,
) -> tuple[ErrorCode, TimestampOffset]:
    if topic is None:
        return ErrorCode.unknown_topic_or_partition, _NOT_FOUND
    partition, error = leader_partition(broker, topic, index, client_epoch)
    if partition is None:
        return error, _NOT_FOUND
    if timestamp in NOTHING_TIERED:
        return ErrorCode.none, _NOT_FOUND
    try:
        found = await partition.offset_for_timestamp(
            EARLIEST_TIMESTAMP if timestamp == EARLIEST_LOCAL else timestamp, committed
        )
    except KafkaError as exc:
        return exc.code, _NOT_FOUND
    return ErrorCode.none, found or _NOT_FOUND


async def _old_style(
    broker: Broker, topic: TopicInfo | None, index: int, timestamp: int
) -> tuple[ErrorCode, tuple[int, ...]]:
    """v0's offsets, newest first (see the module's docstring); the caller keeps the first
    max_num_offsets of them."""
    error, start = await _lookup(broker, topic, index, NO_EPOCH, EARLIEST_TIMESTAMP, False)
    if error is not ErrorCode.none:
        return error, ()
    if timestamp == EARLIEST_TIMESTAMP:
        return error, (start.offset,)
    if timestamp != LATEST_TIMESTAMP and timestamp < 0:
        return error, ()  # Kafka's v0 knows only the two: no segment is that old
    found = _NOT_FOUND
    if timestamp != LATEST_TIMESTAMP:
        error, found = await _lookup(broker, topic, index, NO_EPOCH, timestamp, False)
    if found is _NOT_FOUND and error is ErrorCode.none:
        error, found = await _lookup(broker, topic, index, NO_EPOCH, LATEST_TIMESTAMP, False)
    if error is not ErrorCode.none:
        return error, ()
    return error, (found.offset, start.offset) if found.offset > start.offset else (found.offset,)
