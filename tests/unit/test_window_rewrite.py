"""Blocking file work off the event loop (issue 45): a compaction's rewrite of the Raft window
(raft/journal.py) and a partition's producer-state save (partition/producer_state.py) write,
fsync and rename in a thread while the loop goes on appending, and a kill between any two of
their steps loses no entry and leaves a whole state. The seeded storage simulation runs the
same steps at random points of its schedules (tests/support/sim_disk.py `file_step`)."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from support.journal import RecordingListener
from support.sim_disk import StepFiles

from raftlog.partition.producer_state import ProducerState, StateWriter
from raftlog.raft.durability import Offload
from raftlog.raft.journal import SegmentJournal
from raftlog.raft.window_entries import DATA_PREFIX
from raftlog.storage.batch import BatchHeader
from raftlog.storage.log import Log, LogConfig

NO_OP = b"\x01"


def command(i: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 2**31 - 1)
    builder.append(0, timestamp=1000, key=None, value=b"v%d" % i, headers=[])
    return DATA_PREFIX + bytes(builder.build())


def open_journal(directory: Path, files: Offload | None) -> SegmentJournal:
    log = Log(directory, LogConfig())
    return SegmentJournal(directory / "raft", log, RecordingListener(), files=files)


def fill(journal: SegmentJournal, upto: int) -> None:
    start = journal.last_index + 1 if len(journal) else 1
    for i in range(start, upto + 1):
        journal.add(NO_OP if i == 1 else command(i), i, 0 if i == 1 else 1)


def gate_fsyncs(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[bool]]:
    """Every fsync waits for the returned event; the list says, per fsync, whether it ran on
    the loop's (the main) thread."""
    release = threading.Event()
    on_loop: list[bool] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        on_loop.append(threading.current_thread() is threading.main_thread())
        if not release.wait(2):
            raise AssertionError("an fsync held the loop")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return release, on_loop


async def until(done: object) -> None:
    for _ in range(500):
        if done():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the file thread never finished")


