"""Snapshot install for partitions on the Raft core (FORK.md 7; raft/core/ asks for it in
a Ready, raft/replica.py starts it).

A snapshot is a point in the segment log: the entry at the start of the leader's window and
every batch before it. Installing it moves only what the follower lacks, pulled by the
follower from the node that sent the snapshot point, one chunk per request:

    begin    follower -> source: the point (index, term), the follower's epochs and log end
    manifest source -> follower: the point's entry, its end offset, the source's epochs, the
             first offset its segments hold, share state, and where the logs stop agreeing (as KIP-279 finds it with
             OffsetForLeaderEpoch); the follower cuts its log there
    read     follower -> source: the next offset, and the bytes it takes per read (`window`)
    data     source -> follower: whole batches from there, up to the end: at most `window`
             (READ_BYTES) in messages of at most CHUNK_BYTES, all but the last marked `more`
             (a follower that names no window gets one CHUNK_BYTES message)
    wait     source -> follower: the follower is a learner whose throttle is spent (a move's
             copy, leader.replication.throttled.rate): it asks again WAIT_SECONDS later
    refused  source -> follower: it no longer holds that point, or not that far

The source keeps no state but how far each follower's last read was (for the bytes a move
has still to copy): every request names what it wants, and everything asked for is committed
on the source (below its high watermark), hence the same on every replica. A learner's data
draws on the same budget as its appends (core.Raft.learner_budget), so an install is paced
like a log catch-up and a move's copy leaves the leader room for its writes either way. The
follower appends the batches term by term (the epoch in a batch header is the term it was
written in; segments stay per term), then its window becomes the point's entry alone and the
core is told (`install_done`). A source that stops answering for INSTALL_TIMEOUT seconds, or
answers only `wait` for as long (it no longer leads: no budget refills), fails the install
(`install_failed`); the leader's next snapshot message starts another, which cuts and resumes
where this one stopped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from raftlog.raft.failure_log import FailureLog
from raftlog.raft.journal import SegmentJournal
from raftlog.raft.window_file import Entry
from raftlog.storage.batch import iter_batches
from raftlog.storage.log import Log

log = logging.getLogger(__name__)

KIND = "core_install"  # the mesh control messages' kind
CHUNK_BYTES = 1024 * 1024
# What one read may bring, in several messages: one CHUNK_BYTES per round trip copied 5 MB/s
# on a loaded node (a round trip of ~0.2 s through its loop turns), far below the throttle.
READ_BYTES = 8 * CHUNK_BYTES
INSTALL_TIMEOUT = 10.0
WAIT_SECONDS = 0.05  # a follower told to wait asks again after this (the driver's tick)
MAX_WAITS = round(INSTALL_TIMEOUT / WAIT_SECONDS)  # waits in a row before it gives up

Epochs = list[tuple[int, int]]


class InstallListener(Protocol):
    """The partition: what it keeps beside its log, and what it redoes after an install."""

    def snapshot_state(self) -> object:
        """Sent with the manifest (share-group state, the log start DeleteRecords set): the
        window that held their commands may be cut already."""

    def snapshot_installed(
        self, resume_offset: int, end_offset: int, source: str, state: object
    ) -> None: ...


class Throttle(Protocol):
    """The group's Raft core on the source: a learner's data budget (core.Raft)."""

    def learner_budget(self, peer: int) -> int | None: ...

    def learner_sent(self, peer: int, size: int) -> None: ...


class Timer(Protocol):
    def cancel(self) -> None: ...


# asyncio's loop.call_later by default; the tests give a clock of their own.
Later = Callable[[float, Callable[[], None]], Timer]


def _call_later(delay: float, callback: Callable[[], None]) -> Timer:
    return asyncio.get_running_loop().call_later(delay, callback)


class ControlLink(Protocol):
    """The node's mesh, for its control messages (raft/mesh.py)."""

    def send_control(self, peer_id: str, kind: str, payload: Any) -> None: ...

    def on_control(self, kind: str, handler: Callable[[str, Any], None]) -> None: ...


def agreement_offset(local: Epochs, local_end: int, leader: Epochs, leader_end: int) -> int:
    """Largest offset up to which two logs hold the same batches, from their epoch lists.

    Raft's log matching makes a term's batches identical on every log that has them, so
    the logs agree up to the end of the last term they share (the smaller of its two ends)."""

    def ends(epochs: Epochs, end: int) -> dict[int, tuple[int, int]]:
        spans = {}
        for i, (term, start) in enumerate(epochs):
            stop = epochs[i + 1][1] if i + 1 < len(epochs) else end
            spans[term] = (start, stop)
        return spans

    mine, theirs = ends(local, local_end), ends(leader, leader_end)
    agreed = 0
    for term in sorted(set(mine) & set(theirs)):
        (start, stop), (their_start, their_stop) = mine[term], theirs[term]
        if start != their_start:
            break
        agreed = min(stop, their_stop)
        if stop != their_stop:
            break
    return agreed


