"""FindCoordinator (10): the node coordinating a group (its `__consumer_offsets` partition's
leader). v4+ asks for several keys at once; each gets its own answer.

Advertised from v0 up: librdkafka only compresses with lz4 when the broker advertises
FindCoordinator v1 or later (it takes that as "broker >= 0.11"). A key the principal may not
DESCRIBE (the group, or the transactional id) is refused before it is looked up.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kafka_api.authz import DENIED_MESSAGES, Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from raftlog.broker import Coordinator
from raftlog.errors import ErrorCode

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

BATCHED_VERSION = 4
GROUP_KEY, TRANSACTION_KEY = 0, 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    key_type = getattr(request, "key_type", 0)
    if ctx.api_version < BATCHED_VERSION:
        answer = await _find(ctx, request.key, key_type)
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
    answers = await asyncio.gather(*(_find(ctx, k, key_type) for k in keys))
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


async def _find(ctx: RequestContext, key: str, key_type: int) -> Coordinator:
    denied = None
    if key_type == GROUP_KEY and not authorize(ctx, Op.DESCRIBE, Resource.GROUP, key):
        denied = ErrorCode.group_authorization_failed
    elif key_type == TRANSACTION_KEY and not authorize(
        ctx, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, key
    ):
        denied = ErrorCode.transactional_id_authorization_failed
    if denied is not None:
        return Coordinator(denied, message=DENIED_MESSAGES[denied])
    return await ctx.broker.find_coordinator(key, key_type)
