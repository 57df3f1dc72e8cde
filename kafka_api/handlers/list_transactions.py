"""ListTransactions (66): the transactional ids this node coordinates (admin clients ask every
broker), filtered by state names and producer ids, and from v1 by duration: only
transactions that started more than `duration_filter` ms ago. A state name Kafka does not
know is returned in unknown_state_filters (and matches nothing). Only the ids the principal
may DESCRIBE are listed. While a `__transaction_state` partition this node leads is still
being loaded, the answer is COORDINATOR_LOAD_IN_PROGRESS, as Kafka's, not a partial list.

v0-v1: v2's transactional_id_pattern is a client's regular expression, which Python's `re`
would run with no bound on its backtracking, on the event loop, over every id.

The list grows with what the node coordinates, so it is built and encoded off the loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any

from kafka_api.authz import Op, Resource, authorized
from kafka_api.codec import build, encode_off_loop, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from raftlog.common.clock import LOOP_CLOCK, now_ms
from raftlog.common.errors import ErrorCode
from raftlog.txn.metadata import TxnMetadata, TxnState

API_KEY = 66
MIN_VERSION = 0
MAX_VERSION = 1

STATE_NAMES = {state.kafka_name: state for state in TxnState}


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    coordinator = ctx.broker.transactions
    if coordinator.loading:
        return _answer(m, ErrorCode.coordinator_load_in_progress, (), [])
    names = tuple(dict.fromkeys(request.state_filters))  # once each, in the request's order
    unknown = tuple(n for n in names if n not in STATE_NAMES)
    listed = select(
        coordinator.transactions(),
        {STATE_NAMES[n] for n in names if n in STATE_NAMES} if names else None,
        set(request.producer_id_filters),
        getattr(request, "duration_filter", -1),
        now_ms(LOOP_CLOCK),
    )
    shown = authorized(ctx, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, (t[0] for t in listed))
    return await encode_off_loop(
        _answer, m, ErrorCode.none, unknown, [t for t in listed if t[0] in shown]
    )


def select(
    txns: Iterable[TxnMetadata],
    states: set[TxnState] | None,
    producer_ids: set[int],
    duration_ms: int,
    now: int,
) -> list[tuple[str, int, str]]:
    """(transactional id, producer id, state name) of each transaction the filters keep, in id
    order. `states` None: any state; an empty set: none (only unknown names were asked for).
    A Dead id is being expired and never listed (Kafka's rule). A duration of 0 or more keeps
    only transactions that started more than that long ago: one with no start time (Empty,
    after InitProducerId) is not running at all, where Kafka would count from -1."""
    found = []
    for txn in txns:
        if txn.state == TxnState.DEAD:
            continue
        if states is not None and txn.state not in states:
            continue
        if producer_ids and txn.producer_id not in producer_ids:
            continue
        if duration_ms >= 0 and (txn.start_ms < 0 or now - txn.start_ms <= duration_ms):
            continue
        found.append((txn.transactional_id, txn.producer_id, txn.state.kafka_name))
    found.sort()
    return found


def _answer(
    m: ModuleType,
    error: ErrorCode,
    unknown: tuple[str, ...],
    listed: list[tuple[str, int, str]],
) -> Any:
    state = m.TransactionState
    return build(
        m.ListTransactionsResponse,
        throttle_time=NO_THROTTLE,
        error_code=error,
        unknown_state_filters=unknown,
        transaction_states=tuple(
            state(transactional_id=txn_id, producer_id=pid, transaction_state=name)
            for txn_id, pid, name in listed
        ),
    )
