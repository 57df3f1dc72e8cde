"""FindCoordinator (10): the node coordinating a group (its `__consumer_offsets` partition's
leader). v4+ asks for several keys at once; each gets its own answer.

Advertised from v0 up: librdkafka only compresses with lz4 when the broker advertises
FindCoordinator v1 or later (it takes that as "broker >= 0.11").
"""

from __future__ import annotations

import asyncio
from typing import Any

from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

BATCHED_VERSION = 4


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    key_type = getattr(request, "key_type", 0)
    if ctx.api_version < BATCHED_VERSION:
        answer = await ctx.broker.find_coordinator(request.key, key_type)
        return build(
            m.FindCoordinatorResponse,
            throttle_time=NO_THROTTLE,
            error_code=answer.error,
            error_message=answer.message,
            node_id=answer.node_id,
            host=answer.host,
            port=answer.port,
        )
    keys = request.coordinator_keys
    answers = await asyncio.gather(*(ctx.broker.find_coordinator(k, key_type) for k in keys))
    coordinators = tuple(
        build(
            m.Coordinator,
            key=key,
            node_id=answer.node_id,
            host=answer.host,
            port=answer.port,
            error_code=answer.error,
            error_message=answer.message,
        )
        for key, answer in zip(keys, answers, strict=True)
    )
    return build(m.FindCoordinatorResponse, throttle_time=NO_THROTTLE, coordinators=coordinators)
