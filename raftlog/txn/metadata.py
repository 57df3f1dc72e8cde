"""A transactional id's state and Kafka's rules for changing it (TransactionCoordinator.scala
and TransactionMetadata.scala, transaction version 0/1: the epoch stays for the producer's
life and moves only when a producer is (re)initialised or fenced).

Every rule is a pure function of the current metadata and the request: it answers an error,
or the metadata to write to `__transaction_state` before anything else happens. The
coordinator applies a write to memory only once the log holds it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum

from raftlog.common.errors import ErrorCode
from raftlog.txn.log_records import Partitions, TxnLogValue

E = ErrorCode
# Kafka's isEpochExhausted: the last epochs are kept for the fence and its abort
MAX_EPOCH = 32767 - 1


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use."""
        return "".join(part.capitalize() for part in self.name.split("_"))


PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
# a transaction the coordinator still has to end: open, or decided and its markers going out
IN_PROGRESS = (TxnState.ONGOING, *PREPARING, TxnState.PREPARE_EPOCH_FENCE)


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: Partitions
    start_ms: int  # -1 with no transaction
    last_update_ms: int
    # the epoch before the last bump, so a retried InitProducerId is answered, not fenced;
    # Kafka does not persist it either
    last_producer_epoch: int = -1

    def to_log(self) -> TxnLogValue:
        return TxnLogValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            int(self.state),
            self.partitions,
            self.last_update_ms,
            self.start_ms,
        )

    @classmethod
    def from_log(cls, transactional_id: str, value: TxnLogValue) -> TxnMetadata:
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            value.timeout_ms,
            TxnState(value.state),
            value.partitions,
            value.start_ms,
            value.last_update_ms,
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """An error to answer, or (NONE) the metadata to write first; `write` None with NONE means
    nothing changes (a retry)."""

    error: ErrorCode = E.none
    write: TxnMetadata | None = None


def new_producer(transactional_id: str, producer_id: int, timeout_ms: int) -> TxnMetadata:
    """A transactional id seen for the first time: Empty at epoch -1, bumped to 0 next."""
    return TxnMetadata(transactional_id, producer_id, -1, timeout_ms, TxnState.EMPTY, {}, -1, -1)


def init_producer(
    txn: TxnMetadata,
    timeout_ms: int,
    expected_id: int,
    expected_epoch: int,
    fresh_id: int,
    now_ms: int,
) -> Decision:
    """InitProducerId with a transactional id. `expected_*` are -1 unless the producer asks to
    keep its id (KIP-360); `fresh_id` is used when the epoch is exhausted. An ongoing
    transaction is fenced: aborted with the epoch bumped, the caller answered
    CONCURRENT_TRANSACTIONS until the abort completes (its retry then bumps again)."""
    if expected_id >= 0 and txn.producer_epoch >= 0 and expected_id != txn.producer_id:
        return Decision(E.producer_fenced)
    if txn.state in PREPARING:
        return Decision(E.concurrent_transactions)
    if txn.state == TxnState.ONGOING:
        return Decision(E.concurrent_transactions, fence(txn, now_ms))
    if txn.state not in (TxnState.EMPTY, *COMPLETE):
        return Decision(E.concurrent_transactions)  # Dead: being expired
    if expected_epoch >= 0 and txn.producer_epoch >= 0:
        if expected_epoch == txn.last_producer_epoch and expected_epoch != txn.producer_epoch:
            return Decision()  # a retry of the bump that already happened
        if expected_epoch != txn.producer_epoch:
            return Decision(E.producer_fenced)
    producer_id, epoch, last = txn.producer_id, txn.producer_epoch + 1, txn.producer_epoch
    if epoch > MAX_EPOCH:
        producer_id, epoch, last = fresh_id, 0, -1
    return Decision(
        write=dataclasses.replace(
            txn,
            producer_id=producer_id,
            producer_epoch=epoch,
            last_producer_epoch=last if expected_epoch >= 0 else -1,
            timeout_ms=timeout_ms,
            state=TxnState.EMPTY,
            partitions={},
            start_ms=-1,
            last_update_ms=now_ms,
        )
    )


def _identity(txn: TxnMetadata | None, producer_id: int, epoch: int) -> ErrorCode | None:
    if txn is None or txn.producer_id != producer_id:
        return E.invalid_producer_id_mapping
    if txn.producer_epoch != epoch:
        return E.producer_fenced
    return None


