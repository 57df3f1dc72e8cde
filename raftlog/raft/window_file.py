"""The window file under a Raft group's journal (raft/journal.py): its records, their writes
and a compaction's rewrite of it off the loop, apart from what the entries mean to Raft."""

from __future__ import annotations

import logging
import os
import struct
from concurrent.futures import Future
from dataclasses import dataclass
from io import FileIO
from pathlib import Path
from typing import Any

import crc32c
import msgpack
from mypy_extensions import mypyc_attr

from raftlog.raft.durability import Offload
from raftlog.storage.log import Log
from raftlog.storage.log_reads import Location

log = logging.getLogger(__name__)

RECORD_HEAD = struct.Struct(">II")  # payload length, crc32c of payload


@dataclass(slots=True, init=False)
class Entry:
    """One Raft entry as the window keeps it: where its batches are, not the batches. (An
    __init__ of its own: see docs/architecture.md, "Compiled modules".)"""

    idx: int
    term: int
    offset: int  # first Kafka offset of the entry (log end offset for no-ops)
    next_offset: int
    location: Location | None  # None for inline entries
    inline: bytes | None  # the whole command, for entries that are not batches
    file_pos: int  # where its record starts, counted from the first file's start (_base)

    def __init__(
        self,
        idx: int,
        term: int,
        offset: int,
        next_offset: int,
        location: Location | None = None,
        inline: bytes | None = None,
        file_pos: int = 0,
    ) -> None:
        self.idx = idx
        self.term = term
        self.offset = offset
        self.next_offset = next_offset
        self.location = location
        self.inline = inline
        self.file_pos = file_pos

    def pack(self) -> list[int | bytes | None]:
        if self.location is None:
            return [self.idx, self.term, self.offset, self.next_offset, self.inline]
        loc = self.location
        return [
            self.idx,
            self.term,
            self.offset,
            self.next_offset,
            None,
            loc.segment_base,
            loc.position,
            loc.size,
        ]

    @classmethod
    def unpack(cls, fields: list[Any]) -> Entry:
        idx, term, offset, next_offset, inline = fields[:5]
        if inline is not None:
            return cls(idx, term, offset, next_offset, inline=inline)
        base, position, size = fields[5:8]
        return cls(idx, term, offset, next_offset, Location(base, term, position, size))


@dataclass(slots=True, eq=False)
class Rewrite:
    """A compaction's rewrite of the window file under way off the loop (`_rewrite_off_loop`).
    The file it makes is the old one without its first `base` bytes (a record's bytes depend
    only on its entry), so positions carry over and appends can go to both files."""

    base: int  # where the new file starts in the old one (the first kept entry's file_pos)
    end: int  # the old file's end when its copy started
    low: int  # from here on the old file may differ from the copy (appends, cuts since)
    first: int  # the offset of the new file's first entry
    fd: int = -1  # the new file, once copied and synced: appends and cuts go to it too
    step: Future[Any] | None = None  # the step in the thread


