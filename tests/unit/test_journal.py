"""A partition's Raft log over its segment log (raft/journal.py), driven as the core drives it:
the Raft term of an entry becomes its batches' leader epoch, offsets are assigned at append,
only real conflicts cut the log."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from support.journal import RecordingListener as Listener

from raftlog.raft.journal import COMMIT_SAVE_SECONDS, SegmentJournal, StaleEntry
from raftlog.raft.raft_state import RaftState
from raftlog.raft.window_entries import DATA_PREFIX
from raftlog.storage.batch import iter_batches
from raftlog.storage.log import Log, LogConfig

NO_OP = b"\x01"


def batch(*values: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 2**31 - 1)
    for i, v in enumerate(values):
        builder.append(i, timestamp=1000, key=None, value=v, headers=[])
    return bytes(builder.build())


def open_journal(tmp_path, listener=None):
    log = Log(tmp_path / "p", LogConfig())
    return log, SegmentJournal(tmp_path / "p" / "raft", log, listener or Listener())


def stored(log):
    return [
        (h.base_offset, h.partition_leader_epoch)
        for _, h in iter_batches(log.read(log.log_start_offset, 1 << 20, log.log_end_offset, True))
    ]


def test_term_becomes_the_leader_epoch_and_offsets_are_assigned_at_append(tmp_path):
    log, j = open_journal(tmp_path)
    j.add(NO_OP, 1, 0)  # pysyncobj's genesis entry
    j.add(NO_OP, 2, 3)  # a leader of term 3 starts its term
    j.add(DATA_PREFIX + batch(b"a", b"b"), 3, 3)
    j.add(NO_OP, 4, 5)
    j.add(DATA_PREFIX + batch(b"c") + batch(b"d"), 5, 5)
    assert stored(log) == [(0, 3), (2, 5), (3, 5)]
    assert log.epochs() == [(3, 0), (5, 2)]  # one segment per term
    assert j[-1][1:] == (5, 5) and len(j) == 5
    assert bytes(j[2][0]) == DATA_PREFIX + log.read(0, 1 << 20, 2, True)


def test_commit_index_moves_the_high_watermark_never_back(tmp_path):
    listener = Listener()
    log, j = open_journal(tmp_path, listener)
    j.add(NO_OP, 1, 0)
    j.add(NO_OP, 2, 1)
    j.add(DATA_PREFIX + batch(b"a", b"b", b"c"), 3, 1)
    j.set_commit_index(3)
    assert j.high_watermark == 3
    j.set_commit_index(2)  # the controller's pysyncobj lowers it when it rewinds
    assert j.high_watermark == 3


def test_a_conflicting_entry_cuts_the_log_and_says_so(tmp_path):
    listener = Listener()
    log, j = open_journal(tmp_path, listener)
    j.add(NO_OP, 1, 0)
    j.add(NO_OP, 2, 1)
    j.add(DATA_PREFIX + batch(b"a"), 3, 1)
    j.add(DATA_PREFIX + batch(b"uncommitted"), 4, 1)
    j.cut_after(3)  # a new leader's entry at index 4 has another term
    assert listener.truncations == [([4], "raft")] and stored(log) == [(0, 1)]
    j.add(NO_OP, 4, 2)
    j.add(DATA_PREFIX + batch(b"b"), 5, 2)
    assert listener.truncations == [([4], "raft")]
    assert stored(log) == [(0, 1), (1, 2)]
    assert log.epochs() == [(1, 0), (2, 1)]


def test_the_high_watermark_survives_a_crash(tmp_path):
    """kill -9: nothing closed, nothing flushed by a timer; the page cache keeps what was
    written. Commits in quick succession are written at most every COMMIT_SAVE_SECONDS, but
    the one an acknowledgement or a history record tells of (`persist_commit`) is on disk
    before it is told: the high watermark comes back where it was told."""
    now = [100.0]
    log = Log(tmp_path / "p", LogConfig())
    j = SegmentJournal(tmp_path / "p" / "raft", log, Listener(), clock=lambda: now[0])

    def on_disk() -> int:
        return RaftState(tmp_path / "p" / "raft" / "state").commit_index

    j.add(NO_OP, 1, 0)
    j.add(NO_OP, 2, 1)
    j.add(DATA_PREFIX + batch(b"a", b"b"), 3, 1)
    j.add(DATA_PREFIX + batch(b"c"), 4, 1)
    j.add(DATA_PREFIX + batch(b"d"), 5, 1)
    j.set_commit_index(3)
    now[0] += COMMIT_SAVE_SECONDS / 2
    j.set_commit_index(4)
    assert j.high_watermark == 3
    assert on_disk() == 3  # the second commit: not yet written
    j.persist_commit()
    assert on_disk() == 4
    now[0] += COMMIT_SAVE_SECONDS
    j.set_commit_index(5)  # a follower's, told nobody: written once COMMIT_SAVE_SECONDS passed
    assert on_disk() == 5
    _, again = open_journal(tmp_path)
    assert again.commit_index == 5 and again.high_watermark == 4


def test_a_window_ending_in_an_entry_without_batches_loads_after_a_crash(tmp_path):
    """The leader left every batch of an entry out (a producer's retries, all duplicates):
    the entry holds no data. The window ending in it must load; it named a segment at its
    offset as if it were a no-op, and the partition failed to load on every node."""
    log, j = open_journal(tmp_path)
    j.add(NO_OP, 1, 0)
    j.add(NO_OP, 2, 1)
    j.add(DATA_PREFIX + batch(b"a", b"b"), 3, 1)
    j.add(NO_OP, 4, 2)
    j.add(DATA_PREFIX + batch(b"c"), 5, 2)
    j.add(DATA_PREFIX, 6, 2)  # what add() keeps of an entry whose batches were all left out
    j.set_commit_index(6)
    log.append(batch(b"lost window record"), 2)
    log, again = open_journal(tmp_path)
    assert [e[1:] for e in again[0:6]][-1] == (6, 2)
    assert stored(log) == [(0, 1), (2, 2)] and log.log_end_offset == 3
    assert again.high_watermark == 3


def test_a_window_and_segment_ending_in_zeros_load_as_torn(tmp_path):
    """A machine crash can leave a file longer than what reached its blocks, the rest read as
    zeros: a window record of zeros passes its check (crc32c of no bytes is 0), and the
    node could not open the partition. Both files keep what came before the zeros."""
    log, j = open_journal(tmp_path)
    j.add(NO_OP, 1, 0)
    j.add(NO_OP, 2, 1)
    j.add(DATA_PREFIX + batch(b"a"), 3, 1)
    j.set_commit_index(3)
    j.close()
    log.close()
    for name in ("raft/window", "00000000000000000000-1.log"):
        with open(tmp_path / "p" / name, "ab") as f:
            f.write(bytes(4096))
    log, j = open_journal(tmp_path)
    assert [e[1:] for e in j[0:3]] == [(1, 0), (2, 1), (3, 1)]
    assert stored(log) == [(0, 1)] and log.log_end_offset == 1
    j.add(DATA_PREFIX + batch(b"b"), 4, 1)  # and it goes on where the records ended
    assert stored(log) == [(0, 1), (1, 1)]


def test_window_survives_a_restart_and_unlogged_data_is_cut(tmp_path):
    log, j = open_journal(tmp_path)
    j.add(NO_OP, 1, 0)
    j.add(NO_OP, 2, 1)
    j.add(DATA_PREFIX + batch(b"a"), 3, 1)
    j.set_commit_index(3)
    j.set_term(4, "2")
    log.append(batch(b"never in the window"), 1)  # as if the window record was lost
    j.close()
    log.close()
    log, j = open_journal(tmp_path)
    assert [e[1:] for e in j[0:3]] == [(1, 0), (2, 1), (3, 1)]
    assert (j.term, j.voted_for) == (4, "2")
    assert log.log_end_offset == 1 and j.high_watermark == 1


def test_compaction_keeps_the_data_and_a_short_window(tmp_path):
    log, j = open_journal(tmp_path)
    j.add(NO_OP, 1, 0)
    j.add(NO_OP, 2, 1)
    for i in range(3, 13):
        j.add(DATA_PREFIX + batch(b"%d" % i), i, 1)
    j.compact_to(10)
    assert j[0][1] == 10 and len(j) == 3 and j.has_snapshot()
    assert log.log_end_offset == 10 and stored(log)[0] == (0, 1)


def test_a_payload_read_after_its_entry_was_cut_never_returns_another_entrys_bytes(tmp_path):
    """Issue 43: a lazy payload handed out before a cut is read after it. Raft itself never
    writes an entry of the same term where a cut left off, but nothing in a bare location
    said so: a new batch of that term at that position was read as the cut one's. The
    payload reads only while the window holds its very entry; a compaction of the window
    (whose data stays in the log) makes it stale too."""
    log, j = open_journal(tmp_path)
    j.add(NO_OP, 1, 0)
    j.add(NO_OP, 2, 1)
    j.add(DATA_PREFIX + batch(b"a"), 3, 1)
    j.add(DATA_PREFIX + batch(b"cut"), 4, 1)
    kept, stale = j[2][0], j[3][0]
    j.cut_after(3)
    j.add(DATA_PREFIX + batch(b"new"), 4, 1)  # same segment, same position, other bytes
    fresh = j[3][0]
    assert bytes(fresh) == DATA_PREFIX + log.read(1, 1 << 20, 2, True)
    with pytest.raises(StaleEntry):
        bytes(stale)
    assert bytes(kept) == DATA_PREFIX + log.read(0, 1 << 20, 1, True)
    j.compact_to(4)
    with pytest.raises(StaleEntry):
        bytes(kept)
    assert bytes(fresh) == DATA_PREFIX + log.read(1, 1 << 20, 2, True)


def test_a_window_whose_terms_segment_a_crash_lost_loads_and_goes_on(tmp_path):
    """A no-op opens its term's segment, then its window record is written; the segment's
    directory entry is not fsynced (log.py's _roll), so a machine crash can keep the record
    and lose the file. The partition then failed to open ('no segment 4-2', the storage
    simulation's seed 723 with crashes inside a Ready); it opens, its term's segment made
    again, and the no-op can still be cut or followed by its term's batches."""
    log, j = open_journal(tmp_path)
    j.add(NO_OP, 1, 0)
    j.add(NO_OP, 2, 1)
    j.add(DATA_PREFIX + batch(b"a", b"b"), 3, 1)
    j.add(NO_OP, 4, 2)  # term 2's segment, 2-2, then the record
    j.add(NO_OP, 5, 3)  # and term 3's, 2-3
    j.set_commit_index(3)
    for term in (2, 3):
        (tmp_path / "p" / f"{2:020d}-{term}.log").unlink()  # the files' creation lost
    log, again = open_journal(tmp_path)
    assert [e[1:] for e in again[0:5]] == [(1, 0), (2, 1), (3, 1), (4, 2), (5, 3)]
    assert log.epochs() == [(1, 0), (2, 2), (3, 2)] and log.log_end_offset == 2
    again.cut_after(4)  # a new leader's entry 5 has another term
    assert log.epochs() == [(1, 0), (2, 2)]
    again.add(DATA_PREFIX + batch(b"c"), 5, 2)
    assert stored(log) == [(0, 1), (2, 2)]
