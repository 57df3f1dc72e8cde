"""A Raft group's entries of one loop turn reach the OS together (raft/journal.py
`defer_writes`, storage/segment.py `defer`): one segment writev and one window write for all
of them when the driver persists the Ready, and anything that reads, cuts or relies on them
(a payload read, a truncation, the commit index's write) writes them first. A kill -9 before
that loses only entries nothing counted yet."""

from __future__ import annotations

import os
import resource
import signal
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from support.journal import RecordingListener

from raftlog.raft.journal import SegmentJournal
from raftlog.raft.raft_state import RaftState
from raftlog.raft.window_entries import DATA_PREFIX
from raftlog.storage.batch import iter_batches
from raftlog.storage.log import Log, LogConfig

NO_OP = b"\x01"


def batch(value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 2**31 - 1)
    builder.append(0, timestamp=1000, key=None, value=value, headers=[])
    return bytes(builder.build())


def open_journal(root: Path) -> tuple[Log, SegmentJournal]:
    """As a partition opens its replica (raft/replica.py's CoreGroup defers once the first
    entry is there). Opening again without a close is a restart after kill -9."""
    log = Log(root / "p", LogConfig())
    journal = SegmentJournal(root / "p" / "raft", log, RecordingListener())
    if len(journal) == 0:
        journal.add(NO_OP, 1, 0)
    journal.defer_writes()
    return log, journal


def values(log: Log) -> list[tuple[int, bytes]]:
    data = log.read(log.log_start_offset, 1 << 20, log.log_end_offset, True)
    return [(h.base_offset, bytes(data[p : p + h.size])[-2:-1]) for p, h in iter_batches(data)]


def sizes(root: Path) -> tuple[int, int]:
    """Bytes on disk of the segment log and of the window file."""
    segment = sum(f.stat().st_size for f in (root / "p").glob("*.log"))
    return segment, (root / "p" / "raft" / "window").stat().st_size


