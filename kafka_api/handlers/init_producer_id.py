"""InitProducerId (22): producer ids for idempotent producers (KIP-98, KIP-360), and for
transactional ones from their transaction coordinator.

kafka-python 3 and the Java client (3.0+) enable idempotence by default and will not send
a record without one. Authorization as Kafka's (KIP-679): WRITE on the transactional id when
one is given, else IDEMPOTENT_WRITE on the cluster or WRITE on at least one topic. Below v4 a
fenced producer is told INVALID_PRODUCER_EPOCH, the only code those clients know for it.
"""

from __future__ import annotations

from typing import Any

from kafka_api.authz import Op, Resource, authorize, authorize_by_resource_type, authorize_cluster
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, fenced_as
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5
FENCED_SINCE = 4  # the first version whose clients know PRODUCER_FENCED


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    denied = _denied(ctx, request.transactional_id)
    error, producer_id, epoch = (
        (denied, -1, -1)
        if denied is not None
        else await ctx.broker.init_producer_id(
            request.transactional_id,
            int(request.transaction_timeout.total_seconds() * 1000),
            getattr(request, "producer_id", -1),
            getattr(request, "producer_epoch", -1),
        )
    )
    error = fenced_as(error, ctx.api_version, FENCED_SINCE)
    return build(
        m.InitProducerIdResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,
        producer_id=producer_id,
        producer_epoch=epoch,
    )


def _denied(ctx: RequestContext, transactional_id: str | None) -> ErrorCode | None:
    if transactional_id is not None:
        if authorize(ctx, Op.WRITE, Resource.TRANSACTIONAL_ID, transactional_id):
            return None
        return ErrorCode.transactional_id_authorization_failed
    if authorize_cluster(ctx, Op.IDEMPOTENT_WRITE) or authorize_by_resource_type(
        ctx, Op.WRITE, Resource.TOPIC
    ):
        return None
    return ErrorCode.cluster_authorization_failed
