"""Writes the index entries of the segments a log rolled past and fsyncs them, off the event
loop, and keeps each log's recovery point: the base offset below which every segment but the
last is on disk.

A roll used to fsync the previous segment (its data and both indexes) on the event loop
before creating the next. Every election rolls each replica's log to the new term's segment:
after a produce spread over 3,000 partitions, the kill -9 of a leader rolled a thousand dirty
segments on each survivor, three fsyncs each, and re-leading every partition took 13-26 s
(7 s with no fsync at all). Kafka flushes a rolled segment in the background the same way and,
after an unclean shutdown, recovers every segment from its recovery point on; `Log` does that.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["POINT_FILE", "RecoveryPoint", "settle"]

log = logging.getLogger(__name__)

POINT_FILE = "recovery-point-checkpoint"
_VERSION = "0"
# One thread for the process: fsyncs queue in the kernel anyway, and one thread keeps every
# log's flushes in roll order.
_FLUSHER = ThreadPoolExecutor(1, thread_name_prefix="segment-flush")


Write = tuple[str, bytes]  # a file, and bytes to append to it before its fsync


class RecoveryPoint:
    """One log's writes handed off at its rolls and its recovery point, shared by the event
    loop (`hand_off`, `lower`, `drain`, `close`) and the flusher thread under one lock."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.point = _read(directory)
        self._lock = threading.Condition()
        self._files: list[Write] = []  # handed off, not yet taken by the flusher
        self._target = 0  # the point once they are on disk
        self._generation = 0  # moves on a truncation: a target from before it is stale
        self._queued = False  # a flush of this log is waiting for the flusher thread
        self._busy = False  # the flusher is syncing this log's files
        self._closed = False

    def hand_off(self, files: list[Write], point: int) -> None:
        """A roll: `files` (the rolled segment's, none if it was synced already) are the
        flusher's to write and fsync; once they are on disk every segment below `point` is."""
        with self._lock:
            self._files.extend(files)
            self._target = point
            submit, self._queued = not self._queued, True
        if submit:
            _FLUSHER.submit(self._flush)

    def lower(self, offset: int) -> None:
        """A truncation left the log ending at `offset`: segments created from now on may start
        below the point, so it comes down to `offset`, on disk before any of them exists."""
        with self._lock:
            self._generation += 1
            self._target = min(self._target, offset)
            if self.point > offset:
                self.point = offset
                _write(self.directory, offset)

    def drain(self, closing: bool = False) -> None:
        """Writes and syncs, on the caller's thread, what the flusher has not taken yet, after
        waiting for what it is writing: then every segment but the last is on disk, and the
        log may cut, delete or replace their files. `closing`: the flusher writes nothing more
        to the directory (a clean shutdown's marker may follow, or the directory goes)."""
        with self._lock:
            self._closed = self._closed or closing
            while self._busy:
                self._lock.wait()
            files, self._files = self._files, []
        _sync(files)

    def _flush(self) -> None:
        with self._lock:
            self._queued = False
            if self._closed or (not self._files and self._target <= self.point):
                return
            files, self._files = self._files, []
            target, generation = self._target, self._generation
            self._busy = True
        synced = False
        try:
            synced = _sync(files)
        finally:
            with self._lock:
                self._busy = False
                fresh = not self._closed and generation == self._generation
                if synced and fresh and target > self.point:
                    try:
                        _write(self.directory, target)
                        self.point = target
                    except OSError as exc:  # a lower point only means more to verify
                        log.warning("%s: recovery point not written: %s", self.directory, exc)
                self._lock.notify_all()


def settle() -> None:
    """Returns once every flush handed off so far is done: for a caller that must see the
    recovery points, or no descriptor of the flusher's, on disk (the tests)."""
    _FLUSHER.submit(lambda: None).result()


def _sync(files: list[Write]) -> bool:
    """Appends and fsyncs each file, by name (a rolled segment's descriptor may be closed
    meanwhile); a .log deleted since needs none. False if one failed."""
    ok = True
    for name, data in files:
        try:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT if data else os.O_RDONLY
            fd = os.open(name, flags, 0o666)
        except FileNotFoundError:
            continue
        try:
            while data:  # a write may be short
                data = data[os.write(fd, data) :]
            os.fsync(fd)
        except OSError as exc:
            log.error("%s: fsync failed: %s", name, exc)
            ok = False
        finally:
            os.close(fd)
    return ok


def _read(directory: Path) -> int:
    """0 (verify every segment: always safe) when missing or unreadable."""
    try:
        lines = (directory / POINT_FILE).read_text().split()
    except (FileNotFoundError, UnicodeDecodeError):
        return 0
    if len(lines) == 2 and lines[0] == _VERSION and lines[1].isdigit():
        return int(lines[1])
    return 0


def _write(directory: Path, offset: int) -> None:
    """Renamed into place, not fsynced: lost or torn, the point reads lower (or 0), which only
    means more segments to verify after an unclean shutdown."""
    path = directory / POINT_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{_VERSION}\n{offset}\n")
    os.replace(tmp, path)
