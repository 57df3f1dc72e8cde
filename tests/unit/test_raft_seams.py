"""The pysyncobj seams: the pinned internals are checked, and an upgrade that moves one fails
loudly instead of corrupting a log later."""

import pysyncobj.syncobj as syncobj
import pytest

from raftlog.raft import compat
from raftlog.raft.snapshot import agreement_offset


def test_pinned_pysyncobj_passes_the_check():
    compat.check()


def test_other_version_is_refused(monkeypatch):
    monkeypatch.setattr(compat, "_installed_version", lambda: "0.3.18")
    with pytest.raises(compat.PysyncobjIncompatible, match="0.3.18 installed"):
        compat.check()


def test_missing_seam_is_named(monkeypatch):
    monkeypatch.delattr(syncobj, "Serializer")
    monkeypatch.delattr(syncobj.SyncObj, "transferLeadership")
    with pytest.raises(compat.PysyncobjIncompatible) as err:
        compat.check()
    assert "pysyncobj.syncobj.Serializer is missing" in str(err.value)
    assert "SyncObj.transferLeadership is missing" in str(err.value)


def test_renamed_private_is_named(monkeypatch):
    monkeypatch.setattr(compat, "_PRIVATE_ATTRS", ("_SyncObj__raftMatchIndexes",))
    with pytest.raises(compat.PysyncobjIncompatible, match="__raftMatchIndexes"):
        compat.check()


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
