"""The Raft core over real segment journals (raft/replica.py's JournalLog), messages carried
through the driver's wire encoding: what the core decides lands in each replica's Kafka log
with the same offsets and epochs, and a deposed leader's uncommitted tail is cut from its
segment, not only from the Raft window."""

from __future__ import annotations

import random
from pathlib import Path

import msgpack
from kafka.record.default_records import DefaultRecordBatchBuilder
from support.journal import RecordingListener

from raftlog.raft.core import Config, Entry, HardState, Message, MsgType, Raft, Role
from raftlog.raft.driver import decode, encode
from raftlog.raft.journal import DATA_PREFIX, SegmentJournal
from raftlog.raft.replica import NO_OP, JournalLog
from raftlog.storage.batch import iter_batches
from raftlog.storage.log import Log, LogConfig


def batch(value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 2**31 - 1)
    builder.append(0, timestamp=1000, key=None, value=value, headers=[])
    return bytes(builder.build())


class Replica:
    def __init__(self, root: Path, node: int, peers: tuple[int, ...]) -> None:
        self.log = Log(root / str(node), LogConfig())
        self.listener = RecordingListener()
        self.journal = SegmentJournal(root / str(node) / "raft", self.log, self.listener)
        self.journal.add(NO_OP, 1, 0)
        cfg = Config(id=node, peers=peers, election_tick=10, heartbeat_tick=1, applied=1)
        self.raft = Raft(cfg, JournalLog(self.journal), HardState(commit=1), random.Random(node))

    def values(self) -> list[tuple[int, int, bytes]]:
        """(offset, leader epoch, one-byte value) of every batch in the Kafka log (its last byte is the record's header count)."""
        data = self.log.read(self.log.log_start_offset, 1 << 20, self.log.log_end_offset, True)
        return [
            (h.base_offset, h.partition_leader_epoch, bytes(data[pos : pos + h.size])[-2:-1])
            for pos, h in iter_batches(data)
        ]


class Net:
    """Delivers every message, through msgpack as the mesh would, except to nodes cut off."""

    def __init__(self, tmp_path: Path) -> None:
        peers = (1, 2, 3)
        self.replicas = {n: Replica(tmp_path, n, peers) for n in peers}
        self.cut: set[int] = set()

    def settle(self) -> None:
        for _ in range(200):
            moved = False
            for node, r in self.replicas.items():
                while r.raft.has_ready():
                    rd = r.raft.ready()
                    r.raft.advance(rd)
                    if rd.committed:
                        r.journal.setRaftCommitIndex(rd.committed[-1].index)
                    for m in rd.messages:
                        moved = True
                        if node in self.cut or m.dst in self.cut:
                            continue
                        wire = msgpack.unpackb(msgpack.packb(encode("g", m)))
                        _, back = decode(wire, m.src, m.dst)
                        self.replicas[m.dst].raft.step(back)
            if not moved:
                return

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
    assert all(r.journal.high_watermark == 2 for r in net.replicas.values())

    # Node 1 is cut off and appends what can never commit; 2 and 3 go on in a new term.
    net.cut = {1}
    one.raft.propose(DATA_PREFIX + batch(b"x"))
    net.settle()
    assert [v for _, _, v in one.values()] == [b"a", b"b", b"x"]
    for _ in range(10):  # an election timeout without the old leader: leases run out
        for n in (2, 3):
            net.replicas[n].raft.tick()
        net.settle()
    if net.replicas[3].raft.role != Role.LEADER:
        net.elect(2)
    new = next(net.replicas[n] for n in (2, 3) if net.replicas[n].raft.role == Role.LEADER)
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
