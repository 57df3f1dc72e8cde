"""The Raft core over real segment journals (raft/replica.py's JournalLog), messages carried
through the driver's wire encoding: what the core decides lands in each replica's Kafka log
with the same offsets and epochs, a deposed leader's uncommitted tail is cut from its
segment, not only from the Raft window, and a follower behind a compacted leader installs its
snapshot through raft/install.py."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
from kafka.record.default_records import DefaultRecordBatchBuilder
from support.journal import RecordingListener

from raftlog.raft.core.raft import Raft
from raftlog.raft.core.replication import LEARNER_BURST
from raftlog.raft.core.rules import Config
from raftlog.raft.core.values import NONE, Entry, HardState, Message, MsgType, Role
from raftlog.raft.driver import TICK_SECONDS, decode, encode
from raftlog.raft.install import (
    CHUNK_BYTES,
    MAX_WAITS,
    WAIT_SECONDS,
    Installer,
    Installs,
    Later,
    chunks,
)
from raftlog.raft.journal import SegmentJournal
from raftlog.raft.membership import Membership
from raftlog.raft.replica import NO_OP, JournalLog
from raftlog.raft.window_entries import DATA_PREFIX
from raftlog.storage.batch import iter_batches
from raftlog.storage.log import Log, LogConfig


def batch(value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 2**31 - 1)
    builder.append(0, timestamp=1000, key=None, value=value, headers=[])
    return bytes(builder.build())


class Replica:
    def __init__(
        self, root: Path, node: int, peers: tuple[int, ...], log: LogConfig, **config: Any
    ) -> None:
        """`config`: more of the core's Config (a membership with learners, a throttle)."""
        self.log = Log(root / str(node), log)
        self.listener = RecordingListener()
        self.journal = SegmentJournal(root / str(node) / "raft", self.log, self.listener)
        self.journal.add(NO_OP, 1, 0)
        cfg = Config(id=node, peers=peers, election_tick=10, heartbeat_tick=1, applied=1, **config)
        self.raft = Raft(cfg, JournalLog(self.journal), HardState(commit=1), random.Random(node))

    def values(self) -> list[tuple[int, int, bytes]]:
        """(offset, leader epoch, one-byte value) of every batch in the Kafka log (its last byte is the record's header count)."""
        data = self.log.read(self.log.log_start_offset, 1 << 20, self.log.log_end_offset, True)
        return [
            (h.base_offset, h.partition_leader_epoch, bytes(data[pos : pos + h.size])[-2:-1])
            for pos, h in iter_batches(data)
        ]


class Controls:
    """A node's control messages (the installs'), through msgpack as the mesh would."""

    def __init__(self, net: Net, node: int) -> None:
        self.net, self.node = net, node
        self.handler: Any = None

    def send_control(self, peer_id: str, kind: str, payload: Any) -> None:
        if self.node not in self.net.cut and int(peer_id) not in self.net.cut:
            wire = msgpack.unpackb(msgpack.packb(payload))
            self.net.controls[int(peer_id)].handler(str(self.node), wire)

    def on_control(self, kind: str, handler: Any) -> None:
        self.handler = handler


