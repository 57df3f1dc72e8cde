"""DescribeQuorum (55): kafka-metadata-quorum describe. raftlog's controller is a Raft group
(pysyncobj), the counterpart of KRaft's `__cluster_metadata` quorum, and is described as one
(raftlog/cluster/controller_quorum.py): its leader, term (the leader epoch), commit index (the high
watermark) and each voter's and observer's log end offset (the nodes beyond the controller's
voters observe, controller/voters.py). Timestamps of the last fetch
and catch-up are not kept (-1), nor are voters' directory ids (zero) or their endpoints (v2's
nodes: empty).

As Kafka's KafkaRaftClient: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED; a
request for anything but `__cluster_metadata` partition 0 is UNKNOWN_TOPIC_OR_PARTITION on
every partition it names (that answer, as long as the request, built and encoded in a
thread); while no leader answers, NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from kafka_api.authz import DENIED_MESSAGES, Op, authorize_cluster
from kafka_api.codec import build, encode_off_loop, response_module
from kafka_api.context import RequestContext
from raftlog.cluster.controller_quorum import QuorumState
from raftlog.common.errors import ErrorCode

API_KEY = 55
MIN_VERSION = 0
MAX_VERSION = 2

E = ErrorCode
METADATA_TOPIC = "__cluster_metadata"
# Kafka's Errors.*.message() for the partition errors it sets.
_MESSAGES = {
    E.unknown_topic_or_partition: "This server does not host this topic-partition.",
    E.not_leader_or_follower: "For requests intended only for the leader, this error indicates "
    "that the broker is not the current leader. For requests intended for any replica, this "
    "error indicates that the broker is not a replica of the topic partition.",
}


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not authorize_cluster(ctx, Op.DESCRIBE):
        error = E.cluster_authorization_failed
        return _response(m, error, DENIED_MESSAGES[error], ())
    topics = request.topics
    if not _asks_for_the_quorum(topics):
        # as many answers as the request names partitions: built and encoded in a thread
        return await encode_off_loop(_unknown, m, topics)
    state = await ctx.broker.describe_quorum()
    partition = _error(m, 0, E.not_leader_or_follower) if state is None else _described(m, state)
    return _response(
        m, E.none, None, (m.TopicData(topic_name=METADATA_TOPIC, partitions=(partition,)),)
    )


def _asks_for_the_quorum(topics: Sequence[Any]) -> bool:
    """Does the request name `__cluster_metadata` partition 0, and nothing else?"""
    if len(topics) != 1 or topics[0].topic_name != METADATA_TOPIC:
        return False
    partitions = topics[0].partitions
    return len(partitions) == 1 and partitions[0].partition_index == 0


def _unknown(m: ModuleType, topics: Sequence[Any]) -> Any:
    """UNKNOWN_TOPIC_OR_PARTITION on every partition named."""
    error = E.unknown_topic_or_partition
    return _response(
        m,
        E.none,
        None,
        tuple(
            m.TopicData(
                topic_name=t.topic_name,
                partitions=tuple(_error(m, p.partition_index, error) for p in t.partitions),
            )
            for t in topics
        ),
    )


def _response(m: ModuleType, error: ErrorCode, message: str | None, topics: tuple[Any, ...]) -> Any:
    return build(
        m.DescribeQuorumResponse, error_code=error, error_message=message, topics=topics, nodes=()
    )


def _error(m: ModuleType, index: int, error: ErrorCode) -> Any:
    return build(
        m.PartitionData,
        partition_index=index,
        error_code=error,
        error_message=_MESSAGES.get(error),
        leader_id=-1,
        leader_epoch=-1,
        high_watermark=-1,
        current_voters=(),
        observers=(),
    )


def _described(m: ModuleType, state: QuorumState) -> Any:
    return build(
        m.PartitionData,
        partition_index=0,
        error_code=E.none,
        error_message=None,
        leader_id=state.leader_id,
        leader_epoch=state.leader_epoch,
        high_watermark=state.high_watermark,
        current_voters=tuple(_replica(m, node_id, log_end) for node_id, log_end in state.voters),
        observers=tuple(_replica(m, node_id, log_end) for node_id, log_end in state.observers),
    )


def _replica(m: ModuleType, node_id: int, log_end: int) -> Any:
    return build(
        m.ReplicaState,
        replica_id=node_id,
        replica_directory_id=None,
        log_end_offset=log_end,
        last_fetch_timestamp=-1,
        last_caught_up_timestamp=-1,
    )
