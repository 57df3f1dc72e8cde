"""The node's heap freezer (raftlog/heap.py): frozen out of full GC passes, a dropped
partition's reference cycles are still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from raftlog.heap import HeapFreezer


class Replica:
    """Stands for a partition's objects: they refer to each other, as a SyncObj, its
    transport and their callbacks do."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def freezer() -> Iterator[HeapFreezer]:
    yield HeapFreezer()
    gc.unfreeze()


def test_opened_partitions_are_frozen_and_a_dropped_ones_cycles_still_collected(
    freezer: HeapFreezer,
) -> None:
    replica = Replica()
    gone = weakref.ref(replica)
    freezer.opened()
    assert gc.get_freeze_count() > 0
    del replica
    gc.collect()
    assert gone() is not None  # frozen: no pass looks at it (this is the leak a drop undoes)
    freezer.dropped()
    freezer.opened()  # the next batch of partitions
    assert gone() is None
    assert gc.get_freeze_count() > 0


def test_without_a_drop_nothing_is_collected_before_the_freeze(freezer: HeapFreezer) -> None:
    freezer.opened()
    collected: list[int] = []
    gc.callbacks.append(lambda phase, info: collected.append(info["generation"]))
    try:
        freezer.opened()
    finally:
        gc.callbacks.pop()
    assert 2 not in collected
