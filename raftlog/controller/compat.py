"""Every pysyncobj internal the controller relies on, checked in one place.

pysyncobj's core (syncobj.py) runs the controller group as raftlog's fork,
controller/syncobj_fork.py (raftlog/raft/FORK.md lists what differs); its other modules
(journal, serializer, transport, node, config) are the pinned upstream ones, used through
their seams. The fork is built against one upstream
version: an upgrade must fail at import, naming what moved, not corrupt a log later.
Nothing else in raftlog touches SyncObj privates; they are read through the accessors below.
"""

from __future__ import annotations

import hashlib
import inspect
import os
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from pysyncobj.journal import Journal

import raftlog.controller.syncobj_fork as _syncobj
from raftlog.raft.journal import NO_OP

PINNED_VERSION = "0.3.17"
# sha256 of the upstream syncobj.py the fork was made from: a pysyncobj whose core changed
# needs the fork brought up to date (and FORK.md re-read) before raftlog runs on it.
FORKED_FROM_SHA256 = "e8bdf06797085d734df86e24ab4802fe87893dff77268565ec036f7ad4a1cfe4"

# Name-mangled attributes of SyncObj that raftlog reads.
_PRIVATE_ATTRS = (
    "_SyncObj__raftMatchIndex",
    "_SyncObj__raftNextIndex",
    "_SyncObj__raftLog",
    "_SyncObj__pipeNotifier",
    "_SyncObj__raftCommitIndex",
    "_SyncObj__raftElectionDeadline",
)
# Methods the seams call, and the module globals they replace.
_METHODS = (
    "_applyCommand",
    "doTick",
    "transferLeadership",
    "forceLogCompaction",
    "_getLeader",
    "_isLeader",
    "isNodeConnected",
)
_MODULE_GLOBALS = ("createJournal",)
# The command type bytes pysyncobj writes into the log itself (NO_OP: the journal's too).
REGULAR = 0


class PysyncobjIncompatible(RuntimeError):
    pass


def check() -> None:
    """Raises PysyncobjIncompatible naming every seam that does not look as expected."""
    problems = []
    version = _installed_version()
    if version != PINNED_VERSION:
        problems.append(f"pysyncobj {version} installed, raftlog is built for {PINNED_VERSION}")
    upstream = _upstream_core_sha256()
    if upstream != FORKED_FROM_SHA256:
        problems.append(
            "pysyncobj's syncobj.py is not the one controller/syncobj_fork.py was forked from"
        )
    syncobj_cls = _syncobj.SyncObj
    for name in _METHODS:
        if not callable(getattr(syncobj_cls, name, None)):
            problems.append(f"SyncObj.{name} is missing")
    for name in _MODULE_GLOBALS:
        if not hasattr(_syncobj, name):
            problems.append(f"syncobj_fork.{name} is missing")
    params = inspect.signature(syncobj_cls.__init__).parameters
    if "transport" not in params:
        problems.append("SyncObj.__init__ no longer takes a transport")
    if _syncobj._COMMAND_TYPE.NO_OP != NO_OP or _syncobj._COMMAND_TYPE.REGULAR != REGULAR:
        problems.append("pysyncobj command type bytes changed")
    if problems:
        raise PysyncobjIncompatible("; ".join(problems))


def fork_problems() -> list[str]:
    """What the fork's own source no longer offers of what raftlog reads. The unit tests ask,
    not every start: the fork is raftlog's own file, and reading its source cost each node
    start 0.12 s."""
    problems = []
    source = inspect.getsource(_syncobj.SyncObj)
    for attr in _PRIVATE_ATTRS:
        if attr.replace("_SyncObj", "self.") not in source:
            problems.append(f"SyncObj no longer has {attr}")
    if "createJournal(self.__conf.journalFile)" not in source:
        problems.append("SyncObj no longer builds its log with createJournal(conf.journalFile)")
    if "self._poller.poll(timeToWait)" not in source:
        problems.append("SyncObj ticks no longer end in self._poller.poll(timeToWait)")
    return problems


def _installed_version() -> str | None:
    from importlib.metadata import version

    return version("pysyncobj")


def _upstream_core_sha256() -> str | None:
    spec = find_spec("pysyncobj.syncobj")
    if spec is None or spec.origin is None:
        return None
    return hashlib.sha256(Path(spec.origin).read_bytes()).hexdigest()


_original_create_journal = _syncobj.createJournal


def _create_journal(journal_file: Any) -> Journal:
    """A Journal instance passed as conf.journalFile is the journal itself."""
    if isinstance(journal_file, Journal):
        return journal_file
    return _original_create_journal(journal_file)


def install() -> None:
    """Checks the pinned internals and hooks the journal factory."""
    if _syncobj.createJournal is _create_journal:
        return
    check()
    _syncobj.createJournal = _create_journal


class _NoPoller:
    """Stands in for the poller pysyncobj polls at the end of every tick: its sockets and
    wake-up pipe are not used here (the mesh carries messages, the ticker wakes groups), and
    a poll() syscall per group per tick was most of an idle node's work."""

    def subscribe(self, descr: Any, callback: Any, event_mask: int) -> None:
        pass

    def unsubscribe(self, descr: Any) -> None:
        pass

    def poll(self, timeout: float) -> None:
        pass


class _NoNotifier:
    def notify(self) -> None:
        pass


def detach_poller(obj: _syncobj.SyncObj) -> None:
    """Drops a manually ticked SyncObj's poller and its wake-up pipe (two fds per group, a
    write per proposal)."""
    notifier = getattr(obj, "_SyncObj__pipeNotifier", None)
    if notifier is not None:
        for fd in (notifier._PipeNotifier__pipeR, notifier._PipeNotifier__pipeW):
            os.close(fd)
        obj._SyncObj__pipeNotifier = _NoNotifier()
    obj._poller = _NoPoller()


def elect_now(obj: _syncobj.SyncObj) -> None:
    """Lets the next tick start the election: a group whose only voter is this node has no
    one to split a vote with, so the randomised election timeout is only a delay (0.5-1 s
    after every start and every new single-replica partition)."""
    obj._SyncObj__raftElectionDeadline = 0


def elect_after(obj: _syncobj.SyncObj, seconds: float) -> None:
    """Sets when the group's next election timeout fires, on the core's clock."""
    obj._SyncObj__raftElectionDeadline = _syncobj.monotonicTime() + seconds


def has_uncommitted(obj: _syncobj.SyncObj) -> bool:
    """Entries past the commit index are in the leader's log."""
    log = obj._SyncObj__raftLog
    return len(log) > 0 and log[-1][1] > obj._SyncObj__raftCommitIndex


def match_indexes(obj: _syncobj.SyncObj) -> dict[str, int]:
    """Leader's view of each follower's replicated index, by node id."""
    return {node.id: idx for node, idx in obj._SyncObj__raftMatchIndex.items()}


def match_index(obj: _syncobj.SyncObj, node: Any) -> int:
    index: int = obj._SyncObj__raftMatchIndex.get(node, 0)
    return index


def skip_to_log_end(obj: _syncobj.SyncObj, node: Any) -> None:
    """Makes the leader treat everything as sent to `node`, so its send loop stops walking the
    backlog; the follower's next success answer sets nextIndex back to what it really has
    (pysyncobj moves nextIndex whenever matchIndex advances)."""
    log = obj._SyncObj__raftLog
    obj._SyncObj__raftNextIndex[node] = log[-1][1] + 1
