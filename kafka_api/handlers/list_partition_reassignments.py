"""ListPartitionReassignments (46): the moves in progress (raftlog/controller/moves.py), for
the partitions named or (null) for every topic, as Kafka's controller lists them: each
moving partition's full replica set and its adding and removing replicas; a topic or
partition that does not exist, or does not move, is left out. DESCRIBE on the cluster, else
CLUSTER_AUTHORIZATION_FAILED."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from kafka_api.authz import Op, authorize_cluster
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from kafka_api.entry_work import answer, sliced
from raftlog.api.values import PartitionInfo
from raftlog.common.errors import ErrorCode

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not authorize_cluster(ctx, Op.DESCRIBE):
        return _answer(m, [], ErrorCode.cluster_authorization_failed)
    if request.topics is None:
        wanted = list(ctx.broker.reassigning().items())
    else:
        wanted = [(t.name, list(t.partition_indexes)) for t in request.topics]
    count = sum(len(indexes) for _, indexes in wanted)
    listed: dict[str, list[PartitionInfo]] = {}
    async for name, indexes in sliced(wanted):  # the topics are the loop's
        info = ctx.broker.topic(name)
        if info is None:
            continue
        for index in indexes:
            if 0 <= index < len(info.partitions):
                partition = info.partitions[index]
                if partition.adding or partition.removing:
                    listed.setdefault(name, []).append(partition)
    return await answer(count, _answer, m, list(listed.items()), ErrorCode.none)


def _answer(m: ModuleType, listed: list[tuple[str, list[PartitionInfo]]], error: ErrorCode) -> Any:
    return build(
        m.ListPartitionReassignmentsResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=None,
        topics=tuple(
            m.OngoingTopicReassignment(
                name=name,
                partitions=tuple(
                    m.OngoingPartitionReassignment(
                        partition_index=p.index,
                        replicas=p.replicas,
                        adding_replicas=p.adding,
                        removing_replicas=p.removing,
                    )
                    for p in partitions
                ),
            )
            for name, partitions in listed
        ),
    )