async def test_a_compaction_rewrites_the_window_while_the_loop_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fsyncs of the rewrite wait here until the test releases them: the compaction
    returns at once, the loop turns and appends go on; every fsync ran in the file thread,
    and the new window holds every entry from the cut on, those appended meanwhile too.
    Before, the compaction fsynced on the loop (py-spy: part of 15 % of raftlog1's busy
    samples under produce), every partition and connection of the node waiting."""
    journal = open_journal(tmp_path / "p", Offload(1))
    fill(journal, 30)
    journal.set_commit_index(30)
    release, on_loop = gate_fsyncs(monkeypatch)
    journal.compact_to(25)
    assert journal.first_index == 25
    assert journal.floor_offset == 0  # the old window, naming offset 0 on, is still the file
    turned = asyncio.Event()
    asyncio.get_running_loop().call_soon(turned.set)
    await turned.wait()
    fill(journal, 34)  # while the copy's fsync is held
    release.set()
    await until(lambda: journal._rewrite is None)
    fill(journal, 36)
    assert on_loop and not any(on_loop)
    assert journal.floor_offset == journal.entry(0).offset
    before = [bytes(c) for c, _, _ in journal[:]]
    journal.close()
    monkeypatch.undo()
    again = open_journal(tmp_path / "p", None)
    assert [i for _, i, _ in again[:]] == list(range(25, 37))
    assert [bytes(c) for c, _, _ in again[:]] == before
    again.close()


def test_a_kill_between_any_two_steps_of_the_rewrite_keeps_every_entry(tmp_path: Path) -> None:
    """kill -9 (the directory as the OS has it, copied) before the copy, after it is synced,
    after what was appended meanwhile is copied again, after appends that went to both
    files, after the rename and after the switch: each restarts with every entry appended
    until then, byte for byte, the window starting at the cut or before it."""
    files = StepFiles()
    directory = tmp_path / "p"
    journal = open_journal(directory, files)
    fill(journal, 20)
    journal.set_commit_index(20)
    kills: list[tuple[str, Path, int]] = []

    def kill(step: str) -> None:
        copy = tmp_path / f"kill-{len(kills)}"
        shutil.copytree(directory, copy)
        kills.append((step, copy, journal.last_index))

    journal.compact_to(15)
    kill("cut, nothing written yet")
    fill(journal, 22)
    work, then, done = files.queue.pop(0)
    done.set_result(work())
    kill("copy synced")
    fill(journal, 23)
    then(done)
    kill("appended meanwhile copied again")
    fill(journal, 24)
    kill("appended to both")
    work, then, done = files.queue.pop(0)
    done.set_result(work())
    kill("renamed")
    fill(journal, 25)
    then(done)
    kill("switched")
    fill(journal, 26)
    kill("appended after")
    assert journal._rewrite is None and not files.queue
    expected = {i: bytes(c) for c, i, _ in journal[:]}
    journal.close()
    for step, copy, last in kills:
        restarted = open_journal(copy, None)
        got = {i: bytes(c) for c, i, _ in restarted[:]}
        assert min(got) <= 15 and max(got) == last, step
        assert all(got[i] == expected[i] for i in range(15, last + 1)), step
        assert not (copy / "raft" / "window.next").exists(), step
        restarted.close()


def test_entries_a_turn_has_not_written_yet_reach_the_copy_before_it_is_renamed(
    tmp_path: Path,
) -> None:
    """With deferred writes (a partition's), records appended in this loop turn are counted
    in the file's end but not yet written when the copy is brought up to date: they are
    written then, or the renamed window would end in zeros that no open can read."""
    files = StepFiles()
    directory = tmp_path / "p"
    journal = open_journal(directory, files)
    fill(journal, 20)
    journal.set_commit_index(20)
    journal.defer_writes()
    journal.compact_to(15)
    work, then, done = files.queue.pop(0)
    done.set_result(work())  # the copy, synced
    fill(journal, 22)  # this turn's, waiting for the driver's write
    then(done)  # brought up to date on the loop
    files.step()  # the rename
    copy = tmp_path / "killed"
    shutil.copytree(directory, copy)  # kill -9 before the turn's write
    restarted = open_journal(copy, None)
    assert [i for _, i, _ in restarted[:]] == list(range(15, 23))
    restarted.close()
    journal.close()


def _header(pid: int, sequence: int) -> BatchHeader:
    return BatchHeader(
        base_offset=0,
        batch_length=49,
        partition_leader_epoch=1,
        magic=2,
        crc=0,
        attributes=0,
        last_offset_delta=0,
        base_timestamp=0,
        max_timestamp=0,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=sequence,
        record_count=1,
    )


def test_producer_state_saves_one_at_a_time_off_the_loop_the_latest_winning(
    tmp_path: Path,
) -> None:
    """Nothing is written where the save is asked for; while one write runs, a second and a
    third replace each other and the third is written next; a drop (the log was cut)
    keeps the write under way from landing; a flush (a close) writes the latest at once."""
    path = tmp_path / "producer-state"
    files = StepFiles()
    writer = StateWriter(path, files)
    state = ProducerState(tmp_path)
    for offset in (10, 20, 30):
        state.record(_header(offset, 0), offset)
        writer.save(state.image(offset))
    assert not path.exists() and len(files.queue) == 1
    assert writer.floor == 0  # retention holds until a state is on disk
    files.step()
    assert ProducerState.load(path)[1] == 10 and len(files.queue) == 1  # 20 was replaced
    files.step()
    loaded, offset = ProducerState.load(path)
    assert offset == 30 and len(loaded) == 3 and writer.floor is None
    writer.save(state.image(40))
    writer.drop()
    files.step()
    assert ProducerState.load(path)[1] == 30
    writer.save(state.image(50))
    writer.save(state.image(60))
    writer.flush()
    assert ProducerState.load(path)[1] == 60 and writer.floor is None


async def test_a_producer_state_save_syncs_in_the_file_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "producer-state"
    writer = StateWriter(path, Offload(1))
    state = ProducerState(tmp_path)
    state.record(_header(7, 0), 0)
    release, on_loop = gate_fsyncs(monkeypatch)
    writer.save(state.image(1))
    turned = asyncio.Event()
    asyncio.get_running_loop().call_soon(turned.set)
    await turned.wait()
    release.set()
    await until(lambda: writer.floor is None)
    assert on_loop == [False]
    assert ProducerState.load(path)[1] == 1
