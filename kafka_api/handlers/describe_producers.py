"""DescribeProducers (61): the producers a partition's leader knows (KIP-664's tool for finding
a hanging transaction): id, epoch, last sequence, and the first offset of the transaction
each has open there. raftlog keeps neither a producer's last timestamp nor its coordinator's
epoch: both are -1.

READ on the topic, else TOPIC_AUTHORIZATION_FAILED (checked before the topic's existence,
as Kafka does); an illegal name is INVALID_TOPIC_EXCEPTION, an unknown topic or partition
UNKNOWN_TOPIC_OR_PARTITION, a partition this node does not lead NOT_LEADER_OR_FOLLOWER (Kafka
answers from any replica; here the leader, which judges every batch, is the one asked).
Every copy of a partition named twice is INVALID_REQUEST. Each partition lists at most
MAX_PRODUCERS producers (the producer state's own bound), and the answer, which grows with
what the partitions hold, is built and encoded off the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from kafka_api.authz import DENIED_MESSAGES, Op, Resource, authorize
from kafka_api.codec import build, encode_off_loop, response_module
from kafka_api.common import NO_THROTTLE, duplicates, named_twice, topic_name_error
from kafka_api.context import RequestContext
from kafka_api.entry_work import sliced
from raftlog.api.values import ActiveProducer
from raftlog.common.errors import ErrorCode, KafkaError

API_KEY = 61
MIN_VERSION = 0
MAX_VERSION = 0

E = ErrorCode

# (index, error, message, producers) of each partition, by topic, in the request's order
Described = list[tuple[str, list[tuple[int, ErrorCode, str | None, Sequence[ActiveProducer]]]]]


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    repeated = duplicates((t.name, i) for t in request.topics for i in t.partition_indexes)
    described: Described = []
    async for requested in sliced(request.topics):  # the ACLs and partitions are the loop's
        name: str = requested.name
        topic_error: tuple[ErrorCode, str | None] | None = None
        problem = topic_name_error(name)
        if problem is not None:
            topic_error = (E.invalid_topic_exception, problem)
        elif not authorize(ctx, Op.READ, Resource.TOPIC, name):
            topic_error = (
                E.topic_authorization_failed,
                DENIED_MESSAGES[E.topic_authorization_failed],
            )
        topic = ctx.broker.topic(name) if topic_error is None else None
        if topic_error is None and topic is None:
            topic_error = (E.unknown_topic_or_partition, None)
        partitions: list[tuple[int, ErrorCode, str | None, Sequence[ActiveProducer]]] = []
        for index in requested.partition_indexes:
            if (name, index) in repeated:
                partitions.append((index, E.invalid_request, named_twice("partition"), ()))
            elif topic_error is not None:
                partitions.append((index, *topic_error, ()))
            elif topic is None or not 0 <= index < len(topic.partitions):
                partitions.append((index, E.unknown_topic_or_partition, None, ()))
            else:
                partitions.append((index, *_producers(ctx, name, index)))
        described.append((name, partitions))
    return await encode_off_loop(_answer, m, described)


def _producers(
    ctx: RequestContext, topic: str, index: int
) -> tuple[ErrorCode, str | None, Sequence[ActiveProducer]]:
    partition = ctx.broker.local_partition(topic, index)
    if partition is None or not partition.is_leader:
        return E.not_leader_or_follower, None, ()
    try:
        return E.none, None, partition.active_producers()
    except KafkaError as exc:
        return exc.code, exc.message, ()


def _answer(m: ModuleType, described: Described) -> Any:
    producer = m.ProducerState
    return build(
        m.DescribeProducersResponse,
        throttle_time=NO_THROTTLE,
        topics=tuple(
            m.TopicResponse(
                name=name,
                partitions=tuple(
                    m.PartitionResponse(
                        partition_index=index,
                        error_code=error,
                        error_message=message,
                        active_producers=tuple(
                            producer(
                                producer_id=p.producer_id,
                                producer_epoch=p.producer_epoch,
                                last_sequence=p.last_sequence,
                                last_timestamp=-1,
                                coordinator_epoch=p.coordinator_epoch,
                                current_txn_start_offset=p.txn_start_offset,
                            )
                            for p in producers
                        ),
                    )
                    for index, error, message, producers in partitions
                ),
            )
            for name, partitions in described
        ),
    )
