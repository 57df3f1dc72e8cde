"""Idempotent producer sequence rules (KIP-98), as the leader applies them."""

from raftlog.errors import ErrorCode
from raftlog.producer_state import BATCHES_KEPT, MAX_PRODUCERS, SEQUENCE_WRAP, ProducerState
from raftlog.storage.batch import BatchHeader


def batch(pid=7, epoch=0, seq=0, count=10):
    return BatchHeader(0, 100, 0, 2, 0, 0, count - 1, 0, 0, pid, epoch, seq, count)


def test_in_order_batches_are_accepted():
    s = ProducerState()
    for i, seq in enumerate((0, 10, 20)):
        assert s.check(batch(seq=seq)) is None
        s.record(batch(seq=seq), base_offset=100 * i)


def test_a_retried_batch_is_answered_with_its_first_offset_and_not_written_again():
    s = ProducerState()
    s.record(batch(seq=0), 500)
    s.record(batch(seq=10), 510)
    verdict = s.check(batch(seq=0))
    assert verdict is not None and verdict.error == ErrorCode.none
    assert verdict.base_offset == 500


def test_a_gap_in_sequences_is_out_of_order():
    s = ProducerState()
    s.record(batch(seq=0), 0)
    assert s.check(batch(seq=20)).error == ErrorCode.out_of_order_sequence_number


def test_a_fenced_epoch_is_refused_and_a_new_epoch_starts_at_zero():
    s = ProducerState()
    s.record(batch(epoch=3, seq=0), 0)
    assert s.check(batch(epoch=2, seq=10)).error == ErrorCode.invalid_producer_epoch
    assert s.check(batch(epoch=4, seq=5)).error == ErrorCode.out_of_order_sequence_number
    assert s.check(batch(epoch=4, seq=0)) is None


def test_non_idempotent_and_unknown_producers_are_accepted():
    s = ProducerState()
    assert s.check(batch(pid=-1, seq=-1)) is None
    assert s.check(batch(pid=99, seq=1234)) is None  # state forgotten: accept, as Kafka does


def test_only_the_last_five_batches_are_remembered():
    s = ProducerState()
    for i in range(BATCHES_KEPT + 1):
        s.record(batch(seq=10 * i), 10 * i)
    assert s.check(batch(seq=0)).error == ErrorCode.out_of_order_sequence_number
    assert s.check(batch(seq=10)).error == ErrorCode.none


def test_state_is_bounded_least_recently_written_first():
    s = ProducerState()
    for pid in range(MAX_PRODUCERS + 1):
        s.record(batch(pid=pid), pid)
    assert len(s) == MAX_PRODUCERS
    assert s.check(batch(pid=0, seq=77)) is None  # the oldest was forgotten
    assert s.check(batch(pid=1, seq=77)).error == ErrorCode.out_of_order_sequence_number


def test_snapshot_round_trip(tmp_path):
    s = ProducerState()
    s.record(batch(pid=1, epoch=2, seq=0), 40)
    s.save(tmp_path / "producer-state", offset=50)
    loaded, offset = ProducerState.load(tmp_path / "producer-state")
    assert offset == 50
    assert loaded.check(batch(pid=1, epoch=2, seq=0)).base_offset == 40
    assert ProducerState.load(tmp_path / "missing")[1] == 0


def test_sequences_wrap_after_the_largest_int32():
    """Kafka's sequences go on from 0 after 2**31 - 1, within a batch as across batches: a
    long-lived producer is not refused once it has sent two billion records."""
    s = ProducerState()
    s.record(batch(seq=SEQUENCE_WRAP - 15, count=10), 0)
    assert s.check(batch(seq=SEQUENCE_WRAP - 5, count=10)) is None  # its last sequence is 4
    s.record(batch(seq=SEQUENCE_WRAP - 5, count=10), 10)
    assert s.check(batch(seq=5)) is None
    assert s.check(batch(seq=SEQUENCE_WRAP - 5, count=10)).base_offset == 10
    assert s.check(batch(seq=0)).error == ErrorCode.out_of_order_sequence_number


def test_a_new_epoch_forgets_the_batches_of_the_old_one():
    """After an epoch bump the producer starts again at sequence 0: a batch of the new epoch
    that repeats an old epoch's sequences is new data, and its retries answer its own offset."""
    s = ProducerState()
    s.record(batch(epoch=0, seq=0), 0)
    s.record(batch(epoch=0, seq=10), 10)
    assert s.check(batch(epoch=1, seq=0)) is None
    s.record(batch(epoch=1, seq=0), 20)
    assert s.check(batch(epoch=1, seq=0)).base_offset == 20
    assert s.check(batch(epoch=1, seq=10)) is None
    assert s.check(batch(epoch=0, seq=10)).error == ErrorCode.invalid_producer_epoch
