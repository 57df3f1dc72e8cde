"""Raft's persistent state (term and vote) of every group on a node, made durable in batches.

Raft needs a node's term and vote on disk before any message that depends on them leaves
the node. Saved one group at a time on the event loop (then write, fsync, rename, fsync the
directory: 2.7 ms here), a node electing a thousand partitions stalled for up to 8 s and
lost the leaderships it was electing (issue 12). Here a save only records the bytes (in
raft_state.py's format); the saves recorded so far are written by a thread pool, whose
concurrent syncs share the device's flushes, while the loop goes on. A group's transport
holds the messages it sends after a save of its state until that save is durable
(`GroupTransport` asks `durable` and `wait`), so no peer sees a vote or term before the
disk does. Only that group waits: holding every frame of the connection behind the latest
save (as at first) delayed the other groups' heartbeats and answers by the fsyncs of a
thousand elections, and their leaders stepped down for it (issue 12).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Sequence
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, TypeVar

from mypy_extensions import mypyc_attr

log = logging.getLogger(__name__)

THREADS = 32
T = TypeVar("T")


# mypyc: the controller's journal and the tests' disks subclass it in plain Python.
@mypyc_attr(allow_interpreted_subclasses=True)
class Durability:
    """`inline`: saves are written in the loop's thread (an in-process test's nodes, whose
    order of events must not depend on a thread pool); waiters still run a turn later."""

    def __init__(self, inline: bool = False) -> None:
        self.seq = 0  # saves recorded
        self.durable = 0  # saves on disk
        self._pending: dict[Path, tuple[bytes, int, int]] = {}  # the latest, not yet written
        self._running = False
        self._waiters: list[tuple[int, Callable[[], None]]] = []
        self._pool = None if inline else ThreadPoolExecutor(THREADS, "durability")
        self._failing = 0  # saves failed since saves last worked (0: they work)
        # Where the node's other blocking file work runs (window rewrites, producer state).
        self.files: Offload = InlineOffload() if inline else OFFLOAD

    def save(self, path: Path, image: bytes, start: int, stop: int) -> int:
        """Writes `path` as `image`, whose bytes `start:stop` are all that changed since the
        last save (write_state); returns the number to `wait` for."""
        self.seq += 1
        self._pending[path] = (image, start, stop)
        return self.seq

    def wait(self, seq: int, then: Callable[[], None]) -> None:
        """Calls `then` once the first `seq` saves are durable."""
        if seq <= self.durable:
            then()
            return
        self._waiters.append((seq, then))
        if not self._running:
            self._start()

    def close(self) -> None:
        """Writes what is pending in the caller's thread (the node is stopping)."""
        pending, self._pending = self._pending, {}
        for path, (image, start, stop) in pending.items():
            write_state(path, image, start, stop)
        self.durable = self.seq
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _start(self) -> None:
        batch, self._pending = self._pending, {}
        upto = self.seq
        self._running = True
        loop = asyncio.get_running_loop()
        if self._pool is None:
            for path, written in batch.items():
                write_state(path, *written)
            loop.call_soon(self._finished, upto, [])
            return
        done = asyncio.gather(
            *(loop.run_in_executor(self._pool, write_state, p, *w) for p, w in batch.items()),
            return_exceptions=True,
        )
        done.add_done_callback(lambda f: self._finished(upto, f.result()))

    def _finished(self, upto: int, results: Sequence[object]) -> None:
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:  # the disk failed: nothing better to do than say so and go on as before
            if not self._failing:  # once, not at every batch while it stays failed
                log.error(
                    "Raft state saves failing: %d of %d, first: %s",
                    len(failed),
                    len(results),
                    failed[0],
                )
            self._failing += len(failed)
        elif self._failing and results:
            log.warning("Raft state saves work again (%d failed meanwhile)", self._failing)
            self._failing = 0
        self._running = False
        self.durable = max(self.durable, upto)
        ready = [then for seq, then in self._waiters if seq <= self.durable]
        self._waiters = [(seq, then) for seq, then in self._waiters if seq > self.durable]
        if self._waiters:
            self._start()
        for then in ready:
            then()


def write_state(path: Path, image: bytes, start: int, stop: int) -> None:
    """Writes `image[start:stop]` in place and fdatasyncs it: no metadata changes, so the
    filesystem journal is not involved. A file missing or of another size (the first
    format) is replaced whole: write, fsync, rename, fsync the directory. A group removed
    meanwhile is skipped."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        fd = -1
    if fd >= 0:
        try:
            if os.fstat(fd).st_size == len(image):
                os.pwrite(fd, image[start:stop], start)
                os.fdatasync(fd)
                return
        finally:
            os.close(fd)
    tmp = path.with_suffix(".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except FileNotFoundError:
        return
    try:
        os.write(fd, image)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# mypyc: the storage simulation's file steps (tests/support/sim_disk.py) subclass it in plain Python.
@mypyc_attr(allow_interpreted_subclasses=True)
class Offload:
    """Blocking file work that must not hold the event loop (a Raft window's rewrite after a
    compaction, a partition's producer-state save: write, fsync, rename, fsync the directory,
    2-10 ms each on a busy disk, every partition and connection of the node waiting): `run`
    calls `work` in a thread and then `then(future)` on the loop. Its callers keep their own
    order (one step of a file in flight at a time) and say what stays authoritative
    meanwhile. `wait` blocks on a step (a close, an install): rare, and what they did before.
    Tests and the storage simulation replace it to choose when each step lands."""

    def __init__(self, threads: int = 4) -> None:
        self._pool = ThreadPoolExecutor(threads, "file-work")

    def run(self, work: Callable[[], T], then: Callable[[Future[T]], None]) -> Future[T]:
        loop = asyncio.get_running_loop()
        done = self._pool.submit(work)
        done.add_done_callback(lambda f: _call_soon(loop, then, f))
        return done

    def wait(self, step: Future[T]) -> None:
        """Until `step` ran (its `then` still comes later, on the loop)."""
        futures.wait([step])

    def discard(self, file: BinaryIO) -> None:
        """Closes `file` in a thread: the last close of a file renamed over frees its blocks
        (py-spy: a replaced window's close was most of what its rewrite left on the loop)."""
        self._pool.submit(file.close)


def _call_soon(
    loop: asyncio.AbstractEventLoop, then: Callable[[Future[T]], None], done: Future[T]
) -> None:
    # the loop closed: its caller waited for the step (`wait`) before
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(then, done)


class InlineOffload(Offload):
    """Runs the work at once in the loop's thread, `then` a turn later (Durability(inline))."""

    def __init__(self) -> None:  # no pool
        pass

    def run(self, work: Callable[[], T], then: Callable[[Future[T]], None]) -> Future[T]:
        done: Future[T] = Future()
        try:
            done.set_result(work())
        except Exception as exc:
            done.set_exception(exc)
        asyncio.get_running_loop().call_soon(then, done)
        return done

    def wait(self, step: Future[T]) -> None:
        pass

    def discard(self, file: BinaryIO) -> None:
        file.close()


OFFLOAD = Offload()  # one pool for the process, as the flusher's thread
