"""What ShareFetch and ShareAcknowledge share: their acknowledgement batches checked and
applied on this node's partition leaders, and the per-partition answer. A partition of a topic
the principal may not READ is TOPIC_AUTHORIZATION_FAILED, and so are its acknowledgements; one
of an internal topic (`__consumer_offsets`) is INVALID_TOPIC_EXCEPTION, as Kafka answers a
produce to one: it holds no data to share, and its share state would go into its own Raft
log."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Any

from epoch import NO_EPOCH
from kafka_api.authz import Op, Resource, authorize
from kafka_api.common import current_leader, leader_partition
from kafka_api.context import RequestContext
from raftlog.api.broker import Broker
from raftlog.api.values import Partition, TopicInfo
from raftlog.common.errors import ErrorCode
from raftlog.config.internal_topics import is_internal
from raftlog.share.partition_state import AckBatch, AckType

NO_LEADER = (-1, NO_EPOCH)


@dataclass(slots=True)
class Target:
    """One partition a share request names, its acknowledgements merged (librdkafka may name
    a topic twice in one request) and where it is led."""

    topic_id: uuid.UUID
    index: int
    topic: TopicInfo | None = None
    partition: Partition | None = None
    error: ErrorCode = ErrorCode.none
    acks: list[AckBatch] = field(default_factory=list)
    acked: bool = False  # the request carried acknowledgements for it (they must be answered)
    ack_error: ErrorCode = ErrorCode.none
    ack_written: Awaitable[ErrorCode] | None = None  # the acks' state update, until committed

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic.name if self.topic is not None else str(self.topic_id), self.index)


def targets(
    ctx: RequestContext, topics: Iterable[Any], renew_allowed: bool
) -> dict[tuple[uuid.UUID, int], Target]:
    """The request's partitions by (topic id, index), each resolved to the local leader or to
    why it cannot be served here. RENEW (4) is a v2 type: in a v1 request the partition's
    acknowledgements are INVALID_REQUEST."""
    found: dict[tuple[uuid.UUID, int], Target] = {}
    for requested in topics:
        topic = ctx.broker.topic_by_id(requested.topic_id) if requested.topic_id else None
        for p in requested.partitions:
            target = found.get((requested.topic_id, p.partition_index))
            if target is None:
                target = found[(requested.topic_id, p.partition_index)] = Target(
                    requested.topic_id, p.partition_index, topic
                )
                resolve(ctx, target)
            batches = p.acknowledgement_batches
            if batches:
                target.acked = True
                if not renew_allowed and any(
                    t == AckType.RENEW for b in batches for t in b.acknowledge_types
                ):
                    target.ack_error = ErrorCode.invalid_request
                target.acks.extend(
                    AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                    for b in batches
                )
    return found


def resolve(ctx: RequestContext, target: Target) -> None:
    """Where the target's partition is led, or why it is not served here."""
    topic = target.topic
    if topic is None:
        target.error = ErrorCode.unknown_topic_id
    elif not authorize(ctx, Op.READ, Resource.TOPIC, topic.name):
        target.error = ErrorCode.topic_authorization_failed
    elif is_internal(topic.name):
        target.error = ErrorCode.invalid_topic_exception
    else:
        target.partition, target.error = leader_partition(ctx.broker, topic, target.index, NO_EPOCH)


def apply_acks(broker: Broker, group_id: str, member_id: str, target: Target) -> None:
    """Applies the target's acknowledgements on the leader at once (a RELEASE is fetchable
    by others from now on); their answer waits for `settle_acks`."""
    if not target.acked or target.ack_error is not ErrorCode.none:
        return
    if target.partition is None:
        target.ack_error = target.error
        return
    target.acks.sort(key=lambda b: b.first_offset)
    target.ack_written = broker.share.acknowledge(
        group_id, member_id, target.key, target.partition, target.acks
    )


async def settle_acks(targets: Iterable[Target]) -> None:
    """An acknowledgement is answered once its state update is committed by the partition's
    Raft group: a success the client hears survives the leader's death."""
    pending = [t for t in targets if t.ack_written is not None]
    codes = await asyncio.gather(*(t.ack_written for t in pending if t.ack_written is not None))
    for target, code in zip(pending, codes, strict=True):
        target.ack_error, target.ack_written = code, None


def leader_of(broker: Broker, target: Target, error: ErrorCode) -> tuple[int, int]:
    """KIP-951's hint: where the partition is led now, when this node is not its leader."""
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch):
        return current_leader(broker, target.topic, target.index) or NO_LEADER
    return NO_LEADER
