"""DescribeLogDirs (35): the partition replicas in this node's data directory, their sizes and
lag, and the volume's capacity (v4+). Needs DESCRIBE on the cluster."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, authorize_cluster
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from raftlog.api.values import LogDirInfo
from raftlog.common.errors import ErrorCode

API_KEY = 35
MIN_VERSION = 1  # Kafka 4's baseline; kio models no v0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    if not authorize_cluster(ctx, Op.DESCRIBE):
        return build(
            m.DescribeLogDirsResponse,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results=(),
        )
    # Null asks for every replica; otherwise exactly the listed partitions, as Kafka does.
    wanted = (
        None
        if request.topics is None
        else {(topic.topic, index) for topic in request.topics for index in topic.partitions}
    )
    return build(
        m.DescribeLogDirsResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        results=tuple(_result(m, directory, wanted) for directory in ctx.broker.log_dirs()),
    )


def _result(m: Any, directory: LogDirInfo, wanted: set[tuple[str, int]] | None) -> Any:
    topics: dict[str, list[Any]] = {}
    for replica in directory.replicas:
        if wanted is not None and (replica.topic, replica.partition) not in wanted:
            continue
        topics.setdefault(replica.topic, []).append(
            build(
                m.DescribeLogDirsPartition,
                partition_index=replica.partition,
                partition_size=replica.size,
                offset_lag=replica.offset_lag,
                is_future_key=False,
            )
        )
    return build(
        m.DescribeLogDirsResult,
        error_code=ErrorCode.none,
        log_dir=directory.path,
        topics=tuple(
            build(m.DescribeLogDirsTopic, name=name, partitions=tuple(partitions))
            for name, partitions in topics.items()
        ),
        total_bytes=directory.total_bytes,
        usable_bytes=directory.usable_bytes,
    )
