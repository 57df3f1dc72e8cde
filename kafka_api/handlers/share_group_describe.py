"""ShareGroupDescribe (77, KIP-932): a share group's state, epochs, assignor and members with
their subscriptions and assigned partitions, answered by the group's coordinator (admin
clients send it there after FindCoordinator, as for DescribeGroups). Each group needs
DESCRIBE, else GROUP_AUTHORIZATION_FAILED and nothing of it; a group with a topic (subscribed
or assigned) the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED, and nothing of it
either (KAFKA-18817, Kafka 4.1). Every copy of a group named twice is INVALID_REQUEST and
not described."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, Resource, authorized, authorized_operations
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, duplicates, named_twice
from kafka_api.context import RequestContext
from raftlog.errors import ErrorCode
from raftlog.share.membership import ShareGroupDescription

API_KEY = 77
MIN_VERSION = 1  # the version Kafka 4.1+ and its admin clients speak
MAX_VERSION = 1
UNKNOWN_AUTHORIZED_OPERATIONS = -(2**31)  # Kafka's INT32_MIN: not asked for, or unknown
HIDDEN_TOPICS = "The group has described topic(s) that the client is not authorized to describe."


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    include_operations = getattr(request, "include_authorized_operations", False)
    repeated = duplicates(request.group_ids)
    allowed = authorized(
        ctx, Op.DESCRIBE, Resource.GROUP, (g for g in request.group_ids if g not in repeated)
    )
    described = iter(
        ctx.broker.groups.describe_share_groups([g for g in request.group_ids if g in allowed])
    )
    groups = []
    for requested in request.group_ids:
        outcome: tuple[str, ErrorCode, str | None, ShareGroupDescription | None]
        if requested in repeated:
            outcome = (requested, ErrorCode.invalid_request, named_twice("group"), None)
        elif requested in allowed:
            outcome = next(described)
        else:
            outcome = (requested, ErrorCode.group_authorization_failed, None, None)
        group_id, error, message, found = outcome
        if found is not None and not _topics_describable(ctx, found):
            error, message, found = ErrorCode.topic_authorization_failed, HIDDEN_TOPICS, None
        members = ()
        if found is not None:
            members = tuple(
                build(
                    m.Member,
                    member_id=x.member_id,
                    rack_id=x.rack_id,
                    member_epoch=x.member_epoch,
                    client_id=x.client_id,
                    client_host=x.client_host,
                    subscribed_topic_names=x.subscribed_topic_names,
                    assignment=m.Assignment(topic_partitions=_partitions(ctx, m, x.assignment)),
                )
                for x in found.members
            )
        groups.append(
            build(
                m.DescribedGroup,
                error_code=error,
                error_message=message,
                group_id=group_id,
                group_state=found.state if found is not None else "Dead",
                group_epoch=found.group_epoch if found is not None else -1,
                assignment_epoch=found.assignment_epoch if found is not None else -1,
                assignor_name=found.assignor_name if found is not None else "",
                members=members,
                authorized_operations=(
                    authorized_operations(ctx, Resource.GROUP, group_id)
                    if include_operations and error is ErrorCode.none
                    else UNKNOWN_AUTHORIZED_OPERATIONS
                ),
            )
        )
    return build(m.ShareGroupDescribeResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))


def _partitions(
    ctx: RequestContext, m: Any, assignment: dict[str, tuple[int, ...]]
) -> tuple[Any, ...]:
    described = []
    for name, partitions in sorted(assignment.items()):
        topic = ctx.broker.topic(name)
        if topic is not None:  # deleted since it was assigned
            described.append(
                m.TopicPartitions(topic_id=topic.topic_id, topic_name=name, partitions=partitions)
            )
    return tuple(described)


def _topics_describable(ctx: RequestContext, group: ShareGroupDescription) -> bool:
    topics = {name for x in group.members for name in (*x.subscribed_topic_names, *x.assignment)}
    return len(authorized(ctx, Op.DESCRIBE, Resource.TOPIC, topics)) == len(topics)
