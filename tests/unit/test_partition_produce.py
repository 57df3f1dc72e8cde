"""What a producer relies on from a partition's leader: the produce queue, acks=0/1/all,
the bound on uncommitted bytes, timeouts and idempotent producers' answers. Three real
replicas (Raft groups on the core, segment logs) on the in-process network of
tests/support/replicas.py; the clock moves only when a test steps it, and a test holds
the followers' answers back to keep an entry uncommitted for as long as it needs."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from support.raftnet import Clock
from support.replicas import IDS, Replicas, settings, values
from support.wire import make_batch

import raftlog.partition.produce_queue as produce_queue
from raftlog.api.values import ProduceResult
from raftlog.common.errors import ErrorCode
from raftlog.partition.partition import Partition
from raftlog.raft.window_entries import DATA_PREFIX
from raftlog.storage.batch import parse_header

from .test_batch import HEADER_SIZE, reseal

GZIP, LZ4 = 1, 3


@pytest.fixture
async def replicas(tmp_path: Path):
    clock = Clock()
    r = Replicas(tmp_path, clock)
    yield r
    r.close()


def batch(*vals: bytes, producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    """One uncompressed batch holding `vals` (no key)."""
    return make_batch([(None, v) for v in vals], producer=producer)


def seq_batch(pid: int, first: int, count: int, epoch: int = 0) -> bytes:
    """An idempotent producer's batch: sequences first..first+count-1, values p<pid>-s<seq>."""
    return batch(
        *(b"p%d-s%d" % (pid, first + i) for i in range(count)), producer=(pid, epoch, first)
    )


def gzip_batch(*vals: bytes, codec: int = GZIP) -> bytes:
    """A gzip (or `codec`) batch (kafka-python sends a batch uncompressed when gzip would not
    shrink it: values long and alike enough that it does)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, v in enumerate(vals):
        builder.append(i, timestamp=1_700_000_000_000, key=None, value=v, headers=[])
    built = bytes(builder.build())
    assert parse_header(built).compression == codec
    return built


def appended(p: Partition) -> list[bytes]:
    """Every record value in the replica's log, committed or not."""
    return values(p, p.log_end_offset)


def hold_answers(replicas: Replicas, leader: str, of: Sequence[str] | None = None) -> None:
    """The followers' (or those in `of`) Raft answers to the leader are lost: it cannot
    commit. Their nodes' pings still arrive, so it keeps leading (CheckQuorum)."""
    senders = set(of) if of is not None else set(IDS) - {leader}
    replicas.net.drop = lambda src, dst, msg: dst == leader and src in senders and "core" in msg


def release(replicas: Replicas) -> None:
    """The answers arrive again (from the next heartbeat on)."""
    replicas.net.drop = None


async def leading(replicas: Replicas) -> tuple[str, Partition]:
    """The elected leader, once every replica holds its term's first entry."""
    leader = await replicas.leader()
    await replicas.run(0.3)  # the new term's no-op everywhere, the group quiet
    return leader, replicas.partitions[leader]


def done(*answers: asyncio.Future) -> list[ProduceResult]:
    """The answers, which must all be there already (no waiting on real time)."""
    assert all(a.done() for a in answers), [a.done() for a in answers]
    return [a.result() for a in answers]


# --- the produce queue ------------------------------------------------------------------------


async def test_requests_behind_the_proposals_in_flight_go_as_one_entry_in_arrival_order(
    replicas: Replicas,
) -> None:
    """PROPOSALS_IN_FLIGHT requests are proposed at once; the rest wait in the queue and
    go as one Raft entry once one proposal settles. Each request, whatever its size and
    however many batches it carries, is answered with the offset where its own first
    record landed, and the records lie in the order the requests arrived."""
    leader, p = await leading(replicas)
    hold_answers(replicas, leader)
    entries, sizes = len(p.journal), [1, 4, 2, 7, 3]
    requests = [[b"r%d-%d" % (n, i) for i in range(size)] for n, size in enumerate(sizes)]
    answers = [replicas.send(leader, batch(*vals)) for vals in requests]
    # one request of two batches, queued behind the others
    two = [b"two-a", b"two-b", b"two-c"]
    answers.append(replicas.send(leader, batch(*two[:1]) + batch(*two[1:])))
    requests.append(two)
    await replicas.run(0.3)
    assert len(p.journal) - entries == produce_queue.PROPOSALS_IN_FLIGHT == 2
    assert appended(p) == requests[0] + requests[1]  # the others are queued, not in the log
    assert not any(a.done() for a in answers)
    release(replicas)
    await replicas.run(0.3)
    results = done(*answers)
    assert [r.error for r in results] == [ErrorCode.none] * len(requests)
    assert len(p.journal) - entries == 3
    log = values(p)
    assert log == [v for vals in requests for v in vals]
    for vals, result in zip(requests, results, strict=True):
        assert log[result.base_offset : result.base_offset + len(vals)] == vals
    assert all(values(r) == log for r in replicas.partitions.values())


