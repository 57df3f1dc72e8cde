"""Kafka's rules for who may change a classic group's offsets, as pure functions of the group:
an OffsetCommit's or TxnOffsetCommit's member and generation (commit_error), and the topics
its members subscribe to, which OffsetDelete leaves alone (subscribed_topics)."""

from __future__ import annotations

from raftlog.common.errors import ErrorCode
from raftlog.groups.group import Group, GroupState
from raftlog.groups.records import subscription_topics

E = ErrorCode


def commit_error(
    group: Group,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None,
    txn: bool = False,
) -> ErrorCode:
    """Kafka's order: only members of the current generation may commit, except a standalone
    consumer (generation < 0) while the group is Empty. A transactional commit (`txn`) that
    names no member is taken in any state: TxnOffsetCommit below v3 has no member fields
    (aiokafka sends only v0), so its producer cannot name the group's member. Nor is one
    refused for a rebalance that is completing (Kafka's ClassicGroup.validateOffsetCommit)."""
    if group.state is GroupState.DEAD:
        return E.coordinator_not_available
    if group_instance_id is not None:
        known = group.static_members.get(group_instance_id)
        if known is not None and known != member_id:
            return E.fenced_instance_id
    if generation_id < 0 and group.state is GroupState.EMPTY:
        return E.none
    if txn and generation_id < 0 and not member_id and group_instance_id is None:
        return E.none
    if group.state is GroupState.COMPLETING_REBALANCE and not txn:
        return E.rebalance_in_progress
    if member_id not in group.members:
        return E.unknown_member_id
    if generation_id != group.generation:
        return E.illegal_generation
    return E.none


def subscribed_topics(group: Group) -> set[str] | None:
    """The topics the members' subscriptions name (Kafka's ClassicGroup.subscribedTopics);
    None when a subscription cannot be read, which Kafka takes as subscribed to every topic."""
    topics: set[str] = set()
    for member in group.members.values():
        data = member.metadata(group.protocol_name) if group.protocol_name else b""
        if not data and member.protocols:
            data = member.protocols[0][1]
        try:
            topics.update(subscription_topics(data))
        except ValueError:
            return None
    return topics
