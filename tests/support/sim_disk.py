"""A simulated replica's partition storage (issue 43): the real segment journal, segment log,
Raft state files and snapshot installer in a directory of its own on tmpfs, which the
simulation (tests/support/raft_sim.py) controls as a filesystem seam.

What a Ready asked to write and whose messages have not left yet is not settled: a crash
then cuts one such file at any byte (a torn segment or index tail, a torn window record, a
torn term/vote slot or commit record; in-place writes keep the old bytes past the cut) and
the replica restarts from what is on disk, through the journal's and the log's own recovery.
What was settled (`settle`) is never torn: a kill -9 keeps what the OS took.

Speed (thousands of schedules in the suite): the flusher runs inline on the simulation's
thread (the crash waited for it anyway), and a look at the disk (`settle`, a write step)
re-reads only the files written, created, renamed or deleted since the last, as inotify
tells them (Linux).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import random
import shutil
import struct
import tempfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, ParamSpec, TypeVar

import msgpack
from kafka.record.default_records import DefaultRecordBatchBuilder

from raftlog.raft.core.values import NONE, HardState
from raftlog.raft.durability import Offload
from raftlog.raft.install import Installer, Installs
from raftlog.raft.journal import SegmentJournal
from raftlog.raft.replica import NO_OP, JournalLog
from raftlog.raft.window_entries import DATA_PREFIX, Batches
from raftlog.raft.window_file import Entry
from raftlog.storage import cache, compaction, flusher, offset_file
from raftlog.storage import log as segment_log
from raftlog.storage.batch import iter_batches, records_section
from raftlog.storage.log import Log, LogConfig, TruncateResult
from raftlog.storage.records import walk
from raftlog.storage.segment import parse_segment_name

# Small segments and index intervals: rolls within a term, index entries, several segments
# per log in a schedule of a few hundred entries.
SEGMENT_BYTES = 1024
INDEX_INTERVAL_BYTES = 128
GROUP = "g"
# Files replaced whole by a rename (raftlog/storage/offset_file.py; the Raft state file's
# first save): a crash leaves the old one or the new one.
_RENAMED = {"log-start-offset", "cleaner-offset-checkpoint"}


def batch(value: bytes, key: bytes | None = None) -> bytes:
    """A data command: one record batch holding `value` (offsets and epoch are the log's)."""
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 2**31 - 1)
    builder.append(0, timestamp=1000, key=key, value=value, headers=[])
    return DATA_PREFIX + bytes(builder.build())


def scratch_root() -> Path:
    """A directory for one simulation's replicas, on tmpfs when there is one."""
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="raft-sim-", dir=shm if shm.is_dir() else None))


class _Listener:
    """The partition's side of the journal and the installer: nothing kept beside the log."""

    def admit(self, batches: memoryview, command: object) -> bytes | memoryview:
        return batches

    def appended(self, entry: Entry, command: object) -> None:
        pass

    def compacting(self) -> None:
        pass

    def truncated(self, removed: list[Entry], result: TruncateResult | None, reason: str) -> None:
        pass

    def committed(self, commit_index: int, high_watermark: int) -> None:
        pass

    def snapshot_state(self) -> object:
        return None

    def snapshot_installed(
        self, resume_offset: int, end_offset: int, source: str, state: object
    ) -> None:
        pass


class _Log(Log):
    """The segment log, telling the simulation when a roll writes the deferred appends of the
    segment it rolls past: they reach the OS before the flusher syncs that segment and moves
    the recovery point past it, a step of their own."""

    written: Callable[[str], None] | None = None

    def _roll(self, term: int) -> None:
        self.write_staged()
        if self.written is not None:
            self.written("deferred appends before a roll")
        super()._roll(term)


class _Journal(SegmentJournal):
    """The partition's journal, telling the simulation after each of its write steps."""

    written: Callable[[str], None] | None = None

    def add(self, command: bytes | Batches, idx: int, term: int) -> None:
        super().add(command, idx, term)
        if self.written is not None:
            self.written(f"add {idx}")

    def write_pending(self) -> None:
        pending = bool(self._pending)
        super().write_pending()
        if pending and self.written is not None:
            self.written("pending entries")

    def cut_after(self, idx: int) -> None:
        super().cut_after(idx)
        if self.written is not None:
            self.written(f"cut after {idx}")

    def set_term(self, term: int, voted_for: str | None) -> None:
        super().set_term(term, voted_for)
        if self.written is not None:
            self.written("term/vote")

    def set_commit_index(self, index: int) -> None:
        super().set_commit_index(index)
        if self.written is not None:
            self.written("commit")


