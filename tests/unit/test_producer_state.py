"""Idempotent producer sequence rules (KIP-98), as the leader applies them, and the
transactions open on a partition: its last stable offset and its aborted transactions."""

import msgpack

from raftlog.common.errors import ErrorCode
from raftlog.partition.producer_state import (
    BATCHES_KEPT,
    MAX_PRODUCERS,
    SEQUENCE_WRAP,
    AbortedTxn,
    ActiveProducer,
    ProducerState,
)
from raftlog.storage.batch import BatchHeader
from raftlog.storage.control import Marker


def batch(pid=7, epoch=0, seq=0, count=10, transactional=False):
    attributes = 0x10 if transactional else 0
    return BatchHeader(0, 100, 0, 2, 0, attributes, count - 1, 0, 0, pid, epoch, seq, count)


def marker(pid=7, epoch=0):
    return BatchHeader(0, 66, 0, 2, 0, 0x30, 0, 0, 0, pid, epoch, -1, 1)


COMMIT, ABORT = Marker(True, 0), Marker(False, 0)


def lead(s, header, offset, held=None):
    """As the leader appends a batch: judged, then recorded (a follower only records);
    `held`: the marker a control batch holds."""
    assert s.check(header, held) is None
    s.record(header, offset, held)


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
    lead(s, batch(seq=0), 0)
    assert s.check(batch(seq=20)).error == ErrorCode.out_of_order_sequence_number


def test_a_gap_after_batches_another_leader_wrote_is_retriable_until_one_is_judged_here():
    """A new leader holds the producer's batches as the old leader wrote them; a gap may be
    requests to the old leader the client has not retried yet (librdkafka can send the next
    batch to the new leader first). OUT_OF_ORDER_SEQUENCE makes librdkafka bump its epoch
    and resend all it has not seen acknowledged (duplicating what was written but not
    answered); a retriable "not written" keeps its sequences. Once this leader accepts a batch
    of the producer, a gap is Kafka's OUT_OF_ORDER_SEQUENCE again."""
    s = ProducerState()
    s.record(batch(seq=0), 0)  # copied from the old leader's log
    gap = s.check(batch(seq=20))
    assert gap is not None and gap.error == ErrorCode.not_enough_replicas
    assert s.check(batch(seq=0)).base_offset == 0  # the retry of what the old leader wrote
    lead(s, batch(seq=10), 10)
    lead(s, batch(seq=20), 20)
    assert s.check(batch(seq=40)).error == ErrorCode.out_of_order_sequence_number
    s.record(batch(seq=30), 30)  # a later leader's batch, copied here
    assert s.check(batch(seq=50)).error == ErrorCode.not_enough_replicas


def test_a_batch_judged_in_an_earlier_leadership_counts_as_not_judged():
    """A replica that leads again, with nobody's batch of the producer in between: the
    requests other leaders answered since may still be retried, as after copied batches."""
    s = ProducerState()
    s.new_leadership()
    lead(s, batch(seq=0), 0)
    assert s.check(batch(seq=20)).error == ErrorCode.out_of_order_sequence_number
    s.new_leadership()  # it lost the leadership and won it back
    assert s.check(batch(seq=20)).error == ErrorCode.not_enough_replicas
    lead(s, batch(seq=10), 10)
    assert s.check(batch(seq=30)).error == ErrorCode.out_of_order_sequence_number


def test_a_refused_check_does_not_count_as_judged():
    """A replica that is not the leader checks a request's batches (is it a retry it holds?)
    without appending them; the next batch it records is copied, not judged."""
    s = ProducerState()
    s.record(batch(seq=0), 0)
    assert s.check(batch(seq=10)) is None  # a follower asked about a batch it does not hold
    s.record(batch(seq=10), 10)  # the leader's copy of another request's batch
    assert s.check(batch(seq=30)).error == ErrorCode.not_enough_replicas


def test_a_state_loaded_from_its_snapshot_judged_nothing(tmp_path):
    """After a restart the replica's leadership is new: the sequences it loaded were written
    before it, and a gap is retriable as after batches copied from another leader."""
    s = ProducerState()
    lead(s, batch(seq=0), 0)
    s.save(tmp_path / "producer-state", offset=10)
    loaded, _ = ProducerState.load(tmp_path / "producer-state")
    assert loaded.check(batch(seq=20)).error == ErrorCode.not_enough_replicas


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
        lead(s, batch(seq=10 * i), 10 * i)
    assert s.check(batch(seq=0)).error == ErrorCode.out_of_order_sequence_number
    assert s.check(batch(seq=10)).error == ErrorCode.none


def test_state_is_bounded_least_recently_written_first():
    s = ProducerState()
    for pid in range(MAX_PRODUCERS + 1):
        lead(s, batch(pid=pid), pid)
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
    lead(s, batch(seq=SEQUENCE_WRAP - 15, count=10), 0)
    lead(s, batch(seq=SEQUENCE_WRAP - 5, count=10), 10)  # its last sequence is 4
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


