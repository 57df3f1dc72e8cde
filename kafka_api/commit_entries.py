"""The partitions of an OffsetCommit or TxnOffsetCommit: READ on each topic, and the topic
and partition must exist; one error per entry, in request order, and the commits to make."""

from __future__ import annotations

from typing import Any

from epoch import NO_EPOCH
from kafka_api.authz import Op, Resource, authorize
from kafka_api.context import RequestContext
from kafka_api.entry_work import by_topic
from raftlog.common.errors import ErrorCode
from raftlog.groups.results import CommitOffset


async def commit_entries(
    ctx: RequestContext, topics: Any
) -> tuple[list[ErrorCode], list[CommitOffset]]:
    """(errors, commits): for each partition asked for, NONE if it is to be committed, else
    why not; and the commits. The ACLs and topics are the loop's: the entries are judged on
    it, a slice at a time, each topic once."""
    errors: list[ErrorCode] = []
    commits: list[CommitOffset] = []

    def judge(topic: Any) -> tuple[bool, Any]:
        return authorize(ctx, Op.READ, Resource.TOPIC, topic.name), ctx.broker.topic(topic.name)

    async for topic, p, (readable, info) in by_topic(topics, judge):
        if not readable:
            errors.append(ErrorCode.topic_authorization_failed)
            continue
        if info is None or not 0 <= p.partition_index < len(info.partitions):
            errors.append(ErrorCode.unknown_topic_or_partition)
            continue
        errors.append(ErrorCode.none)
        commits.append(
            CommitOffset(
                topic.name,
                p.partition_index,
                p.committed_offset,
                getattr(p, "committed_leader_epoch", NO_EPOCH),
                p.committed_metadata,
            )
        )
    return errors, commits