async def test_a_queue_longer_than_an_entry_may_be_goes_as_several_entries(
    replicas: Replicas,
) -> None:
    """No entry reaches max_message_bytes (pysyncobj mis-sends larger ones): the queue
    goes as several entries, requests whole and in order; one request that alone reaches
    the bound is refused at once (RECORD_LIST_TOO_LARGE)."""
    leader, p = await leading(replicas)
    context = replicas.contexts[leader]
    context.timings = dataclasses.replace(context.timings, max_message_bytes=1200)
    too_big = replicas.send(leader, batch(b"x" * 1200))
    assert done(too_big)[0].error == ErrorCode.record_list_too_large
    hold_answers(replicas, leader)
    entries = len(p.journal)
    requests = [batch(b"%d" % i + b"." * 300) for i in range(10)]
    assert 3 * len(requests[0]) < 1200 - len(DATA_PREFIX) < 4 * len(requests[0])
    answers = [replicas.send(leader, r) for r in requests]
    await replicas.run(0.2)
    release(replicas)
    await replicas.run(0.5)
    assert [r.base_offset for r in done(*answers)] == list(range(10))
    assert len(p.journal) - entries == 2 + 3  # the eight queued: three, three, two
    assert [v[:1] for v in values(p)] == [b"%d" % i for i in range(10)]


# --- acks ---------------------------------------------------------------------------------------


async def test_acks_all_is_answered_once_a_majority_holds_the_entry(replicas: Replicas) -> None:
    """acks=all: not while the followers have the records but the leader has not heard so
    (the leader alone is no majority); as soon as one follower's answer arrives, with
    the offset the records have in the committed log."""
    leader, p = await leading(replicas)
    first = replicas.send(leader, batch(b"a", b"b"))
    await replicas.run(0.2)
    assert done(first)[0].base_offset == 0
    hold_answers(replicas, leader)
    answer = replicas.send(leader, batch(b"c", b"d", b"e"))
    await replicas.run(0.5)
    assert all(r.log_end_offset == 5 for r in replicas.partitions.values())
    assert not answer.done() and p.high_watermark == 2
    slow = next(i for i in IDS if i != leader)
    hold_answers(replicas, leader, of=[slow])  # the other follower answers
    await replicas.run(0.2)  # its answer to the next heartbeat
    assert done(answer)[0] == ProduceResult(base_offset=2, log_start_offset=0)
    assert p.high_watermark == 5 and values(p) == [b"a", b"b", b"c", b"d", b"e"]


async def test_acks_1_is_answered_once_the_leader_has_appended(replicas: Replicas) -> None:
    """acks=1, Kafka's leader-only acknowledgement: answered with its offset when the
    leader has the records in its log, without waiting for a follower; an acks=all
    request proposed with it still waits for the commit."""
    leader, p = await leading(replicas)
    hold_answers(replicas, leader)
    one = replicas.send(leader, batch(b"x", b"y"), acks=1)
    everyone = replicas.send(leader, batch(b"z"), acks=-1)
    await replicas.step()
    assert done(one)[0] == ProduceResult(base_offset=0, log_start_offset=0)
    assert p.high_watermark == 0 and not everyone.done()
    release(replicas)
    await replicas.run(0.2)
    assert done(everyone)[0].base_offset == 2
    assert values(p) == [b"x", b"y", b"z"]


async def test_acks_0_gets_no_offset_and_keeps_its_place(replicas: Replicas) -> None:
    """acks=0: the answer (which the handler never sends) is there at once, without an
    offset; the records still go into the log between the requests before and after it."""
    leader, p = await leading(replicas)
    before = replicas.send(leader, batch(b"a"))
    silent = replicas.send(leader, batch(b"b", b"c"), acks=0)
    assert done(silent)[0] == ProduceResult(base_offset=-1, log_start_offset=0)
    after = replicas.send(leader, batch(b"d"))
    await replicas.run(0.3)
    assert [r.base_offset for r in done(before, after)] == [0, 3]
    assert values(p) == [b"a", b"b", b"c", b"d"]
    refused = await replicas.send(leader, b"garbage", acks=0)
    assert refused.error == ErrorCode.corrupt_message  # the handler closes the connection


