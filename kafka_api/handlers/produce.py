"""Produce (0). Every partition is proposed synchronously, in request order, before any is
awaited: the facade appends in call order, so a connection's produce requests reach each log
in the order they were sent even though their commits are awaited concurrently."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from typing import Any

from epoch import NO_EPOCH
from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import Encoded
from kafka_api.common import (
    LEADER_MOVED,
    current_leader,
    endpoints,
    leader_partition,
    millis,
    resolve_topic,
)
from kafka_api.context import RequestContext
from kafka_api.errors import CloseConnection
from kafka_api.produce_encoding import (
    FIRST_FLEXIBLE,
    PartitionAnswer,
    TopicAnswer,
    encode_produce_response,
)
from raftlog.api.broker import Broker
from raftlog.api.values import ProduceResult, TopicInfo
from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.storage.batch import HEADER_SIZE, parse_header

API_KEY = 0
MIN_VERSION = 3  # v3 is the first with magic-2 batches only; Kafka 4 serves no older one
MAX_VERSION = 13  # v13 addresses topics by id (KIP-516)

_VALID_ACKS = (0, 1, -1)
# What a transactional batch is answered when its coordinator's verification fails (Kafka's
# AddPartitionsToTxnManager for Produce below v11): the coordinator busy or moving is
# retriable, a fenced producer is told so, anything else means "not in a transaction".
_VERIFY_ANSWERS = {
    ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
    ErrorCode.invalid_producer_epoch: ErrorCode.invalid_producer_epoch,
    ErrorCode.concurrent_transactions: ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_load_in_progress: ErrorCode.not_enough_replicas,
    ErrorCode.coordinator_not_available: ErrorCode.not_enough_replicas,
    ErrorCode.not_coordinator: ErrorCode.not_enough_replicas,
}
# Refusals that come before any other check of a partition (Kafka authorizes first).
_DENIED = (ErrorCode.topic_authorization_failed, ErrorCode.transactional_id_authorization_failed)


async def handle(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    version = ctx.api_version
    acks = request.acks
    timeout_ms = millis(request.timeout)
    proposed = []
    checking = broker.authorizer is not None
    # Kafka answers a transactional write its principal may not make with this error for
    # every partition; WRITE on each topic is asked after it (an unknown topic id cannot be).
    txn_denied = (
        checking
        and request.transactional_id is not None
        and not authorize(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, request.transactional_id)
    )
    resolved = [
        (topic_data, *_resolve(broker, topic_data, version)) for topic_data in request.topic_data
    ]
    verified: dict[tuple[str, int], ErrorCode] = {}
    if request.transactional_id is not None and not txn_denied:
        verified = await _verify(broker, request.transactional_id, resolved)
    for topic_data, key, topic, topic_error in resolved:
        if txn_denied:
            topic, topic_error = None, ErrorCode.transactional_id_authorization_failed
        elif (
            checking
            and topic_error is not ErrorCode.unknown_topic_id
            and not authorize(ctx, Op.WRITE, Resource.TOPIC, topic.name if topic else str(key))
        ):
            topic, topic_error = None, ErrorCode.topic_authorization_failed
        outcomes = [
            (
                data.index,
                _propose(
                    broker,
                    request,
                    topic,
                    topic_error,
                    data.index,
                    data.records,
                    timeout_ms,
                    verified.get((topic.name, data.index)) if topic is not None else None,
                ),
            )
            for data in topic_data.partition_data
        ]
        proposed.append((key, topic, outcomes))

    topics: list[TopicAnswer] = []
    failed = []
    leaders = set()
    error_code = 0  # the first partition's error that is one, for the request metrics
    for key, topic, outcomes in proposed:
        partitions: list[PartitionAnswer] = []
        for index, outcome in outcomes:
            result = outcome if isinstance(outcome, ProduceResult) else await outcome
            leader = None
            if result.error is not ErrorCode.none:
                failed.append(f"{index}: {result.error.name}")
                error_code = error_code or int(result.error)
                if version >= 10 and result.error in LEADER_MOVED:
                    leader = current_leader(broker, topic, index)
                    if leader is not None:
                        leaders.add(leader[0])
            partitions.append((index, result, leader))
        topics.append((key, partitions))
    if acks == 0:
        if failed:
            # Kafka's only way to tell an acks=0 producer that it is writing to the wrong place.
            raise CloseConnection(f"acks=0 produce failed for partitions {', '.join(failed)}")
        return None
    body = encode_produce_response(version, topics, endpoints(broker, leaders))
    return Encoded(body, version >= FIRST_FLEXIBLE, error_code)


def _resolve(
    broker: Broker, topic_data: Any, version: int
) -> tuple[str | uuid.UUID | None, TopicInfo | None, ErrorCode]:
    """A topic's name (below v13) or id (v13), whichever its version has, and the topic."""
    if version >= 13:
        topic_id = topic_data.topic_id
        return (topic_id, *resolve_topic(broker, None, topic_id, True))
    name = topic_data.name
    return (name, *resolve_topic(broker, name, None, False))


