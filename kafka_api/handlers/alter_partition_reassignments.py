"""AlterPartitionReassignments (45): kafka-reassign-partitions and AdminClient's
alter_partition_reassignments. raftlog does not move partition replicas yet (a partition's
Raft group keeps the replicas it was created with), so no reassignment is ever started;
each partition is answered as Kafka's ReplicationControlManager checks it first: unknown
partitions, a cancellation with nothing to cancel (NO_REASSIGNMENT_IN_PROGRESS), a replica
list that is empty, names a broker twice or one that is not registered, or (v1) changes the
replication factor when that is not allowed (INVALID_REPLICA_ASSIGNMENT). A target that is
the current assignment needs no move and succeeds; any other is refused with
INVALID_REPLICA_ASSIGNMENT saying so. ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED
for the request and every partition. A partition named twice is INVALID_REQUEST."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from kafka_api.authz import Op, authorize_cluster
from kafka_api.codec import build, encode_off_loop, response_module
from kafka_api.common import NO_THROTTLE, duplicates, named_twice
from kafka_api.context import RequestContext
from kafka_api.entry_work import sliced
from raftlog.errors import ErrorCode

API_KEY = 45
MIN_VERSION = 0
MAX_VERSION = 1

E = ErrorCode
Answer = tuple[int, ErrorCode, str | None]
Results = list[tuple[str, list[Answer]]]

NOT_MOVED = (
    "raftlog does not move partition replicas yet: a partition keeps the replicas it was "
    "created with"
)


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    asked = [(t.name, p) for t in request.topics for p in t.partitions]
    by_topic: dict[str, list[Answer]] = {}
    if not authorize_cluster(ctx, Op.ALTER):
        for topic, p in asked:
            by_topic.setdefault(topic, []).append(
                (p.partition_index, E.cluster_authorization_failed, None)
            )
        return await encode_off_loop(
            _answer, m, list(by_topic.items()), E.cluster_authorization_failed, True
        )
    repeated = duplicates((topic, p.partition_index) for topic, p in asked)
    registered = {b.node_id for b in ctx.broker.live_brokers()}
    rf_change = ctx.api_version < 1 or bool(request.allow_replication_factor_change)
    async for topic, p in sliced(asked):  # the topics are the loop's
        index = p.partition_index
        if (topic, index) in repeated:
            answer: Answer = (index, E.invalid_request, named_twice("partition"))
        else:
            info = ctx.broker.topic(topic)
            current = (
                info.partitions[index].replicas
                if info and 0 <= index < len(info.partitions)
                else None
            )
            answer = (index, *_judge(current, p.replicas, registered, rf_change))
        by_topic.setdefault(topic, []).append(answer)
    return await encode_off_loop(_answer, m, list(by_topic.items()), E.none, rf_change)


def _judge(
    current: tuple[int, ...] | None,
    target: tuple[int, ...] | None,
    registered: set[int],
    rf_change: bool,
) -> tuple[ErrorCode, str | None]:
    if current is None:
        return E.unknown_topic_or_partition, None
    if target is None:
        return E.no_reassignment_in_progress, "No reassignment is in progress for this partition."
    if not target:
        return E.invalid_replica_assignment, "The replica list is empty."
    if len(set(target)) != len(target):
        return (
            E.invalid_replica_assignment,
            f"The replica list {list(target)} names a broker twice.",
        )
    unknown = sorted(set(target) - registered)
    if unknown:
        return E.invalid_replica_assignment, f"No such broker is registered: {unknown}."
    if not rf_change and len(target) != len(current):
        return (
            E.invalid_replica_assignment,
            f"The replication factor would change from {len(current)} to {len(target)}, "
            "and allowReplicationFactorChange is false.",
        )
    if tuple(target) == tuple(current):
        return E.none, None
    return E.invalid_replica_assignment, NOT_MOVED


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