class Controls:
    """The installers' control messages between the simulated nodes, through msgpack, queued
    until the simulation pumps them (`DiskSim.pump`)."""

    def __init__(self) -> None:
        self.queue: list[tuple[int, int, Any]] = []
        self.handlers: dict[int, Callable[[str, Any], None]] = {}

    def link(self, node: int) -> _Link:
        return _Link(self, node)


class _Link:
    def __init__(self, controls: Controls, node: int) -> None:
        self._controls, self._node = controls, node

    def send_control(self, peer_id: str, kind: str, payload: Any) -> None:
        wire = msgpack.unpackb(msgpack.packb(payload))
        self._controls.queue.append((self._node, int(peer_id), wire))

    def on_control(self, kind: str, handler: Callable[[str, Any], None]) -> None:
        self._controls.handlers[self._node] = handler


class Disk:
    """One replica's directory and the storage open on it (one incarnation at a time)."""

    def __init__(self, root: Path, node: int, clock: Callable[[], float]) -> None:
        self.dir = root / str(node)
        self.dir.mkdir(parents=True)
        self.node = node
        self._clock = clock
        self._images: dict[str, bytes] = {}  # settled contents, by path
        self._read: dict[str, bytes] = {}  # contents when last looked at, by path
        self._changes = _Changes(str(self.dir))
        # With `trace`: the contents after each write step since the settle, named.
        self.trace = False
        self._steps: list[tuple[str, dict[str, bytes]]] = []
        self.log: Log | None = None
        self.journal: SegmentJournal | None = None
        self.installer: Installer | None = None

    def open(
        self, controls: Controls, done: Callable[[int, int], None], failed: Callable[[], None]
    ) -> tuple[JournalLog, HardState]:
        """Opens the storage from what is on disk (recovering torn files), as a partition
        does at start: the core's log and hard state."""
        self.log = _Log(
            self.dir,
            LogConfig(segment_bytes=SEGMENT_BYTES, index_interval_bytes=INDEX_INTERVAL_BYTES),
        )
        self.files = StepFiles()
        journal = self.journal = _Journal(
            self.dir / "raft", self.log, _Listener(), clock=self._clock, files=self.files
        )
        if self.trace:
            journal.written = self.log.written = self._written
        if len(journal) == 0:
            journal.add(NO_OP, 1, 0)  # every replica's log starts with the same term-0 entry
        journal.defer_writes()  # as raft/replica.py's CoreGroup: written when a Ready is taken
        listener = _Listener()
        self.installer = Installer(
            GROUP, journal, self.log, listener, Installs(controls.link(self.node)), done, failed
        )
        log = JournalLog(journal)
        last_term = log.term_at(log.last_index()) or 0
        voted = journal.voted_for
        hs = HardState(
            max(journal.term, last_term),
            int(voted) if voted else NONE,
            min(journal.commit_index, log.last_index()),
        )
        self.settle()
        return log, hs

    def set_term(self, term: int, vote: int) -> None:
        """A Ready's term and vote, written when it is taken (raft/replica.py's persist)."""
        assert self.journal is not None
        voted = str(vote) if vote != NONE else None
        if (term, voted) != (self.journal.term, self.journal.voted_for):
            self.journal.set_term(term, voted)

    def settle(self) -> None:
        """What is on disk now stays through any crash (its Ready's messages are leaving)."""
        self._images = self._contents()
        self._steps.clear()

    def _contents(self) -> dict[str, bytes]:
        """Every file's bytes: those last looked at, and anew those changed since."""
        changed = self._changes.take()
        if changed is None:
            changed = set(self._read) | set(self._files())
        contents = dict(self._read)
        for path in sorted(changed):
            try:
                with open(path, "rb") as f:
                    contents[path] = f.read()
            except FileNotFoundError:
                contents.pop(path, None)
        self._read = contents
        return contents

    def crash(self, rng: random.Random, within: bool = False) -> str | None:
        """kill -9 in the middle of writing; descriptors are dropped without a flush. Says
        what it left on disk.

        By default one file written since the last settle is cut at a random byte of what
        was written (past the cut, an in-place write leaves the old bytes), the others keep
        what was written. `within` (with `trace` on): the node stops inside one of the
        writes since the settle (a segment append, a window record, a cut, the term/vote,
        the commit record): those before it are all on disk, those after it not at all,
        and of its own files each has the new bytes or the old, one of them torn."""
        assert self.log is not None
        segments = self.log.segments()
        # A segment the log rolled past was fsynced by the flusher: only the last one is torn.
        synced = {os.path.basename(s.path)[: -len(".log")] for s in segments[:-1]}
        now = self._contents()
        self._close()
        states = [("settled", self._images), *self._steps]
        if now != states[-1][1]:
            states.append(("the last write", now))
        if within and len(states) > 1:
            k = rng.randrange(len(states) - 1)
            before, (step, after) = states[k][1], states[k + 1]
            state, notes = dict(before), []
            written = sorted(
                p for p in before.keys() | after.keys() if before.get(p) != after.get(p)
            )
            tearable = [p for p in written if p in after and not _rolled_past(p, synced)]
            torn = rng.choice(tearable) if tearable else None
            for path in written:
                rel = os.path.relpath(path, self.dir)
                if path == torn:
                    data, note = _tear(path, before.get(path), after[path], rng)
                elif rng.random() < 0.5:
                    data, note = after.get(path), "written"
                else:
                    data, note = before.get(path), "not written"
                if data is None:
                    state.pop(path, None)
                else:
                    state[path] = data
                notes.append(f"{rel} {note}")
            for path in now.keys() | state.keys():
                if path not in state:
                    os.unlink(path)
                elif now.get(path) != state[path]:
                    Path(path).write_bytes(state[path])
            done = ", ".join(notes) or "nothing changed"
            return f"stopped in {step} ({k + 1} of {len(states) - 1} writes): {done}"
        changed = [
            (path, data)
            for path, data in sorted(now.items())
            if not _rolled_past(path, synced) and data != self._images.get(path)
        ]
        if not changed:
            return None
        path, new = rng.choice(changed)
        data, note = _tear(path, self._images.get(path), new, rng)
        if data is None:
            os.unlink(path)
        else:
            Path(path).write_bytes(data)
        return f"{os.path.relpath(path, self.dir)} {note}"

    def file_step(self) -> str | None:
        """The next step of the journal's window rewrite, run whole as its thread runs it,
        and its `then` as the loop's next callback; says which. The rename replaces the
        window by the same records without its head: what was settled of it stays so."""
        journal = self.journal
        if journal is None or not self.files.queue:
            return None
        base = journal._base
        self.files.step()
        if journal._base == base:
            step = "window rewrite copied"
        else:
            step = "window rewrite renamed into place"
            window, copy = str(journal.window_path), str(journal._next_path)
            cut = journal._base - base
            for state in (self._images, *(after for _, after in self._steps)):
                if window in state:
                    state[window] = state[window][cut:]
                if copy in state:
                    state.pop(copy)
        if self.trace:
            self._written(step)
        return step

    def _written(self, step: str) -> None:
        """The journal finished one write step: what the disk holds now, for `crash(within)`."""
        self._steps.append((step, self._contents()))

    def _files(self) -> list[str]:
        found = []
        dirs = [str(self.dir)]
        while dirs:
            with os.scandir(dirs.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        dirs.append(entry.path)
                    else:
                        found.append(entry.path)
        return found

    def _close(self) -> None:
        """Drops the incarnation's descriptors as a killed process does: nothing written."""
        if self.installer is not None:
            self.installer.close()
        if self.log is not None:
            for segment in self.log.segments():
                segment._staged.clear()  # deferred appends die with the process
                segment.close()
        if self.journal is not None:
            self.journal._file.close()
            self.journal._state.close()
            rewrite = self.journal._rewrite
            if rewrite is not None and rewrite.fd >= 0:
                os.close(rewrite.fd)
            self.files.queue.clear()  # the thread died with the process
        self.log = self.journal = self.installer = None

    def stored(self, upper: int) -> bytes:
        """Every batch the segments hold below offset `upper`, as stored."""
        assert self.log is not None
        log = self.log
        parts: list[bytes] = []
        offset, upper = log.segment_start, min(upper, log.log_end_offset)
        while offset < upper:
            data = log.read(offset, 1 << 20, upper, True)
            if not data:
                break
            parts.append(data)
            offset = list(iter_batches(data))[-1][1].next_offset
        return b"".join(parts)

    def records(self, upper: int) -> dict[int, tuple[int, bytes | None, bytes]]:
        """Every record the segments hold below offset `upper`, by offset: its batch's
        leader epoch, its key and its bytes (which compaction keeps as they were)."""
        data = self.stored(upper)
        found = {}
        for pos, header in iter_batches(data):
            section = records_section(data[pos : pos + header.size], header)
            for start, end, delta, _, key, _ in walk(section, header.record_count):
                offset = header.base_offset + delta
                found[offset] = (header.partition_leader_epoch, key, section[start:end])
        return found

    def clean(self, now_ms: int, rng: random.Random | None) -> str | None:
        """One pass of the partition's key-based compaction (cleanup.policy=compact, as
        partition.py's compact: below the window's first entry and the high watermark). With
        `rng` the node is killed at one of the pass's durable steps (a rewrite written, each
        directory fsync of its swap, the checkpoint's rename) and says where; else the pass
        is settled (it fsyncs what it writes)."""
        assert self.log is not None and self.journal is not None
        self.settle()
        floor = min(self.journal.floor_offset, self.journal.high_watermark)
        steps = self.log.compact_steps(now_ms, floor, 0, 0.0)
        _Barriers.hook = self._written
        try:
            for _ in steps:
                pass
        finally:
            _Barriers.hook = None
        if rng is None or not self._steps:
            self.settle()
            return None
        now = self._contents()
        self._close()
        states = [("settled", self._images), *self._steps]
        k = rng.randrange(len(states))
        step, state = states[k]
        for path in now.keys() | state.keys():
            if path not in state:
                os.unlink(path)
            elif now.get(path) != state[path]:
                Path(path).write_bytes(state[path])
        return f"killed while cleaning, after {step} ({k} of {len(states) - 1} steps)"

    def remove(self) -> None:
        self._close()
        self._changes.close()


_libc = ctypes.CDLL(None, use_errno=True)
# inotify(7): a file written or cut, created, deleted, renamed away or into place.
_IN_MODIFY, _IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x2, 0x40, 0x80, 0x100, 0x200
_IN_Q_OVERFLOW, _IN_ISDIR = 0x4000, 0x40000000
_WATCH = _IN_MODIFY | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows


class _Changes:
    """The paths under a directory written, created, renamed or deleted since last asked.
    Without inotify (its per-user limit reached) every look reads every file."""

    def __init__(self, root: str) -> None:
        self._fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        self._dirs: dict[int, str] = {}
        if self._fd >= 0:
            self._watch(root)

    def _watch(self, path: str) -> None:
        wd = _libc.inotify_add_watch(self._fd, os.fsencode(path), _WATCH)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")
        self._dirs[wd] = path

    def take(self) -> set[str] | None:
        """None when some changes are unknown (the kernel's queue overflowed, or a directory
        appeared whose first files came before its watch): look at every file then."""
        if self._fd < 0:
            return None
        changed: set[str] = set()
        complete = True
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return changed if complete else None
            pos = 0
            while pos < len(data):
                wd, mask, _, length = _EVENT.unpack_from(data, pos)
                name = os.fsdecode(
                    data[pos + _EVENT.size : pos + _EVENT.size + length].rstrip(b"\0")
                )
                pos += _EVENT.size + length
                directory = self._dirs.get(wd)
                if mask & _IN_Q_OVERFLOW or directory is None:
                    complete = False
                    continue
                if not name:  # the watched directory's own (its watch ending)
                    continue
                path = os.path.join(directory, name)
                if mask & _IN_ISDIR:
                    if mask & (_IN_CREATE | _IN_MOVED_TO):
                        self._watch(path)
                        complete = False
                    continue
                changed.add(path)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)


