"""The partitions of an OffsetCommit or TxnOffsetCommit: READ on each topic, and the topic
and partition must exist; one error per entry, in request order, and the commits to make."""

from __future__ import annotations

from typing import Any

from epoch import NO_EPOCH
from kafka_api.authz import Op, Resource, authorized
from kafka_api.context import RequestContext
from raftlog.errors import ErrorCode
from raftlog.groups.results import CommitOffset


def commit_entries(ctx: RequestContext, topics: Any) -> tuple[list[ErrorCode], list[CommitOffset]]:
    """(errors, commits): for each partition asked for, NONE if it is to be committed, else
    why not; and the commits."""
    entries = [(topic.name, p) for topic in topics for p in topic.partitions]
    readable = authorized(ctx, Op.READ, Resource.TOPIC, (t.name for t in topics))
    errors: list[ErrorCode] = []
    commits: list[CommitOffset] = []
    for name, p in entries:
        topic = ctx.broker.topic(name)
        if name not in readable:
            errors.append(ErrorCode.topic_authorization_failed)
            continue
        if topic is None or not 0 <= p.partition_index < len(topic.partitions):
            errors.append(ErrorCode.unknown_topic_or_partition)
            continue
        errors.append(ErrorCode.none)
        commits.append(
            CommitOffset(
                name,
                p.partition_index,
                p.committed_offset,
                getattr(p, "committed_leader_epoch", NO_EPOCH),
                p.committed_metadata,
            )
        )
    return errors, commits
