"""ElectLeaders (43): kafka-leader-election and the admin clients' elect_leaders.

PREFERRED (0) hands each partition's Raft leadership to its preferred replica, the first of
its replicas as Metadata lists them (raftlog/preferred_leaders.py): ELECTION_NOT_NEEDED where
it already leads, PREFERRED_LEADER_NOT_AVAILABLE where it is down or not in sync, and the
answer once every election is done or the request's timeout ran out (REQUEST_TIMED_OUT for
those still under way, as Kafka's purgatory answers).

UNCLEAN (1) is answered as Kafka's controller answers it, which elects only a partition
without a leader: ELECTION_NOT_NEEDED where a leader exists. Where none does, a Raft group
elects one from a majority on its own, and a replica outside it taking over would lose
committed records: ELIGIBLE_LEADERS_NOT_AVAILABLE.

Null topic_partitions means every partition, and then the partitions that needed no election
are left out, as Kafka does. ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for the
request and every partition it names. A partition named twice is INVALID_REQUEST.
"""

from __future__ import annotations

import asyncio
from types import ModuleType
from typing import Any

from kafka_api.authz import DENIED_MESSAGES, Op, authorize_cluster
from kafka_api.codec import build, encode_off_loop, response_module
from kafka_api.common import NO_THROTTLE, duplicates, millis, named_twice
from kafka_api.context import RequestContext
from raftlog.errors import ErrorCode

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2

E = ErrorCode
PREFERRED, UNCLEAN = 0, 1
# Elections run at once; the rest wait their turn within the same timeout.
MAX_CONCURRENT = 256

Outcome = tuple[ErrorCode, str | None]
Results = list[tuple[str, list[tuple[int, ErrorCode, str | None]]]]


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    election = getattr(request, "election_type", PREFERRED)  # v0 elects the preferred only
    named: list[tuple[str, list[int]]] | None = (
        None
        if request.topic_partitions is None
        else [(t.topic, list(t.partitions)) for t in request.topic_partitions]
    )
    if not authorize_cluster(ctx, Op.ALTER):
        error = E.cluster_authorization_failed
        return await _everything_refused(m, named, error, DENIED_MESSAGES[error])
    if election not in (PREFERRED, UNCLEAN):
        return await _everything_refused(
            m, named, E.invalid_request, f"Unknown election type {election}"
        )
    broker = ctx.broker
    every = named is None
    if named is None:
        named = [(t.name, list(range(len(t.partitions)))) for t in broker.topics().values()]
    repeated = duplicates((topic, i) for topic, indexes in named for i in indexes)
    timeout_ms = millis(request.timeout)
    todo = enumerate((topic, i) for topic, indexes in named for i in indexes)
    outcomes: dict[int, Outcome] = {}

    async def elect() -> None:
        """One of MAX_CONCURRENT workers over the partitions: a task for each partition named
        would be a million tasks for a request naming a million."""
        for position, (topic, index) in todo:
            if (topic, index) in repeated:
                outcomes[position] = E.invalid_request, named_twice("partition")
            elif election == UNCLEAN:
                outcomes[position] = _unclean(ctx, topic, index)
            else:
                outcomes[position] = await broker.elect_preferred_leader(topic, index, timeout_ms)

    await asyncio.gather(*(elect() for _ in range(MAX_CONCURRENT)))
    results: Results = []
    answers = (outcomes[position] for position in range(len(outcomes)))
    for topic, indexes in named:
        partitions = []
        for index in indexes:
            error, message = next(answers)
            if not (every and error is E.election_not_needed):
                partitions.append((index, error, message))
        results.append((topic, partitions))
    return await encode_off_loop(_answer, m, E.none, results)


def _unclean(ctx: RequestContext, topic: str, index: int) -> Outcome:
    info = ctx.broker.topic(topic)
    if info is None or not 0 <= index < len(info.partitions):
        return E.unknown_topic_or_partition, f"No such partition as {topic}-{index}"
    if info.partitions[index].leader >= 0:
        return E.election_not_needed, None
    return (
        E.eligible_leaders_not_available,
        "No leader: a Raft group elects one from a majority of its replicas; an unclean "
        "election would lose committed records",
    )


async def _everything_refused(
    m: ModuleType, named: list[tuple[str, list[int]]] | None, error: ErrorCode, message: str
) -> Any:
    """Kafka's ElectLeadersRequest.getErrorResponse: the request's error on every partition
    it names (none when it named none)."""
    results: Results = [
        (topic, [(i, error, message) for i in indexes]) for topic, indexes in named or ()
    ]
    return await encode_off_loop(_answer, m, error, results)


def _answer(m: ModuleType, error: ErrorCode, results: Results) -> Any:
    return build(
        m.ElectLeadersResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,
        replica_election_results=tuple(
            m.ReplicaElectionResult(
                topic=topic,
                partition_result=tuple(
                    m.PartitionResult(partition_id=i, error_code=code, error_message=message)
                    for i, code, message in partitions
                ),
            )
            for topic, partitions in results
        ),
    )