def _rolled_past(path: str, synced: set[str]) -> bool:
    name = os.path.basename(path)
    return parse_segment_name(name) is not None and name.split(".")[0] in synced


def _tear(
    path: str, previous: bytes | None, new: bytes, rng: random.Random
) -> tuple[bytes | None, str]:
    """`new` cut at a random byte of what was written over `previous` (None: no file), past
    which an in-place write leaves the old bytes; a file replaced by a rename is old or new."""
    if os.path.basename(path) in _RENAMED or (path.endswith("/raft/state") and not previous):
        return previous, "not replaced"  # written whole to a temporary file and renamed over
    old = previous or b""
    same = 0
    limit = min(len(old), len(new))
    while same < limit and old[same] == new[same]:
        same += 1
    end = len(new)
    if len(new) == len(old):  # written in place: a cut past the last changed byte is no tear
        while end > same and old[end - 1] == new[end - 1]:
            end -= 1
        cut = rng.randint(same, end)
        return new[:cut] + old[cut:], f"torn at {cut} of {len(new)}"
    cut = rng.randint(same, end)
    return new[:cut], f"torn at {cut} of {len(new)}"


class DiskSim:
    """The storage of every replica of one simulation, and the event loop the installers'
    timers need (never run: the simulation decides when an install stalls or fails)."""

    def __init__(self, ids: tuple[int, ...], clock: Callable[[], float]) -> None:
        self.root = scratch_root()
        self.loop = asyncio.new_event_loop()
        # Budgets of one descriptor and no index bytes for past segments: every read of one
        # reopens its file and reloads its indexes, as a node over its budgets does.
        self._budgets = (cache.indexes.limit, cache.files.limit)
        cache.configure(max_index_bytes=0, max_open_files=1)
        self._flusher, flusher._FLUSHER = flusher._FLUSHER, _Inline()
        _Barriers.install()
        self.controls = Controls()
        self.disks = {i: Disk(self.root, i, clock) for i in ids}

    def pump(self, node: int, live: Callable[[int], bool]) -> None:
        """Delivers the control messages of `node`'s install (to and from it) until none is
        left; one to or from a node that is down is lost. Other installs' wait their turn."""
        queue = self.controls.queue
        with _running(self.loop):
            while mine := [m for m in queue if node in m[:2]]:
                queue.remove(mine[0])
                src, dst, payload = mine[0]
                handler = self.controls.handlers.get(dst)
                if handler is not None and live(src) and live(dst):
                    handler(str(src), payload)

    def start_install(self, node: int, index: int, term: int, source: int) -> None:
        installer = self.disks[node].installer
        assert installer is not None
        with _running(self.loop):
            installer.start(index, term, str(source))

    def give_up(self, node: int, why: str) -> None:
        installer = self.disks[node].installer
        if installer is not None:
            with _running(self.loop):
                installer._give_up(why)

    def close(self) -> None:
        for disk in self.disks.values():
            disk.remove()
        self.controls.queue.clear()
        self.loop.close()
        cache.configure(*self._budgets)
        flusher._FLUSHER = self._flusher
        _Barriers.uninstall()
        shutil.rmtree(self.root, ignore_errors=True)


