"""The controller's pysyncobj seams: the pinned internals are checked, and an upgrade that
moves one fails loudly instead of corrupting a log later."""

import time

import pytest

import raftlog.controller.syncobj_fork as syncobj
from raftlog.controller import compat
from raftlog.controller.group import RaftGroup
from raftlog.controller.journal import ControllerJournal
from raftlog.controller.ticker import Ticker
from raftlog.raft.elections import ElectionBudget
from raftlog.raft.install import agreement_offset
from raftlog.raft.mesh import Mesh
from raftlog.raft.timings import RaftTimings


def test_pinned_pysyncobj_passes_the_check():
    compat.check()
    assert compat.fork_problems() == []


def test_other_version_is_refused(monkeypatch):
    monkeypatch.setattr(compat, "_installed_version", lambda: "0.3.18")
    with pytest.raises(compat.PysyncobjIncompatible, match="0.3.18 installed"):
        compat.check()


def test_changed_upstream_core_is_refused(monkeypatch):
    monkeypatch.setattr(compat, "_upstream_core_sha256", lambda: "0" * 64)
    with pytest.raises(compat.PysyncobjIncompatible, match="not the one"):
        compat.check()


def test_missing_seam_is_named(monkeypatch):
    monkeypatch.delattr(syncobj, "createJournal")
    monkeypatch.delattr(syncobj.SyncObj, "transferLeadership")
    with pytest.raises(compat.PysyncobjIncompatible) as err:
        compat.check()
    assert "syncobj_fork.createJournal is missing" in str(err.value)
    assert "SyncObj.transferLeadership is missing" in str(err.value)


def test_renamed_private_is_named(monkeypatch):
    monkeypatch.setattr(compat, "_PRIVATE_ATTRS", ("_SyncObj__raftMatchIndexes",))
    assert compat.fork_problems() == ["SyncObj no longer has _SyncObj__raftMatchIndexes"]


@pytest.mark.parametrize(
    ("local", "local_end", "leader", "leader_end", "expected"),
    [
        # identical logs
        ([(1, 0), (2, 50)], 80, [(1, 0), (2, 50)], 80, 80),
        # follower behind in the same term
        ([(1, 0), (2, 50)], 60, [(1, 0), (2, 50), (3, 90)], 120, 60),
        # follower wrote an uncommitted tail in term 2 that the leader never had
        ([(1, 0), (2, 50)], 95, [(1, 0), (2, 50), (3, 90)], 120, 90),
        # follower has a term the leader lacks: agreement ends with the last shared term
        ([(1, 0), (4, 40)], 70, [(1, 0), (5, 30)], 90, 30),
        # empty follower
        ([], 0, [(1, 0)], 10, 0),
        # same term starting at different offsets cannot happen in Raft; never agree past it
        ([(1, 0), (2, 40)], 60, [(1, 0), (2, 45)], 60, 40),
    ],
)
def test_agreement_offset(local, local_end, leader, leader_end, expected):
    assert agreement_offset(local, local_end, leader, leader_end) == expected


class _Quiet:
    """A JournalListener for a log-less (controller-style) journal: nothing to admit."""

    def admit(self, batches, command):
        return b""

    def appended(self, entry, command):
        pass

    def compacting(self):
        pass

    def truncated(self, removed, result, reason):
        pass

    def committed(self, commit_index, high_watermark):
        pass


@pytest.mark.parametrize(("peers", "leads"), [([], True), (["2", "3"], False)])
async def test_only_a_group_of_one_skips_the_election_timeout(tmp_path, peers, leads):
    """A one-node controller leads on its first tick: a restarted one-node cluster serves at
    once instead of after 0.5-1 s. A group with peers keeps its randomised timeout, which keeps
    elections from splitting votes."""
    mesh = Mesh("1", ("127.0.0.1", 0), {p: ("127.0.0.1", 1) for p in peers}, b"secret")
    journal = ControllerJournal(tmp_path / "raft", None, _Quiet())
    group = RaftGroup(
        "g",
        "1",
        peers,
        journal,
        mesh,
        Ticker(ElectionBudget(100.0, 25, time.monotonic)),
        RaftTimings(),
    )
    try:
        group.tick()
        assert group.is_leader is leads
    finally:
        group.close()
