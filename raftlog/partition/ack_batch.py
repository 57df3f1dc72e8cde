"""The acknowledgements of every replica on a node that one loop turn noted go into the
history in one write (issue 45: a write per replica per turn was ~6 % of a node's CPU on
small writes, each an append that dirties the file's inode).

Each is still written before its answers can leave: the batch's callback is queued on the
event loop when the turn's first acknowledgement is noted, ahead of the producers' tasks that
the answers wake (call_soon is FIFO), and it writes the history (after each replica's commit
index, ReplicaBase._write) before any of them runs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from epoch.history import HistoryJournal

log = logging.getLogger(__name__)


class AckBatch:
    def __init__(self, history: HistoryJournal) -> None:
        self._history = history
        self._due: list[Callable[[], None]] = []

    def add(self, loop: asyncio.AbstractEventLoop, record: Callable[[], None]) -> None:
        """`record` writes a replica's acknowledgements noted since it last ran: it runs
        before anything the loop is asked to run after this call."""
        if not self._due:
            loop.call_soon(self._run)
        self._due.append(record)

    def _run(self) -> None:
        due, self._due = self._due, []
        with self._history.held():
            for record in due:
                try:
                    record()
                except Exception:  # one replica's failure keeps the others' records
                    log.exception("recording acknowledgements failed")
