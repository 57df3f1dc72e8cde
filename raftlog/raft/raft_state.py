"""A Raft group's persistent state (term, vote) and its commit index, on disk.

Term and vote live in one file of two 512-byte slots, each a whole record with a sequence
number and a CRC; a save writes the slot the previous save did not, in place, and
fdatasyncs it. A save cut by a crash spoils only that slot, and its state was never relied
upon (no message that depended on it had left), so the other slot holds what is owed.
Written in place, a save changes no metadata: first it was a new file renamed over the old
and the directory fsynced, and a thousand elections' renames and directory commits made
every file the node created meanwhile wait on the filesystem journal (a segment roll on the
event loop took 5-10 ms, and a 1,000-partition topic took 60-90 s to lead instead of 7).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c
import msgpack

from raftlog.raft.durability import Durability, write_state

SLOT = 512
_SLOT_HEAD = struct.Struct(">IQH")  # crc32c of what follows it, sequence, payload length
_COMMIT_INDEX = struct.Struct(">Q")
_COMMIT = struct.Struct(">QI")  # commit index, crc32c of it


class RaftState:
    """currentTerm and votedFor, durable before pysyncobj acts on them. The commit index goes
    to its own file in place (one small write, no fsync) in `persist_commit`, which the
    journal calls before anything implied by it is told (an acknowledgement, a history
    record) and otherwise at most every COMMIT_SAVE_SECONDS. Kept only once a second
    regardless of that, a kill -9 restart brought the high watermark back below what clients
    had been acknowledged (the audit's high_watermark_never_decreases broke after every such
    restart). A machine crash can lose it, as Kafka's replication-offset-checkpoint; the
    leader brings it back."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._commit_path = path.with_name("commit")
        self.term = 0
        self.voted_for: str | None = None
        self.commit_index = 1
        # Set for a group with peers: term and vote reach the disk in the node's batches,
        # before any message of the group sent after them (raft/durability.py).
        self.durability: Durability | None = None
        self.saved_seq = 0  # the durability save its messages must follow
        self._seq = 0  # the slot sequence of the last save
        self._image = bytearray(2 * SLOT)
        self._commit_fd = -1  # opened at the first persist_commit
        if path.exists():
            self._load(path.read_bytes())
        saved = _read_commit(self._commit_path)
        if saved is not None:
            self.commit_index = saved
        self._saved_commit = self.commit_index

    def _load(self, data: bytes) -> None:
        if len(data) != 2 * SLOT:  # the first format: one msgpack record, replaced whole
            self.term, self.voted_for, self.commit_index = msgpack.unpackb(data)
            return
        slots = [_read_slot(data[i * SLOT : (i + 1) * SLOT]) for i in (0, 1)]
        valid = [(seq, state) for seq, state in slots if state is not None]
        if not valid:
            raise ValueError(f"{self._path}: neither Raft state slot is intact")
        self._seq, (self.term, self.voted_for, self.commit_index) = max(valid)
        self._image[:] = data

    def set_term(self, term: int, voted_for: str | None) -> None:
        self.term, self.voted_for = term, voted_for
        self.save()

    def persist_commit(self) -> None:
        """The commit index to its file, if it moved since the last time: one pwrite on a
        descriptor kept open (limits.FDS_PER_REPLICA counts it). Every commit of every
        replica paid this before (4 % of the cluster's CPU on small requests), and the open
        and close around each write were two thirds of it (0.8 opens per record)."""
        index = self.commit_index
        if index != self._saved_commit:
            if self._commit_fd < 0:
                self._commit_fd = os.open(self._commit_path, os.O_WRONLY | os.O_CREAT, 0o644)
            record = _COMMIT.pack(index, crc32c.crc32c(_COMMIT_INDEX.pack(index)))
            os.pwrite(self._commit_fd, record, 0)
            self._saved_commit = index

    def close(self) -> None:
        fd, self._commit_fd = self._commit_fd, -1
        if fd >= 0:
            os.close(fd)

    def save(self) -> None:
        """Durable now, or (with `durability`) before this group's next message leaves."""
        seq = self._seq + 1
        payload = msgpack.packb([self.term, self.voted_for, self.commit_index])
        body = struct.pack(">QH", seq, len(payload)) + payload
        record = struct.pack(">I", crc32c.crc32c(body)) + body
        if len(record) > SLOT:  # a node id of hundreds of bytes; never spill into the other slot
            raise ValueError(f"Raft state of {len(record)} bytes does not fit a {SLOT}-byte slot")
        # Counted only once it fits: a refused save must not move the next one onto the
        # slot that holds the latest good record.
        self._seq = seq
        start = (seq % 2) * SLOT
        self._image[start : start + SLOT] = record.ljust(SLOT, b"\0")
        image = bytes(self._image)
        if self.durability is not None:
            self.saved_seq = self.durability.save(self._path, image, start, start + SLOT)
        else:
            write_state(self._path, image, start, start + SLOT)


def _read_slot(slot: bytes) -> tuple[int, tuple[int, str | None, int] | None]:
    crc, seq, length = _SLOT_HEAD.unpack_from(slot)
    body_end = _SLOT_HEAD.size + length
    if length == 0 or body_end > SLOT or crc32c.crc32c(slot[4:body_end]) != crc:
        return 0, None
    term, voted_for, commit_index = msgpack.unpackb(slot[_SLOT_HEAD.size : body_end])
    return seq, (term, voted_for, commit_index)


def _read_commit(path: Path) -> int | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(data) < _COMMIT.size:
        return None
    index, crc = _COMMIT.unpack_from(data)
    return index if crc32c.crc32c(_COMMIT_INDEX.pack(index)) == crc else None
