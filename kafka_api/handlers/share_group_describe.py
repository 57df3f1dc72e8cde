"""ShareGroupDescribe (77, KIP-932): a share group's state, epochs, assignor and members with
their subscriptions and assigned partitions, answered by the group's coordinator (admin
clients send it there after FindCoordinator, as for DescribeGroups). Each group needs
DESCRIBE, else GROUP_AUTHORIZATION_FAILED and nothing of it; a group with a topic (subscribed
or assigned) the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED, and nothing of it
either (KAFKA-18817, Kafka 4.1). Every copy of a group named twice is INVALID_REQUEST and
not described. The groups are authorized, described and their topics looked up on the loop a
slice at a time; repeats are counted, and the answer to more than a thousand built and
encoded, in a thread (kafka_api/entry_work.py)."""

from __future__ import annotations

import uuid
from types import ModuleType
from typing import Any

from kafka_api.authz import Op, Resource, authorize, authorized, authorized_operations
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, duplicates, named_twice
from kafka_api.context import RequestContext
from kafka_api.entry_work import answer, off_loop, sliced
from raftlog.common.errors import ErrorCode
from raftlog.share.membership import ShareGroupDescription

API_KEY = 77
MIN_VERSION = 1  # the version Kafka 4.1+ and its admin clients speak
MAX_VERSION = 1
UNKNOWN_AUTHORIZED_OPERATIONS = -(2**31)  # Kafka's INT32_MIN: not asked for, or unknown
HIDDEN_TOPICS = "The group has described topic(s) that the client is not authorized to describe."

# (group, error, message, description, the ids of its assigned topics that still exist,
# authorized operations) of each group answered
Described = tuple[
    str, ErrorCode, str | None, ShareGroupDescription | None, dict[str, uuid.UUID], int
]


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    include_operations = getattr(request, "include_authorized_operations", False)
    ids: tuple[str, ...] = request.group_ids
    repeated = await off_loop(len(ids), duplicates, ids)
    coordinator = ctx.broker.groups
    described: list[Described] = []
    # The ACLs, the groups and the topics are the loop's.
    async for group_id in sliced(ids):
        found: ShareGroupDescription | None = None
        message: str | None
        if group_id in repeated:
            error, message = ErrorCode.invalid_request, named_twice("group")
        elif authorize(ctx, Op.DESCRIBE, Resource.GROUP, group_id):
            error, message, found = coordinator.describe_share_group(group_id)
        else:
            error, message = ErrorCode.group_authorization_failed, None
        if found is not None and not _topics_describable(ctx, found):
            error, message, found = ErrorCode.topic_authorization_failed, HIDDEN_TOPICS, None
        operations = UNKNOWN_AUTHORIZED_OPERATIONS
        if include_operations and error is ErrorCode.none:
            operations = authorized_operations(ctx, Resource.GROUP, group_id)
        described.append((group_id, error, message, found, _topic_ids(ctx, found), operations))
    # A ShareGroupDescription is a snapshot, its assignments copies.
    return await answer(len(ids), _answer, m, described)


def _topic_ids(ctx: RequestContext, group: ShareGroupDescription | None) -> dict[str, uuid.UUID]:
    """The ids of the topics assigned in the group that still exist."""
    ids: dict[str, uuid.UUID] = {}
    if group is None:
        return ids
    for name in {name for x in group.members for name in x.assignment}:
        topic = ctx.broker.topic(name)
        if topic is not None:  # deleted since it was assigned
            ids[name] = topic.topic_id
    return ids


def _topics_describable(ctx: RequestContext, group: ShareGroupDescription) -> bool:
    topics = {name for x in group.members for name in (*x.subscribed_topic_names, *x.assignment)}
    return len(authorized(ctx, Op.DESCRIBE, Resource.TOPIC, topics)) == len(topics)


def _answer(m: ModuleType, described: list[Described]) -> Any:
    groups = []
    for group_id, error, message, found, topic_ids, operations in described:
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
                    assignment=m.Assignment(
                        topic_partitions=tuple(
                            m.TopicPartitions(
                                topic_id=topic_ids[name], topic_name=name, partitions=partitions
                            )
                            for name, partitions in sorted(x.assignment.items())
                            if name in topic_ids
                        )
                    ),
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
                authorized_operations=operations,
            )
        )
    return build(m.ShareGroupDescribeResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))
