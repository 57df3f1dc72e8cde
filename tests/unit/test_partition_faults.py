"""Partitions (segment log, journal, Raft group, producer state, produce queue) on three
replicas, under the exact message orders the network fault suite found, on an in-process
network with an injected clock (tests/support/replicas.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support.raftnet import Clock, message_types
from support.replicas import IDS, PID, Replicas, values
from support.wire import make_batch

from raftlog.api.values import ProduceResult
from raftlog.common.errors import ErrorCode
from raftlog.raft.driver import TICK_SECONDS


@pytest.fixture
async def replicas(tmp_path: Path):
    r = Replicas(tmp_path, Clock())
    yield r
    r.close()


async def test_a_leader_that_cannot_commit_its_term_answers_no_sequence_verdict(
    replicas: Replicas,
) -> None:
    """A suspect of the fault run's duplicates, reduced: E (sequences 10-19) is appended by
    leader L only; M is elected without it but never commits its term; F (20-29) reaches M.
    Had M answered OUT_OF_ORDER_SEQUENCE, librdkafka would bump its epoch and re-send E and
    F from sequence 0 while L, elected again, commits the first E: E twice. M's verdict
    only leaves with its entry's commit, so when it steps down M answers "possibly persisted"
    (REQUEST_TIMED_OUT: F is in its log), and the retries land after E, once each."""
    leader = await replicas.leader()
    first = replicas.produce(leader, 0, 10)
    await replicas.run(0.3)
    assert first.done() and first.result().error == ErrorCode.none
    m, n = (i for i in IDS if i != leader)
    replicas.net.isolate(leader)
    e = replicas.produce(leader, 10, 10)  # appended on L only
    await replicas.run(0.1)
    # M wins the next term with N's vote (N's own campaign is lost), but none of M's
    # appends ever arrive.
    replicas.net.drop = lambda src, _dst, msg: bool(
        (src == m and "app" in message_types(msg))
        or (src == n and message_types(msg) & {"prevote", "vote"})
    )
    for _ in range(60):
        await replicas.step()
        if replicas.partitions[m].is_leader:
            break
    assert replicas.partitions[m].is_leader and not replicas.partitions[m].term_committed
    f = replicas.produce(m, 20, 10)
    await replicas.run(0.2)
    answer: ProduceResult | None = f.result() if f.done() else None
    assert answer is None or answer.error != ErrorCode.out_of_order_sequence_number
    # M cannot commit its term and steps down; L (with E) returns and is elected with N.
    replicas.net.heal()
    replicas.net.isolate(m)
    # L still believes in its old term until it hears of M's: wait for a newer leader.
    m_term = replicas.partitions[m].group.term
    new = await replicas.leader(among=(leader, n), above_term=m_term)
    await replicas.run(1.0)
    assert f.done() and f.result().error == ErrorCode.request_timed_out
    assert e.done()
    # The client retries E and F where the leader now is, under the same producer epoch:
    # E is the copy L wrote (it committed with L's new term), F goes after it; once each.
    retry_e = replicas.produce(new, 10, 10)
    retry_f = replicas.produce(new, 20, 10)
    await replicas.run(0.5)
    assert retry_e.result() == ProduceResult(base_offset=10, log_start_offset=0)
    assert retry_f.result() == ProduceResult(base_offset=20, log_start_offset=0)
    assert values(replicas.partitions[new]) == [b"p7-s%d" % i for i in range(30)]


async def test_a_producer_snapshot_from_a_cut_tail_is_not_loaded_after_a_crash(
    replicas: Replicas,
) -> None:
    """A replica saved its producers (at a window compaction) with an uncommitted tail in
    its log; the tail was cut and the log grew past the snapshot's offset again. After a
    kill -9 the snapshot looked valid: the cut batch came back into the producer state at
    its old offset, and a retry of it was answered with that offset, not where it is."""
    old = await replicas.leader()
    await replicas.run(0.3)
    replicas.produce(old, 0, 10)
    await replicas.run(0.3)
    replicas.net.isolate(old)
    replicas.produce(old, 10, 10)  # E, offsets 10-19 on the old leader only
    await replicas.run(0.1)
    replicas.partitions[old].compacting()  # saves producers as of offset 20
    new = await replicas.leader(among=tuple(i for i in IDS if i != old))
    other = replicas.produce(new, 0, 5, pid=8)  # offsets 10-14
    e = replicas.produce(new, 10, 10)  # E again, at 15-24
    await replicas.run(0.5)
    assert other.result().base_offset == 10 and e.result().base_offset == 15
    replicas.net.heal()
    await replicas.run(2.0)
    assert replicas.partitions[old].log_end_offset == 25
    replicas.crash_and_restart(old)
    # The restarted replica is elected (the third one's campaigns are lost) and is asked
    # for E once more: it must know where E is.
    third = next(i for i in IDS if i not in (old, new))
    replicas.net.isolate(new)
    replicas.net.drop = lambda src, _dst, msg: bool(
        src == third and message_types(msg) & {"prevote", "vote"}
    )
    assert await replicas.leader(among=(old,)) == old
    retry = replicas.produce(old, 10, 10)
    await replicas.run(0.5)
    assert retry.result() == ProduceResult(base_offset=15, log_start_offset=0)


async def test_a_produce_racing_a_lost_leadership_is_refused_not_forwarded(
    replicas: Replicas,
) -> None:
    """A produce request was queued on the leader, and in the same loop turn the leader
    learned of a newer one. pysyncobj forwarded the queued command to the new leader,
    which appended it as it came, unjudged: a producer's retry of a batch already in the log
    went in a second time (and out-of-order sequences went in too). The core never forwards
    (FORK 6): the request is answered where it was sent, and the client retries."""
    old = await replicas.leader()
    first = replicas.produce(old, 0, 10)
    await replicas.run(0.3)
    assert first.result().base_offset == 0
    others = tuple(i for i in IDS if i != old)
    # The old leader's messages are lost and its peers' groups' answers too, but their nodes'
    # pings reach it (a busy node, FORK 10): it leads on while they elect another.
    for other in others:
        replicas.net.blocked.add((old, other))
    replicas.net.drop = lambda _src, dst, message: dst == old and "core" in message
    new = await replicas.leader(among=others)
    assert replicas.partitions[old].is_leader  # not yet told
    # The new leader's heartbeat is on its way when the client's retry reaches the old one.
    replicas.net.drop = None
    for _ in range(2):  # a heartbeat interval on the new leader's node alone
        replicas.clock.now += TICK_SECONDS
        replicas.driver(new).tick()
    for _ in range(3):
        await asyncio.sleep(0)  # the new leader's turn sends it
    assert any(dest == old for _src, dest, _m in replicas.net.queue)
    replicas.net.blocked.clear()
    retry = replicas.produce(old, 10, 10)
    replicas.net.deliver()
    assert not replicas.partitions[old].is_leader
    await replicas.run(1.0)
    assert retry.result().error in (ErrorCode.not_leader_or_follower, ErrorCode.request_timed_out)
    assert values(replicas.partitions[new]) == [b"p7-s%d" % i for i in range(10)]
    again = replicas.produce(new, 10, 10)  # the client's retry at the new leader: once
    await replicas.run(0.5)
    assert again.result().base_offset == 10
    assert all(
        values(p) == [b"p7-s%d" % i for i in range(20)] for p in replicas.partitions.values()
    )


async def test_a_follower_holding_the_snapshot_keeps_its_log(replicas: Replicas) -> None:
    """The leader started a snapshot for a follower whose log already held the snapshot's
    last entry and more (the fault suite saw it after a window compaction). The follower cut
    everything after the snapshot point, committed and acknowledged entries included, and
    fetched them again: for that while they had one copy fewer than acknowledged. Now it
    keeps its log (Raft's InstallSnapshot rule) and goes on by appends."""
    leader = await replicas.leader()
    for i in range(5):
        replicas.produce(leader, i * 10, 10)
        await replicas.run(0.1)
    lp = replicas.partitions[leader]
    lp.group.force_compaction()
    await replicas.run(0.3)
    assert lp.journal.has_snapshot()
    for i in range(5, 8):
        replicas.produce(leader, i * 10, 10)
        await replicas.run(0.1)
    follower = next(i for i in IDS if i != leader)
    fp = replicas.partitions[follower]
    assert fp.log_end_offset == lp.log_end_offset == 80
    raft = lp.group.raft
    raft.send_snapshot(int(follower), raft.progress[int(follower)])
    replicas.driver(leader).wake(lp.group)
    await replicas.run(1.0)
    history = (replicas.root / follower / "history.jsonl").read_text().splitlines()
    assert "truncation" not in {json.loads(line)["kind"] for line in history}
    after = replicas.produce(leader, 80, 10)
    await replicas.run(0.5)
    assert after.result().base_offset == 80
    assert fp.high_watermark == 90 and values(fp) == values(lp)
    # The abandoned transmission does not keep the leader from compacting again.
    first = lp.journal.first_index
    lp.group.force_compaction()
    await replicas.run(0.3)
    assert lp.journal.first_index > first


def raft_messages(replicas: Replicas) -> list[tuple[str, str, str]]:
    """Records every group message the Net carries from now on: (source, dest, type)."""
    seen: list[tuple[str, str, str]] = []

    def record(src: str, dst: str, frame: dict) -> bool:
        seen.extend((src, dst, kind) for kind in message_types(frame))
        return False

    replicas.net.drop = record
    return seen


async def quiet_after_a_write(replicas: Replicas) -> str:
    """The leader, once a write it took is acknowledged at once and every replica went quiet."""
    leader = await replicas.leader()
    first = replicas.produce(leader, 0, 5)
    await replicas.run(0.2)
    assert first.done() and first.result().error == ErrorCode.none
    await replicas.run(0.5)
    assert all(p.group.quiet for p in replicas.partitions.values())
    return leader


async def test_an_idle_partition_goes_quiet_and_wakes_for_a_produce(replicas: Replicas) -> None:
    """Idle groups cost nothing (issue 12): once every replica holds the leader's log, no
    group sends or ticks anything; a produce wakes the group and is acknowledged at once."""
    leader = await quiet_after_a_write(replicas)
    seen = raft_messages(replicas)
    await replicas.run(5.0)
    assert seen == []
    assert all(p.group.quiet for p in replicas.partitions.values())
    ack = replicas.produce(leader, 5, 5)
    await replicas.run(0.1)
    assert ack.done() and ack.result().error == ErrorCode.none
    await replicas.run(0.5)  # the followers learn the commit from the next heartbeat
    assert all(
        values(p) == values(replicas.partitions[leader]) for p in replicas.partitions.values()
    )
    assert all(p.group.quiet for p in replicas.partitions.values())
    assert len(values(replicas.partitions[leader])) == 10


@pytest.mark.parametrize("fault", ["isolated", "silent one way"])
async def test_a_quiet_partition_whose_leader_falls_silent_elects_another(
    replicas: Replicas, fault: str
) -> None:
    """No heartbeats flow in a quiet group, so the node-level pings stand in for them: a
    leader that cannot be heard wakes its followers' election timers, and a new leader is
    elected as fast as without quiet (an election timeout after the leader was last heard).
    The harness's nodes tick at phases of their own: 400 runs took 0.95-1.4 s (ticked in
    step, followers woken together split about one election in ten, and took up to 3.1 s)."""
    leader = await quiet_after_a_write(replicas)
    term = replicas.partitions[leader].group.term
    replicas.net.isolate(leader, incoming=fault == "isolated")
    others = tuple(i for i in IDS if i != leader)
    new = await replicas.leader(among=others, seconds=2.5, above_term=term)
    ack = replicas.produce(new, 5, 5)
    await replicas.run(0.2)
    assert ack.done() and ack.result().error == ErrorCode.none
    if fault == "isolated":
        await replicas.run(1.5)  # CheckQuorum, from when the old leader last heard its peers
        assert not replicas.partitions[leader].is_leader
    replicas.net.heal()
    await replicas.run(1.5)
    assert all(values(p) == values(replicas.partitions[new]) for p in replicas.partitions.values())
    assert all(p.group.quiet for p in replicas.partitions.values())


async def test_a_quiet_leader_held_past_its_lease_and_woken_by_a_write_leads_on(
    replicas: Replicas,
) -> None:
    """A quiet partition's leader node is held 0.8 s (SIGSTOP, a GC pause): its loop runs
    nothing, and its followers' pings wait unread. The first thing it runs after is a
    client's write, which wakes the group with its lease dated from when the mesh last read
    its followers' nodes, 0.8 s ago, and charged the hold as a leader awake through it is
    (its mesh's rounds stopped: Mesh.hold_ago, driver.wake_to_lead): Raft.resume's grace,
    in which its appends' answers keep it (e2e/test_stalled_leader.py holds a real node).
    It leads on: no election, no NOT_LEADER to its producers (stepped down at once, as a
    leader woken with its lease spent is, the write was refused). The followers, woken by its silence, had
    not stood yet: they stand a whole election timeout after it fell silent, less two
    keepalive rounds."""
    leader = await quiet_after_a_write(replicas)
    term = replicas.partitions[leader].group.term
    others = tuple(i for i in IDS if i != leader)
    unread: list[tuple[str, str, dict]] = []

    def hold(src: str, dst: str, frame: dict) -> bool:
        if dst == leader:
            unread.append((src, dst, frame))
            return True
        return False

    replicas.net.drop = hold
    for _ in range(16):  # 0.8 s: the others tick and ping, the held node runs nothing
        replicas.clock.now += TICK_SECONDS
        for node_id in others:
            replicas.meshes[node_id].keepalive()
            replicas.driver(node_id).tick()
        await replicas.settle()
    assert not any(replicas.partitions[i].group.quiet for i in others)  # woken by the silence
    replicas.net.drop = None
    ack = replicas.produce(leader, 5, 5)  # before it reads a byte of what waited
    for _ in range(3):
        await asyncio.sleep(0)  # the write is proposed, its turn sends the appends
    assert not replicas.partitions[leader].group.quiet
    replicas.net.queue.extendleft(reversed(unread))  # its sockets are read
    await replicas.settle()
    await replicas.run(2.0)  # four lease lengths
    assert ack.done() and ack.result().error == ErrorCode.none
    assert replicas.partitions[leader].is_leader
    assert all(p.group.term == term for p in replicas.partitions.values())


async def test_a_leader_whose_followers_nodes_are_heard_keeps_leading(
    replicas: Replicas,
) -> None:
    """CheckQuorum counts a follower as answering while its node is heard: on a node busy
    with a thousand groups, one group's answers can wait behind the others' for longer than
    the election timeout, and its leader must not step down for that. Once the nodes fall
    silent too, it does."""
    leader = await replicas.leader()
    others = tuple(i for i in IDS if i != leader)
    replicas.produce(leader, 0, 1)  # a group with work pending does not go quiet
    # the followers' answers of this group are lost; their nodes' pings still arrive
    replicas.net.drop = lambda source, dest, message: dest == leader and "core" in message
    for _ in range(60):  # 3 s: three times the time CheckQuorum gives
        await replicas.step()
        assert replicas.partitions[leader].is_leader
        assert not replicas.partitions[leader].group.quiet
        assert not any(replicas.partitions[i].is_leader for i in others)
    replicas.net.drop = lambda source, dest, message: dest == leader
    await replicas.run(1.5)
    assert not replicas.partitions[leader].is_leader


async def test_a_new_groups_other_replicas_give_its_first_one_the_first_election(
    replicas: Replicas,
) -> None:
    """The first replica (Kafka's preferred leader) of a group that never had an election
    stands alone for two election timeouts; the others stand after that. While its node is
    opening partitions, no partition replica stands at all (it still votes); a group that
    does not wait for openings (the controller's) ignores that."""
    first, second = (replicas.partitions[i].group for i in ("1", "2"))
    budget = replicas.driver("2").elections
    budget.held = True
    assert not second.may_stand()  # held: no deferral round used up
    budget.held = False
    assert [second.may_stand() for _ in range(3)] == [False, False, True]
    assert first.may_stand()
    assert await replicas.leader() == "1"
    assert replicas.partitions["1"].group.term == 1  # uncontested
    budget.held = True
    assert not second.may_stand()
    assert budget.take_unheld()


async def test_requests_arriving_while_two_proposals_are_in_raft_go_as_one_entry(
    replicas: Replicas,
) -> None:
    """A producer spread over 1,000 partitions sends tiny batches; as an entry each, every
    replica's Raft work per record was that of a whole entry (issue 12)."""
    leader = await replicas.leader()
    p = replicas.partitions[leader]
    await replicas.run(0.5)
    before = len(p.journal)
    acks = [replicas.produce(leader, 3 * i, 3) for i in range(10)]
    await replicas.run(0.5)
    results = [a.result() for a in acks]
    assert [r.error for r in results] == [ErrorCode.none] * 10
    assert [r.base_offset for r in results] == [results[0].base_offset + 3 * i for i in range(10)]
    assert len(p.journal) - before == 3  # two proposed at once, the eight after them as one
    expected = [b"p%d-s%d" % (PID, s) for s in range(30)]
    assert all(values(r)[-30:] == expected for r in replicas.partitions.values())


async def test_a_follower_holding_a_retried_batch_answers_possibly_persisted(
    replicas: Replicas,
) -> None:
    """A retry that reaches a follower after an earlier attempt was written: "not the leader"
    would tell librdkafka the batch was not written, and its next batch's success at the
    leader would look like skipped sequence numbers (an epoch bump, then duplicates)."""
    leader = await replicas.leader()
    first = replicas.produce(leader, 0, 10)
    await replicas.run(0.3)
    assert first.done() and first.result().error == ErrorCode.none
    follower = next(i for i in IDS if i != leader)
    again = replicas.produce(follower, 0, 10)  # the same batch, at a follower
    fresh = replicas.produce(follower, 10, 10)  # a batch nobody wrote
    await replicas.run(0.1)
    assert again.result().error == ErrorCode.request_timed_out
    assert fresh.result().error == ErrorCode.not_leader_or_follower


async def test_an_idle_partitions_checkpoint_leaves_its_producer_state_as_it_is(
    replicas: Replicas,
) -> None:
    """Every checkpoint saved the producer state with an fsync on the event loop, changed or
    not: at 3,000 idle partitions, 3,000 fsyncs a minute a node. A checkpoint after new
    batches still saves it, on every replica."""
    leader = await replicas.leader()
    replicas.produce(leader, 0, 5)
    await replicas.run(0.5)

    def saved() -> dict[int, int]:
        return {i: p._producer_path.stat().st_ino for i, p in replicas.partitions.items()}

    for p in replicas.partitions.values():
        p.compacting()
    first = saved()
    for p in replicas.partitions.values():
        p.compacting()
    assert saved() == first
    replicas.produce(leader, 5, 5)
    await replicas.run(0.5)
    for p in replicas.partitions.values():
        p.compacting()
    assert all(ino != first[i] for i, ino in saved().items())


def _batch(first_value: int, count: int, epoch: int, first_seq: int) -> bytes:
    """Producer PID's records p7-s<first_value>.. under `epoch`, from sequence `first_seq`."""
    return make_batch(
        [(None, b"p%d-s%d" % (PID, first_value + i)) for i in range(count)],
        producer=(PID, epoch, first_seq),
    )


async def test_a_gap_from_a_producer_the_new_leader_has_not_heard_keeps_its_sequences(
    replicas: Replicas,
) -> None:
    """The fault run's epoch bumps (4 in 300 cycles, 'skipped sequence numbers'), with the
    answers raftlog gave. Leader L appends R0 (sequences 10-19), which reaches both followers,
    and is cut off before it commits; M is elected and commits R0 with its term. R0's answer
    from L is "possibly persisted"; R1 (20-29), read by L once it knows it no longer leads, is
    NOT_LEADER (not written anywhere). librdkafka answers a failed request on the old leader's
    thread, and decrements the partition's in-flight count before it re-queues the failed
    batch and drains again: the new leader's thread can send R2 (30-39) ahead of R0 and R1's
    retries. M's log lacks 20-29. Answered OUT_OF_ORDER_SEQUENCE (Kafka's answer), R2 sends
    librdkafka (rdkafka_request.c: R2's sequence is past the first unacknowledged one) to bump
    its epoch and send R0, R1 and R2 again from sequence 0: R0, already committed by M, is
    written twice. Answered with a retriable error that keeps the sequence, the client retries
    R0 (found: its first offset), R1 and R2 under the same epoch: each record once."""
    old = await replicas.leader()
    first = replicas.produce(old, 0, 10)
    await replicas.run(0.3)
    assert first.result().error == ErrorCode.none
    replicas.net.isolate(old, outgoing=False)  # L's appends arrive, nothing reaches L
    r0 = replicas.send(old, _batch(10, 10, 0, 10))
    await replicas.run(0.1)
    assert all(replicas.partitions[i].log_end_offset == 20 for i in IDS)
    replicas.net.isolate(old)
    new = await replicas.leader(among=tuple(i for i in IDS if i != old))
    replicas.net.heal()
    await replicas.run(0.5)
    assert not replicas.partitions[old].is_leader
    assert r0.result().error == ErrorCode.request_timed_out
    r1 = replicas.send(old, _batch(20, 10, 0, 20))
    await replicas.run(0.1)
    assert r1.result().error == ErrorCode.not_leader_or_follower
    r2 = replicas.send(new, _batch(30, 10, 0, 30))
    await replicas.run(0.3)
    answer = r2.result().error
    # What librdkafka does with R2's answer (rd_kafka_handle_idempotent_Produce_error).
    if answer == ErrorCode.out_of_order_sequence_number:
        retries = [_batch(10 + 10 * i, 10, 1, 10 * i) for i in range(3)]  # epoch bumped
    else:
        assert answer == ErrorCode.not_enough_replicas  # retriable, not written
        retries = [_batch(10 + 10 * i, 10, 0, 10 + 10 * i) for i in range(3)]
    answers = [replicas.send(new, b) for b in retries]
    await replicas.run(0.3)
    assert [a.result().base_offset for a in answers] == [10, 20, 30]
    assert values(replicas.partitions[new]) == [b"p%d-s%d" % (PID, s) for s in range(40)]