# --- losing leadership ----------------------------------------------------------------------


async def test_a_leader_that_steps_down_answers_what_it_did_not_commit_at_once(
    replicas: Replicas,
) -> None:
    """A leader cut off from its followers steps down (CheckQuorum) and answers every request
    it did not commit at once, never as a success: those in its Raft log REQUEST_TIMED_OUT
    ("possibly persisted": a next leader holding them could still commit them, FORK 5), those
    still in its queue NOT_LEADER_OR_FOLLOWER. The client retries where the new leader is;
    here the new leader never got them, and they are gone from every log."""
    old, p = await leading(replicas)
    replicas.net.isolate(old)
    answers = [replicas.send(old, batch(b"lost-%d" % i)) for i in range(4)]
    await replicas.step()
    assert appended(p) == [b"lost-0", b"lost-1"]  # two in flight, two queued
    while p.is_leader:
        assert not any(a.done() for a in answers)
        await replicas.step()
    errors = [r.error for r in done(*answers)]
    assert errors == [ErrorCode.request_timed_out] * 2 + [ErrorCode.not_leader_or_follower] * 2
    others = tuple(i for i in IDS if i != old)
    new = await replicas.leader(among=others)
    after = replicas.send(new, batch(b"kept"))
    replicas.net.heal()
    await replicas.run(1.0)
    assert done(after)[0].base_offset == 0
    assert all(values(r) == [b"kept"] for r in replicas.partitions.values())
    assert appended(p) == [b"kept"]


# --- the bound on uncommitted bytes -------------------------------------------------------------


