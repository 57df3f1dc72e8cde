"""Fetch (1): committed batches up to the high watermark, with long-poll, size limits (KIP-74)
and divergence detection (KIP-320). Sessionless only: every answer carries session id 0, which
tells clients that asked for a session (epoch 0) that none was created."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from epoch import NO_EPOCH
from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import (
    LEADER_MOVED,
    NO_THROTTLE,
    current_leader,
    endpoints,
    leader_partition,
    millis,
    resolve_topic,
)
from kafka_api.context import RequestContext
from kafka_api.fetch_encoding import FETCH_API_KEY
from raftlog.api.broker import Broker
from raftlog.api.values import Partition, TopicInfo
from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.storage.batch import records_in_batches

API_KEY = FETCH_API_KEY
MIN_VERSION = 4  # Kafka 4's baseline
MAX_VERSION = 18

_FULL_FETCH_EPOCHS = (0, -1)  # open a new session (0) or fetch sessionless (-1)
_READ_COMMITTED = 1


@dataclass(slots=True)
class _Slot:
    """One requested partition and what the latest read found for it."""

    topic: TopicInfo | None
    index: int
    client_epoch: int
    fetch_offset: int
    max_bytes: int
    last_fetched_epoch: int
    error: ErrorCode
    partition: Partition | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    diverging: tuple[int, int] | None = None
    leader: tuple[int, int] | None = None  # KIP-951 hint after NOT_LEADER / FENCED


async def handle(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    m = response_module(API_KEY, version)
    if version >= 7 and request.session_epoch not in _FULL_FETCH_EPOCHS:
        # An incremental fetch names a session; we never create one, so it cannot exist.
        return build(
            m.FetchResponse,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.fetch_session_id_not_found,
            session_id=0,
            responses=(),
        )
    topics = _requested(ctx, request)
    slots = [slot for _, topic_slots in topics for slot in topic_slots]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + millis(request.max_wait) / 1000
    # The broker's fetch.max.bytes caps what a client may ask for in one response.
    max_bytes = min(request.max_bytes, ctx.broker.fetch_max_bytes)
    committed = version >= 4 and request.isolation_level == _READ_COMMITTED
    while True:
        gathered, answer_now = _read(ctx.broker, slots, max_bytes, version >= 12, committed)
        remaining = deadline - loop.time()
        if answer_now or gathered >= request.min_bytes or remaining <= 0 or not slots:
            break
        await _wait_for_data(slots, remaining, committed)
    for slot in slots:  # the last read is the one answered: its data counts as sent
        if slot.records and slot.partition is not None:
            slot.partition.sent(len(slot.records), records_in_batches(slot.records))
    if version >= 12:
        for slot in slots:
            if slot.error in LEADER_MOVED:
                slot.leader = current_leader(ctx.broker, slot.topic, slot.index)
    return build(
        m.FetchResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        session_id=0,
        responses=tuple(
            build(
                m.FetchableTopicResponse,
                topic=getattr(fetch_topic, "topic", None),
                topic_id=getattr(fetch_topic, "topic_id", None),
                partitions=tuple(_partition_data(m, slot, committed) for slot in topic_slots),
            )
            for fetch_topic, topic_slots in topics
        ),
        node_endpoints=tuple(
            m.NodeEndpoint(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in endpoints(ctx.broker, {s.leader[0] for s in slots if s.leader is not None})
        )
        if version >= 16  # v12-15 name the leader but not its endpoint
        else (),
    )


def _requested(ctx: RequestContext, request: Any) -> list[tuple[Any, list[_Slot]]]:
    """The requested partitions per requested topic, topics resolved once. A partition named
    again is read once (Kafka keeps a map of them): 1,500 copies of one built 1.8 GB. A topic
    the principal may not READ is TOPIC_AUTHORIZATION_FAILED whether it exists or not (an
    unknown topic id stays UNKNOWN_TOPIC_ID: there is no name to authorize)."""
    version = ctx.api_version
    topics = []
    seen: set[tuple[Any, int]] = set()
    checking = ctx.broker.authorizer is not None
    for fetch_topic in request.topics:
        topic, topic_error = resolve_topic(
            ctx.broker,
            getattr(fetch_topic, "topic", None),
            getattr(fetch_topic, "topic_id", None),
            version >= 13,
        )
        name = topic.name if topic is not None else getattr(fetch_topic, "topic", None)
        if (
            checking
            and topic_error is not ErrorCode.unknown_topic_id
            and not authorize(ctx, Op.READ, Resource.TOPIC, name or "")
        ):
            topic, topic_error = None, ErrorCode.topic_authorization_failed
        slots = []
        for requested in fetch_topic.partitions:
            if (name, requested.partition) in seen:
                continue
            seen.add((name, requested.partition))
            slots.append(
                _Slot(
                    topic=topic,
                    index=requested.partition,
                    client_epoch=requested.current_leader_epoch if version >= 9 else NO_EPOCH,
                    fetch_offset=requested.fetch_offset,
                    max_bytes=requested.partition_max_bytes,
                    last_fetched_epoch=requested.last_fetched_epoch if version >= 12 else NO_EPOCH,
                    error=topic_error,
                )
            )
        topics.append((fetch_topic, slots))
    return topics


def _read(
    broker: Broker, slots: list[_Slot], max_bytes: int, check_divergence: bool, committed: bool
) -> tuple[int, bool]:
    """Reads every slot again; returns the record bytes gathered and whether something (an
    error or a divergence) must be answered without waiting, as Kafka does. Leadership and the
    client's epoch are checked on every read: a long poll can outlive an election."""
    gathered = 0
    answer_now = False
    for slot in slots:
        slot.records = b""
        slot.diverging = None
        slot.partition = partition = None
        if slot.topic is not None:
            partition, slot.error = leader_partition(
                broker, slot.topic, slot.index, slot.client_epoch
            )
        if partition is None:
            slot.high_watermark = slot.last_stable_offset = slot.log_start_offset = -1
            answer_now = True
            continue
        slot.partition = partition
        try:
            if check_divergence and _may_diverge(slot, partition):
                epoch, end_offset = partition.end_offset_for_epoch(slot.last_fetched_epoch)
                if epoch != slot.last_fetched_epoch or end_offset < slot.fetch_offset:
                    slot.diverging = (epoch, end_offset)
                    answer_now = True
            if slot.diverging is None:
                # KIP-74: only the first partition that returns data may exceed the limits.
                slot.records = partition.read(
                    slot.fetch_offset,
                    min(slot.max_bytes, max(0, max_bytes - gathered)),
                    gathered == 0,
                    committed,
                )
                gathered += len(slot.records)
        except KafkaError as exc:
            slot.error = exc.code
            answer_now = True
        if slot.error in (ErrorCode.none, ErrorCode.offset_out_of_range):
            slot.high_watermark = partition.high_watermark
            slot.last_stable_offset = partition.last_stable_offset
            slot.log_start_offset = partition.log_start_offset
        else:
            slot.high_watermark = slot.last_stable_offset = slot.log_start_offset = -1
    return gathered, answer_now


