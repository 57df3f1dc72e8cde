"""FindCoordinator (10): the node coordinating a group (its `__consumer_offsets` partition's
leader). v4+ asks for several keys at once; each gets its own answer.

Advertised from v0 up: librdkafka only compresses with lz4 when the broker advertises
FindCoordinator v1 or later (it takes that as "broker >= 0.11"). A key the principal may not
DESCRIBE (the group, or the transactional id) is refused before it is looked up.

Many keys cost one look per coordinator partition: the keys are authorized on the loop a slice
at a time, placed (hashed) in a thread, and answered from one look at each partition they
fall in (kafka_api/entry_work.py). Looking each key up on its own, in a task each, held the
loop a second for 10,000 keys and, before `__consumer_offsets` existed, asked for its creation
once per key.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from kafka_api.authz import DENIED_MESSAGES, Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from kafka_api.entry_work import answer, off_loop, sliced
from raftlog.api.broker import Broker
from raftlog.api.values import Coordinator
from raftlog.common.errors import ErrorCode

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

BATCHED_VERSION = 4
GROUP_KEY, TRANSACTION_KEY = 0, 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    key_type = getattr(request, "key_type", 0)
    if ctx.api_version < BATCHED_VERSION:
        found = _denied(ctx, request.key, key_type) or await ctx.broker.find_coordinator(
            request.key, key_type
        )
        return build(
            m.FindCoordinatorResponse,
            throttle_time=NO_THROTTLE,
            error_code=found.error,
            error_message=found.message,
            node_id=found.node_id,
            host=found.host,
            port=found.port,
        )
    keys: tuple[str, ...] = request.coordinator_keys
    placed = await off_loop(len(keys), _placed, ctx.broker, keys, key_type)
    answers: list[Coordinator | None] = []  # None: its partition's coordinator, found below
    async for key, index in sliced(zip(keys, placed, strict=True)):  # the ACLs are the loop's
        refused = _denied(ctx, key, key_type)
        if refused is None and index is None:  # find_coordinator says why, at once
            refused = await ctx.broker.find_coordinator(key, key_type)
        answers.append(refused)
    wanted = {i for i, a in zip(placed, answers, strict=True) if a is None and i is not None}
    leaders = await ctx.broker.coordinators(key_type, wanted) if wanted else {}
    return await answer(len(keys), _answer, m, keys, placed, answers, leaders)


def _placed(broker: Broker, keys: Sequence[str], key_type: int) -> list[int | None]:
    """Each key's coordinator partition (None: a key that cannot be placed)."""
    return [broker.coordinator_partition(key, key_type) for key in keys]


def _denied(ctx: RequestContext, key: str, key_type: int) -> Coordinator | None:
    denied = None
    if key_type == GROUP_KEY and not authorize(ctx, Op.DESCRIBE, Resource.GROUP, key):
        denied = ErrorCode.group_authorization_failed
    elif key_type == TRANSACTION_KEY and not authorize(
        ctx, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, key
    ):
        denied = ErrorCode.transactional_id_authorization_failed
    if denied is None:
        return None
    return Coordinator(denied, message=DENIED_MESSAGES[denied])


def _answer(
    m: ModuleType,
    keys: Sequence[str],
    placed: Sequence[int | None],
    answers: Sequence[Coordinator | None],
    leaders: dict[int, Coordinator],
) -> Any:
    coordinators = []
    for key, index, found in zip(keys, placed, answers, strict=True):
        if found is None:
            assert index is not None  # only a placed key waits for its partition's leader
            found = leaders[index]
        coordinators.append(
            build(
                m.Coordinator,
                key=key,
                node_id=found.node_id,
                host=found.host,
                port=found.port,
                error_code=found.error,
                error_message=found.message,
            )
        )
    return build(
        m.FindCoordinatorResponse, throttle_time=NO_THROTTLE, coordinators=tuple(coordinators)
    )
