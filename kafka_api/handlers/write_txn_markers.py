"""WriteTxnMarkers (27): commit or abort markers written on partitions this node leads. In
Kafka the transaction coordinator sends it to partition leaders; raftlog's coordinators do
that over the mesh (raftlog/txn/markers.py) and never through this API, so here it serves
one thing: an admin's abort of a hanging transaction (KIP-664: kafka-python's
`abort_transaction`, Java's `Admin.abortTransaction`), which names the producer and epoch
DescribeProducers showed.

Kafka's authorization: ALTER or CLUSTER_ACTION on the cluster (KIP-1037, Kafka 3.8+: an
admin's abort needs no inter-broker right; ALTER on the cluster already lets a principal
grant itself any ACL, so it adds no reach), else CLUSTER_AUTHORIZATION_FAILED for every
partition. Per partition UNKNOWN_TOPIC_OR_PARTITION for one the cluster does not have,
NOT_LEADER_OR_FOLLOWER for one this node does not lead.

Beyond Kafka, so that no client can end another producer's live transaction or fence its id
(Kafka lets any client with the right do both, and without an authorizer every client has
it):
- a COMMIT marker is INVALID_REQUEST: only a coordinator decides to commit;
- a producer with no transaction open on the partition is answered NONE and nothing is
  written (the abort has nothing to do; a marker then would only move the producer's epoch);
- the coordinators are asked what they hold of the producer (every `__transaction_state`
  leader, since the marker names no transactional id): a transaction they still run on the
  partition (ongoing there, or decided and its markers going out) is
  TRANSACTION_COORDINATOR_FENCED, Kafka's answer to a marker from a sender that is not the
  producer's current coordinator: the coordinator ends it itself. A marker epoch above the
  one they hold for the producer is INVALID_PRODUCER_EPOCH. COORDINATOR_NOT_AVAILABLE while
  they cannot say; a producer id no transactional id uses any more is a hanging
  transaction's, aborted at the epoch given;
- a transaction that began on the partition while they were asked is
  CONCURRENT_TRANSACTIONS (asked again, it is judged as itself).

Else the marker's own outcome (an epoch older than the producer's is INVALID_PRODUCER_EPOCH).
A partition is answered once its marker is committed, or REQUEST_TIMED_OUT after
MARKER_TIMEOUT_S (the marker may still land); a committed marker on `__consumer_offsets`
settles the transaction's offsets, as the coordinator's own markers do. v1 only: kio has no
v0, and v2's transaction version (KIP-890 part 2) is not offered. The same producer and
partition named twice is INVALID_REQUEST for every copy, and none of them is written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from types import ModuleType
from typing import Any

from kafka_api.authz import Op, authorize_cluster
from kafka_api.codec import build, response_module
from kafka_api.common import duplicates
from kafka_api.context import RequestContext
from kafka_api.entry_work import answer, off_loop, sliced
from raftlog.api.values import Partition
from raftlog.common.errors import ErrorCode
from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC

API_KEY = 27
MIN_VERSION = 1
MAX_VERSION = 1
# An answer before an admin client's own request timeout (30 s by default) gives up on it.
MARKER_TIMEOUT_S = 15.0

E = ErrorCode


Asked = list[tuple[Any, str, int]]  # (marker, topic, partition) in the request's order


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    markers = request.markers
    asked = await off_loop(len(markers), _asked, markers)
    if not (authorize_cluster(ctx, Op.ALTER) or authorize_cluster(ctx, Op.CLUSTER_ACTION)):
        errors = [E.cluster_authorization_failed] * len(asked)
        return await answer(len(asked), _answer, m, markers, errors)
    repeated = await off_loop(len(asked), _repeated, asked)
    errors = []
    aborts: dict[int, Awaitable[ErrorCode]] = {}
    # The partitions are the loop's: each is judged here, a slice at a time; only those with
    # a transaction of the producer open wait for its coordinators and a marker, all at once.
    async for position, (marker, name, index) in sliced(enumerate(asked)):
        if (marker.producer_id, name, index) in repeated:
            errors.append(E.invalid_request)
            continue
        found = _open(ctx, marker, name, index)
        if isinstance(found, ErrorCode):
            errors.append(found)
        else:
            errors.append(E.none)  # the abort's outcome replaces it
            aborts[position] = _abort(ctx, marker, name, index, *found)
    if aborts:
        for position, error in zip(aborts, await asyncio.gather(*aborts.values()), strict=True):
            errors[position] = error
    return await answer(len(asked), _answer, m, markers, errors)


def _asked(markers: Any) -> Asked:
    return [
        (marker, topic.name, index)
        for marker in markers
        for topic in marker.topics
        for index in topic.partition_indexes
    ]


def _repeated(asked: Asked) -> set[tuple[int, str, int]]:
    return duplicates((marker.producer_id, name, index) for marker, name, index in asked)


def _answer(m: ModuleType, markers: Any, errors: list[ErrorCode]) -> Any:
    found = iter(errors)
    return build(
        m.WriteTxnMarkersResponse,
        markers=tuple(
            m.WritableTxnMarkerResult(
                producer_id=marker.producer_id,
                topics=tuple(
                    m.WritableTxnMarkerTopicResult(
                        name=topic.name,
                        partitions=tuple(
                            m.WritableTxnMarkerPartitionResult(
                                partition_index=index, error_code=next(found)
                            )
                            for index in topic.partition_indexes
                        ),
                    )
                    for topic in marker.topics
                ),
            )
            for marker in markers
        ),
    )


def _open(
    ctx: RequestContext, marker: Any, name: str, index: int
) -> ErrorCode | tuple[Partition, int]:
    """The partition this node leads and the first offset of the producer's transaction open
    there, or the answer: there is nothing to abort, or no abort may be written."""
    topic = ctx.broker.topic(name)
    if topic is None or not 0 <= index < len(topic.partitions):
        return E.unknown_topic_or_partition
    if marker.producer_id < 0 or marker.transaction_result:  # no producer, or a commit
        return E.invalid_request
    partition = ctx.broker.local_partition(name, index)
    if partition is None or not partition.is_leader:
        return E.not_leader_or_follower
    start = partition.transaction_start(marker.producer_id)
    if start is None:
        return E.none  # nothing open here to abort
    return partition, start


async def _abort(
    ctx: RequestContext, marker: Any, name: str, index: int, partition: Partition, start: int
) -> ErrorCode:
    error, held = await ctx.broker.producer_held(marker.producer_id, name, index)
    if error != E.none:
        return error
    if held is not None and held.running:
        return E.transaction_coordinator_fenced
    if held is not None and marker.producer_epoch > held.epoch:
        return E.invalid_producer_epoch
    if not partition.is_leader:
        return E.not_leader_or_follower
    now = partition.transaction_start(marker.producer_id)
    if now is None:
        return E.none  # ended meanwhile
    if now != start:
        return E.concurrent_transactions
    try:
        result = await asyncio.wait_for(
            partition.write_marker(
                marker.producer_id, marker.producer_epoch, False, marker.coordinator_epoch
            ),
            MARKER_TIMEOUT_S,
        )
    except TimeoutError:
        return E.request_timed_out
    if result.error == E.none and name == OFFSETS_TOPIC:
        ctx.broker.groups.end_transaction(index, marker.producer_id, False)
    return result.error