class Writes:
    """Counts the segment writes (os.writev) while passing them on."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = os.writev

        def writev(fd: int, buffers: list[bytes]) -> int:
            self.count += 1
            return real(fd, buffers)

        monkeypatch.setattr(os, "writev", writev)


def test_a_turns_entries_reach_the_os_in_one_write_per_file(tmp_path, monkeypatch):
    log, j = open_journal(tmp_path)
    j.add(NO_OP, 2, 1)
    j.write_pending()
    before = sizes(tmp_path)
    writes = Writes(monkeypatch)
    for i in range(5):
        j.add(DATA_PREFIX + batch(b"%d" % i), 3 + i, 1)
    assert sizes(tmp_path) == before and writes.count == 0  # held until the Ready is persisted
    j.write_pending()
    assert writes.count == 1
    segment, window = sizes(tmp_path)
    assert segment > before[0] and window > before[1]
    _, again = open_journal(tmp_path)  # kill -9 now: every entry is in the OS's hands
    assert [e[1] for e in again[0:7]] == list(range(1, 8))
    assert values(log) == [(i, b"%d" % i) for i in range(5)]


def test_without_deferral_every_entry_is_written_at_once(tmp_path, monkeypatch):
    """The controller's journal and a replica's first entry: no Ready persists them."""
    log = Log(tmp_path / "p", LogConfig())
    j = SegmentJournal(tmp_path / "p" / "raft", log, RecordingListener())
    j.add(NO_OP, 1, 0)
    j.add(NO_OP, 2, 1)
    writes = Writes(monkeypatch)
    j.add(DATA_PREFIX + batch(b"a"), 3, 1)
    j.add(DATA_PREFIX + batch(b"b"), 4, 1)
    assert writes.count == 2
    _, again = open_journal(tmp_path)
    assert len(again) == 4


def test_a_kill_before_the_write_loses_only_the_pending_entries(tmp_path):
    log, j = open_journal(tmp_path)
    j.add(NO_OP, 2, 1)
    j.add(DATA_PREFIX + batch(b"a"), 3, 1)
    j.write_pending()
    j.add(DATA_PREFIX + batch(b"b"), 4, 1)
    j.add(DATA_PREFIX + batch(b"c"), 5, 1)
    log2, again = open_journal(tmp_path)  # killed with two entries held
    assert len(again) == 3 and values(log2) == [(0, b"a")]
    again.add(DATA_PREFIX + batch(b"d"), 4, 2)  # a new term's entry takes their place
    again.write_pending()
    log3, third = open_journal(tmp_path)
    assert [e[1:] for e in third[0:4]] == [(1, 0), (2, 1), (3, 1), (4, 2)]
    assert values(log3) == [(0, b"a"), (1, b"d")]


def test_a_kill_between_the_segment_and_the_window_write_cuts_the_unnamed_batches(tmp_path):
    """Batches go first: a kill between the two writes leaves batches no window record
    names, which the next open cuts; never a record whose batches are missing."""
    log, j = open_journal(tmp_path)
    j.add(NO_OP, 2, 1)
    j.add(DATA_PREFIX + batch(b"a"), 3, 1)
    j.write_pending()
    j.add(DATA_PREFIX + batch(b"b"), 4, 1)
    log.write_staged()  # the segment's writev done, the window's write not
    log2, again = open_journal(tmp_path)
    assert len(again) == 3 and values(log2) == [(0, b"a")] and log2.log_end_offset == 1


def test_reads_cuts_and_the_commit_write_see_the_pending_entries(tmp_path):
    log, j = open_journal(tmp_path)
    j.add(NO_OP, 2, 1)
    for i in range(4):
        j.add(DATA_PREFIX + batch(b"%d" % i), 3 + i, 1)
    # A leader encodes its append (reading the payload) before the Ready is persisted.
    assert bytes(j[3][0])[-2:-1] == b"1"
    j.cut_after(4)  # entries 5 and 6 go, while their window records were still held
    assert values(log) == [(0, b"0"), (1, b"1")]
    j.add(DATA_PREFIX + batch(b"x"), 5, 2)
    j.set_commit_index(5)
    j.persist_commit()  # an acknowledgement is about to be told: the entries go first
    log2, again = open_journal(tmp_path)
    assert [e[1:] for e in again[0:5]] == [(1, 0), (2, 1), (3, 1), (4, 1), (5, 2)]
    assert values(log2) == [(0, b"0"), (1, b"1"), (2, b"x")]
    assert RaftState(tmp_path / "p" / "raft" / "state").commit_index == 5
    assert again.high_watermark == 3


def test_a_failed_write_leaves_the_segment_as_the_file_is(tmp_path):
    """The disk refuses the turn's writev (here: past the file size limit): the segment's
    bookkeeping goes back to what the file holds, and later appends land where it says."""
    log, j = open_journal(tmp_path)
    j.add(NO_OP, 2, 1)
    j.add(DATA_PREFIX + batch(b"a"), 3, 1)
    j.write_pending()
    segment = log.segments()[-1]
    size = segment.size
    j.add(DATA_PREFIX + batch(b"b" * 4000), 4, 1)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, hard))
    try:
        with pytest.raises(OSError):
            j.write_pending()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)
    assert segment.size == size == os.path.getsize(segment.path)
    assert segment.next_offset == 1
    segment.append(batch(b"c"))
    assert values(log) == [(0, b"a"), (1, b"c")]


def test_a_payload_read_before_the_write_comes_from_memory_as_it_will_be_stored(
    tmp_path, monkeypatch
):
    """A leader encodes its appends (reading each new entry's batches for every follower)
    before the Ready is persisted: those reads neither write nor pread, and give the bytes
    the segment then holds."""
    log, j = open_journal(tmp_path)
    j.add(NO_OP, 2, 1)
    j.write_pending()
    writes = Writes(monkeypatch)
    preads = []
    real_pread = os.pread
    monkeypatch.setattr(os, "pread", lambda *a: preads.append(a) or real_pread(*a))
    for i in range(3):
        j.add(DATA_PREFIX + batch(b"%d" % i), 3 + i, 1)
    held = [bytes(j[k][0]) for k in (2, 3, 4) for _ in range(2)]  # two followers each
    assert writes.count == 0 and preads == []
    j.write_pending()
    assert writes.count == 1
    assert held[::2] == [bytes(j[k][0]) for k in (2, 3, 4)]  # now read from the file
    assert len(preads) == 3