def _propose(
    broker: Broker,
    request: Any,
    topic: TopicInfo | None,
    topic_error: ErrorCode,
    index: int,
    records: bytes | None,
    timeout_ms: int,
    verified: ErrorCode | None,
) -> ProduceResult | Awaitable[ProduceResult]:
    """The result for a partition that fails before reaching the log, else the facade's
    awaitable, whose proposal has already happened when this returns. `verified`: what the
    transaction coordinator said of a transactional batch's partition (None: no such
    batch)."""
    if topic_error in _DENIED:
        return ProduceResult(error=topic_error)
    if request.acks not in _VALID_ACKS:
        return ProduceResult(error=ErrorCode.invalid_required_acks)
    if verified is not None and verified != ErrorCode.none:
        return ProduceResult(
            error=_VERIFY_ANSWERS.get(verified, ErrorCode.invalid_txn_state),
            message=f"Partition was not added to the transaction ({verified.name})",
        )
    if topic is None:
        return ProduceResult(error=topic_error)
    if topic.internal:
        # Kafka's rule: group state is written by the coordinators only. A client's garbage
        # batch left every group on its partition loading forever, and a forged commit
        # record took effect at the next leader change.
        return ProduceResult(
            error=ErrorCode.invalid_topic_exception,
            message=f"Cannot append to internal topic {topic.name}",
        )
    partition, error = leader_partition(broker, topic, index, NO_EPOCH)
    if partition is None:
        return ProduceResult(error=error)
    if not records:
        return ProduceResult(
            error=ErrorCode.invalid_record,
            message="Produce requests must have at least one record batch per partition",
        )
    try:
        return partition.produce(records, request.acks, timeout_ms, verified == ErrorCode.none)
    except KafkaError as exc:  # the facade may refuse at once (e.g. NOT_LEADER_OR_FOLLOWER)
        return ProduceResult.refused(exc)


async def _verify(
    broker: Broker,
    transactional_id: str,
    resolved: list[tuple[Any, str | uuid.UUID | None, TopicInfo | None, ErrorCode]],
) -> dict[tuple[str, int], ErrorCode]:
    """KIP-890: each partition a transactional batch is for, checked with its coordinator
    before anything is proposed. One at a time: asked here, the answer comes without
    yielding, so this request's proposals keep their place among the connection's."""
    answers: dict[tuple[str, int], ErrorCode] = {}
    for topic_data, _, topic, _ in resolved:
        if topic is None:
            continue
        for data in topic_data.partition_data:
            records = data.records
            if not records or len(records) < HEADER_SIZE:
                continue
            header = parse_header(records)
            if header.is_transactional and (topic.name, data.index) not in answers:
                answers[topic.name, data.index] = await broker.verify_transaction(
                    transactional_id,
                    header.producer_id,
                    header.producer_epoch,
                    topic.name,
                    data.index,
                )
    return answers
