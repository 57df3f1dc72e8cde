"""ShareAcknowledge (79, KIP-932): acknowledgements without a fetch (commit_sync, or a poll
that fetches nothing). Epoch -1 acknowledges and closes the member's share session, which is
how librdkafka leaves: its acknowledgements are applied first, then what it still holds goes
back to the group. That holds whether its leave reached the group's coordinator first or not
(raftlog/share/manager.py member_left). Needs READ on the group (else the whole request is
refused) and on each topic."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, endpoints
from kafka_api.context import RequestContext
from kafka_api.handlers.share_ack import apply_acks, leader_of, settle_acks, targets
from raftlog.common.errors import ErrorCode

API_KEY = 79
MIN_VERSION = 1
MAX_VERSION = 2  # v2: RENEW acknowledgements (KIP-1222)


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    broker = ctx.broker
    group_id, member_id = request.group_id, request.member_id
    if not authorize(ctx, Op.READ, Resource.GROUP, group_id or ""):
        return _answer(m, ErrorCode.group_authorization_failed, (), ())
    if not group_id or not member_id:
        return _answer(m, ErrorCode.invalid_request, (), ())
    step = broker.share.sessions.for_acknowledge(group_id, member_id, request.share_session_epoch)
    if step.error is not ErrorCode.none:
        return _answer(m, step.error, (), ())
    found = targets(ctx, request.topics, renew_allowed=ctx.api_version >= 2)
    by_topic: dict[Any, list[Any]] = {}
    leaders: set[int] = set()
    for target in found.values():
        apply_acks(broker, group_id, member_id, target)
    if step.closing:  # its acknowledgements are applied (above): the rest goes back now
        broker.share.release(group_id, member_id)
    await settle_acks(found.values())
    for target in found.values():
        leader_id, leader_epoch = leader_of(broker, target, target.ack_error)
        if leader_id >= 0:
            leaders.add(leader_id)
        by_topic.setdefault(target.topic_id, []).append(
            m.PartitionData(
                partition_index=target.index,
                error_code=target.ack_error,
                current_leader=m.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch),
            )
        )
    responses = tuple(
        m.ShareAcknowledgeTopicResponse(topic_id=topic_id, partitions=tuple(partitions))
        for topic_id, partitions in by_topic.items()
    )
    nodes = tuple(
        m.NodeEndpoint(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
        for b in endpoints(broker, leaders)
    )
    return _answer(m, ErrorCode.none, responses, nodes, broker.share.lock_duration_ms(group_id))


def _answer(
    m: Any,
    error: ErrorCode,
    responses: tuple[Any, ...],
    nodes: tuple[Any, ...],
    lock_ms: int = 0,
) -> Any:
    return build(
        m.ShareAcknowledgeResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,
        acquisition_lock_timeout=timedelta(milliseconds=lock_ms),  # v2: what a RENEW gives
        responses=responses,
        node_endpoints=nodes,
    )
