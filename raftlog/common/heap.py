"""Keeps long-lived partition objects out of the cyclic collector's full passes.

At 1,000 partitions a node holds about 250,000 objects that live as long as their
partitions; every full pass walked them all (0.3 s, every ~10 s, freeing nothing), and
those stalls under load cost leaderships (issue 12). `gc.freeze()` moves everything alive
into a generation no pass walks. Frozen objects are still freed by reference counting,
but a frozen reference cycle never is: a dropped partition (a deleted topic) would leak
its cycles for good. So a drop unfreezes, and the next freeze collects first. A partition
reopened in place (its Raft group raised and was restarted from its files) is both: its old
objects are dropped and its new ones opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from collections.abc import Iterator

# A reopened partition's objects are frozen this long after its reopening, with those of every
# other partition reopened meanwhile: groups that fail together (a disk failing under several)
# restart within a few loop turns, and each freeze after a drop costs a full collection.
REFREEZE_SECONDS = 1.0


class HeapFreezer:
    def __init__(self, refreeze_seconds: float = REFREEZE_SECONDS) -> None:
        self._dropped = False
        self._refreeze_seconds = refreeze_seconds
        self._refreeze: asyncio.TimerHandle | None = None

    def opened(self) -> None:
        """A batch of partitions was opened: freezes what is alive now."""
        if self._refreeze is not None:  # this freeze takes the reopened partitions too
            self._refreeze.cancel()
            self._refreeze = None
        if self._dropped:
            # One full pass (about as long as the ones the freeze saves) finds what the
            # dropped partitions left before it would be frozen with the rest.
            gc.collect()
            self._dropped = False
        gc.freeze()

    def dropped(self) -> None:
        """A partition was dropped: its cycles may be among the frozen objects."""
        if not self._dropped:
            gc.unfreeze()
            self._dropped = True

    def reopened(self) -> None:
        """A partition was closed and opened again from its files (raft/driver.py restarts
        a group that raised): its old objects' cycles may be frozen, as a dropped partition's,
        and its new objects are frozen as an opened one's, REFREEZE_SECONDS later."""
        self.dropped()
        if self._refreeze is None:
            self._refreeze = asyncio.get_running_loop().call_later(
                self._refreeze_seconds, self.opened
            )


_pause_lock = threading.Lock()
_pauses = 0


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic collection while the block runs (in a worker thread): a request decoded or
    an answer built there makes up to millions of short-lived objects, which set off full
    passes that each held the interpreter, and with it the event loop, for up to 1.6 s (a
    CreateAcls of a million entries). Those objects hold no cycles; reference counting frees
    them. Pauses nest across threads; collection resumes when the last one ends."""
    global _pauses
    with _pause_lock:
        if _pauses == 0:
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0:
                gc.enable()
