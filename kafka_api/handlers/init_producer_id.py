"""InitProducerId (22): producer ids for idempotent producers (KIP-98, KIP-360).

kafka-python 3 and the Java client (3.0+) enable idempotence by default and will not send
a record without one. Transactional ids are refused: raftlog has no transaction coordinator.
"""

from __future__ import annotations

from typing import Any

from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    error, producer_id, epoch = await ctx.broker.init_producer_id(
        request.transactional_id,
        getattr(request, "producer_id", -1),
        getattr(request, "producer_epoch", -1),
    )
    return build(
        m.InitProducerIdResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,
        producer_id=producer_id,
        producer_epoch=epoch,
    )
