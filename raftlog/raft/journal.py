"""A Raft group's log on disk: for a partition, the Raft log *is* its Kafka segment log.

Raft sees a window of entries (from the last snapshot point on). A data entry's command is
`DATA` + Kafka record batches; `add()` is the one place where the term of the Raft entry is
known, so it is where batches get their offsets and `partitionLeaderEpoch`. Entries keep only
their location in memory and in `raft/window`; the bytes are read back lazily when an append
carrying them is sent. Commands that are not batches (a new term's no-op, the controller's
pickled calls: raftlog/controller/journal.py) are small and live inline in the window file.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, overload

import crc32c
import msgpack
from mypy_extensions import mypyc_attr

from raftlog.raft.durability import Durability, Offload
from raftlog.raft.membership import CONF
from raftlog.raft.raft_state import RaftState
from raftlog.raft.window_entries import (
    DATA,
    DATA_PREFIX,
    Batches,
    RaftEntry,
    StoredCommand,
    WindowView,
    window_item,
)
from raftlog.raft.window_file import RECORD_HEAD, Entry, Rewrite, WindowFile, fsync_dir
from raftlog.storage.log import Log, TruncateResult

log = logging.getLogger(__name__)

# A new term's first entry: command type byte 1, as pysyncobj wrote it (data directories of
# releases that ran partitions on it keep it; raftlog/controller/compat.py checks the byte).
NO_OP = 1
# How stale the commit index on disk may get between the writes that something relies on
# (`persist_commit`): a follower's restart then re-learns at most this much from its leader.
COMMIT_SAVE_SECONDS = 0.5


class JournalListener(Protocol):
    """What a partition learns from its Raft log, in log order."""

    def admit(self, batches: memoryview, command: object) -> bytes | memoryview:
        """The batches of a data entry that go into the log (the leader may leave some out)."""

    def appended(self, entry: Entry, command: object) -> None: ...

    def compacting(self) -> None:
        """The window is about to be cut at a snapshot point: what only its entries hold
        (producer state, inline commands) is saved now, before they are gone."""

    def truncated(
        self, removed: list[Entry], result: TruncateResult | None, reason: str
    ) -> None: ...

    def committed(self, commit_index: int, high_watermark: int) -> None: ...


class StaleEntry(LookupError):
    """A payload was read after its entry left the window (cut, or compacted away)."""


# mypyc: the controller's journal and the tests' disks subclass it in plain Python.
@mypyc_attr(allow_interpreted_subclasses=True)
class SegmentJournal(WindowFile):
    """A partition's Raft log over its segment log (raft/replica.py's JournalLog), or, with no
    log, the controller's (raftlog/controller/journal.py)."""

    def __init__(
        self,
        raft_dir: Path,
        log: Log | None,
        listener: JournalListener,
        clock: Callable[[], float] = time.monotonic,
        files: Offload | None = None,
    ) -> None:
        """`files`: where a compaction's rewrite of the window runs (a partition's: the node's
        Durability.files, a thread); None: in place (the controller's, tools, tests)."""
        raft_dir.mkdir(parents=True, exist_ok=True)
        self._offload = files
        self._clock = clock
        self._dir = raft_dir
        self._log = log
        self._listener = listener
        self._state = RaftState(raft_dir / "state")
        self._window_path = raft_dir / "window"
        # The configuration in force at the window's start, when an entry the window no
        # longer holds set it: (its Raft index, its command).
        self._conf_path = raft_dir / "membership"
        self._base_conf: tuple[int, bytes] | None = None
        if self._conf_path.exists():
            index, command = msgpack.unpackb(self._conf_path.read_bytes())
            self._base_conf = (int(index), bytes(command))
        self._entries: list[Entry] = []
        self._window_bytes = 0  # data bytes referenced by the window
        # With `defer_writes`, records (and their batches) written at `write_pending`.
        self._deferred = False
        self._pending: list[bytes] = []
        # The window file starts at `_base` of the positions entries count (`Entry.file_pos`);
        # a rewrite off the loop moves it (`_rewrite_off_loop`).
        self._base = 0
        self._rewrite: Rewrite | None = None
        self._rewrite_again = False  # compacted again while a rewrite was under way
        # The first offset the window file on disk may name, while that is below the window's
        # first entry (a rewrite under way or failed): retention and cleaning stay below it.
        self._disk_first: int | None = None
        self._next_path = raft_dir / "window.next"
        self._next_path.unlink(missing_ok=True)  # a rewrite a crash stopped: the window holds all
        self._load_window()
        # Unbuffered: each record reaches the OS in the same step as its batch's segment write,
        # before anything can acknowledge it; a buffered record lost to kill -9 would make the
        # next start cut acknowledged batches the window does not know. Readable: a rewrite
        # copies its tail (_copied).
        self._file = open(self._window_path, "a+b", buffering=0)  # noqa: SIM115 - kept open
        self._file_end = self._file.seek(0, os.SEEK_END)  # kept here: a tell() per entry
        self._high_watermark = self._hw_for(self._state.commit_index)
        self._commit_saved_at = -COMMIT_SAVE_SECONDS

    # --- the Raft log ------------------------------------------------------------------------

    def add(self, command: bytes | Batches, idx: int, term: int) -> None:
        if isinstance(command, Batches):
            kind, batches = DATA, memoryview(command.batches)
        else:
            kind, batches = command[0], memoryview(command)[1:]
        if self._log is not None and self._entries:
            self._check_log_end()
        data = self._listener.admit(batches, command) if kind == DATA else b""
        if len(data) and self._log is not None:
            result = self._log.append(data, term, defer=self._deferred)
            entry = Entry(idx, term, result.base_offset, result.next_offset, result.location)
            self._window_bytes += result.location.size
        elif kind == DATA:
            # every batch was left out: the entry stays in the Raft log, with no batches
            leo = self._log.log_end_offset if self._log is not None else 0
            entry = Entry(idx, term, leo, leo, inline=DATA_PREFIX)
        else:
            if kind == NO_OP and term > 0 and self._log is not None:
                self._log.begin_term(term)
            leo = self._log.log_end_offset if self._log is not None else 0
            entry = Entry(idx, term, leo, leo, inline=bytes(command))
        self._append_record(entry)
        self._entries.append(entry)
        self._listener.appended(entry, command)

    def _drop_first(self, count: int) -> None:
        """Drops the window's first `count` entries (their data stays in the log)."""
        if count <= 0:
            return
        removed = self._entries[:count]
        confs = [(e.idx, e.inline) for e in removed if e.inline is not None and e.inline[0] == CONF]
        if confs and self._log is not None:  # a partition's (the controller's has none)
            self._save_base_conf(*confs[-1])  # before the window forgets it
        self._entries = self._entries[count:]
        self._window_bytes -= sum(e.location.size for e in removed if e.location is not None)
        if self._offload is None or not self._entries:
            self._rewrite_window()
            return
        if self._disk_first is None:
            self._disk_first = removed[0].offset
        if self._rewrite is not None:
            self._rewrite_again = True  # the next starts once this one's file is in place
        else:
            self._rewrite_off_loop()

    @overload
    def __getitem__(self, item: int) -> RaftEntry: ...

    @overload
    def __getitem__(self, item: slice) -> WindowView: ...

    def __getitem__(self, item: int | slice) -> RaftEntry | WindowView:
        if isinstance(item, slice):
            return window_item(self, 0, len(self._entries), item)
        # the list checks the index; a native call (window_item's goes through EntryReader,
        # ~40 ns more compiled, and the controller's pysyncobj indexes its log per entry)
        return self._tuple(item)

    def __len__(self) -> int:
        return len(self._entries)

    def set_commit_index(self, index: int) -> None:
        if index == self._state.commit_index:
            return
        self._state.commit_index = index
        now = self._clock()
        if now - self._commit_saved_at >= COMMIT_SAVE_SECONDS:
            self._commit_saved_at = now
            self.persist_commit()
        # pysyncobj (the controller's) lowers its commit index to the log end when it rewinds
        # a follower's log onto entries it is about to re-add; committed entries never go
        # away, so neither does the high watermark.
        self._high_watermark = max(self._hw_for(index), self._high_watermark)
        self._listener.committed(index, self._high_watermark)

    @property
    def commit_index(self) -> int:
        return self._state.commit_index

    def set_term(self, term: int, voted_for: str | None) -> None:
        self._state.set_term(term, voted_for)

    @property
    def term(self) -> int:
        return self._state.term

    @property
    def voted_for(self) -> str | None:
        return self._state.voted_for

    # --- what raftlog reads ------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        """Where the Raft log ends."""
        if self._entries:
            return self._entries[-1].next_offset
        return self._log.log_end_offset if self._log is not None else 0

    @property
    def window_bytes(self) -> int:
        return self._window_bytes

    @property
    def floor_offset(self) -> int:
        """Retention and cleaning stay below this: the window's first entry, or the first the
        window file on disk still names while a compaction's rewrite of it is under way (a
        crash then restarts from that file, whose entries must still read their batches)."""
        first = self._entries[0].offset
        return first if self._disk_first is None else min(first, self._disk_first)

    @property
    def first_index(self) -> int:
        return self._entries[0].idx if self._entries else 0

    def entry(self, position: int) -> Entry:
        return self._entries[position]

    def inline_commands(self, kind: int, after: int) -> list[tuple[int, bytes]]:
        """(Raft index, command) of the window's inline entries of one kind past `after`."""
        return [
            (e.idx, e.inline)
            for e in self._entries
            if e.idx > after and e.inline is not None and e.inline[:1] == bytes([kind])
        ]

    @property
    def base_conf(self) -> tuple[int, bytes] | None:
        """The configuration entry in force at the window's start, if the window lost it."""
        return self._base_conf

    def conf_commands(self) -> list[tuple[int, bytes]]:
        """(Raft index, command) of the configuration entries the window holds past the base."""
        after = self._base_conf[0] if self._base_conf is not None else 0
        return self.inline_commands(CONF, after)

    def conf_at(self, idx: int) -> bytes | None:
        """The configuration command in force at Raft index `idx` (None: the group's first)."""
        found = self._base_conf[1] if self._base_conf is not None else None
        for index, command in self.conf_commands():
            if index > idx:
                break
            found = command
        return found

    def raft_entries(self, lo: int, hi: int) -> list[RaftEntry]:
        """The window's entries of Raft indexes lo to hi - 1, as the Raft core reads them (a
        WindowView's walk cost the core's every Ready a generator and a slice object)."""
        entries = self._entries
        if not entries:
            return []
        first = entries[0].idx
        raft_entry = self._raft_entry
        return [raft_entry(e) for e in entries[max(lo - first, 0) : max(hi - first, 0)]]

    @property
    def last_index(self) -> int:
        return self._entries[-1].idx

    def entry_by_index(self, idx: int) -> Entry | None:
        if not self._entries:
            return None
        pos = idx - self._entries[0].idx
        return self._entries[pos] if 0 <= pos < len(self._entries) else None

    @property
    def window_path(self) -> Path:
        return self._window_path

    def has_snapshot(self) -> bool:
        """A window that does not start at Raft index 1 was cut at a snapshot point."""
        return bool(self._entries) and self._entries[0].idx > 1

    def install(self, anchor: Entry, conf: bytes | None = None) -> None:
        """A snapshot install on the Raft core (raft/install.py) brought the log up to the end
        of `anchor`, the snapshot's last entry: the window becomes that entry alone, in one
        atomic, synced step, and it and everything before it count as committed. `conf`: the
        configuration in force there, as the source's log says (saved first)."""
        if self._log is not None and self._log.log_end_offset != anchor.next_offset:
            raise RuntimeError(
                f"install of entry {anchor.idx}: the log ends at {self._log.log_end_offset}, "
                f"not at its end {anchor.next_offset}"
            )
        if conf is not None and (self._base_conf is None or self._base_conf[1] != conf):
            self._save_base_conf(anchor.idx, conf)
        self._replace_window([anchor], anchor.idx)
        self._high_watermark = max(self._hw_for(self._state.commit_index), self._high_watermark)
        self._listener.committed(self._state.commit_index, self._high_watermark)

    def compact_to(self, idx: int) -> None:
        """Drops entries before `idx` from the window (a snapshot was taken there)."""
        if self._entries and idx > self._entries[0].idx:
            # The entry after the snapshot point was applied, hence committed.
            self._state.commit_index = max(self._state.commit_index, idx + 1)
            self.persist_commit()  # a restart must not find its commit before the window
            self._listener.compacting()
            self._drop_first(idx - self._entries[0].idx)

    def checkpoint(self) -> None:
        """Saves what only the window's entries hold (producer state, inline commands) without
        cutting it: a restart then reads the log only from here (raft/replica.py)."""
        self._listener.compacting()

    def persist_commit(self) -> None:
        """The commit index on disk before anything implied by it is told (an acknowledgement,
        a history record): a kill -9 restart must not bring the high watermark back below.
        The entries it covers go first."""
        self.write_pending()
        self._state.persist_commit()

    def close(self) -> None:
        self.finish_rewrite()  # one compacted again meanwhile keeps the dead head: read past
        self.write_pending()
        self._file.close()
        self._state.persist_commit()
        self._state.save()
        self._state.close()

    def durable_through(self, durability: Durability) -> None:
        """Term and vote saves join the node's batches (a group with peers)."""
        self._state.durability = durability

    @property
    def state_seq(self) -> int:
        """The latest batched save of term and vote, which this group's messages follow."""
        return self._state.saved_seq

    # --- internals ---------------------------------------------------------------------------

    def _tuple(self, position: int) -> RaftEntry:
        return self._raft_entry(self._entries[position])

    def _raft_entry(self, e: Entry) -> RaftEntry:
        if e.location is None:
            assert e.inline is not None  # an entry is inline or has its batches in the log
            return (e.inline, e.idx, e.term)
        assert self._log is not None  # only a partition's entries have batches
        return (StoredCommand(self, e, e.location.size), e.idx, e.term)

    def read_entry(self, entry: Entry) -> list[bytes | bytearray | memoryview]:
        """The batches of `entry`, which the window must still hold (StoredCommand), as the
        buffers that make them up (Segment.read_parts)."""
        if self.entry_by_index(entry.idx) is not entry:
            raise StaleEntry(f"{self._dir}: entry {entry.idx} of term {entry.term} left the window")
        assert self._log is not None and entry.location is not None
        return self._log.read_location_parts(entry.location)

    def _hw_for(self, commit_index: int) -> int:
        """High watermark = the offset after the last committed entry."""
        if not self._entries:
            return self._log.log_start_offset if self._log is not None else 0
        pos = min(commit_index - self._entries[0].idx, len(self._entries) - 1)
        if pos < 0:
            return self._entries[0].offset
        return self._entries[pos].next_offset

    def _replace_window(self, entries: list[Entry], committed: int) -> None:
        """The window after a snapshot install: `entries`, with everything up to `committed`
        (the snapshot's last entry) counted as committed, rewritten in one synced step."""
        self._entries = entries
        self._window_bytes = sum(e.location.size for e in entries if e.location is not None)
        self._state.commit_index = max(self._state.commit_index, committed)
        self.persist_commit()
        self._rewrite_window()

    def _save_base_conf(self, index: int, command: bytes) -> None:
        """Atomic and synced, before the window that held the entry is rewritten without it (a
        crash in between finds the entry in both, and `conf_commands` skips the window's)."""
        tmp = self._conf_path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(msgpack.packb([index, command]))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._conf_path)
        fsync_dir(self._dir)
        self._base_conf = (index, command)

    def _load_window(self) -> None:
        if not self._window_path.exists():
            return
        data = self._window_path.read_bytes()
        pos = 0
        while pos + RECORD_HEAD.size <= len(data):
            length, crc = RECORD_HEAD.unpack_from(data, pos)
            payload = data[pos + RECORD_HEAD.size : pos + RECORD_HEAD.size + length]
            # Zeros (length 0, and crc32c of nothing is 0) are what a file system can leave
            # past the last write a machine crash interrupted; no record is ever empty.
            if length == 0 or len(payload) < length or crc32c.crc32c(payload) != crc:
                break
            entry = Entry.unpack(msgpack.unpackb(payload))
            entry.file_pos = pos
            if not self._in_log(entry):
                break
            self._entries.append(entry)
            if entry.location is not None:
                self._window_bytes += entry.location.size
            pos += RECORD_HEAD.size + length
        if pos < len(data):
            log.warning(
                "%s: dropping %d bytes of window past a torn or unlogged entry",
                self._window_path,
                len(data) - pos,
            )
            with open(self._window_path, "r+b") as f:
                f.truncate(pos)
        self._cut_log_to_window()

    def _check_log_end(self) -> None:
        """The log must end where the window's last entry ends before anything is appended; an
        interrupted snapshot install can leave data past it, which no longer belongs there."""
        assert self._log is not None  # a partition's journal: the controller's has no log
        if self._log.log_end_offset != self._entries[-1].next_offset:
            self._cut_log_to_window()

    def cut_after(self, idx: int) -> None:
        """A Raft truncation by the core (raft/replica.py): entries after `idx` and their batches
        go; the core cuts only what it proved divergent (FORK.md, 2 and 8)."""
        if self._entries:
            self._cut_from(max(0, idx + 1 - self._entries[0].idx), "raft")

    def truncate_for_install(self, offset: int, leader_terms: set[int], leader_start: int) -> int:
        """Drops the window entries a snapshot install replaces: those past `offset` (where
        this log stops agreeing with the leader's) or of a term the leader never had. Entries
        before it are identical to the leader's (Raft's log matching), so votes stay honest.
        A log that then ends below the leader's log start (retention deleted all it holds
        there) continues at that start. Returns where the install resumes: the log's end."""
        keep = len(self._entries)
        for i, entry in enumerate(self._entries):
            if entry.next_offset > offset or (entry.term > 0 and entry.term not in leader_terms):
                keep = i
                break
        if keep == 0:
            raise RuntimeError(f"install at offset {offset} would empty the Raft window")
        self._cut_from(keep, "install")
        assert self._log is not None  # installs are a partition's: its journal has a log
        if self._log.log_end_offset < leader_start:
            self._log.reset(leader_start)
        return self._log.log_end_offset

    def _cut_from(self, position: int, reason: str) -> None:
        """Cuts window entries from `position` on, and their data from the log."""
        if position >= len(self._entries):
            return
        self.write_pending()  # the file is cut at a record's position: all of them first
        removed = self._entries[position:]
        del self._entries[position:]
        self._window_bytes -= sum(e.location.size for e in removed if e.location is not None)
        self._file.truncate(removed[0].file_pos - self._base)
        self._file_end = self._file.seek(0, os.SEEK_END) + self._base
        self._mirror_cut(self._file_end)
        first = removed[0]
        result = None
        if self._log is not None:
            if first.location is not None:
                loc = first.location
                result = self._log.truncate(loc.segment_base, loc.term, loc.position, False)
            elif first.term > 0 and first.inline is not None and first.inline[:1] == bytes([NO_OP]):
                # the no-op opened its term's segment: the whole segment goes with it
                result = self._log.truncate(first.offset, first.term, 0, True)
            else:
                result = self._log.truncate_to_offset(first.offset)
        self._listener.truncated(removed, result, reason)

    def _cut_log_to_window(self) -> None:
        """Batches appended to the log whose window record was lost are not in the Raft log:
        keeping them would give the next entries different offsets than on other replicas."""
        if self._log is None or not self._entries:
            return
        end = None
        # The log ends with the last entry that put something there: batches, or a no-op's
        # segment. A data entry whose batches were all left out (a producer's duplicates)
        # holds nothing: taken for a no-op, it named a segment that does not exist and the
        # partition could not load after a kill -9 (the fault suite's kill_all, all nodes).
        # A no-op's segment a machine crash lost (its directory entry is not fsynced, its
        # window record survived: issue 43's storage simulation) is made again once the log
        # is cut to the entries before it; naming it failed the partition's open.
        segments = {(s.base_offset, s.term) for s in self._log.segments()}
        lost: list[int] = []
        for entry in reversed(self._entries):
            if entry.location is not None:
                loc = entry.location
                end = (loc.segment_base, loc.term, loc.position + loc.size)
                break
            if entry.term > 0 and entry.inline is not None and entry.inline[:1] == bytes([NO_OP]):
                if (entry.offset, entry.term) not in segments:
                    lost.append(entry.term)
                    continue
                end = (entry.offset, entry.term, 0)  # its term's segment stays, empty
                break
        if end is None:
            # Nothing in the window put data in the log (after a compaction its entries may
            # all be inline commands): the log ends where they were appended, and what came
            # before them is the committed log the window was cut from.
            result = self._log.truncate_to_offset(self._entries[-1].next_offset)
        else:
            result = self._log.truncate(*end, False)
        if result.bytes or result.terms_removed:
            log.warning("%s: cut %d bytes the window does not know", self._dir, result.bytes)
        for term in reversed(lost):
            if term > self._log.active_term:
                log.warning("%s: term %d's segment was lost; made again", self._dir, term)
                self._log.begin_term(term)

    def _in_log(self, entry: Entry) -> bool:
        """An entry whose batches did not survive log recovery is not in the Raft log either."""
        return self._log is None or entry.next_offset <= self._log.log_end_offset
