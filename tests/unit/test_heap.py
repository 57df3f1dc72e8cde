"""The node's heap freezer (raftlog/common/heap.py): frozen out of full GC passes, a dropped
partition's reference cycles are still collected."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from raftlog.common.heap import HeapFreezer


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


@pytest.mark.usefixtures("freezer")  # unfreezes after
async def test_replicas_reopened_together_cost_one_collection_and_are_frozen() -> None:
    """A replica reopened in place (its Raft group raised) is a drop and an opening: the
    freezer lets go at once and freezes again REFREEZE_SECONDS later (0 here), once for
    however many were reopened meanwhile, collecting what their old objects left."""
    freezer = HeapFreezer(refreeze_seconds=0.0)
    old = Replica()
    gone = weakref.ref(old)
    freezer.opened()
    del old
    full: list[str] = []
    gc.callbacks.append(lambda phase, info: full.append(phase) if info["generation"] == 2 else 0)
    try:
        freezer.reopened()
        freezer.reopened()
        assert gc.get_freeze_count() == 0
        for _ in range(3):
            await asyncio.sleep(0)  # the refreeze's turn
    finally:
        gc.callbacks.pop()
    assert gone() is None
    assert gc.get_freeze_count() > 0
    assert full == ["start", "stop"]
