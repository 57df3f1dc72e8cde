"""DescribeCluster (60): the admin clients' view of brokers and controller. Open to every
principal, as in Kafka; the operations it may do on the cluster are reported when asked for,
to a principal that may DESCRIBE the cluster (0 to one that may not)."""

from __future__ import annotations

from typing import Any

from kafka_api.authz import CLUSTER, Op, Resource, authorize_cluster, authorized_operations
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, UNKNOWN_AUTHORIZED_OPERATIONS
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode

API_KEY = 60
MIN_VERSION = 0
MAX_VERSION = 2

BROKERS_ENDPOINT = 1  # the only endpoint type raftlog has (2 would be KRaft controllers)


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    broker = ctx.broker
    endpoint_type = getattr(request, "endpoint_type", BROKERS_ENDPOINT)
    if endpoint_type != BROKERS_ENDPOINT:
        return build(
            m.DescribeClusterResponse,
            throttle_time=NO_THROTTLE,
            error_code=ErrorCode.unsupported_endpoint_type,
            error_message=f"Endpoint type {endpoint_type} is not supported",
            cluster_id=broker.cluster_id,
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=UNKNOWN_AUTHORIZED_OPERATIONS,
            endpoint_type=endpoint_type,
        )
    cluster_operations = UNKNOWN_AUTHORIZED_OPERATIONS
    if request.include_cluster_authorized_operations:
        cluster_operations = (
            authorized_operations(ctx, Resource.CLUSTER, CLUSTER)
            if authorize_cluster(ctx, Op.DESCRIBE)
            else 0
        )
    brokers = tuple(
        build(
            m.DescribeClusterBroker,
            broker_id=b.node_id,
            host=b.host,
            port=b.port,
            rack=b.rack,
            is_fenced=False,
        )
        for b in broker.client_brokers()
    )
    return build(
        m.DescribeClusterResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id(),
        brokers=brokers,
        cluster_authorized_operations=cluster_operations,
        endpoint_type=endpoint_type,
    )
