"""ListPartitionReassignments (46): the reassignments in progress. raftlog starts none
(alter_partition_reassignments.py), so the answer lists none, for the partitions named or
(null) for all, as Kafka answers a cluster with nothing moving. DESCRIBE on the cluster,
else CLUSTER_AUTHORIZATION_FAILED."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, authorize_cluster
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from raftlog.errors import ErrorCode

API_KEY = 46
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    allowed = authorize_cluster(ctx, Op.DESCRIBE)
    return build(
        m.ListPartitionReassignmentsResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none if allowed else ErrorCode.cluster_authorization_failed,
        error_message=None,
        topics=(),
    )