def begin_terms_at(log_: Log, epochs: Epochs, offset: int, end: int, last_term: int) -> None:
    """Terms of the source's log that start at `offset` get their segment now, including terms
    that hold no data at all, so the follower's epoch list comes out the same as the source's.
    A term that begins at the snapshot's end after its last entry's term comes by Raft."""
    for term, start in epochs:
        if start != offset or term <= log_.active_term:
            continue
        if start == end and term > last_term:
            continue
        log_.begin_term(term)


def append_batches(
    log_: Log, batches: bytes | memoryview, on_offset: Callable[[int], None]
) -> None:
    """Appends whole batches one term's run at a time (log.append keeps segments per term);
    `on_offset` is called with the log end before each run and after the last."""
    view = memoryview(batches)
    run_start, run_term = 0, None
    for pos, header in iter_batches(view):
        term = header.partition_leader_epoch
        if term != run_term:
            if run_term is not None:
                log_.append(view[run_start:pos], run_term, keep_offsets=True)
            # A compacted log has gaps between batches, never overlaps.
            if header.base_offset < log_.log_end_offset:
                raise RuntimeError(
                    f"snapshot data at offset {header.base_offset}, log ends at "
                    f"{log_.log_end_offset}"
                )
            on_offset(log_.log_end_offset)
            run_start, run_term = pos, term
    if run_term is not None:
        log_.append(view[run_start:], run_term, keep_offsets=True)
    on_offset(log_.log_end_offset)


def chunks(data: bytes, most: int) -> list[bytes]:
    """Whole batches of `data` in pieces of at most `most` bytes (a larger batch alone)."""
    parts: list[bytes] = []
    start = 0
    for pos, header in iter_batches(data):
        if pos > start and pos + header.size - start > most:
            parts.append(data[start:pos])
            start = pos
    parts.append(data[start:])
    return parts


class Installs:
    """The node's install messages, routed to each group's Installer by name."""

    def __init__(self, link: ControlLink) -> None:
        self._link = link
        self._groups: dict[str, Installer] = {}
        self._failures = FailureLog(log)
        link.on_control(KIND, self._received)

    def add(self, name: str, installer: Installer) -> None:
        self._groups[name] = installer

    def remove(self, name: str) -> None:
        self._groups.pop(name, None)

    def send(self, peer_id: str, payload: dict[str, Any]) -> None:
        self._link.send_control(peer_id, KIND, payload)

    def _received(self, peer_id: str, payload: Any) -> None:
        try:
            installer = self._groups.get(payload["group"])
            if installer is not None:
                installer.received(peer_id, payload)
        except Exception:
            self._failures.exception(
                peer_id, "snapshot install message from node %s failed", peer_id
            )


@dataclass
class _Inbound:
    id: str
    source: str
    index: int
    term: int
    anchor: Entry | None = None
    end: int = 0
    epochs: Epochs | None = None
    resume: int = 0
    state: object = None
    conf: bytes | None = None  # the configuration in force at the anchor, as the source says
    deadline: Timer | None = None
    retry: Timer | None = None  # the next read after a `wait`
    waits: int = 0  # `wait` answers since the last data
    # The anchor entry's batches come first here, and go into the log at once when all have
    # come: its Location names one segment, and a roll between two of its batches (answers
    # cut at whole batches, not entries) made the install fail at its end, every time.
    held: bytearray = field(default_factory=bytearray)
    held_end: int = 0  # the offset after the last batch held