def test_an_open_transaction_holds_the_first_unstable_offset_until_its_marker():
    """The last stable offset stops at the oldest open transaction's first offset, whichever
    producer's later transactions end first; a commit leaves nothing to hide."""
    s = ProducerState()
    assert s.first_unstable(0) is None
    s.record(batch(pid=1, transactional=True), 10)
    s.record(batch(pid=2, transactional=True), 20)
    s.record(batch(pid=1, seq=10, transactional=True), 30)  # same transaction: still 10
    assert s.first_unstable(40) == 10
    s.record(marker(pid=2), 40, COMMIT)
    assert s.first_unstable(41) == 10
    s.record(marker(pid=1), 41, COMMIT)
    assert s.first_unstable(42) is None
    assert s.aborted(0, 100) == []


def test_a_transaction_stays_unstable_until_its_marker_is_below_the_high_watermark():
    """Kafka's rule: a marker appended but not committed may be cut by the next leader, so
    the transaction it ends holds the last stable offset until the high watermark passes it."""
    s = ProducerState()
    s.record(batch(pid=1, transactional=True), 10)
    s.record(marker(pid=1), 20, COMMIT)
    assert s.first_unstable(20) == 10
    assert s.first_unstable(21) is None


def test_an_abort_is_listed_for_the_reads_that_may_hold_its_records():
    s = ProducerState()
    s.record(batch(pid=1, transactional=True), 10)
    s.record(marker(pid=1), 20, ABORT)
    s.record(batch(pid=2, transactional=True), 30)
    s.record(marker(pid=2), 40, ABORT)
    assert s.aborted(0, 100) == [AbortedTxn(1, 10, 20), AbortedTxn(2, 30, 40)]
    assert s.aborted(21, 100) == [AbortedTxn(2, 30, 40)]  # the first one's marker is behind
    assert s.aborted(0, 30) == [AbortedTxn(1, 10, 20)]  # the second starts at the read's end
    s.forget_aborted_before(21)
    assert s.aborted(0, 100) == [AbortedTxn(2, 30, 40)]


def test_a_marker_for_a_partition_the_producer_did_not_write_ends_nothing():
    s = ProducerState()
    s.record(marker(pid=1), 5, ABORT)
    assert s.aborted(0, 100) == [] and s.first_unstable(100) is None


def test_a_producer_in_a_transaction_may_not_write_outside_it():
    s = ProducerState()
    s.record(batch(pid=1, transactional=True), 0)
    verdict = s.check(batch(pid=1, seq=10))
    assert verdict is not None and verdict.error == ErrorCode.invalid_txn_state
    assert s.check(batch(pid=1, seq=10, transactional=True)) is None


def test_a_fencing_marker_moves_the_epoch_and_stale_batches_and_markers_are_refused():
    """The coordinator fences a producer by ending its transaction with a newer epoch: the old
    epoch's batches are refused from then on, and its sequences start again at 0."""
    s = ProducerState()
    s.record(batch(pid=1, epoch=3, transactional=True), 0)
    assert s.check(marker(pid=1, epoch=2)).error == ErrorCode.invalid_producer_epoch
    assert s.check(marker(pid=1, epoch=4)) is None
    s.record(marker(pid=1, epoch=4), 10, ABORT)
    assert s.check(batch(pid=1, epoch=3, seq=10)).error == ErrorCode.invalid_producer_epoch
    assert s.check(batch(pid=1, epoch=4, seq=0, transactional=True)) is None


def test_a_marker_from_an_older_coordinator_is_refused_and_ends_nothing():
    """A coordinator that lost its `__transaction_state` partition may still retry a marker
    of a decision its successor carried out; accepted, it would end the producer's next
    transaction (as committed, in the fault suite's seed 2123). Kafka's checkCoordinatorEpoch:
    refused, TRANSACTION_COORDINATOR_FENCED; an equal or newer epoch is accepted."""
    s = ProducerState()
    lead(s, batch(pid=1, transactional=True), 0)
    lead(s, marker(pid=1), 10, Marker(True, 14))
    lead(s, batch(pid=1, seq=10, transactional=True), 11)  # the next transaction
    stale = s.check(marker(pid=1), Marker(True, 13))
    assert stale is not None and stale.error == ErrorCode.transaction_coordinator_fenced
    assert s.transaction_start(1) == 11 and s.first_unstable(100) == 11
    assert s.check(marker(pid=1), Marker(False, 14)) is None
    assert s.check(marker(pid=1), Marker(False, 15)) is None
    lead(s, marker(pid=1), 21, Marker(False, 14))
    assert s.aborted(0, 100) == [AbortedTxn(1, 11, 21)]
    assert s.active()[0].coordinator_epoch == 14