class _Barriers:
    """The cleaner's durable steps, told to the disk whose pass runs (`hook`): each
    directory fsync (the swap's commit points, the checkpoint's rename) and each rewrite
    written and fsynced, in the storage modules for the simulation's lifetime."""

    hook: Callable[[str], None] | None = None
    _saved: list[tuple[Any, str, Any]] = []

    @classmethod
    def install(cls) -> None:
        def synced(original: Callable[[Path], None]) -> Callable[[Path], None]:
            def fsync_dir(path: Path) -> None:
                original(path)
                if cls.hook is not None:
                    cls.hook("a directory fsync")

            return fsync_dir

        clean = compaction.clean_segment

        def clean_segment(*args: Any, **kwargs: Any) -> Any:
            outcome = yield from clean(*args, **kwargs)
            if cls.hook is not None:
                cls.hook("a rewrite written")
            return outcome

        for module in (segment_log, compaction, offset_file):
            cls._saved.append((module, "fsync_dir", module.fsync_dir))
            module.fsync_dir = synced(module.fsync_dir)  # type: ignore[attr-defined]
        cls._saved.append((compaction, "clean_segment", clean))
        compaction.clean_segment = clean_segment

    @classmethod
    def uninstall(cls) -> None:
        while cls._saved:
            module, name, original = cls._saved.pop()
            setattr(module, name, original)