class Net:
    """Delivers every message, through msgpack as the mesh would, except to nodes cut off.
    Voters 1, 2, 3 and the `learners` given."""

    def __init__(
        self,
        tmp_path: Path,
        learners: tuple[int, ...] = (),
        log: LogConfig | None = None,
        **config: Any,
    ) -> None:
        peers = (1, 2, 3)
        if learners:
            config["membership"] = Membership.of(peers, learners)
        log = log or LogConfig()
        self.replicas = {n: Replica(tmp_path, n, peers, log, **config) for n in peers + learners}
        self.cut: set[int] = set()
        self.controls = {n: Controls(self, n) for n in self.replicas}
        self.installers: dict[int, Installer] = {}

    def with_installs(self, later: Later | None = None) -> None:
        """Snapshot installs between the replicas, each paced by its core's learner budget;
        their timers on the event loop, or on `later`."""
        for n, r in self.replicas.items():
            self.installers[n] = Installer(
                "g",
                r.journal,
                r.log,
                r.listener,
                Installs(self.controls[n]),
                r.raft.install_done,
                r.raft.install_failed,
                r.raft,
                *(() if later is None else (later,)),
            )

    def settle(self) -> None:
        for _ in range(200):
            moved = False
            for node, r in self.replicas.items():
                while r.raft.has_ready():
                    rd = r.raft.ready()
                    r.raft.advance(rd)
                    if rd.committed:
                        r.journal.set_commit_index(rd.committed[-1].index)
                    if rd.install is not None:
                        moved = True
                        i = rd.install
                        self.installers[node].start(i.index, i.term, str(i.source))
                    for m in rd.messages:
                        moved = True
                        if node in self.cut or m.dst in self.cut:
                            continue
                        wire = msgpack.unpackb(msgpack.packb(encode("g", m)))
                        _, back = decode(wire, m.src, m.dst)
                        self.replicas[m.dst].raft.step(back)
            if not moved:
                return

    def heartbeat(self) -> None:
        """The leaders' next heartbeat: followers learn the commit index from it."""
        for r in self.replicas.values():
            if r.raft.role == Role.LEADER:
                for _ in range(r.raft.cfg.heartbeat_tick):
                    r.raft.tick()
        self.settle()

    def without_node_1(self) -> Replica:
        """Nodes 2 and 3 elect one of them after an election timeout without node 1 (cut off):
        their leases on it run out."""
        for _ in range(10):
            for n in (2, 3):
                self.replicas[n].raft.tick()
            self.settle()
        if self.replicas[3].raft.role != Role.LEADER:
            self.elect(2)
        return next(self.replicas[n] for n in (2, 3) if self.replicas[n].raft.role == Role.LEADER)

    def elect(self, node: int) -> None:
        self.replicas[node].raft.campaign(pre=True)
        self.settle()
        assert self.replicas[node].raft.role == Role.LEADER


def test_messages_survive_the_wire_encoding() -> None:
    entries = (Entry(6, 5, DATA_PREFIX + batch(b"x")), Entry(7, 6, NO_OP))
    for m in (
        Message(MsgType.APP, 1, 2, term=7, index=4, log_term=6, entries=entries, commit=3),
        Message(MsgType.APP, 1, 3, term=7, index=6, log_term=7, commit=6, quiesce=True),
        Message(MsgType.APP_RESP, 2, 1, 7, index=4, log_term=5, reject=True, reject_hint=2),
        Message(MsgType.VOTE, 3, 1, 8, index=6, log_term=7, transfer=True),
    ):
        assert decode(msgpack.unpackb(msgpack.packb(encode("g", m))), m.src, m.dst) == ("g", m)


def test_replicas_hold_the_same_batches_and_a_deposed_tail_is_cut(tmp_path: Path) -> None:
    net = Net(tmp_path)
    net.elect(1)
    one = net.replicas[1]
    for v in (b"a", b"b"):
        one.raft.propose(DATA_PREFIX + batch(v))
    net.settle()
    committed = one.values()
    assert [v for _, _, v in committed] == [b"a", b"b"]
    assert all(r.values() == committed for r in net.replicas.values())
    net.heartbeat()
    assert all(r.journal.high_watermark == 2 for r in net.replicas.values())

    # Node 1 is cut off and appends what can never commit; 2 and 3 go on in a new term.
    net.cut = {1}
    one.raft.propose(DATA_PREFIX + batch(b"x"))
    net.settle()
    assert [v for _, _, v in one.values()] == [b"a", b"b", b"x"]
    new = net.without_node_1()
    new.raft.propose(DATA_PREFIX + batch(b"c"))
    net.settle()

    # Healed: node 1 hears the new leader, cuts its tail from the segment and takes term 2's.
    net.cut = set()
    for _ in range(3):
        new.raft.tick()
        net.settle()
    want = new.values()
    assert [v for _, _, v in want] == [b"a", b"b", b"c"]
    assert [e for _, e, _ in want] == [1, 1, new.raft.term]
    assert all(r.values() == want for r in net.replicas.values())
    assert any(reason == "raft" for _, reason in one.listener.truncations)
    assert one.log.log_end_offset == 3 and one.journal.high_watermark == 3


