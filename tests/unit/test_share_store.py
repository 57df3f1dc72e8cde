"""The share state every replica applies from its partition's Raft log (raftlog/share/store.py):
updates in Kafka's ShareUpdate shape, applied once each, saved and carried in snapshots."""

from __future__ import annotations

from pathlib import Path

from raftlog.share.partition_state import RecordState
from raftlog.share.store import SHARE, ShareStore, ShareUpdate, decode, encode

A, K, X = (int(s) for s in (RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))


def test_a_command_round_trips_and_is_marked_as_share_state() -> None:
    updates = [ShareUpdate("g", 5, ((5, 6, A, 2), (8, 8, K, 1))), ShareUpdate("h", 0, deleted=True)]
    command = encode(updates)
    assert command[0] == SHARE
    assert decode(command) == updates


def test_updates_merge_and_the_start_passes_a_done_head() -> None:
    store = ShareStore()
    store.apply(3, encode([ShareUpdate("g", 0)]))
    store.apply(4, encode([ShareUpdate("g", 0, ((2, 3, K, 1), (4, 5, A, 1)))]))
    stored = store.get("g")
    assert stored is not None and stored.start_offset == 0
    assert stored.runs() == [(2, 3, K, 1), (4, 5, A, 1)]
    # 0-1 accepted: the start moves over them and over 2-3, done before
    store.apply(5, encode([ShareUpdate("g", 2, ((4, 4, X, 2),))]))
    assert stored.start_offset == 5 and stored.runs() == [(5, 5, A, 1)]
    # a start from an older view never moves it back
    store.apply(6, encode([ShareUpdate("g", 1, ((1, 1, A, 1),))]))
    assert stored.start_offset == 5 and stored.runs() == [(5, 5, A, 1)]


def test_a_command_is_applied_once_and_a_delete_drops_the_group() -> None:
    store = ShareStore()
    store.apply(7, encode([ShareUpdate("g", 4), ShareUpdate("h", 0)]))
    store.apply(7, encode([ShareUpdate("g", 9)]))  # replayed from the window: skipped
    assert store.applied == 7 and store.get("g").start_offset == 4  # type: ignore[union-attr]
    store.apply(8, encode([ShareUpdate("g", 0, deleted=True)]))
    assert sorted(store) == ["h"]


def test_a_saved_store_loads_and_only_a_newer_snapshot_replaces_it(tmp_path: Path) -> None:
    path = tmp_path / "share-state"
    assert len(ShareStore.load(path)) == 0  # none saved yet
    store = ShareStore()
    store.apply(10, encode([ShareUpdate("g", 3, ((3, 4, A, 1), (6, 6, X, 5)))]))
    store.save(path)
    loaded = ShareStore.load(path)
    assert loaded.applied == 10 and loaded.dump() == store.dump()
    older = ShareStore()
    older.apply(9, encode([ShareUpdate("g", 0)]))
    assert not loaded.adopt(older)
    newer = ShareStore.undump(store.dump())
    newer.apply(12, encode([ShareUpdate("g", 7)]))
    assert loaded.adopt(newer) and loaded.get("g").start_offset == 7  # type: ignore[union-attr]


def test_a_later_incarnation_starts_over_and_an_earlier_one_changes_nothing() -> None:
    store = ShareStore()
    store.apply(1, encode([ShareUpdate("g", 0, ((0, 4, K, 1), (6, 6, A, 3)))]))
    # the group was deleted and used again: its new start replaces everything
    store.apply(2, encode([ShareUpdate("g", 40, incarnation=1)]))
    stored = store.get("g")
    assert stored is not None and (stored.start_offset, stored.runs()) == (40, [])
    # a deposed leader's late update of the deleted incarnation
    store.apply(3, encode([ShareUpdate("g", 7, ((7, 9, K, 1),))]))
    assert (stored.start_offset, stored.runs(), stored.incarnation) == (40, [], 1)
    assert ShareStore.undump(store.dump()).get("g").incarnation == 1  # type: ignore[union-attr]