def _may_diverge(slot: _Slot, partition: Partition) -> bool:
    """Whether the epoch the client last fetched needs looking up (KIP-320). Clients send it
    on every fetch (kafka-python does); in the leader's current epoch the answer is always
    (epoch, log end offset), so there is nothing to look up unless the client is past it."""
    if slot.last_fetched_epoch < 0:
        return False
    return (
        slot.last_fetched_epoch != partition.leader_epoch
        or slot.fetch_offset > partition.log_end_offset
    )


async def _wait_for_data(slots: list[_Slot], timeout: float, committed: bool) -> None:
    """Until any partition's readable end (high watermark, or last stable offset) passes what
    the last read saw, or the timeout."""
    waiters = [
        asyncio.ensure_future(
            slot.partition.wait_for_data(
                max(
                    slot.fetch_offset,
                    slot.last_stable_offset if committed else slot.high_watermark,
                ),
                timeout,
                committed,
            )
        )
        for slot in slots
        if slot.partition is not None
    ]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def _partition_data(m: Any, slot: _Slot, committed: bool) -> Any:
    """A read_committed answer lists the aborted transactions its records may include (the
    client drops their records); a read_uncommitted one lists none (null)."""
    values: dict[str, Any] = {}
    aborted: tuple[Any, ...] | None = None
    if committed:
        aborted = ()
        if slot.records and slot.partition is not None:
            aborted = tuple(
                m.AbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset)
                for t in slot.partition.aborted_transactions(
                    slot.fetch_offset, slot.last_stable_offset
                )
            )
    if slot.diverging is not None:
        epoch, end_offset = slot.diverging
        values["diverging_epoch"] = m.EpochEndOffset(epoch=epoch, end_offset=end_offset)
    if slot.leader is not None:
        leader_id, leader_epoch = slot.leader
        values["current_leader"] = m.LeaderIdAndEpoch(
            leader_id=leader_id, leader_epoch=leader_epoch
        )
    return build(
        m.PartitionData,
        partition_index=slot.index,
        error_code=slot.error,
        high_watermark=slot.high_watermark,
        last_stable_offset=slot.last_stable_offset,
        log_start_offset=slot.log_start_offset,
        aborted_transactions=aborted,
        preferred_read_replica=-1,
        records=slot.records,
        **values,
    )
