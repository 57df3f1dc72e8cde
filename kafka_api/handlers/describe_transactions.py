"""DescribeTransactions (65): a transactional id's state, producer, timeout, start time and
partitions, from its coordinator (admin clients find it with FindCoordinator first, so an id
this node does not coordinate is NOT_COORDINATOR, one still being loaded
COORDINATOR_LOAD_IN_PROGRESS, an unknown or expiring one TRANSACTIONAL_ID_NOT_FOUND).

Each id needs DESCRIBE on it, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing of it.
Every copy of an id named twice is INVALID_REQUEST and not described (Kafka describes each
copy, partition list and all: the answer would grow with repeats, not with what is held).
The ids are authorized and looked up on the loop a slice at a time (kafka_api/entry_work.py);
the repeats are counted, and the answer to more than a thousand built and encoded, in a thread.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

from kafka_api.authz import Op, Resource, authorize
from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE, duplicates
from kafka_api.context import RequestContext
from kafka_api.entry_work import answer, off_loop, sliced
from raftlog.common.errors import ErrorCode
from raftlog.txn.metadata import TxnMetadata, TxnState

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0

E = ErrorCode


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    ids: tuple[str, ...] = request.transactional_ids
    repeated = await off_loop(len(ids), duplicates, ids)
    coordinator = ctx.broker.transactions
    found: list[tuple[str, ErrorCode, TxnMetadata | None]] = []
    async for txn_id in sliced(ids):  # the ACLs and the coordinator are the loop's
        if txn_id in repeated:
            found.append((txn_id, E.invalid_request, None))
        elif not authorize(ctx, Op.DESCRIBE, Resource.TRANSACTIONAL_ID, txn_id):
            found.append((txn_id, E.transactional_id_authorization_failed, None))
        else:
            error, txn = coordinator.describe(txn_id)
            if txn is not None and txn.state == TxnState.DEAD:  # being expired
                error, txn = E.transactional_id_not_found, None
            found.append((txn_id, error, txn))
    # TxnMetadata is never changed, only replaced: what was found may be read in a thread.
    return await answer(len(ids), _answer, m, found)


def _answer(m: ModuleType, found: list[tuple[str, ErrorCode, TxnMetadata | None]]) -> Any:
    return build(
        m.DescribeTransactionsResponse,
        throttle_time=NO_THROTTLE,
        transaction_states=tuple(
            _described(m, txn) if txn is not None else _failed(m, txn_id, error)
            for txn_id, error, txn in found
        ),
    )


def epoch_ms(ms: int) -> datetime:
    """kio carries the start time as a datetime; -1 (no transaction) round-trips as -1, and
    so does a time no datetime holds (a record from the log is not trusted that far)."""
    try:
        return datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, ValueError, OSError):
        return _NO_TIME


_NO_TIME = datetime.fromtimestamp(-1 / 1000, UTC)


def _described(m: ModuleType, txn: TxnMetadata) -> Any:
    return m.TransactionState(
        error_code=E.none,
        transactional_id=txn.transactional_id,
        transaction_state=txn.state.kafka_name,
        transaction_timeout=timedelta(milliseconds=txn.timeout_ms),
        transaction_start_time=epoch_ms(txn.start_ms),
        producer_id=txn.producer_id,
        producer_epoch=txn.producer_epoch,
        topics=tuple(
            m.TopicData(topic=topic, partitions=tuple(sorted(indexes)))
            for topic, indexes in sorted(txn.partitions.items())
        ),
    )


def _failed(m: ModuleType, txn_id: str, error: ErrorCode) -> Any:
    return m.TransactionState(
        error_code=error,
        transactional_id=txn_id,
        transaction_state="",
        transaction_timeout=timedelta(0),
        transaction_start_time=_NO_TIME,
        producer_id=-1,
        producer_epoch=-1,
        topics=(),
    )
