"""The real controller state machine (ControllerMachine on the pysyncobj fork) as one node
on tmp_path, ticked on a test clock: commands are pickled into its journal, committed and
applied as on a node, with no network and no sleeping. Callers patch the fork's
`monotonicTime` (raftlog.controller.syncobj_fork) with the Clock first."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pysyncobj import SyncObjConf
from pysyncobj.config import FAIL_REASON
from pysyncobj.node import Node

from raftlog.controller import ControllerMachine, ControllerUnavailable, compat
from raftlog.controller.journal import ControllerJournal
from support.journal import RecordingListener
from support.raftnet import Clock, Net, NetTransport


def start_controller(
    directory: Path, on_apply: Callable[[], None] = lambda: None
) -> tuple[ControllerMachine, ControllerJournal]:
    """A one-node controller machine on `directory` that compacts after 10 entries; it leads
    at once."""
    journal = ControllerJournal(directory / "raft", None, RecordingListener())
    conf = SyncObjConf(
        autoTick=False,
        journalFile=journal,
        fullDumpFile=str(directory / "dump"),
        useFork=False,
        logCompactionMinEntries=10,
    )
    transport = NetTransport(Net(("1",)), "1")
    machine = ControllerMachine(Node("1"), set(), on_apply=on_apply, conf=conf, transport=transport)
    machine.quiesceAfter = 0.2
    machine.peerContact = lambda node: None
    machine.electionAllowed = lambda: True
    compat.detach_poller(machine)
    compat.elect_now(machine)
    return machine, journal


def tick(machine: ControllerMachine, clock: Clock, times: int = 1) -> None:
    for _ in range(times):
        clock.now += 0.05
        machine.doTick(0.0)


class OneNodeController:
    """raftlog.controller.Controller's call() over a one-node machine. The caller yields
    before each tick, so requests made together are proposed together. Counts what it is
    asked (`commands`) and what the machine applies (`applied`); `unavailable` makes calls
    fail as a controller without a quorum does; `before_apply` runs before each command."""

    def __init__(self, directory: Path, clock: Clock) -> None:
        self.clock = clock
        self.applied = 0
        self.unavailable = False
        self.commands: list[str] = []
        self.before_apply: Callable[[], None] = lambda: None
        self.state, self.journal = start_controller(directory, self._on_apply)

    def _on_apply(self) -> None:
        self.applied += 1

    def run(self, method: str, *args: Any) -> Any:
        """The command committed and applied, without the event loop."""
        outcome: list[tuple[Any, int]] = []
        getattr(self.state, method)(*args, callback=lambda r, e: outcome.append((r, e)))
        while not outcome:
            tick(self.state, self.clock)
        result, error = outcome[0]
        assert error == FAIL_REASON.SUCCESS
        return result

    async def call(self, method: str, *args: Any, timeout: float = 10.0) -> Any:
        self.commands.append(method)
        if self.unavailable:
            raise ControllerUnavailable(f"{method}: no controller commit within {timeout}s")
        self.before_apply()
        outcome: list[tuple[Any, int]] = []
        getattr(self.state, method)(*args, callback=lambda r, e: outcome.append((r, e)))
        while not outcome:
            await asyncio.sleep(0)
            tick(self.state, self.clock)
        result, error = outcome[0]
        assert error == FAIL_REASON.SUCCESS
        return result

    def topic(self, name: str) -> dict[str, Any]:
        return self.state.topics[name]

    def close(self) -> None:
        self.journal.close()