async def test_a_leader_stops_proposing_at_the_uncommitted_bound_and_resumes_on_commit(
    replicas: Replicas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With followers that do not answer, the leader's log runs ahead of its commit index
    only by UNCOMMITTED_BYTES (and the proposal that crossed it): later requests wait in
    the queue rather than grow a backlog its followers must walk. Commits let them in,
    in order. (The proposal count bound is lifted here so only the byte bound acts.)"""
    monkeypatch.setattr(produce_queue, "PROPOSALS_IN_FLIGHT", 1000)
    monkeypatch.setattr(produce_queue, "UNCOMMITTED_BYTES", 2000)
    leader, p = await leading(replicas)
    hold_answers(replicas, leader)
    requests = [batch(b"%d" % i + b"." * 500) for i in range(10)]
    answers = [replicas.send(leader, r) for r in requests]
    proposal = len(DATA_PREFIX) + len(requests[0])
    expected = -(-2000 // proposal)  # the first that reaches the bound is the last proposed
    assert expected < len(requests)
    await replicas.run(0.5)
    assert len(appended(p)) == expected
    assert all(len(appended(r)) == expected for r in replicas.partitions.values())
    assert not any(a.done() for a in answers)
    release(replicas)
    await replicas.run(0.5)
    results = done(*answers)
    assert [r.base_offset for r in results] == list(range(10))
    assert [v[:1] for v in values(p)] == [b"%d" % i for i in range(10)]


# --- timeouts -------------------------------------------------------------------------------------


async def test_a_timed_out_request_answers_request_timed_out_and_keeps_its_place(
    replicas: Replicas,
) -> None:
    """A request whose timeout passes before its commit answers REQUEST_TIMED_OUT (here a
    timeout of 0: Kafka's answer-now). Its records are not withdrawn: they keep their place
    between the requests around it, which are answered with their own offsets, and the
    producer's retry is answered with where the first copy landed."""
    leader, p = await leading(replicas)
    hold_answers(replicas, leader)
    before = replicas.send(leader, batch(b"a"))
    late = replicas.send(leader, seq_batch(9, 0, 2), timeout_ms=0)
    after = replicas.send(leader, batch(b"d"))
    await replicas.step()
    assert done(late)[0].error == ErrorCode.request_timed_out
    assert not before.done() and not after.done()
    release(replicas)
    await replicas.run(0.3)
    assert [r.base_offset for r in done(before, after)] == [0, 3]
    assert values(p) == [b"a", b"p9-s0", b"p9-s1", b"d"]
    retry = replicas.send(leader, seq_batch(9, 0, 2))
    await replicas.run(0.2)
    assert done(retry)[0] == ProduceResult(base_offset=1, log_start_offset=0)
    assert len(values(p)) == 4


# --- idempotent producers -------------------------------------------------------------------------


async def test_a_retried_batch_is_answered_with_its_first_offset_and_written_once(
    replicas: Replicas,
) -> None:
    """A producer that lost an answer resends the batch with the same sequence numbers:
    whether the first copy is committed or still on its way through Raft (in flight or
    queued), the retry answers where that copy landed and adds nothing to the log."""
    leader, p = await leading(replicas)
    first = replicas.send(leader, seq_batch(7, 0, 10))
    other = replicas.send(leader, seq_batch(8, 0, 5))
    await replicas.run(0.2)
    assert [r.base_offset for r in done(first, other)] == [0, 10]
    retry = replicas.send(leader, seq_batch(7, 0, 10))
    await replicas.run(0.2)
    assert done(retry)[0] == ProduceResult(base_offset=0, log_start_offset=0)
    assert p.log_end_offset == 15
    # Twice more while the first copy is uncommitted: one retry in the proposal after
    # it, one in the queue behind both.
    hold_answers(replicas, leader)
    copies = [replicas.send(leader, seq_batch(7, 10, 3)) for _ in range(3)]
    await replicas.run(0.2)
    assert not any(c.done() for c in copies)
    release(replicas)
    await replicas.run(0.3)
    assert [r.base_offset for r in done(*copies)] == [15, 15, 15]
    assert [r.error for r in done(*copies)] == [ErrorCode.none] * 3
    assert values(p) == [b"p7-s%d" % s for s in range(10)] + [b"p8-s%d" % s for s in range(5)] + [
        b"p7-s%d" % s for s in range(10, 13)
    ]


async def test_sequence_errors_refuse_only_their_own_request(replicas: Replicas) -> None:
    """In one Raft entry: a batch with a gap in its producer's sequences (OUT_OF_ORDER_
    SEQUENCE_NUMBER) and one from a fenced (older) producer epoch (INVALID_PRODUCER_EPOCH)
    are left out of the log; the requests around them are written and answered with
    offsets that count only what was written."""
    leader, p = await leading(replicas)
    setup = [replicas.send(leader, seq_batch(7, 0, 5)), replicas.send(leader, seq_batch(8, 0, 1))]
    await replicas.run(0.2)
    setup.append(replicas.send(leader, seq_batch(8, 0, 2, epoch=1)))  # pid 8 bumps its epoch
    await replicas.run(0.2)
    assert [r.base_offset for r in done(*setup)] == [0, 5, 6]
    hold_answers(replicas, leader)
    entries = len(p.journal)
    filler = [replicas.send(leader, batch(b"f%d" % i)) for i in range(2)]  # both in flight
    ok_1 = replicas.send(leader, seq_batch(9, 0, 2))
    gap = replicas.send(leader, seq_batch(7, 6, 1))  # 5 was never sent
    fenced = replicas.send(leader, seq_batch(8, 1, 1, epoch=0))
    ok_2 = replicas.send(leader, seq_batch(7, 5, 3))
    release(replicas)
    await replicas.run(0.3)
    assert len(p.journal) == entries + 3  # the four after the fillers as one entry
    results = done(*filler, ok_1, gap, fenced, ok_2)
    assert [r.error for r in results] == [
        ErrorCode.none,
        ErrorCode.none,
        ErrorCode.none,
        ErrorCode.out_of_order_sequence_number,
        ErrorCode.invalid_producer_epoch,
        ErrorCode.none,
    ]
    assert [results[i].base_offset for i in (0, 1, 2, 5)] == [8, 9, 10, 12]
    assert values(p)[8:] == [b"f0", b"f1", b"p9-s0", b"p9-s1", b"p7-s5", b"p7-s6", b"p7-s7"]
    assert all(values(r) == values(p) for r in replicas.partitions.values())


async def test_a_new_leader_judges_retries_by_the_producer_state_it_rebuilt(
    replicas: Replicas,
) -> None:
    """Producer state is built by every replica from the batches it appends (and, after a
    restart, from its files): after a leader change, and after every replica restarted,
    the leader of the day still answers a retry with the original offset, refuses a
    sequence gap, and appends the next batch after the last. The gap is refused as retriable
    while the producer's newest batch is one this leader did not judge (requests to an
    earlier leader may still be retried: producer_state.py), then as Kafka does."""
    old, _ = await leading(replicas)
    for first in (0, 10):
        replicas.send(old, seq_batch(7, first, 10))
        await replicas.run(0.2)
    replicas.net.isolate(old)
    new = await replicas.leader(among=tuple(i for i in IDS if i != old))
    retry, gap = replicas.send(new, seq_batch(7, 0, 10)), replicas.send(new, seq_batch(7, 30, 5))
    await replicas.run(0.2)
    assert done(retry)[0].base_offset == 0
    assert done(gap)[0].error == ErrorCode.not_enough_replicas
    replicas.net.heal()
    await replicas.run(1.0)
    assert all(len(values(r)) == 20 for r in replicas.partitions.values())
    for node_id in IDS:
        replicas.crash_and_restart(node_id)
    leader, p = await leading(replicas)
    retry, gap = (
        replicas.send(leader, seq_batch(7, 10, 10)),
        replicas.send(leader, seq_batch(7, 30, 1)),
    )
    nxt = replicas.send(leader, seq_batch(7, 20, 10))
    later_gap = replicas.send(leader, seq_batch(7, 40, 1))
    await replicas.run(0.3)
    assert done(retry)[0].base_offset == 10
    assert done(gap)[0].error == ErrorCode.not_enough_replicas
    assert done(nxt)[0].base_offset == 20
    assert done(later_gap)[0].error == ErrorCode.out_of_order_sequence_number
    assert values(p) == [b"p7-s%d" % s for s in range(30)]


# --- compressed batches ----------------------------------------------------------------------------


async def checks_finished(p: Partition) -> None:
    """Waits for the compressed-batch checks the leader's queue is waiting on (they run in a
    thread, on real time, so no clock step finishes them)."""
    checks = [r.checked for r in p.produce_queue._queue if r.checked is not None]
    await asyncio.wait_for(asyncio.gather(*checks, return_exceptions=True), 30)
    await asyncio.sleep(0)  # their done callbacks propose


@pytest.mark.parametrize("codec", [GZIP, LZ4])
async def test_a_compressed_batch_keeps_its_place_while_it_is_checked(
    replicas: Replicas, codec: int
) -> None:
    """A compressed batch is opened before it is proposed (gzip in a thread, a short lz4
    one on the event loop: check_inline); the requests after it wait for it rather than
    overtake it (a connection's writes land in order), and a batch that does not open is
    refused alone."""
    leader, p = await leading(replicas)
    zipped = [b"z%d" % i * 100 for i in range(3)]
    packed = replicas.send(leader, gzip_batch(*zipped, codec=codec))
    plain = replicas.send(leader, batch(b"p"))
    await checks_finished(p)
    await replicas.run(0.2)
    assert [r.base_offset for r in done(packed, plain)] == [0, 3]
    # a batch whose payload is not in its codec (the batch's CRC made valid)
    broken = bytearray(gzip_batch(b"never" * 100, codec=codec)[:HEADER_SIZE]) + b"not at all"
    refused = replicas.send(leader, bytes(reseal(broken)))
    after = replicas.send(leader, batch(b"q"))
    await checks_finished(p)
    await replicas.run(0.2)
    assert done(refused)[0].error == ErrorCode.corrupt_message
    assert done(after)[0].base_offset == 4
    assert values(p) == [*zipped, b"p", b"q"]


async def test_a_short_lz4_batch_is_checked_on_the_event_loop_and_a_long_one_in_a_thread(
    replicas: Replicas,
) -> None:
    """A batch as the bench's producer sends it (1,000 records of 1 KiB, half random, so 2:1
    in lz4) is checked as it arrives, with no thread for the queue to wait on, and one a
    record short is refused at once; a batch decompressing to more than INLINE_RATIO times
    its size (a bomb's shape) is checked in a thread, and written once it passes."""
    leader, p = await leading(replicas)
    rng = random.Random(45)
    vals = [rng.randbytes(512) + b"x" * 512 for _ in range(1000)]
    sent = replicas.send(leader, gzip_batch(*vals, codec=LZ4))
    assert [r for r in p.produce_queue._queue if r.checked is not None] == []
    short = bytearray(gzip_batch(*vals[:10], codec=LZ4))
    short[57:61] = (11).to_bytes(4, "big")  # eleven records claimed, ten inside
    refused = replicas.send(leader, bytes(reseal(short)))
    await asyncio.sleep(0)
    assert done(refused)[0].error == ErrorCode.corrupt_message
    await replicas.run(0.2)
    assert done(sent)[0].base_offset == 0
    alike = replicas.send(leader, gzip_batch(*[b"a" * 1000] * 100, codec=LZ4))
    assert [r.checked is not None for r in p.produce_queue._queue] == [True]
    await checks_finished(p)
    await replicas.run(0.2)
    assert done(alike)[0].base_offset == 1000
    assert values(p) == [*vals, *[b"a" * 1000] * 100]


async def test_compression_type_stores_every_batch_rebuilt_when_rebuilds_end_together(
    replicas: Replicas,
) -> None:
    """compression.type: each request's batches are rebuilt in a thread (here lz4 ones, on
    an uncompressed topic) and the rebuilt ones proposed. The rebuilds of several requests
    may end in one turn of the loop (the loop busy meanwhile, as here): the first one's end
    proposes the others that are done too, which once went into the log as the producer
    sent them, still lz4."""
    leader, p = await leading(replicas)
    p.apply_settings({**settings(), "compression.type": "uncompressed"})
    sent = [replicas.send(leader, gzip_batch(b"v%d" % i * 100, codec=LZ4)) for i in range(4)]
    checks = [r.checked for r in p.produce_queue._queue if r.checked is not None]
    assert len(checks) == 4
    while not all(c.done() for c in checks):
        time.sleep(0.05)  # the loop busy: every thread that ends meanwhile is seen in one turn
        await asyncio.sleep(0)
    await asyncio.sleep(0)  # their done callbacks propose
    await replicas.run(0.2)
    assert [r.error for r in done(*sent)] == [ErrorCode.none] * 4
    assert values(p) == [b"v%d" % i * 100 for i in range(4)]
    stored = MemoryRecords(bytes(p.log.read(0, 1 << 22, p.high_watermark, True)))
    codecs = []
    while (stored_batch := stored.next_batch()) is not None:
        codecs.append(stored_batch.compression_type)
    assert codecs == [0] * 4


@pytest.mark.parametrize("recompressed", [False, True])
async def test_a_compacted_topic_refuses_records_without_a_key_and_stores_nothing_of_them(
    replicas: Replicas, recompressed: bool
) -> None:
    """cleanup.policy=compact (with compression.type gzip: each batch rebuilt in a thread):
    a batch with a keyless record is INVALID_RECORD naming it, whether read on the event
    loop (small and plain) or in a thread (compressed), and nothing of it is stored; keyed
    batches are written, and the requests keep their order."""
    leader, p = await leading(replicas)
    extra = {"compression.type": "gzip"} if recompressed else {}
    p.apply_settings({**settings(), "cleanup.policy": "compact,delete", **extra})
    why = "Compacted topic cannot accept message without key in topic partition t-0"
    sent = [
        replicas.send(leader, make_batch([(b"k0", b"a"), (None, b"b")])),
        replicas.send(leader, gzip_batch(b"z" * 100, b"y" * 100)),  # no keys
        replicas.send(leader, gzip_batch(b"x" * 100, codec=LZ4)),
        replicas.send(leader, make_batch([(b"k1", b"kept"), (b"", b"kept too")])),
    ]
    await checks_finished(p)
    await replicas.run(0.2)
    answers = done(*sent)
    assert [(a.error, a.record_errors) for a in answers] == [
        (ErrorCode.invalid_record, ((1, why),)),
        (ErrorCode.invalid_record, ((0, why), (1, why))),
        (ErrorCode.invalid_record, ((0, why),)),
        (ErrorCode.none, ()),
    ]
    assert answers[3].base_offset == 0
    assert values(p) == [b"kept", b"kept too"]


def test_a_lone_requests_batches_go_into_the_log_as_the_request_brought_them() -> None:
    """A proposal of one request holds that request's buffer itself, which the segment's
    writev sends as it is; several requests' batches are joined once. Either is the DATA
    command a follower receives."""
    one = produce_queue.ProduceRequest(b"batch-one", 1, 1, -1, None)
    two = produce_queue.ProduceRequest(b"batch-two", 1, 1, -1, None)
    alone = produce_queue.Proposal([one])
    assert alone.batches is one.records and len(alone) == 1 + len(one.records)
    both = produce_queue.Proposal([one, two])
    assert bytes(both) == DATA_PREFIX + b"batch-onebatch-two" and len(both) == len(bytes(both))