class Installer:
    """One partition's: serves its committed log to followers, installs its leader's."""

    def __init__(
        self,
        name: str,
        journal: SegmentJournal,
        log_: Log,
        listener: InstallListener,
        installs: Installs,
        done: Callable[[int, int], None],
        failed: Callable[[], None],
        throttle: Throttle | None = None,
        later: Later = _call_later,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`throttle`: the group's core, whose learner budget paces the data served to a
        learner (None: never paced)."""
        self._name = name
        self._journal = journal
        self._log = log_
        self._listener = listener
        self._installs = installs
        self._done = done
        self._failed = failed
        self._throttle = throttle
        self._later = later
        self._clock = clock
        self._inbound: _Inbound | None = None
        # source side: per follower node, the offset its last request named and when
        self._serving: dict[str, tuple[int, float]] = {}
        installs.add(name, self)

    def close(self) -> None:
        self._installs.remove(self._name)
        self._stop()

    def install_offset(self, peer_id: str) -> int | None:
        """How far `peer_id`'s install from this replica has come (the log end it last
        asked from), if it asked within INSTALL_TIMEOUT."""
        seen = self._serving.get(peer_id)
        if seen is None or self._clock() - seen[1] > INSTALL_TIMEOUT:
            return None
        return seen[0]

    def received(self, peer_id: str, payload: dict[str, Any]) -> None:
        op = payload["op"]
        if op == "begin":
            self._serve_begin(peer_id, payload)
        elif op == "read":
            self._serve_read(peer_id, payload)
        else:
            inbound = self._inbound
            if inbound is None or payload["id"] != inbound.id or peer_id != inbound.source:
                return  # an install this follower gave up
            self._follow(inbound, op, payload)

    # --- follower side ---------------------------------------------------------------------

    def start(self, index: int, term: int, source: str) -> None:
        """The core asked to install (index, term) from `source`'s node."""
        self._stop()
        inbound = _Inbound(os.urandom(8).hex(), source, index, term)
        self._inbound = inbound
        self._send(
            inbound,
            op="begin",
            index=index,
            term=term,
            epochs=[[t, s] for t, s in self._log.epochs()],
            end=self._log.log_end_offset,
        )

    def _follow(self, inbound: _Inbound, op: str, payload: dict[str, Any]) -> None:
        if op == "refused":
            self._give_up(f"node {inbound.source} refused: {payload['reason']}")
        elif op == "manifest":
            self._begin(inbound, payload)
        elif op == "data" and inbound.anchor is not None:
            inbound.waits = 0
            self._data(inbound, payload["batches"], bool(payload.get("more")))
        elif op == "wait" and inbound.anchor is not None:
            self._wait(inbound)

    def _wait(self, inbound: _Inbound) -> None:
        """The source's throttle is spent: the same read again a little later, unless it has
        said only that for INSTALL_TIMEOUT (a source that no longer leads refills nothing)."""
        if inbound.deadline is not None:
            inbound.deadline.cancel()
            inbound.deadline = None
        inbound.waits += 1
        if inbound.waits > MAX_WAITS:
            self._give_up("the source's throttle gave nothing for too long")
            return

        def again() -> None:
            inbound.retry = None
            if self._inbound is inbound:
                self._next(inbound)

        inbound.retry = self._later(WAIT_SECONDS, again)

    def _begin(self, inbound: _Inbound, manifest: dict[str, Any]) -> None:
        inbound.anchor = Entry.unpack(manifest["anchor"])
        inbound.end = int(manifest["end"])
        inbound.epochs = [(int(t), int(s)) for t, s in manifest["epochs"]]
        inbound.state = manifest["state"]
        inbound.conf = manifest.get("conf")
        # Everything before `agreed` is identical on both logs (log matching): kept, so the
        # votes this replica gives stay honest while the rest comes.
        inbound.resume = self._journal.truncate_for_install(
            int(manifest["agreed"]), {t for t, _ in inbound.epochs}, int(manifest["log_start"])
        )
        self._begin_terms(inbound, inbound.resume)
        self._next(inbound)

    def _data(self, inbound: _Inbound, batches: bytes, more: bool) -> None:
        """One answer to a read; `more`: others of the same read follow."""
        before = self._read_from(inbound)
        anchor = inbound.anchor
        assert anchor is not None  # set by the manifest, before any read
        view = memoryview(batches)
        split = len(view)
        if anchor.inline is None:
            split = next(
                (p for p, h in iter_batches(view) if h.base_offset >= anchor.offset), split
            )
        if split:
            append_batches(
                self._log, view[:split], lambda offset: self._begin_terms(inbound, offset)
            )
        if split < len(view):
            inbound.held += view[split:]
            inbound.held_end = max(h.next_offset for _, h in iter_batches(view[split:]))
            if inbound.held_end >= inbound.end:
                held, inbound.held = bytes(inbound.held), bytearray()
                append_batches(self._log, held, lambda offset: self._begin_terms(inbound, offset))
        if more:
            self._expect(inbound)
            return
        if self._read_from(inbound) == before and before < inbound.end:
            # The source's log has no batch left below the end (a cleaned tail before a no-op):
            # this log cannot reach that end by appending.
            self._give_up(f"no batches between {before} and {inbound.end}")
            return
        self._next(inbound)

    def _read_from(self, inbound: _Inbound) -> int:
        """Where the next read starts: past what the log and the held batches have."""
        return inbound.held_end if inbound.held else self._log.log_end_offset

    def _next(self, inbound: _Inbound) -> None:
        end = self._log.log_end_offset
        if end < inbound.end:
            offset = self._read_from(inbound)
            self._send(inbound, op="read", offset=offset, end=inbound.end, window=READ_BYTES)
            return
        if end != inbound.end:
            self._give_up(f"the log ends at {end}, past the snapshot's end {inbound.end}")
            return
        anchor = inbound.anchor
        assert anchor is not None  # set by the manifest, before any read
        if anchor.inline is None:
            anchor.location = self._log.locate(anchor.offset, anchor.next_offset)
        self._stop()
        self._journal.install(anchor, inbound.conf)
        self._listener.snapshot_installed(inbound.resume, end, inbound.source, inbound.state)
        self._done(inbound.index, inbound.term)

    def _begin_terms(self, inbound: _Inbound, offset: int) -> None:
        assert inbound.epochs is not None and inbound.anchor is not None
        begin_terms_at(self._log, inbound.epochs, offset, inbound.end, inbound.anchor.term)

    def _send(self, inbound: _Inbound, **payload: Any) -> None:
        """A request to the source; its answer must come within INSTALL_TIMEOUT."""
        self._expect(inbound)
        self._installs.send(inbound.source, {"group": self._name, "id": inbound.id, **payload})

    def _expect(self, inbound: _Inbound) -> None:
        """The source's next message must come within INSTALL_TIMEOUT."""
        if inbound.deadline is not None:
            inbound.deadline.cancel()
        inbound.deadline = self._later(
            INSTALL_TIMEOUT, lambda: self._give_up("the source stopped answering")
        )

    def _give_up(self, why: str) -> None:
        inbound = self._inbound
        if inbound is None:
            return
        log.warning(
            "%s: snapshot install %d from node %s: %s",
            self._name,
            inbound.index,
            inbound.source,
            why,
        )
        self._stop()
        self._failed()

    def _stop(self) -> None:
        inbound, self._inbound = self._inbound, None
        if inbound is not None:
            for timer in (inbound.deadline, inbound.retry):
                if timer is not None:
                    timer.cancel()

    # --- source side ---------------------------------------------------------------------------

    def _serve_begin(self, peer_id: str, request: dict[str, Any]) -> None:
        entry = self._journal.entry_by_index(int(request["index"]))
        if entry is None or entry.term != request["term"]:
            self._refuse(peer_id, request, "it no longer holds the snapshot point")
            return
        if entry.next_offset > self._journal.high_watermark:
            self._refuse(peer_id, request, "the snapshot point is not committed here")
            return
        end = entry.next_offset
        epochs = [(t, s) for t, s in self._log.epochs() if s <= end]
        theirs = [(int(t), int(s)) for t, s in request["epochs"]]
        agreed = min(agreement_offset(theirs, int(request["end"]), epochs, end), end)
        self._serving[peer_id] = (agreed, self._clock())
        self._reply(
            peer_id,
            request,
            op="manifest",
            anchor=entry.pack(),
            end=end,
            epochs=[[t, s] for t, s in epochs],
            log_start=self._log.segment_start,  # whole batches: from below a moved start
            agreed=agreed,
            state=self._listener.snapshot_state(),
            conf=self._journal.conf_at(entry.idx),
        )

    def _serve_read(self, peer_id: str, request: dict[str, Any]) -> None:
        offset, end = int(request["offset"]), int(request["end"])
        if end > self._journal.high_watermark or offset < self._log.segment_start:
            self._refuse(peer_id, request, f"offsets {offset}..{end} are not held here")
            return
        self._serving[peer_id] = (offset, self._clock())
        peer = int(peer_id)
        budget = None if self._throttle is None else self._throttle.learner_budget(peer)
        if budget is not None and budget <= 0:
            self._reply(peer_id, request, op="wait")
            return
        window = request.get("window")
        most = min(int(window), READ_BYTES) if isinstance(window, int) and window > 0 else 0
        most = max(most, CHUNK_BYTES)
        data = self._log.read(offset, most if budget is None else min(most, budget), end, True)
        if budget is not None and self._throttle is not None:
            self._throttle.learner_sent(peer, len(data))
        parts = chunks(data, CHUNK_BYTES)
        for i, part in enumerate(parts):
            self._reply(peer_id, request, op="data", batches=part, more=i + 1 < len(parts))

    def _refuse(self, peer_id: str, request: dict[str, Any], reason: str) -> None:
        self._reply(peer_id, request, op="refused", reason=reason)

    def _reply(self, peer_id: str, request: dict[str, Any], **payload: Any) -> None:
        self._installs.send(peer_id, {"group": self._name, "id": request["id"], **payload})
