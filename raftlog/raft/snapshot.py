"""pysyncobj's Serializer seam for partitions: a snapshot is a point in the segment log.

Taking a snapshot costs nothing: the data is already in the segments, so the window is just
cut at pysyncobj's snapshot point (its two anchor entries stay). Sending one to a follower
that fell behind that point streams segment data, and only what the follower lacks: the
first chunk is a manifest with the leader's epochs (term, start offset); the follower finds
where its log stops agreeing (as KIP-279 does with OffsetForLeaderEpoch), truncates there and
tells the leader that offset; the leader streams whole batches from it up to the snapshot
point. pysyncobj's push-only transfer drives it: `None` from getTransmissionData means
"nothing to send right now".
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Protocol

from pysyncobj.config import SERIALIZER_STATE

from raftlog.raft.compat import NO_OP, SnapshotSeam
from raftlog.raft.install import agreement_offset, append_batches, begin_terms_at
from raftlog.raft.journal import Entry, RaftEntry, SegmentJournal, StoredCommand
from raftlog.raft.mesh import Message
from raftlog.storage.batch import iter_batches
from raftlog.storage.log import Log

log = logging.getLogger(__name__)

CHUNK_BYTES = 1024 * 1024
# A leader keeps entries a connected follower still lacks, up to this much data.
HARD_WINDOW_BYTES = 256 * 1024 * 1024
RESUME_TIMEOUT = 10.0
RESUME = "rl_snapshot_resume"  # follower -> leader, outside pysyncobj's message types

# A transmission's chunk as pysyncobj carries it: (data, is first, is last).
Chunk = tuple[dict[str, Any], bool, bool]


class SnapshotLink(Protocol):
    """What the snapshotter needs from the group's transport."""

    def queued(self, node_id: str) -> int: ...

    def skip_to_log_end(self, node: Any) -> None: ...

    def match_index(self, node: Any) -> int: ...

    def compaction_floor(self) -> int: ...

    def send_side_message(self, node_id: str, message: Message) -> None: ...

    def nodes(self) -> set[Any]: ...


class SnapshotListener(Protocol):
    def snapshot_state(self) -> object:
        """What the partition keeps beside its log (share-group state), sent with a snapshot:
        the window that held its commands may be cut already."""

    def snapshot_installed(
        self, resume_offset: int, end_offset: int, source: str, state: object
    ) -> None: ...


@dataclass
class _Outbound:
    id: str
    anchors: list[Entry]
    end_offset: int
    started: float
    cursor: int | None = None  # set once the follower said where to resume


@dataclass
class _Inbound:
    id: str
    leader: str
    anchors: list[Entry]
    end_offset: int
    epochs: list[tuple[int, int]]
    resume_offset: int
    state: object  # the leader's snapshot_state()
    retained: bool = False  # this log already held the snapshot's last entry