def add_partitions(
    txn: TxnMetadata | None, producer_id: int, epoch: int, partitions: Partitions, now_ms: int
) -> Decision:
    """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's `__consumer_offsets`
    partition): the transaction starts, or grows, before the producer writes there."""
    error = _identity(txn, producer_id, epoch)
    if error is not None or txn is None:
        return Decision(error or E.invalid_producer_id_mapping)
    if txn.state in PREPARING:
        return Decision(E.concurrent_transactions)
    if txn.state == TxnState.ONGOING and all(
        indexes <= txn.partitions.get(topic, frozenset()) for topic, indexes in partitions.items()
    ):
        return Decision()
    if txn.state not in (TxnState.ONGOING, TxnState.EMPTY, *COMPLETE):
        return Decision(E.concurrent_transactions)
    merged = dict(txn.partitions) if txn.state == TxnState.ONGOING else {}
    for topic, indexes in partitions.items():
        merged[topic] = merged.get(topic, frozenset()) | indexes
    return Decision(
        write=dataclasses.replace(
            txn,
            state=TxnState.ONGOING,
            partitions=merged,
            start_ms=txn.start_ms if txn.state == TxnState.ONGOING else now_ms,
            last_update_ms=now_ms,
        )
    )


def end_transaction(
    txn: TxnMetadata | None, producer_id: int, epoch: int, commit: bool, now_ms: int
) -> Decision:
    """EndTxn: Ongoing moves to PrepareCommit/PrepareAbort (the markers follow); a retry of a
    decision already taken or completed is answered as the first was. Anything else is
    INVALID_TXN_STATE, as Kafka answers EndTxn v0/1: an abort meeting the commit before it
    cannot tell a transaction never started (librdkafka sends one after an
    AddPartitionsToTxn that failed retriably, its issue #4849) from an abort of that
    commit, and "aborted" would then be a lie. Kafka's transaction version 2 tells them
    apart by an epoch bump per transaction; librdkafka speaks only v0/1."""
    error = _identity(txn, producer_id, epoch)
    if error is not None or txn is None:
        return Decision(error or E.invalid_producer_id_mapping)
    want_prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    want_complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
    if txn.state == TxnState.ONGOING:
        return Decision(write=dataclasses.replace(txn, state=want_prepare, last_update_ms=now_ms))
    if txn.state == want_complete:
        return Decision()
    if txn.state == want_prepare:
        return Decision(E.concurrent_transactions)
    return Decision(E.invalid_txn_state)


def fence(txn: TxnMetadata, now_ms: int) -> TxnMetadata:
    """An ongoing transaction aborted by the coordinator (a new producer with its id, or its
    timeout): PrepareAbort with the epoch bumped, so the markers fence the old producer."""
    epoch = txn.producer_epoch + 1 if txn.producer_epoch < MAX_EPOCH else txn.producer_epoch
    return dataclasses.replace(
        txn,
        producer_epoch=epoch,
        last_producer_epoch=-1,
        state=TxnState.PREPARE_ABORT,
        last_update_ms=now_ms,
    )


def complete(txn: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Every marker is written: CompleteCommit or CompleteAbort, no partitions left."""
    state = (
        TxnState.COMPLETE_COMMIT
        if txn.state == TxnState.PREPARE_COMMIT
        else TxnState.COMPLETE_ABORT
    )
    return dataclasses.replace(txn, state=state, partitions={}, last_update_ms=now_ms)


def timed_out(txn: TxnMetadata, now_ms: int) -> bool:
    return txn.state == TxnState.ONGOING and txn.start_ms + txn.timeout_ms < now_ms


def idle(txn: TxnMetadata) -> bool:
    """No transaction open or being ended: the id may be forgotten without losing one."""
    return txn.state == TxnState.EMPTY or txn.state in COMPLETE


def expired(txn: TxnMetadata, now_ms: int, expiration_ms: int) -> bool:
    """Kafka's transactional.id.expiration.ms: an idle id not used for that long is removed
    (a tombstone in `__transaction_state`); its producer then gets INVALID_PRODUCER_ID_MAPPING
    and must initialise again."""
    return idle(txn) and txn.last_update_ms + expiration_ms <= now_ms


def in_transaction(
    txn: TxnMetadata | None, producer_id: int, epoch: int, topic: str, index: int
) -> ErrorCode:
    """KIP-890's verification before a transactional batch is written: NONE only while the
    producer's ongoing transaction includes the partition (INVALID_TXN_STATE otherwise, what
    Produce below v11 answers)."""
    error = _identity(txn, producer_id, epoch)
    if error is not None or txn is None:
        return E.invalid_producer_epoch if error == E.producer_fenced else E.invalid_txn_state
    if txn.state in PREPARING:
        return E.concurrent_transactions
    if txn.state != TxnState.ONGOING or index not in txn.partitions.get(topic, frozenset()):
        return E.invalid_txn_state
    return E.none
