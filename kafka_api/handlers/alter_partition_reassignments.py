"""AlterPartitionReassignments (45): kafka-reassign-partitions, Cruise Control and
AdminClient's alter_partition_reassignments start, replace and cancel partition moves
(KIP-455). A partition with a replica list moves there (raftlog/controller/moves.py; the
partition's leader carries the move out); null cancels its move. Each partition is judged
as Kafka's ReplicationControlManager judges it: unknown partitions
(UNKNOWN_TOPIC_OR_PARTITION), a cancellation with nothing to cancel
(NO_REASSIGNMENT_IN_PROGRESS), a replica list that is empty, names a broker twice or one that
is not live, or (v1) changes the replication factor when that is not allowed
(INVALID_REPLICA_ASSIGNMENT). The ones that pass go to the controller in one command, judged
again where it applies (another request may have changed the move meanwhile). ALTER on the
cluster, else CLUSTER_AUTHORIZATION_FAILED for the request and every partition. A partition
named twice is INVALID_REQUEST."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from kafka_api.authz import Op, authorize_cluster
from kafka_api.codec import build, encode_off_loop, response_module
from kafka_api.common import NO_THROTTLE, duplicates, named_twice
from kafka_api.context import RequestContext
from kafka_api.entry_work import sliced
from raftlog.api.values import PartitionInfo
from raftlog.common.errors import ErrorCode

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 1

E = ErrorCode
Answer = tuple[int, ErrorCode, str | None]
Results = list[tuple[str, list[Answer]]]
Change = tuple[int, tuple[int, ...] | None]


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    asked = [(t.name, p) for t in request.topics for p in t.partitions]
    if not authorize_cluster(ctx, Op.ALTER):
        refused: dict[str, list[Answer]] = {}
        for topic, p in asked:
            refused.setdefault(topic, []).append(
                (p.partition_index, E.cluster_authorization_failed, None)
            )
        return await encode_off_loop(
            _answer, m, list(refused.items()), E.cluster_authorization_failed, True
        )
    repeated = duplicates((topic, p.partition_index) for topic, p in asked)
    live = {b.node_id for b in ctx.broker.live_brokers()}
    rf_change = ctx.api_version < 1 or bool(request.allow_replication_factor_change)
    by_topic: dict[str, list[Answer]] = {}
    changes: dict[str, list[Change]] = {}
    # Where in its topic's answers each entry the controller is to judge goes.
    pending: dict[str, list[int]] = {}
    async for topic, p in sliced(asked):  # the topics are the loop's
        index = p.partition_index
        answers = by_topic.setdefault(topic, [])
        if (topic, index) in repeated:
            answers.append((index, E.invalid_request, named_twice("partition")))
            continue
        info = ctx.broker.topic(topic)
        current = info.partitions[index] if info and 0 <= index < len(info.partitions) else None
        target = None if p.replicas is None else tuple(p.replicas)
        refusal = _judge(current, target, live, rf_change)
        if refusal is None:
            pending.setdefault(topic, []).append(len(answers))
            changes.setdefault(topic, []).append((index, target))
            refusal = E.none, None  # (replaced by the controller's answer)
        answers.append((index, *refusal))
    if changes:
        timeout_ms = int(request.timeout.total_seconds() * 1000)
        recorded = await ctx.broker.alter_partition_reassignments(list(changes.items()), timeout_ms)
        for topic, outcomes in zip(changes, recorded, strict=True):
            answers = by_topic[topic]
            for place, (code, message) in zip(pending[topic], outcomes, strict=True):
                answers[place] = (answers[place][0], code, message)
    return await encode_off_loop(_answer, m, list(by_topic.items()), E.none, rf_change)


def _judge(
    current: PartitionInfo | None,
    target: tuple[int, ...] | None,
    live: set[int],
    rf_change: bool,
) -> tuple[ErrorCode, str | None] | None:
    """Why the entry is refused before it reaches the controller, None if it is not."""
    if current is None:
        return E.unknown_topic_or_partition, "The topic or partition does not exist."
    moving = bool(current.adding or current.removing)
    if target is None:
        if not moving:
            return E.no_reassignment_in_progress, "No partition reassignment is in progress."
        return None
    if not target:
        return (
            E.invalid_replica_assignment,
            "The manual partition assignment includes an empty replica list.",
        )
    if len(set(target)) != len(target):
        return (
            E.invalid_replica_assignment,
            f"The replica list {list(target)} names a broker twice.",
        )
    unknown = sorted(set(target) - live)
    if unknown:
        return E.invalid_replica_assignment, f"No such broker is registered and live: {unknown}."
    # KIP-860: while a move is in progress, its target's size is the replication factor.
    factor = len(current.replicas) - len(current.removing)
    if not rf_change and len(target) != factor:
        return (
            E.invalid_replica_assignment,
            f"The replication factor would change from {factor} to {len(target)}, "
            "and allowReplicationFactorChange is false.",
        )
    if target == current.replicas and not moving:
        return E.none, None  # nothing to move: no command
    return None


def _answer(m: ModuleType, results: Results, error: ErrorCode, rf_change: bool) -> Any:
    return build(
        m.AlterPartitionReassignmentsResponse,
        throttle_time=NO_THROTTLE,
        allow_replication_factor_change=rf_change,  # v1 echoes the request's (KIP-860)
        error_code=error,
        error_message=None,
        responses=tuple(
            m.ReassignableTopicResponse(
                name=topic,
                partitions=tuple(
                    m.ReassignablePartitionResponse(
                        partition_index=i, error_code=code, error_message=message
                    )
                    for i, code, message in answers
                ),
            )
            for topic, answers in results
        ),
    )
