"""Idempotent producers (kafka-python and the Java client enable idempotence by default).

The broker's duplicate detection is shown on the wire, where a retry can be sent at will.
With librdkafka a committed-but-unanswered batch is rarely resent across a failover (it
drains outstanding requests before moving to the new leader), so the failover test checks
what users rely on end to end: production with retries on carries on across a kill -9 with
no failed send and no record written twice."""

from __future__ import annotations

import collections

import pytest
from support import records as R
from support import wire as W
from support.cluster import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def test_sequence_rules_on_the_wire(cluster_factory):
    cluster = cluster_factory(name="sequences")
    cluster.create_topic("seq", partitions=1, replication_factor=3)
    _, leader_addr = W.find_partition_leader(cluster.bootstrap, "seq", 0)
    with W.KafkaWire(leader_addr) as w:
        error, pid, epoch = w.init_producer_id()
        assert error == W.NONE and pid >= 0 and epoch == 0
        first = W.make_batch([(b"k", b"a"), (b"k", b"b")], producer=(pid, epoch, 0))
        written = w.produce("seq", 0, first)
        assert written.error == W.NONE
        again = w.produce("seq", 0, first)  # the client's retry of a lost answer
        assert (again.error, again.base_offset) == (W.NONE, written.base_offset)
        gap = w.produce("seq", 0, W.make_batch([(b"k", b"c")], producer=(pid, epoch, 5)))
        assert gap.error == W.OUT_OF_ORDER_SEQUENCE_NUMBER
        nxt = w.produce("seq", 0, W.make_batch([(b"k", b"c")], producer=(pid, epoch, 2)))
        assert (nxt.error, nxt.base_offset) == (W.NONE, written.base_offset + 2)
        bumped = w.produce("seq", 0, W.make_batch([(b"k", b"d")], producer=(pid, epoch + 1, 0)))
        assert bumped.error == W.NONE
        stale = w.produce("seq", 0, W.make_batch([(b"k", b"e")], producer=(pid, epoch, 3)))
        assert stale.error == W.INVALID_PRODUCER_EPOCH
        other_pid = w.init_producer_id()[1]
        assert other_pid != pid
    values = [r.value for r in R.consume_confluent(cluster.bootstrap, "seq", {0: 4}, timeout=60)]
    assert values == [b"a", b"b", b"c", b"d"]


def _wire_batch(pid: int, epoch: int, seq: int) -> bytes:
    return W.make_batch([(b"w", b"wire-%d" % seq)], producer=(pid, epoch, seq))


def test_retries_across_a_leader_failure_write_each_record_once(cluster_factory):
    """Also, on the wire: the new leader answers a sequence gap from a producer whose batches
    only the old leader judged as retriable (NOT_ENOUGH_REPLICAS: the batches between may be
    retries still to come from requests to the old leader; OUT_OF_ORDER_SEQUENCE would make
    librdkafka bump its epoch and resend them as new records), and once it accepted one of
    the producer's batches itself, as Kafka does (OUT_OF_ORDER_SEQUENCE)."""
    cluster = cluster_factory(name="idempotence")
    cluster.create_topic("idem", partitions=1, replication_factor=3)
    W.topic_metadata(cluster.bootstrap, "idem")
    producer = R.ContinuousProducer(
        cluster.bootstrap, "idem", [0], run="idem", rate_per_s=4000, idempotent=True
    )
    producer.start()
    try:
        wait_for(lambda: producer.acked_count() >= 4000 or producer.error, 120, what="acks")
        leader, term = cluster.leader("idem", 0)
        with W.KafkaWire(cluster.node(leader).kafka) as w:
            _, pid, epoch = w.init_producer_id()
            for seq in (0, 1):
                assert w.produce("idem", 0, _wire_batch(pid, epoch, seq)).error == W.NONE
        cluster.kill(leader)
        new, _ = cluster.leader("idem", 0, timeout=60, exclude=[leader], min_term=term)
        with W.KafkaWire(cluster.node(new).kafka) as w:
            assert w.produce("idem", 0, _wire_batch(pid, epoch, 3)).error == W.NOT_ENOUGH_REPLICAS
            assert w.produce("idem", 0, _wire_batch(pid, epoch, 2)).error == W.NONE
            gap = w.produce("idem", 0, _wire_batch(pid, epoch, 4)).error
            assert gap == W.OUT_OF_ORDER_SEQUENCE_NUMBER
        before = producer.acked_count()
        wait_for(
            lambda: producer.acked_count() >= before + 4000 or producer.error,
            180,
            what="acks from the new leader",
        )
    finally:
        outcome = producer.stop()
    assert not outcome.failed, f"{len(outcome.failed)} sends failed: {outcome.failed[:3]}"

    live = ",".join(cluster.node(n).kafka for n in cluster.node_ids if n != leader)
    ends = W.end_offsets(live, "idem")
    got = R.consume_confluent(live, "idem", ends, timeout=180)
    copies = collections.Counter(r.value for r in got)
    duplicated = [v for v, n in copies.items() if n > 1]
    assert not duplicated, f"{len(duplicated)} records written twice, e.g. {duplicated[:3]}"
    assert sorted(v for v in copies if v.startswith(b"wire-")) == [b"wire-0", b"wire-1", b"wire-2"]
    R.check_log(
        outcome.acked, got, start_offsets={0: 0}, end_offsets=ends, foreign_ok=True
    ).raise_if_failed()