# mypyc: SegmentJournal, which the controller's journal and the tests' disks subclass in plain
# Python, is built on it.
@mypyc_attr(allow_interpreted_subclasses=True)
class WindowFile:
    """The window file's half of SegmentJournal (raft/journal.py), whose __init__ sets these."""

    _dir: Path
    _log: Log | None
    _offload: Offload | None
    _entries: list[Entry]
    _window_path: Path
    _next_path: Path
    _file: FileIO
    _file_end: int
    _deferred: bool
    _pending: list[bytes]
    _base: int
    _rewrite: Rewrite | None
    _rewrite_again: bool
    _disk_first: int | None

    def defer_writes(self) -> None:
        """From now on `add` leaves an entry's batches and window record in memory until
        `write_pending`, which the Raft driver calls for each Ready before its messages can
        leave or its entries count (raft/replica.py's persist): a group's entries of one loop
        turn then reach the OS in one segment writev and one window write instead of two
        system calls per entry. Anything that reads, cuts or rewrites the files, and the
        commit index's write, writes them first. Until it is called (the controller's journal,
        a replica's first entry) every add writes at once."""
        self._deferred = True

    def write_pending(self) -> None:
        """The deferred entries to the OS: their batches first, then their window records (a
        kill -9 between the two leaves batches the window does not know, which the next open
        cuts, never a record without its batches)."""
        if not self._pending:
            return
        if self._log is not None:
            self._log.write_staged()
        frames, self._pending = self._pending, []
        self._write_frames(b"".join(frames))

    def _append_record(self, entry: Entry) -> None:
        entry.file_pos = self._file_end
        frame = _frame(entry)
        self._file_end += len(frame)
        if self._deferred:
            self._pending.append(frame)
        else:
            self._write_frames(frame)

    def _write_frames(self, frames: bytes) -> None:
        """Writes records that end the window file (`_file_end` already counts them)."""
        record = memoryview(frames)
        try:
            while record:  # an unbuffered write may be short
                record = record[self._file.write(record) :]
        except OSError:
            self._file_end = self._file.seek(0, os.SEEK_END) + self._base
            self._mirror_cut(self._file_end)
            raise
        rw = self._rewrite
        if rw is not None and rw.fd >= 0:  # the rewrite's file gets them too
            _pwrite_all(rw.fd, frames, self._file_end - len(frames) - rw.base)

    def _rewrite_window(self) -> None:
        """The window file rewritten in place of the old, on the caller's thread (an install,
        the controller's clear, or no loop), after any rewrite under way."""
        self.finish_rewrite()
        self.write_pending()  # their batches; the records are rewritten below
        tmp = self._window_path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            pos = 0
            for entry in self._entries:
                entry.file_pos = pos
                record = _frame(entry)
                f.write(record)
                pos += len(record)
            f.flush()
            os.fsync(f.fileno())
        if hasattr(self, "_file") and not self._file.closed:
            self._file.close()
        os.replace(tmp, self._window_path)
        fsync_dir(self._dir)
        self._file = open(self._window_path, "a+b", buffering=0)  # noqa: SIM115
        self._file_end = pos
        self._base = 0
        self._disk_first = None

    # --- a compaction's rewrite, off the loop -----------------------------------------------
    #
    # The old file stays the window until the new one is renamed over it, and holds every
    # record throughout: (1) a thread copies the old file from the first kept record on into
    # `window.next` and fsyncs it; (2) on the loop, what was appended or cut meanwhile is
    # copied again (a few records), and from then on every append and cut goes to both files;
    # (3) a thread renames `window.next` over `window` and fsyncs the directory; (4) on the
    # loop, the new file becomes the one appended to. A crash before the rename restarts from
    # the old file (the window from before the cut: its segments are still there, retention
    # and cleaning stay below `floor_offset`), after it from the new; both hold every record
    # written. A close or a synchronous rewrite waits for the step under way (`finish_rewrite`).

    def _rewrite_off_loop(self) -> None:
        assert self._offload is not None
        self.write_pending()  # the copy reads them from the old file
        first = self._entries[0]
        rw = Rewrite(first.file_pos, self._file_end, self._file_end, first.offset)
        self._rewrite = rw
        src = os.dup(self._file.fileno())
        start, stop = rw.base - self._base, rw.end - self._base
        rw.step = self._offload.run(
            lambda: _copy_window(src, self._next_path, start, stop),
            lambda done: self._copied(rw, done),
        )

    def _copied(self, rw: Rewrite, done: Future[int], here: bool = False) -> None:
        """The copy is synced: what changed meanwhile goes to it too, then the rename (`here`:
        on this thread, for `finish_rewrite`)."""
        if self._rewrite is not rw or rw.step is not done:
            return  # finish_rewrite took this step already
        error = done.exception()
        if error is not None:
            self._rewrite_failed(rw, error)
            return
        rw.fd = done.result()
        self.write_pending()  # `_file_end` counts them: the copy must hold them, not zeros
        try:
            if self._file_end > rw.low:
                data = os.pread(self._file.fileno(), self._file_end - rw.low, rw.low - self._base)
                _pwrite_all(rw.fd, data, rw.low - rw.base)
            os.ftruncate(rw.fd, self._file_end - rw.base)
        except OSError as exc:
            self._rewrite_failed(rw, exc)
            return
        next_path, window, directory = self._next_path, self._window_path, self._dir
        if here:
            swapped: Future[OSError | None] = Future()
            rw.step = swapped
            try:
                swapped.set_result(_swap_window(next_path, window, directory))
            except OSError as exc:
                swapped.set_exception(exc)
            self._swapped(rw, swapped)
            return
        assert self._offload is not None
        rw.step = self._offload.run(
            lambda: _swap_window(next_path, window, directory),
            lambda done: self._swapped(rw, done),
        )

    def _swapped(self, rw: Rewrite, done: Future[OSError | None]) -> None:
        """The copy is the window now: appended to from here on."""
        if self._rewrite is not rw or rw.step is not done:
            return
        error = done.exception()
        if error is not None:  # not renamed: the old file is still the window
            self._rewrite_failed(rw, error)
            return
        unsynced = done.result()
        if unsynced is not None:  # renamed, but a machine crash may bring the old one back
            log.warning("%s: window renamed, directory not synced: %s", self._dir, unsynced)
        old, self._file = self._file, open(rw.fd, "a+b", buffering=0)  # noqa: SIM115
        assert self._offload is not None
        self._offload.discard(old)
        self._base = rw.base
        self._rewrite = None
        self._disk_first = None if unsynced is None else rw.first  # hold it, then
        if self._rewrite_again:  # compacted meanwhile: the file still starts at rw's first
            self._rewrite_again = False
            self._disk_first = rw.first
            self._rewrite_off_loop()

    def _rewrite_failed(self, rw: Rewrite, error: BaseException) -> None:
        """The old file stays the window, with its dead head (and so does the floor)."""
        log.warning("%s: window rewrite failed: %s", self._window_path, error)
        self._rewrite = None
        self._rewrite_again = False
        if rw.fd >= 0:
            os.close(rw.fd)

    def finish_rewrite(self) -> None:
        """Waits for the step of a rewrite under way and does the rest here (a close, an
        install, the controller's clear: rare, and they fsynced on the loop before too)."""
        rw = self._rewrite
        if rw is None:
            return
        self._rewrite_again = False
        step = rw.step
        assert step is not None and self._offload is not None
        self._offload.wait(step)
        if rw.fd < 0:
            self._copied(rw, step, here=True)
        else:
            self._swapped(rw, step)

    def _mirror_cut(self, position: int) -> None:
        """The window file was cut at `position` (or a write failed there): so is the copy."""
        rw = self._rewrite
        if rw is None:
            return
        if rw.fd < 0:
            rw.low = min(rw.low, position)
        else:
            os.ftruncate(rw.fd, position - rw.base)


def _frame(entry: Entry) -> bytes:
    payload: bytes = msgpack.packb(entry.pack())
    return RECORD_HEAD.pack(len(payload), crc32c.crc32c(payload)) + payload


def _copy_window(src: int, path: Path, start: int, stop: int) -> int:
    """In a thread: `path` made of bytes `start:stop` of the window file open at `src` (which
    it closes), fsynced; its descriptor. A cut on the loop meanwhile may end the copy short:
    the loop copies again from there."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            pos = start
            while pos < stop:
                chunk = os.pread(src, min(stop - pos, 1 << 20), pos)
                if not chunk:
                    break
                _pwrite_all(fd, chunk, pos - start)
                pos += len(chunk)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
    finally:
        os.close(src)
    return fd


def _swap_window(path: Path, window: Path, directory: Path) -> OSError | None:
    """In a thread: the rewritten window in place of the old, durably; raises if it is not in
    place, returns the error if only the directory's fsync failed."""
    os.replace(path, window)
    try:
        fsync_dir(directory)
    except OSError as exc:
        return exc
    return None


def _pwrite_all(fd: int, data: bytes | memoryview, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view, position = view[written:], position + written


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
