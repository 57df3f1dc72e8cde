"""ShareFetch (78, KIP-932): a share consumer's fetch. It acknowledges what the member says it
is done with, then hands it records of the partitions in its share session that this node
leads: each offset to one member at a time, under a lock that expires (records come back) and
with a delivery count. A session epoch orders the member's requests (raftlog/share/sessions);
only a member that joined the group by ShareGroupHeartbeat opens one (epoch 0), else the
request gets UNKNOWN_MEMBER_ID (raftlog/share/members); it ends with the member's final
request or with the connection that opened it. A member that left its group may
still acknowledge in its session until its final request (acknowledgements on their way when
it closed are applied), but is handed nothing more. Needs READ on the group (else the whole
request is refused) and on each topic."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, endpoints, millis
from kafka_api.context import RequestContext
from kafka_api.handlers.share_ack import (
    Target,
    apply_acks,
    leader_of,
    resolve,
    settle_acks,
    targets,
)
from raftlog.api.broker import Broker
from raftlog.api.values import Partition
from raftlog.common.errors import ErrorCode
from raftlog.share.manager import Fetched
from raftlog.share.sessions import INITIAL_EPOCH, Key

API_KEY = 78
MIN_VERSION = 1
MAX_VERSION = 2  # v2: lock renewal (KIP-1222) and record-limit acquisition
RECORD_LIMIT = 1  # share_acquire_mode: max_records exact (0: whole batches)


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    broker = ctx.broker
    group_id, member_id = request.group_id, request.member_id
    if not authorize(ctx, Op.READ, Resource.GROUP, group_id or ""):
        return _refused(m, ErrorCode.group_authorization_failed, None)
    if not group_id or not member_id:
        return _refused(m, ErrorCode.invalid_request, "group id and member id are required")
    if request.share_session_epoch == INITIAL_EPOCH:
        refused = await broker.share.is_member(group_id, member_id)
        if refused is not ErrorCode.none:
            return _refused(m, refused, _why_not_opened(refused))
    found = targets(ctx, request.topics, renew_allowed=ctx.api_version >= 2)
    forgotten: list[Key] = []
    for topic in request.forgotten_topics_data:
        info = broker.topic_by_id(topic.topic_id) if topic.topic_id else None
        if info is not None:
            forgotten.extend((info.name, index) for index in topic.partitions)
    step = broker.share.sessions.for_fetch(
        group_id,
        member_id,
        request.share_session_epoch,
        # only partitions that exist: a session lives across requests, and what it holds must
        # stay within what the cluster has, whatever indexes a client names
        [
            t.key
            for t in found.values()
            if t.topic is not None
            and 0 <= t.index < len(t.topic.partitions)
            and t.error is not ErrorCode.invalid_topic_exception
        ],
        forgotten,
        has_acks=any(t.acked for t in found.values()),
        acks_only=all(t.acked for t in found.values()),
        connection=ctx.connection,
    )
    if step.error is not ErrorCode.none or step.session is None:
        return _refused(m, step.error, None)
    if request.share_session_epoch == INITIAL_EPOCH and ctx.connection is not None:
        # the session ends with this connection, as in Kafka (a killed consumer sends no
        # final request): what its member holds goes back at once, not at its locks' end
        connection = ctx.connection
        connection.on_close("share", lambda: broker.share.connection_closed(connection))
    for target in found.values():
        apply_acks(broker, group_id, member_id, target)
    fetched: dict[Key, Fetched] = {}
    if step.closing:
        broker.share.release(group_id, member_id)  # after its acknowledgements, above
    elif not getattr(request, "is_renew_ack", False) and not step.session.left:
        # a renewal only renews; a member that left its group only acknowledges
        led: list[tuple[Key, Partition]] = []
        for key in sorted(step.session.partitions):
            held = _session_target(ctx, key, found)
            if held is not None and held.partition is not None:
                led.append((key, held.partition))
        fetched = await broker.share.fetch(
            group_id,
            member_id,
            led,
            millis(request.max_wait) / 1000,
            min(request.max_bytes, broker.fetch_max_bytes),
            request.max_records,
            getattr(request, "share_acquire_mode", 0) == RECORD_LIMIT,
        )
    await settle_acks(found.values())
    return _response(m, broker, group_id, found, fetched)


def _session_target(ctx: RequestContext, key: Key, found: dict[Any, Target]) -> Target | None:
    """The session's partition as this request sees it (named in it or not); None once its
    topic is gone."""
    topic = ctx.broker.topic(key[0])
    if topic is None:
        return None
    target = found.get((topic.topic_id, key[1]))
    if target is None:
        target = found[(topic.topic_id, key[1])] = Target(topic.topic_id, key[1], topic)
        resolve(ctx, target)
    return target


def _response(
    m: Any, broker: Broker, group_id: str, found: dict[Any, Target], fetched: dict[Key, Fetched]
) -> Any:
    by_topic: dict[Any, list[Any]] = {}
    leaders: set[int] = set()
    for target in found.values():
        got = fetched.get(target.key)
        if got is None and not target.acked and target.error is ErrorCode.none:
            continue  # nothing to say about it this time (Kafka leaves such partitions out)
        leader_id, leader_epoch = leader_of(broker, target, target.error)
        if leader_id >= 0:
            leaders.add(leader_id)
        by_topic.setdefault(target.topic_id, []).append(
            m.PartitionData(
                partition_index=target.index,
                error_code=target.error,
                acknowledge_error_code=int(target.ack_error),
                current_leader=m.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch),
                records=got.records if got is not None else b"",  # never null: librdkafka
                acquired_records=tuple(
                    m.AcquiredRecords(
                        first_offset=r.first_offset,
                        last_offset=r.last_offset,
                        delivery_count=r.delivery_count,
                    )
                    for r in (got.acquired if got is not None else ())
                ),
            )
        )
    return build(
        m.ShareFetchResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        acquisition_lock_timeout=timedelta(milliseconds=broker.share.lock_duration_ms(group_id)),
        responses=tuple(
            m.ShareFetchableTopicResponse(topic_id=topic_id, partitions=tuple(partitions))
            for topic_id, partitions in by_topic.items()
        ),
        node_endpoints=tuple(
            m.NodeEndpoint(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in endpoints(broker, leaders)
        ),
    )


def _why_not_opened(error: ErrorCode) -> str:
    if error is ErrorCode.unknown_member_id:
        return "not a member of the share group: a session opens once it joins by heartbeat"
    if error is ErrorCode.share_session_limit_reached:
        return "too many share sessions are being opened on this node at once"
    return "the share group's coordinator cannot be asked about the member now"


def _refused(m: Any, error: ErrorCode, message: str | None) -> Any:
    """A request refused whole: the client resets its session (epoch 0) and starts over."""
    return build(
        m.ShareFetchResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,
        error_message=message,
        acquisition_lock_timeout=timedelta(0),
        responses=(),
        node_endpoints=(),
    )
