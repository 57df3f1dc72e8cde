"""ElectLeaders (43): kafka-leader-election and the admin clients' elect_leaders.

PREFERRED (0) hands each partition's Raft leadership to its preferred replica, the first of
its replicas as Metadata lists them (raftlog/cluster/preferred_leaders.py): ELECTION_NOT_NEEDED where
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
from kafka_api.entry_work import Slices, off_loop
from raftlog.common.errors import ErrorCode

API_KEY = 43
MIN_VERSION = 0
MAX_VERSION = 2

E = ErrorCode
PREFERRED, UNCLEAN = 0, 1
# Elections run at once; the rest wait their turn within the same timeout.
MAX_CONCURRENT = 256

Outcome = tuple[ErrorCode, str | None]
Results = list[tuple[str, list[tuple[int, ErrorCode, str | None]]]]
Named = list[tuple[str, list[int]]]  # (topic, partition indexes) as asked


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    election = getattr(request, "election_type", PREFERRED)  # v0 elects the preferred only
    asked = request.topic_partitions
    named: Named | None = None if asked is None else await off_loop(len(asked), _named, asked)
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
    repeated = await off_loop(len(named), _repeated, named)
    timeout_ms = millis(request.timeout)
    todo = enumerate((topic, i) for topic, indexes in named for i in indexes)
    outcomes: dict[int, Outcome] = {}
    slices = Slices()

    async def elect() -> None:
        """One of MAX_CONCURRENT workers over the partitions: a task for each partition named
        would be a million tasks for a request naming a million. An answer found at once (an
        unknown topic) does not hand the loop back: the slices do."""
        for position, (topic, index) in todo:
            if (topic, index) in repeated:
                outcomes[position] = E.invalid_request, named_twice("partition")
            elif election == UNCLEAN:
                outcomes[position] = _unclean(ctx, topic, index)
            else:
                outcomes[position] = await broker.elect_preferred_leader(topic, index, timeout_ms)
            await slices.step()

    await asyncio.gather(*(elect() for _ in range(MAX_CONCURRENT)))
    return await encode_off_loop(_elected, m, named, outcomes, every)


def _named(asked: Any) -> Named:
    return [(t.topic, list(t.partitions)) for t in asked]


def _repeated(named: Named) -> set[tuple[str, int]]:
    return duplicates((topic, i) for topic, indexes in named for i in indexes)


def _elected(m: ModuleType, named: Named, outcomes: dict[int, Outcome], every: bool) -> Any:
    """The outcomes (by position) in the request's order; asked for every partition, those
    that needed no election are left out."""
    results: Results = []
    answers = (outcomes[position] for position in range(len(outcomes)))
    for topic, indexes in named:
        partitions = []
        for index in indexes:
            error, message = next(answers)
            if not (every and error is E.election_not_needed):
                partitions.append((index, error, message))
        results.append((topic, partitions))
    return _answer(m, E.none, results)


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
    m: ModuleType, named: Named | None, error: ErrorCode, message: str
) -> Any:
    """Kafka's ElectLeadersRequest.getErrorResponse: the request's error on every partition
    it names (none when it named none)."""
    return await encode_off_loop(_refused, m, named, error, message)


def _refused(m: ModuleType, named: Named | None, error: ErrorCode, message: str) -> Any:
    results: Results = [
        (topic, [(i, error, message) for i in indexes]) for topic, indexes in named or ()
    ]
    return _answer(m, error, results)


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