def test_the_coordinator_epoch_outlives_a_new_producer_epoch():
    """The epoch is the coordinator's, not the producer's: a bump (a batch or a fencing
    marker of a newer producer epoch) keeps it."""
    s = ProducerState()
    lead(s, batch(pid=1, transactional=True), 0)
    lead(s, marker(pid=1), 10, Marker(False, 14))
    lead(s, batch(pid=1, epoch=1, transactional=True), 11)
    assert s.check(marker(pid=1, epoch=1), Marker(True, 13)).error == (
        ErrorCode.transaction_coordinator_fenced
    )
    lead(s, marker(pid=1, epoch=2), 21, Marker(False, 15))  # a fencing abort
    assert s.check(marker(pid=1, epoch=2), Marker(False, 14)).error == (
        ErrorCode.transaction_coordinator_fenced
    )


def test_a_marker_makes_its_producer_known_with_its_coordinator_epoch():
    """A partition the producer added but never wrote still fences an older coordinator."""
    s = ProducerState()
    lead(s, marker(pid=1), 0, Marker(True, 14))
    assert s.check(marker(pid=1), Marker(True, 13)).error == (
        ErrorCode.transaction_coordinator_fenced
    )


def test_the_coordinator_epoch_survives_a_snapshot_and_an_older_file_loads_without(tmp_path):
    path = tmp_path / "producer-state"
    s = ProducerState()
    s.record(batch(pid=1, transactional=True), 0)
    s.record(marker(pid=1), 10, Marker(True, 14))
    s.save(path, offset=11)
    loaded, _ = ProducerState.load(path)
    assert loaded.check(marker(pid=1), Marker(True, 13)).error == (
        ErrorCode.transaction_coordinator_fenced
    )
    # the same file as written before the coordinator epochs: every one unknown (-1)
    path.write_bytes(msgpack.packb(msgpack.unpackb(path.read_bytes())[:5]))
    loaded, offset = ProducerState.load(path)
    assert offset == 11 and loaded.check(marker(pid=1), Marker(True, 13)) is None
    assert loaded.active()[0].coordinator_epoch == -1


def test_open_and_aborted_transactions_survive_a_snapshot(tmp_path):
    s = ProducerState()
    s.record(batch(pid=1, transactional=True), 10)
    s.record(marker(pid=1), 20, ABORT)
    s.record(batch(pid=2, transactional=True), 30)
    s.save(tmp_path / "producer-state", offset=31)
    loaded, _ = ProducerState.load(tmp_path / "producer-state")
    assert loaded.first_unstable(31) == 30
    assert loaded.aborted(0, 100) == [AbortedTxn(1, 10, 20)]


def test_a_snapshot_written_before_transactions_still_loads(tmp_path):
    path = tmp_path / "producer-state"
    path.write_bytes(msgpack.packb([50, [[1, 2, [[0, 9, 40]]]]]))
    loaded, offset = ProducerState.load(path)
    assert offset == 50 and loaded.check(batch(pid=1, epoch=2, seq=0)).base_offset == 40
    assert loaded.first_unstable(50) is None


def test_active_producers_list_open_transactions_first_then_the_latest_written():
    """DescribeProducers' view: an operator looks for the transaction holding the last stable
    offset back, so open ones come first, oldest first; a producer whose sequences were
    evicted still shows while its transaction is open (its epoch unknown: -1)."""
    s = ProducerState()
    s.record(batch(pid=1, epoch=2, seq=0, count=5), 0)  # sequences 0-4
    s.record(batch(pid=2, transactional=True), 5)
    s.record(batch(pid=3, transactional=True), 15)
    s.record(batch(pid=2, seq=10, transactional=True), 25)  # same transaction: from 5
    s.record(batch(pid=4, seq=-1), 35)  # no sequence (the group coordinator's)
    s.record(marker(pid=3), 36, COMMIT)
    assert s.active() == [
        ActiveProducer(2, 0, 19, 5),
        ActiveProducer(4, 0, -1, -1),
        ActiveProducer(3, 0, 9, -1, 0),  # its marker's coordinator epoch: 0
        ActiveProducer(1, 2, 4, -1),
    ]
    for pid in range(100, 100 + MAX_PRODUCERS):  # pid 2's sequences are evicted
        s.record(batch(pid=pid), 40)
    found = s.active()
    assert len(found) == MAX_PRODUCERS  # bounded, open transactions included
    assert found[0] == ActiveProducer(2, -1, -1, 5)
    assert found[1] == ActiveProducer(100 + MAX_PRODUCERS - 1, 0, 9, -1)


def test_a_transaction_is_open_here_from_its_first_batch_to_its_marker_in_its_epoch():
    """What spares a transaction's later batches on the partition the coordinator's check
    (Kafka's verification guard): only its first batch needs it."""
    s = ProducerState()
    assert not s.transaction_open(1, 0)
    s.record(batch(pid=1, transactional=True), 10)
    assert s.transaction_open(1, 0)
    assert not s.transaction_open(1, 1)  # another epoch: a new instance, asked again
    s.record(marker(pid=1), 20, COMMIT)
    assert not s.transaction_open(1, 0)
