"""The share-partition manager on a real partition leader (three in-process replicas, real
Raft, injected clocks): what ShareFetch and ShareAcknowledge do to a share group's records,
and what of it outlives the leader (the state each replica applies from the Raft log)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords
from support.clock import ManualClock
from support.members import every_member
from support.raftnet import Clock
from support.replicas import IDS, Replicas
from support.wire import make_batch

from raftlog.common.errors import ErrorCode
from raftlog.config import group_config as gc
from raftlog.partition.partition import Partition
from raftlog.share import manager
from raftlog.share.manager import Fetched, ShareManager
from raftlog.share.partition_state import AckBatch, AckType, RecordState
from raftlog.share.sessions import LEAVE_GRACE_SECONDS

KEY = ("t", 0)
EARLIEST = {gc.AUTO_OFFSET_RESET: "earliest"}
ACCEPT, RELEASE, REJECT = AckType.ACCEPT, AckType.RELEASE, AckType.REJECT


class Rig:
    """The replicas, the node leading them, and one ShareManager per node (as each node has
    its own), all on one manual clock for locks."""

    def __init__(self, replicas: Replicas, node: str, **configs: str) -> None:
        self.replicas = replicas
        self.node = node
        self.clock = ManualClock()
        self.configs = {**EARLIEST, **configs}
        self.managers: dict[str, ShareManager] = {}

    @property
    def p(self) -> Partition:
        return self.replicas.partitions[self.node]

    @property
    def share(self) -> ShareManager:
        if self.node not in self.managers:
            self.managers[self.node] = ShareManager(
                lambda _group: gc.values(self.configs), every_member, self.clock
            )
        return self.managers[self.node]

    async def fetch(self, member: str, wait: float = 0.0) -> Fetched | None:
        got = await self.replicas.until(
            self.share.fetch("g", member, [(KEY, self.p)], wait, 1 << 20, 500)
        )
        return got.get(KEY)

    async def ack(self, member: str, *batches: tuple[int, int, AckType]) -> ErrorCode:
        acks = [AckBatch(first, last, (kind,)) for first, last, kind in batches]
        return await self.replicas.until(self.share.acknowledge("g", member, KEY, self.p, acks))

    def produce(self, count: int, first: int = 0) -> None:
        for i in range(first, first + count):
            self.replicas.send(self.node, make_batch([(None, b"v%d" % i)]))

    async def fail_over(self, crash: bool = True) -> None:
        """kill -9 of the leader (or its isolation), and another replica taking over."""
        old = self.node
        if crash:
            self.replicas.crash_and_restart(old)
            self.replicas.net.isolate(old)  # until the others have elected one of them
        else:
            self.replicas.net.isolate(old)
        self.node = await self.replicas.leader(among=tuple(i for i in IDS if i != old))
        self.replicas.net.heal()
        await self.replicas.run(0.3)


@pytest.fixture
async def rig(tmp_path: Path):
    clock = Clock()
    replicas = Replicas(tmp_path, clock)
    node = await replicas.leader()
    await replicas.run(0.3)
    rig = Rig(replicas, node)
    rig.produce(10)  # ten one-record batches: offsets 0..9
    await replicas.run(0.5)
    assert rig.p.high_watermark == 10
    yield rig
    replicas.close()


def values(fetched: Fetched | None) -> dict[int, bytes]:
    """offset -> value of the records the member holds (the client keeps only those)."""
    assert fetched is not None
    held = {o for r in fetched.acquired for o in range(r.first_offset, r.last_offset + 1)}
    records = MemoryRecords(fetched.records)
    found = {}
    while (batch := records.next_batch()) is not None:
        found.update({r.offset: r.value for r in batch if r.offset in held})
    return found


def counts(fetched: Fetched | None) -> dict[int, int]:
    """offset -> delivery count of what the member was handed."""
    assert fetched is not None
    return {
        o: r.delivery_count
        for r in fetched.acquired
        for o in range(r.first_offset, r.last_offset + 1)
    }


async def test_each_record_goes_to_one_member_and_a_release_brings_it_back(rig: Rig) -> None:
    first = await rig.fetch("a")
    assert values(first) == {i: b"v%d" % i for i in range(10)}
    assert set(counts(first).values()) == {1}
    assert await rig.fetch("b") is None  # everything is held by a
    assert await rig.ack("b", (0, 4, ACCEPT)) == ErrorCode.invalid_record_state
    assert await rig.ack("a", (0, 4, ACCEPT), (5, 9, RELEASE)) == ErrorCode.none
    again = await rig.fetch("b")
    assert counts(again) == dict.fromkeys(range(5, 10), 2)


async def test_an_expired_lock_and_a_closed_session_hand_records_back(rig: Rig) -> None:
    rig.configs[gc.RECORD_LOCK_DURATION_MS] = "15000"
    assert rig.share.lock_duration_ms("g") == 15000
    assert await rig.fetch("a") is not None
    await rig.clock.advance(14.9)
    assert await rig.fetch("b") is None
    await rig.clock.advance(0.2)  # a's lock ran out: the records are the group's again
    assert len(values(await rig.fetch("b"))) == 10
    rig.share.release("g", "b")  # b's session closed (ShareAcknowledge epoch -1)
    assert set(counts(await rig.fetch("c")).values()) == {3}


async def test_a_member_that_left_hands_its_records_back_before_their_locks_run_out(
    rig: Rig,
) -> None:
    """Its coordinator said it left or was fenced (share/members.py): its session here waits
    LEAVE_GRACE_SECONDS for its final acknowledgements (test_share_close.py), then ends, and
    the records it held go to the others before their locks (30 s) run out. A member without
    a session here hands them back at once."""
    step = rig.share.sessions.for_fetch("g", "a", 0, [KEY], [], False, False)
    assert step.error is ErrorCode.none
    assert await rig.fetch("a") is not None
    assert await rig.fetch("b") is None
    rig.share.member_left("g", "a")
    session = rig.share.sessions.get("g", "a")
    assert session is not None and session.left
    assert await rig.fetch("b") is None
    await rig.clock.advance(LEAVE_GRACE_SECONDS)
    assert rig.share.sessions.get("g", "a") is None
    assert set(counts(await rig.fetch("b")).values()) == {2}
    rig.share.member_left("g", "b")  # b fetched here through no session: nothing to wait for
    assert set(counts(await rig.fetch("c")).values()) == {3}


async def test_a_closed_connection_ends_its_sessions_and_hands_their_records_back(
    rig: Rig,
) -> None:
    """A consumer killed with kill -9 sends no final request: the close of the connection that
    opened its session ends it (Kafka's disconnect listener), what it acknowledged before
    stays acknowledged and the rest goes to the others at once, not after the 30 s locks;
    a member that left (its grace running) is released at the close too."""
    connection = object()
    for member in ("a", "c"):
        step = rig.share.sessions.for_fetch("g", member, 0, [KEY], [], False, False, connection)
        assert step.error is ErrorCode.none
    assert set(values(await rig.fetch("a"))) == set(range(10))
    assert await rig.ack("a", (0, 3, ACCEPT)) == ErrorCode.none
    rig.share.member_left("g", "c")
    assert await rig.fetch("b") is None  # a holds 4..9 for 30 s
    rig.share.connection_closed(connection)
    assert rig.share.sessions.get("g", "a") is None
    assert rig.share.sessions.get("g", "c") is None
    assert counts(await rig.fetch("b")) == dict.fromkeys(range(4, 10), 2)
    rig.share.connection_closed(connection)  # its second close: nothing more to end
    assert rig.share.sessions.get("g", "b") is None  # b fetched through no session


async def test_a_fetch_reads_on_until_it_has_enough_records(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log is read a chunk at a time (not the fetch's whole byte budget); a chunk that
    holds fewer records than the fetch may take is read again, larger."""
    monkeypatch.setattr(manager, "READ_START_BYTES", 100)  # one or two of the batches
    assert values(await rig.fetch("a")) == {i: b"v%d" % i for i in range(10)}


async def test_a_fetch_waits_for_new_records(rig: Rig) -> None:
    assert await rig.ack("a") == ErrorCode.invalid_record_state  # nothing started yet
    assert await rig.fetch("a") is not None
    waiting = asyncio.ensure_future(rig.share.fetch("g", "a", [(KEY, rig.p)], 30.0, 1 << 20, 9))
    await rig.replicas.run(0.2)
    assert not waiting.done()
    rig.produce(1, first=10)
    await rig.replicas.run(0.5)
    assert values((await waiting).get(KEY)) == {10: b"v10"}


async def test_the_group_starts_at_the_high_watermark_by_default(rig: Rig) -> None:
    del rig.configs[gc.AUTO_OFFSET_RESET]
    assert await rig.fetch("a") is None  # latest: only what comes after


async def test_a_read_committed_group_gets_only_what_transactions_committed(rig: Rig) -> None:
    """share.isolation.level=read_committed: records of an open transaction wait for its end
    (and hold back what follows them), an aborted transaction's are archived without ever
    being handed out, a committed one's are delivered; read_uncommitted gets them all."""
    rig.configs[gc.ISOLATION_LEVEL] = gc.READ_COMMITTED
    p, pid = rig.p, 7

    async def produce(batch: bytes, transactional: bool) -> None:
        answer = p.produce(batch, -1, 30_000, transactional=transactional)
        assert (await rig.replicas.until(asyncio.ensure_future(answer))).error == ErrorCode.none

    async def marker(commit: bool) -> None:
        answer = asyncio.ensure_future(p.write_marker(pid, 0, commit, 0))
        assert (await rig.replicas.until(answer)).error == ErrorCode.none

    def txn(value: bytes, seq: int) -> bytes:
        return make_batch([(None, value)], producer=(pid, 0, seq), transactional=True)

    assert set(values(await rig.fetch("a"))) == set(range(10))
    assert await rig.ack("a", (0, 9, ACCEPT)) == ErrorCode.none
    await produce(txn(b"aborted", 0), True)  # offset 10
    await produce(make_batch([(None, b"after")]), False)  # 11: behind the open transaction
    assert await rig.fetch("a") is None
    await marker(False)  # 12
    await produce(txn(b"committed", 1), True)  # 13
    await marker(True)  # 14
    await rig.replicas.run(0.3)
    got = values(await rig.fetch("a"))  # the markers (12, 14) too, which clients skip
    assert 10 not in got
    assert (got[11], got[13]) == (b"after", b"committed")
    view = rig.share.view("g", KEY, p)
    assert view is not None and view.start_offset == 11  # 10 archived: done, never delivered

    rig.configs[gc.ISOLATION_LEVEL] = gc.READ_UNCOMMITTED
    other = ShareManager(lambda _group: gc.values(rig.configs), every_member, rig.clock)
    everything = await rig.replicas.until(other.fetch("h", "b", [(KEY, p)], 0.0, 1 << 20, 500))
    assert values(everything.get(KEY))[10] == b"aborted"


# --- what outlives the leader -------------------------------------------------------------


async def test_a_new_leader_keeps_every_answered_ack_and_hands_the_rest_out_again(
    rig: Rig,
) -> None:
    assert len(values(await rig.fetch("a"))) == 10
    assert await rig.ack("a", (0, 2, ACCEPT), (3, 3, REJECT), (4, 5, RELEASE)) == ErrorCode.none
    assert await rig.ack("a", (7, 7, ACCEPT)) == ErrorCode.none
    await rig.fail_over(crash=True)
    state = rig.p.share_state("g")
    assert state is not None and state.start_offset == 4  # 0-2 accepted, 3 rejected
    # a's locks died with the old leader: 4-9 come back at once, but 7 (accepted) never;
    # the released 4-5 keep their delivery, 6, 8, 9 were only acquired (as in Kafka)
    assert counts(await rig.fetch("b")) == {4: 2, 5: 2, 6: 1, 8: 1, 9: 1}
    assert await rig.ack("b", (4, 6, ACCEPT), (8, 9, ACCEPT)) == ErrorCode.none
    assert rig.p.share_state("g").start_offset == 10  # type: ignore[union-attr]


async def test_an_ack_is_answered_only_once_committed(rig: Rig) -> None:
    assert await rig.fetch("a") is not None
    rig.replicas.net.isolate(rig.node)  # the leader can no longer reach a majority
    answer = asyncio.ensure_future(
        rig.share.acknowledge("g", "a", KEY, rig.p, [AckBatch(0, 9, (ACCEPT,))])
    )
    await rig.replicas.run(0.3)
    assert not answer.done()  # applied on the leader, but not committed
    await rig.replicas.run(2.0)  # the leader's lease runs out (CheckQuorum): never a success
    assert answer.done() and answer.result() == ErrorCode.not_leader_or_follower
    await rig.fail_over(crash=False)
    assert len(values(await rig.fetch("b"))) == 10  # the unanswered ACCEPT did not count


async def test_the_start_is_committed_before_records_are_handed_out(rig: Rig) -> None:
    """With `latest`, a group's start is the high watermark when it first fetches. A new
    leader must not start again at its own, later one and skip what came in between."""
    del rig.configs[gc.AUTO_OFFSET_RESET]
    assert await rig.fetch("a") is None  # starts at 10
    rig.produce(3, first=10)
    await rig.replicas.run(0.5)
    await rig.fail_over(crash=True)
    assert values(await rig.fetch("a")) == {10: b"v10", 11: b"v11", 12: b"v12"}


async def test_a_full_restart_after_the_window_was_cut_keeps_the_state(rig: Rig) -> None:
    assert len(values(await rig.fetch("a"))) == 10
    assert await rig.ack("a", (0, 5, ACCEPT), (6, 6, RELEASE)) == ErrorCode.none
    for p in rig.replicas.partitions.values():  # the commands leave the Raft window
        p.group.force_compaction()
    await rig.replicas.run(0.5)
    assert all(p.journal.has_snapshot() for p in rig.replicas.partitions.values())
    assert all((rig.replicas.root / n / "t-0" / "share-state").exists() for n in IDS)
    for node in IDS:
        rig.replicas.crash_and_restart(node)
    rig.managers.clear()
    rig.node = await rig.replicas.leader()
    assert counts(await rig.fetch("b")) == {6: 2, 7: 1, 8: 1, 9: 1}


async def test_a_follower_that_installs_a_snapshot_gets_the_share_state(rig: Rig) -> None:
    follower = next(i for i in IDS if i != rig.node)
    rig.replicas.net.isolate(follower)
    await rig.replicas.run(1.0)  # its node unheard: the leader cuts its window without it
    assert len(values(await rig.fetch("a"))) == 10
    assert await rig.ack("a", (0, 3, ACCEPT), (4, 4, RELEASE)) == ErrorCode.none
    rig.produce(5, first=10)
    await rig.replicas.run(0.3)
    rig.p.group.force_compaction()  # the ack's command leaves the leader's window
    await rig.replicas.run(0.3)
    assert rig.p.journal.first_index > 1
    rig.replicas.net.heal()
    await rig.replicas.run(2.0)
    fp = rig.replicas.partitions[follower]
    assert fp.log_end_offset == 15
    history = (rig.replicas.root / follower / "history.jsonl").read_text()
    assert '"snapshot_install"' in history  # it did not catch up by appends
    stored = fp.share_state("g")
    assert stored is not None and stored.start_offset == 4
    assert stored.runs() == [(4, 4, RecordState.AVAILABLE, 1)]
    assert stored.runs() == rig.p.share_state("g").runs()  # type: ignore[union-attr]


async def test_a_new_leader_hands_out_nothing_before_its_term_is_committed(rig: Rig) -> None:
    """A follower can hold an ack's update, answered by the old leader, without knowing yet
    that it is committed. Leading, it must not serve the group before its own term commits
    (which commits everything before): its applied state would hand the records out again."""
    f1, f2 = (i for i in IDS if i != rig.node)
    parts = rig.replicas.partitions
    assert len(values(await rig.fetch("a"))) == 10
    await rig.replicas.run(0.3)  # the group's start is committed on all three
    assert not parts[f1]._share_pending
    rig.replicas.net.isolate(f2)
    # f1 gets the update and confirms it, but never hears that it was committed
    rig.replicas.net.drop = lambda src, dst, _m: (
        (src, dst) == (rig.node, f1) and bool(parts[f1]._share_pending)
    )
    assert await rig.ack("a", (0, 9, ACCEPT)) == ErrorCode.none
    assert parts[f1].share_state("g").start_offset == 0  # type: ignore[union-attr]
    old = rig.node
    rig.replicas.crash_and_restart(old)
    rig.replicas.net.heal()
    rig.replicas.net.isolate(old)
    # f2's vote reaches f1; its answers to f1's appends, which would commit f1's term, do not
    rig.replicas.net.drop = lambda src, dst, _m: (src, dst) == (f2, f1) and parts[f1].is_leader
    rig.node = f1
    for _ in range(400):
        await rig.replicas.step()
        if rig.p.is_leader:
            break
    assert rig.p.is_leader and not rig.p.term_committed
    assert await rig.share.fetch("g", "b", [(KEY, rig.p)], 0.0, 1 << 20, 500) == {}
    rig.replicas.net.drop = None
    rig.node = await rig.replicas.leader(among=(f1,))
    assert rig.p.share_state("g").start_offset == 10  # type: ignore[union-attr]
    assert await rig.fetch("b") is None


async def test_a_deleted_groups_state_is_not_taken_up_again(rig: Rig) -> None:
    deletions = {"g": 0}
    rig.managers[rig.node] = ShareManager(
        lambda _group: gc.values(rig.configs),
        every_member,
        rig.clock,
        incarnation=deletions.__getitem__,
    )
    assert len(values(await rig.fetch("a"))) == 10
    assert await rig.ack("a", (0, 9, ACCEPT)) == ErrorCode.none
    assert await rig.fetch("a") is None  # all done
    deletions["g"] = 1  # DeleteGroups: the controller counts the deletion
    again = await rig.fetch("b")  # the group starts over, from share.auto.offset.reset
    assert counts(again) == dict.fromkeys(range(10), 1)
    assert await rig.ack("a", (0, 9, ACCEPT)) == ErrorCode.invalid_record_state  # b holds them
    stored = rig.p.share_state("g")
    assert stored is not None and (stored.incarnation, stored.start_offset) == (1, 0)
