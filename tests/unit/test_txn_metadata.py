"""Kafka's transaction coordinator rules (transaction version 0/1), one request at a time,
and the `__transaction_state` records they are written as."""

from __future__ import annotations

import dataclasses

import pytest

from raftlog.common.errors import ErrorCode as E
from raftlog.txn import metadata as rules
from raftlog.txn.log_records import (
    RecordError,
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from raftlog.txn.metadata import TxnMetadata, TxnState

NOW = 1_700_000_000_000


def fresh(epoch: int = 0, state: TxnState = TxnState.EMPTY, **kw: object) -> TxnMetadata:
    txn = TxnMetadata("tx", 42, epoch, 60_000, state, {}, -1, NOW)
    return dataclasses.replace(txn, **kw)  # type: ignore[arg-type]


def ongoing(**kw: object) -> TxnMetadata:
    return fresh(state=TxnState.ONGOING, partitions={"t": frozenset({0})}, start_ms=NOW, **kw)


def test_a_new_transactional_id_gets_epoch_0_and_each_init_bumps_it():
    first = rules.init_producer(rules.new_producer("tx", 42, 60_000), 60_000, -1, -1, -1, NOW)
    assert first.error == E.none and first.write is not None
    assert (first.write.producer_id, first.write.producer_epoch) == (42, 0)
    again = rules.init_producer(first.write, 60_000, -1, -1, -1, NOW)
    assert again.write is not None and again.write.producer_epoch == 1


def test_an_exhausted_epoch_moves_to_a_fresh_producer_id():
    decision = rules.init_producer(fresh(epoch=rules.MAX_EPOCH), 60_000, -1, -1, 77, NOW)
    assert decision.write is not None
    assert (decision.write.producer_id, decision.write.producer_epoch) == (77, 0)


def test_init_on_an_ongoing_transaction_fences_it_with_a_bumped_epoch_abort():
    """The new producer is told to come back (CONCURRENT_TRANSACTIONS); the old epoch's
    transaction goes to PrepareAbort under the next epoch, so its markers fence it."""
    decision = rules.init_producer(ongoing(epoch=5), 60_000, -1, -1, -1, NOW)
    assert decision.error == E.concurrent_transactions
    assert decision.write is not None
    assert (decision.write.state, decision.write.producer_epoch) == (TxnState.PREPARE_ABORT, 6)
    assert decision.write.partitions == {"t": frozenset({0})}


@pytest.mark.parametrize("state", [TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT])
def test_init_waits_while_markers_are_being_written(state):
    assert rules.init_producer(fresh(state=state), 60_000, -1, -1, -1, NOW).error == (
        E.concurrent_transactions
    )


def test_kip_360_keeps_the_id_of_the_producer_that_asks_with_it_and_fences_others():
    txn = fresh(epoch=3)
    kept = rules.init_producer(txn, 60_000, 42, 3, -1, NOW)
    assert kept.write is not None and kept.write.producer_epoch == 4
    retried = rules.init_producer(kept.write, 60_000, 42, 3, -1, NOW)  # its answer was lost
    assert retried == rules.Decision()
    assert rules.init_producer(kept.write, 60_000, 42, 2, -1, NOW).error == E.producer_fenced
    assert rules.init_producer(txn, 60_000, 41, 3, -1, NOW).error == E.producer_fenced


def test_add_partitions_starts_a_transaction_and_grows_it():
    started = rules.add_partitions(fresh(), 42, 0, {"t": frozenset({1})}, NOW)
    assert started.write is not None and started.write.state == TxnState.ONGOING
    assert started.write.start_ms == NOW
    grown = rules.add_partitions(
        started.write, 42, 0, {"t": frozenset({2}), "u": frozenset({0})}, NOW + 5
    )
    assert grown.write is not None and grown.write.start_ms == NOW
    assert grown.write.partitions == {"t": frozenset({1, 2}), "u": frozenset({0})}
    assert rules.add_partitions(grown.write, 42, 0, {"t": frozenset({1})}, NOW) == rules.Decision()


@pytest.mark.parametrize(
    ("txn", "pid", "epoch", "error"),
    [
        (None, 42, 0, E.invalid_producer_id_mapping),
        (fresh(), 41, 0, E.invalid_producer_id_mapping),
        (fresh(epoch=2), 42, 1, E.producer_fenced),
        (fresh(state=TxnState.PREPARE_COMMIT), 42, 0, E.concurrent_transactions),
    ],
)
def test_add_partitions_refusals(txn, pid, epoch, error):
    assert rules.add_partitions(txn, pid, epoch, {"t": frozenset({0})}, NOW).error == error


@pytest.mark.parametrize(
    ("state", "commit", "error", "writes"),
    [
        (TxnState.ONGOING, True, E.none, TxnState.PREPARE_COMMIT),
        (TxnState.ONGOING, False, E.none, TxnState.PREPARE_ABORT),
        (TxnState.COMPLETE_COMMIT, True, E.none, None),  # a retry of what was done
        # an abort after a commit: of that commit, or of a transaction never started (Kafka
        # EndTxn v0/1 cannot tell, and answers so; f300's fatal librdkafka error)
        (TxnState.COMPLETE_COMMIT, False, E.invalid_txn_state, None),
        (TxnState.COMPLETE_ABORT, False, E.none, None),
        (TxnState.PREPARE_COMMIT, True, E.concurrent_transactions, None),
        (TxnState.PREPARE_COMMIT, False, E.invalid_txn_state, None),
        (TxnState.PREPARE_ABORT, False, E.concurrent_transactions, None),
        (TxnState.EMPTY, True, E.invalid_txn_state, None),
        (TxnState.EMPTY, False, E.invalid_txn_state, None),
    ],
)
def test_end_transaction_by_state(state, commit, error, writes):
    decision = rules.end_transaction(fresh(state=state), 42, 0, commit, NOW)
    assert decision.error == error
    assert (decision.write.state if decision.write else None) == writes


def test_complete_empties_the_partitions_and_timeouts_count_from_the_start():
    txn = ongoing()
    assert not rules.timed_out(txn, NOW + 60_000) and rules.timed_out(txn, NOW + 60_001)
    prepared = rules.end_transaction(txn, 42, 0, True, NOW).write
    assert prepared is not None
    done = rules.complete(prepared, NOW)
    assert (done.state, done.partitions) == (TxnState.COMPLETE_COMMIT, {})


@pytest.mark.parametrize(
    ("txn", "epoch", "topic", "index", "answer"),
    [
        (ongoing(), 0, "t", 0, E.none),
        (ongoing(), 0, "t", 1, E.invalid_txn_state),  # never added
        (ongoing(), 1, "t", 0, E.invalid_producer_epoch),
        (fresh(state=TxnState.PREPARE_COMMIT), 0, "t", 0, E.concurrent_transactions),
        (fresh(state=TxnState.COMPLETE_COMMIT), 0, "t", 0, E.invalid_txn_state),
        (None, 0, "t", 0, E.invalid_txn_state),
    ],
)
def test_a_partition_is_in_the_transaction_only_while_it_is_ongoing_with_it(
    txn, epoch, topic, index, answer
):
    assert rules.in_transaction(txn, 42, epoch, topic, index) == answer


def test_records_round_trip_in_kafkas_format():
    assert encode_key("tx-é") == b"\x00\x00\x00\x05tx-\xc3\xa9"
    assert decode_key(encode_key("tx-é")) == "tx-é"
    assert decode_key(b"\x00\x01\x00\x00") is None  # a key version from elsewhere: skipped
    value = TxnLogValue(
        42, 3, 60_000, 1, {"b": frozenset({2, 0}), "a": frozenset({1})}, NOW, NOW - 5
    )
    assert decode_value(encode_value(value)) == value
    empty = TxnLogValue(42, 3, 60_000, 0, {}, NOW, -1)
    assert encode_value(empty)[17:21] == b"\xff\xff\xff\xff"  # partitions null when Empty
    assert decode_value(encode_value(empty)) == empty
    with pytest.raises(RecordError):
        decode_value(encode_value(value)[:-3])


def test_a_flexible_value_written_by_newer_kafka_reads():
    """Value version 1: compact lengths and tag sections (Kafka writes one tagged field)."""
    body = (
        b"\x00\x01"  # version 1
        + (42).to_bytes(8, "big")
        + (3).to_bytes(2, "big")
        + (60_000).to_bytes(4, "big")
        + b"\x01"  # Ongoing
        + b"\x02"  # one topic (length + 1)
        + b"\x02t"  # "t"
        + b"\x02"  # one partition
        + (7).to_bytes(4, "big")
        + b"\x00"  # the topic entry's tags
        + NOW.to_bytes(8, "big")
        + NOW.to_bytes(8, "big")
        + b"\x01\x02\x02\x00\x00"  # tag 2 (client transaction version), 2 bytes
    )
    assert decode_value(body) == TxnLogValue(42, 3, 60_000, 1, {"t": frozenset({7})}, NOW, NOW)