class PartitionSnapshots(SnapshotSeam):
    """Passed to pysyncobj as conf.fullDumpFile; raft/compat.py makes it the serializer."""

    def __init__(
        self,
        journal: SegmentJournal,
        log_: Log,
        self_id: str,
        link: SnapshotLink | None,
        listener: SnapshotListener,
    ) -> None:
        self._journal = journal
        self._log = log_
        self._self_id = self_id
        self._link = link
        self._listener = listener
        self._taken: int | None = None
        self._outbound: dict[Any, _Outbound] = {}
        self._inbound: _Inbound | None = None
        self._installed: list[Entry] | None = None

    def __fspath__(self) -> str:
        # pysyncobj loads a dump at start only if os.path.isfile() of this "file" is true: it
        # must be once the window was cut at a snapshot point, or pysyncobj's last-applied
        # index stays below the window, it never applies again, and every tick of the group
        # re-sends append entries. The window file is a regular file that exists then.
        if self._journal.has_snapshot():
            return str(self._journal.window_path)
        return "/nonexistent/raftlog-snapshot"

    @property
    def link(self) -> SnapshotLink:
        """The group's transport. The group is built with these snapshots, so it is linked
        right after; nothing here runs before."""
        if self._link is None:
            raise RuntimeError("snapshots used before their group's transport was linked")
        return self._link

    @link.setter
    def link(self, link: SnapshotLink) -> None:
        self._link = link

    # --- taking snapshots ------------------------------------------------------------------

    def checkSerializing(self) -> tuple[int, int | None]:  # noqa: N802 - pysyncobj's name
        if self._taken is None:
            return SERIALIZER_STATE.NOT_SERIALIZING, None
        taken, self._taken = self._taken, None
        return SERIALIZER_STATE.SUCCESS, taken

    def serialize(self, data: tuple[Any, ...], idx: int) -> None:
        for node, out in list(self._outbound.items()):
            if self.link.match_index(node) >= out.anchors[-1].idx:
                # The follower held the snapshot's last entry, kept its log and went on by
                # appends: nothing to install (and an abandoned one must not hold the window).
                del self._outbound[node]
        if self._outbound:
            return  # cutting the window now would move the point a follower is installing
        if idx > self.link.compaction_floor() and self._journal.window_bytes < HARD_WINDOW_BYTES:
            # A connected follower still needs entries before idx: cutting them would turn
            # its ordinary catch-up into a snapshot install. pysyncobj asks again next tick.
            return
        self._journal.compact_to(idx)
        self._taken = idx

    def deserialize(self) -> tuple[None, RaftEntry, RaftEntry, set[Any]]:
        anchors = self._installed
        self._installed = None
        if anchors is not None:
            e0, e1 = (self._anchor_tuple(e) for e in anchors)
        else:
            e0, e1 = self._journal[0], self._journal[1]
        return (None, e1, e0, self.link.nodes())

    # --- leader side -------------------------------------------------------------------------

    def getTransmissionData(self, node: Any) -> Chunk | None:  # noqa: N802
        chunk = self._next_chunk(node)
        if chunk is None:
            # pysyncobj keeps asking, and sending an empty message per answer, until 0.1 s
            # have passed, because its loop does not advance on this path. Having it treat
            # everything as sent ends the loop; the follower's answer to the next heartbeat
            # brings it back here, where the transmission resumes.
            self.link.skip_to_log_end(node)
        return chunk

    def _next_chunk(self, node: Any) -> Chunk | None:
        out = self._outbound.get(node)
        now = time.monotonic()
        if out is None:
            anchors = [self._journal.entry(0), self._journal.entry(1)]
            out = _Outbound(os.urandom(8).hex(), anchors, anchors[1].next_offset, now)
            self._outbound[node] = out
            manifest = {
                "kind": "manifest",
                "id": out.id,
                "leader": self._self_id,
                "anchors": [_anchor_fields(e) for e in anchors],
                "end": out.end_offset,
                "log_start": self._log.log_start_offset,
                "epochs": [[t, s] for t, s in self._log.epochs() if s <= out.end_offset],
                "state": self._listener.snapshot_state(),
            }
            return (manifest, True, False)
        if out.cursor is None:
            if now - out.started > RESUME_TIMEOUT:
                del self._outbound[node]  # the follower went quiet: start over next time
            return None
        if self.link.queued(node.id) > CHUNK_BYTES:
            return None  # the connection is busy; pysyncobj asks again on its next send
        if out.cursor >= out.end_offset:
            del self._outbound[node]
            return ({"kind": "end", "id": out.id}, False, True)
        data = self._log.read(out.cursor, CHUNK_BYTES, out.end_offset, True)
        last = None
        for _, header in iter_batches(data):
            last = header
        out.cursor = last.next_offset if last is not None else out.end_offset
        return ({"kind": "data", "id": out.id, "batches": data}, False, False)

    def cancelTransmisstion(self, node: Any) -> None:  # noqa: N802 - pysyncobj's spelling
        self._outbound.pop(node, None)

    def resume_requested(self, node: Any, transmission: str, offset: int) -> None:
        out = self._outbound.get(node)
        if out is not None and out.id == transmission and out.cursor is None:
            out.cursor = max(offset, self._log.log_start_offset)

    # --- follower side -----------------------------------------------------------------------

    def setTransmissionData(self, data: Chunk | None) -> bool:  # noqa: N802
        if data is None:
            return False
        chunk, is_first, is_last = data
        if is_first:
            self._start_install(chunk)
            return False
        inbound = self._inbound
        if inbound is None or chunk.get("id") != inbound.id:
            return False  # from a transmission this follower is no longer installing
        if chunk["kind"] == "data":
            self._append_chunk(inbound, chunk["batches"])
            return False
        if not is_last:
            return False
        self._inbound = None
        if inbound.retained and not self._journal.holds(inbound.anchors[-1]):
            log.error("snapshot install: the log no longer holds the snapshot's last entry")
            return False
        if not inbound.retained and self._log.log_end_offset != inbound.end_offset:
            log.error(
                "snapshot install ended at %d, expected %d; waiting for a new one",
                self._log.log_end_offset,
                inbound.end_offset,
            )
            return False
        anchors = [self._locate(e) for e in inbound.anchors]
        self._journal.expect_anchors(anchors)
        self._installed = anchors
        self._listener.snapshot_installed(
            inbound.resume_offset, inbound.end_offset, inbound.leader, inbound.state
        )
        return True

    def _start_install(self, manifest: dict[str, Any]) -> None:
        epochs = [(t, s) for t, s in manifest["epochs"]]
        end = manifest["end"]
        leader_start = manifest["log_start"]
        anchors = [_anchor_entry(f) for f in manifest["anchors"]]
        # Raft's InstallSnapshot rule: a log that holds the snapshot's last entry holds the
        # whole snapshot; it keeps that entry and all after it, and nothing is streamed.
        # Cutting down to the snapshot point removed committed entries (the fault suite's
        # audit: a follower was a copy short of entries acknowledged to producers).
        retained = self._journal.holds(anchors[-1])
        if retained:
            resume = end
        else:
            agreed = agreement_offset(self._log.epochs(), self._log.log_end_offset, epochs, end)
            agreed = min(agreed, end)
            resume = self._journal.truncate_for_install(
                agreed, {t for t, _ in epochs}, leader_start
            )
        self._inbound = _Inbound(
            manifest["id"],
            manifest["leader"],
            anchors,
            end,
            epochs,
            resume,
            manifest.get("state"),
            retained,
        )
        if not retained:
            self._begin_terms_at(self._inbound, resume)
        self.link.send_side_message(
            manifest["leader"], {"type": RESUME, "id": manifest["id"], "offset": resume}
        )

    def _append_chunk(self, inbound: _Inbound, batches: bytes) -> None:
        append_batches(self._log, batches, lambda offset: self._begin_terms_at(inbound, offset))

    def _begin_terms_at(self, inbound: _Inbound, offset: int) -> None:
        last_term = inbound.anchors[-1].term
        begin_terms_at(self._log, inbound.epochs, offset, inbound.end_offset, last_term)

    def _locate(self, anchor: Entry) -> Entry:
        if anchor.inline is not None:
            return anchor
        location = self._log.locate(anchor.offset, anchor.next_offset)
        return Entry(anchor.idx, anchor.term, anchor.offset, anchor.next_offset, location)

    def _anchor_tuple(self, entry: Entry) -> RaftEntry:
        if entry.location is None:
            assert entry.inline is not None  # _locate gave every other anchor its location
            return (entry.inline, entry.idx, entry.term)
        return (StoredCommand(self._log, entry.location), entry.idx, entry.term)


def _anchor_fields(entry: Entry) -> list[int | bytes | None]:
    return [entry.idx, entry.term, entry.offset, entry.next_offset, entry.inline]


def _anchor_entry(fields: list[Any]) -> Entry:
    idx, term, offset, next_offset, inline = fields
    return Entry(idx, term, offset, next_offset, inline=inline)


__all__ = ["NO_OP", "PartitionSnapshots", "RESUME"]