async def test_a_follower_behind_a_compacted_leader_installs_its_snapshot(tmp_path: Path) -> None:
    """Node 1, cut off, keeps a tail that never committed; the others go on in term 2 and the
    leader compacts past everything 1 has. Healed, 1 installs the snapshot: its divergent tail
    is cut, only what it lacks is pulled (from where the epochs say the logs stop agreeing),
    and its log then holds the same batches, offsets and epochs as the leader's."""
    net = Net(tmp_path)
    net.with_installs()
    net.elect(1)
    one = net.replicas[1]
    for v in (b"a", b"b"):
        one.raft.propose(DATA_PREFIX + batch(v))
    net.settle()
    net.cut = {1}
    one.raft.propose(DATA_PREFIX + batch(b"x"))
    net.settle()
    new = net.without_node_1()
    for v in (b"c", b"d", b"e"):
        new.raft.propose(DATA_PREFIX + batch(v))
    net.settle()
    new.journal.compact_to(new.raft.commit - 1)
    assert new.journal.first_index > one.raft.last_index()  # only an install catches 1 up

    net.cut = set()
    for _ in range(3):
        new.raft.tick()
        net.settle()
    want = new.values()
    assert [v for _, _, v in want] == [b"a", b"b", b"c", b"d", b"e"]
    assert one.values() == want
    assert one.log.epochs() == new.log.epochs()
    assert one.listener.installs == [(2, want[-1][0], str(new.raft.id))]  # resumed at 2: a, b kept
    assert any(reason == "install" for _, reason in one.listener.truncations)  # x cut
    assert one.raft.installing is None and one.raft.commit == new.raft.commit
    assert new.raft.progress[1].match == new.raft.last_index()


async def test_an_install_whose_source_went_away_fails_and_the_next_one_completes(
    tmp_path: Path,
) -> None:
    net = Net(tmp_path)
    net.with_installs()
    net.elect(1)
    one = net.replicas[1]
    net.cut = {3}
    for v in (b"a", b"b", b"c"):
        one.raft.propose(DATA_PREFIX + batch(v))
    net.settle()
    one.journal.compact_to(one.raft.commit - 1)
    three = net.replicas[3]
    three.raft.step(
        Message(MsgType.SNAP, 1, 3, one.raft.term, one.journal.first_index, one.raft.term)
    )
    net.settle()  # 3 asks node 1, which it cannot reach: no answer
    assert three.raft.installing is not None
    net.installers[3]._give_up("the source stopped answering")  # what its timeout does
    assert three.raft.installing is None
    net.cut = set()
    for _ in range(3):
        one.raft.tick()
        net.settle()
    assert three.values() == one.values()
    assert len(three.listener.installs) == 1


