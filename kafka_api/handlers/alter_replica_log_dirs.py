"""AlterReplicaLogDirs (34): moving a replica to another log directory of its broker
(kafka-reassign-partitions --replica-log-dirs). A raftlog node keeps every replica in its one
data directory (the one DescribeLogDirs reports), so there is never a move to make: each
partition is answered as Kafka's ReplicaManager.alterReplicaLogDirs answers it, NONE when the
directory named is the one the replica is in, LOG_DIR_NOT_FOUND for any other directory,
REPLICA_NOT_AVAILABLE for a partition this node holds no replica of, INVALID_TOPIC_EXCEPTION
for a name too long for Kafka's future-log directory. ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED on every partition. A partition named twice is INVALID_REQUEST.
The request's own checks run in a thread, whether a replica is here on the loop a slice at a
time (kafka_api/entry_work.py), and the answer is built and encoded in a thread.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from kafka_api.authz import Op, authorize_cluster
from kafka_api.codec import build, encode_off_loop, response_module
from kafka_api.common import NO_THROTTLE, duplicates
from kafka_api.context import RequestContext
from kafka_api.entry_work import sliced
from raftlog.common.errors import ErrorCode

API_KEY = 34
MIN_VERSION = 1  # Kafka 4's baseline; kio models no v0
MAX_VERSION = 2

E = ErrorCode
# Kafka's future-log directory "<topic>-<partition>.<32 hex digits>-future" must fit a file
# name (KAFKA-4893).
MAX_DIR_NAME = 255
_FUTURE_SUFFIX = len(".") + 32 + len("-future")

# (topic, partition, error) of each partition named, in the request's order; None: to be
# answered by whether this node holds a replica of it
Checked = list[tuple[str, int, ErrorCode | None]]


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not authorize_cluster(ctx, Op.ALTER):
        return await encode_off_loop(_denied, m, request.dirs)
    ours = {_normal(p) for d in ctx.broker.log_dirs() for p in (d.path, os.path.realpath(d.path))}
    # The request's own checks in a thread; whether a replica is here is the loop's to say.
    checked = await asyncio.to_thread(_checked, request.dirs, ours)
    local = ctx.broker.local_partition
    async for at, (topic, index, error) in sliced(enumerate(checked)):
        if error is None:
            error = E.replica_not_available if local(topic, index) is None else E.none
            checked[at] = (topic, index, error)  # E.none: already there
    return await encode_off_loop(_answer, m, checked)


def _checked(dirs: Sequence[Any], ours: set[str]) -> Checked:
    asked = [(d.path, t.name, i) for d in dirs for t in d.topics for i in t.partitions]
    repeated = duplicates((topic, index) for _, topic, index in asked)
    checked: Checked = []
    for path, topic, index in asked:
        error: ErrorCode | None = None
        if (topic, index) in repeated:
            error = E.invalid_request
        elif len(f"{topic}-{index}") + _FUTURE_SUFFIX > MAX_DIR_NAME:
            error = E.invalid_topic_exception
        elif _normal(path) not in ours:
            error = E.log_dir_not_found
        checked.append((topic, index, error))
    return checked


def _denied(m: ModuleType, dirs: Sequence[Any]) -> Any:
    error = E.cluster_authorization_failed
    return _answer(m, [(t.name, i, error) for d in dirs for t in d.topics for i in t.partitions])


def _normal(path: str) -> str:
    """A directory's absolute form, read without touching the file system (a request may name
    any number of them): ours is also given resolved, so its resolved form matches too."""
    return os.path.normpath(os.path.abspath(path))


def _answer(m: ModuleType, checked: Checked) -> Any:
    by_topic: dict[str, list[tuple[int, ErrorCode | None]]] = {}
    for topic, index, error in checked:
        by_topic.setdefault(topic, []).append((index, error))
    return build(
        m.AlterReplicaLogDirsResponse,
        throttle_time=NO_THROTTLE,
        results=tuple(
            m.AlterReplicaLogDirTopicResult(
                topic_name=topic,
                partitions=tuple(
                    m.AlterReplicaLogDirPartitionResult(partition_index=i, error_code=error)
                    for i, error in partitions
                ),
            )
            for topic, partitions in by_topic.items()
        ),
    )