_P = ParamSpec("_P")
_T = TypeVar("_T")


class _Inline(ThreadPoolExecutor):
    """The flusher's thread, run at once on the caller's: a roll's segment is synced before
    the roll returns, as the crash (which waited for the flusher) always found it."""

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        done: Future[_T] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            done.set_exception(exc)
        return done


class StepFiles(Offload):
    """A replica's file thread (durability.Offload) whose steps run when the simulation says
    (`Disk.file_step`), each whole with its `then` right after; a crash drops those not run."""

    def __init__(self) -> None:  # no pool: nothing runs in a thread
        self.queue: list[tuple[Callable[[], Any], Callable[[Future[Any]], None], Future[Any]]] = []

    def run(self, work: Callable[[], _T], then: Callable[[Future[_T]], None]) -> Future[_T]:
        done: Future[_T] = Future()
        self.queue.append((work, then, done))
        return done

    def wait(self, step: Future[_T]) -> None:
        """Runs `step` now (a close, an install); its `then` would be a stale callback."""
        for job in self.queue:
            if job[2] is step:
                self.queue.remove(job)
                _resolve(job[2], job[0])
                return

    def discard(self, file: BinaryIO) -> None:
        file.close()  # at once: what a renamed-over file held is out of sight anyway

    def step(self) -> None:
        work, then, done = self.queue.pop(0)
        _resolve(done, work)
        then(done)


def _resolve(done: Future[Any], work: Callable[[], Any]) -> None:
    try:
        done.set_result(work())
    except Exception as exc:
        done.set_exception(exc)


class _running:
    """Makes `loop` the running loop for a synchronous call (the installer's timers ask for it)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def __enter__(self) -> None:
        asyncio.events._set_running_loop(self._loop)

    def __exit__(self, *exc: object) -> None:
        asyncio.events._set_running_loop(None)