class Clock:
    """Timers on a clock the test moves (the installs' `later`)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.due: list[list[Any]] = []  # [at, callback, cancelled]

    def later(self, delay: float, callback: Callable[[], None]) -> Clock.Handle:
        timer = [self.now + delay, callback, False]
        self.due.append(timer)
        return Clock.Handle(timer)

    class Handle:
        def __init__(self, timer: list[Any]) -> None:
            self.timer = timer

        def cancel(self) -> None:
            self.timer[2] = True

    def advance(self, seconds: float) -> None:
        self.now += seconds
        while ready := [t for t in self.due if t[0] <= self.now]:
            for timer in ready:
                self.due.remove(timer)
                if not timer[2]:
                    timer[1]()


def test_a_learners_snapshot_install_is_paced_by_its_throttle(tmp_path: Path) -> None:
    """Issue 44: a learner a move adds behind a compacted leader installs the snapshot, and
    the data it pulls draws on the same budget as its appends (Config.learner_bytes_per_tick,
    leader.replication.throttled.rate): at most a burst of LEARNER_BURST ticks' worth at once,
    then the rate; the source answers `wait` while the budget is spent and the learner asks
    again a tick later. Without the throttle the whole snapshot went in one request."""
    per_tick = 4000
    clock = Clock()
    net = Net(tmp_path, learners=(4,), learner_bytes_per_tick=per_tick)
    net.with_installs(clock.later)
    served: list[tuple[float, int]] = []  # (time, bytes) of each data answer to node 4
    to_four = net.controls[1].send_control

    def counted(peer_id: str, kind: str, payload: Any) -> None:
        if peer_id == "4" and payload.get("op") == "data":
            served.append((clock.now, len(payload["batches"])))
        to_four(peer_id, kind, payload)

    net.controls[1].send_control = counted  # type: ignore[method-assign]
    net.elect(1)
    one, four = net.replicas[1], net.replicas[4]
    net.cut = {4}
    for n in range(100):
        one.raft.propose(DATA_PREFIX + batch(b"%01000d" % n))
    net.settle()
    net.heartbeat()
    one.journal.compact_to(one.raft.commit - 1)
    total = one.log.read(0, 1 << 30, one.log.log_end_offset, True)
    assert len(total) > 25 * per_tick and len(total) < CHUNK_BYTES  # one chunk unthrottled
    net.cut = set()
    ticks = 0
    while four.values() != one.values():
        one.raft.tick()
        ticks += 1
        clock.advance(TICK_SECONDS)
        net.settle()
        assert ticks < 200, "the install never finished"
    assert four.listener.installs and four.raft.installing is None
    batch_bytes = max(h.size for _, h in iter_batches(total))
    copied = sum(size for _, size in served)
    assert copied >= len(total) - 2 * batch_bytes  # all but what came after the snapshot point
    assert len(served) > 10  # many paced reads, not one chunk
    for at, _ in served:  # no ten ticks got more than the burst, their refill and a batch
        window = sum(size for t, size in served if at - 10 * TICK_SECONDS < t <= at)
        assert window <= (LEARNER_BURST + 10) * per_tick + batch_bytes, (at, window)
    assert ticks >= copied // per_tick - LEARNER_BURST - 1  # it took about copied / rate


def test_a_learners_install_from_a_source_that_stopped_leading_gives_up(tmp_path: Path) -> None:
    """A source that no longer leads refills no budget: it answers only `wait`, and after
    INSTALL_TIMEOUT of them the learner gives the install up (the next leader's snapshot
    message starts another), instead of waiting forever."""
    clock = Clock()
    net = Net(tmp_path, learners=(4,), learner_bytes_per_tick=4000)
    net.with_installs(clock.later)
    net.elect(1)
    one, four = net.replicas[1], net.replicas[4]
    net.cut = {4}
    for n in range(100):  # more than the burst
        one.raft.propose(DATA_PREFIX + batch(b"%01000d" % n))
    net.settle()
    net.heartbeat()
    one.journal.compact_to(one.raft.commit - 1)
    net.cut = set()
    for _ in range(100):  # until its budget lets the snapshot message and a first read go
        one.raft.tick()
        clock.advance(TICK_SECONDS)
        net.settle()
        if four.raft.installing is not None:
            break
    assert four.raft.installing is not None
    one.raft.become_follower(one.raft.term + 1, NONE)  # deposed: its budget is gone
    for _ in range(MAX_WAITS - 1):
        clock.advance(WAIT_SECONDS)
    assert four.raft.installing is not None  # still waiting
    clock.advance(2 * WAIT_SECONDS)
    assert four.raft.installing is None and not four.listener.installs


def test_an_install_keeps_the_anchor_entrys_batches_in_one_segment(tmp_path: Path) -> None:
    """Entries of three batches, segments of two, reads of one batch (the throttle): the
    learner's segments roll between the batches of most entries, the snapshot point's (the
    anchor) among them. Its batches are held until all have come and go in at once, so its
    Location names one segment; appended as they came, the install failed at its end
    ('no batch of Segment(...) ends at offset ...', found under a produce load) and again
    after every retry."""
    size = len(batch(b"%01000d" % 0))
    clock = Clock()
    net = Net(
        tmp_path,
        learners=(4,),
        log=LogConfig(segment_bytes=2 * size + 10),
        learner_bytes_per_tick=size,
    )
    net.with_installs(clock.later)
    net.elect(1)
    one, four = net.replicas[1], net.replicas[4]
    net.cut = {4}
    for n in range(12):
        three = b"".join(batch(b"%01000d" % (3 * n + i)) for i in range(3))
        one.raft.propose(DATA_PREFIX + three)
    net.settle()
    net.heartbeat()
    one.journal.compact_to(one.raft.commit - 1)
    net.cut = set()
    for _ in range(300):
        one.raft.tick()
        clock.advance(TICK_SECONDS)
        net.settle()
        if four.listener.installs and four.values() == one.values():
            break
    assert four.listener.installs, "the install never finished"
    assert four.values() == one.values()
    assert len(four.log.segments()) > 10  # it did roll between batches


def test_a_read_answers_in_whole_batch_chunks() -> None:
    """A read brings up to READ_BYTES in messages of at most CHUNK_BYTES (a larger batch
    alone), so one round trip carries what a loaded node's throttle allows."""
    small, large = batch(b"s"), batch(b"L" * 3000)
    data = small * 3 + large + small
    parts = chunks(data, 3 * len(small))
    assert parts == [small * 3, large, small]
    assert chunks(data, len(data)) == [data]
    assert chunks(b"", 10) == [b""]


def test_an_append_built_before_a_cut_is_not_sent_with_bytes_the_cut_removed(
    tmp_path: Path,
) -> None:
    """Issue 43: a leader held by SIGSTOP reads, in one loop turn after it resumes, a late
    answer of its own term (node 2 refusing an append that overtook a lost one), which makes
    it send its unreplicated tail again, and the new leader's first append, which deposes it
    and cuts that tail from the segment. The Ready of that turn held the first append, whose
    entry now lay just past the end of its segment: encoding it raised `Segment(...) has no
    N bytes at <size>` and the group's Ready failed halfway. It is dropped (a lost message:
    the deposed leader's term is stale anyway), and the replica follows the new leader."""
    net = Net(tmp_path)
    net.elect(1)
    one = net.replicas[1]
    one.raft.propose(DATA_PREFIX + batch(b"a"))
    net.settle()
    net.cut = {1}
    one.raft.propose(DATA_PREFIX + batch(b"x"))  # index 4: its appends are lost
    net.settle()
    x_entry = one.journal.entry_by_index(4)
    assert x_entry is not None and x_entry.location is not None
    x_location = x_entry.location
    new = net.without_node_1()  # node 1, held, does not tick
    new.raft.propose(DATA_PREFIX + batch(b"c"))
    net.settle()

    net.cut = set()
    one.raft.step(
        Message(MsgType.APP_RESP, 2, 1, 1, index=4, log_term=1, reject=True, reject_hint=3)
    )
    assert any(m.entries for m in one.raft.outbox)  # x, to be sent again
    for _ in range(new.raft.cfg.heartbeat_tick):
        new.raft.tick()
    rd = new.raft.ready()
    new.raft.advance(rd)
    for m in rd.messages:
        if m.dst == 1:
            one.raft.step(decode(msgpack.unpackb(msgpack.packb(encode("g", m))), 2, 1)[1])
    assert one.raft.role == Role.FOLLOWER
    assert one.log.segments()[0].size == x_location.position  # x cut at the end of its segment

    rd = one.raft.ready()
    for m in rd.messages:
        encode("g", m)  # raised ValueError: the segment has no bytes at its end
    assert all(m.term == one.raft.term for m in rd.messages if m.entries)
    one.raft.advance(rd)
    net.settle()
    for _ in range(3):
        new.raft.tick()
        net.settle()
    assert one.values() == new.values()
    assert [v for _, _, v in one.values()] == [b"a", b"c"]
