"""Term and vote on disk (raftlog/raft/raft_state.py): saved in place into alternating slots,
a save cut by a crash falls back to the one before it, files of the first format still load.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import msgpack
import pytest

from raftlog.raft.durability import Durability
from raftlog.raft.raft_state import SLOT, RaftState


def test_term_and_vote_survive_a_restart_and_later_saves_rewrite_in_place(tmp_path: Path) -> None:
    path = tmp_path / "state"
    state = RaftState(path)
    state.set_term(3, "2")
    inode = path.stat().st_ino
    state.set_term(4, None)
    state.set_term(5, "3")
    assert path.stat().st_ino == inode  # no new file, so no directory change to commit
    assert path.stat().st_size == 2 * SLOT
    again = RaftState(path)
    assert (again.term, again.voted_for) == (5, "3")
    again.set_term(6, "1")
    assert (RaftState(path).term, RaftState(path).voted_for) == (6, "1")


def test_a_save_cut_by_a_crash_falls_back_to_the_one_before(tmp_path: Path) -> None:
    path = tmp_path / "state"
    state = RaftState(path)
    state.set_term(7, "1")
    state.set_term(8, "2")  # the slot this one went to is then torn
    data = bytearray(path.read_bytes())
    newest = 0 if RaftState(path)._seq % 2 == 0 else SLOT
    data[newest + 4 : newest + 18] = b"\xff" * 14  # its header and payload
    path.write_bytes(bytes(data))
    assert (RaftState(path).term, RaftState(path).voted_for) == (7, "1")


def test_both_slots_spoilt_is_an_error_not_term_zero(tmp_path: Path) -> None:
    """Starting from term 0 after a vote would let the node vote twice in one term."""
    path = tmp_path / "state"
    RaftState(path).set_term(9, "2")
    path.write_bytes(b"\x01" * (2 * SLOT))
    with pytest.raises(ValueError, match="neither Raft state slot"):
        RaftState(path)


def test_a_state_file_of_the_first_format_loads_and_is_replaced_on_save(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.write_bytes(msgpack.packb([12, "3", 40]))
    state = RaftState(path)
    assert (state.term, state.voted_for, state.commit_index) == (12, "3", 40)
    state.set_term(13, None)
    assert path.stat().st_size == 2 * SLOT
    assert (RaftState(path).term, RaftState(path).voted_for) == (13, None)


async def test_batched_saves_are_on_disk_once_waited_for(tmp_path: Path) -> None:
    durability = Durability()
    states = [RaftState(tmp_path / f"g{i}" / "state") for i in range(50)]
    for i, state in enumerate(states):
        (tmp_path / f"g{i}").mkdir()
        state.durability = durability
        state.set_term(i + 1, "1")
        state.set_term(i + 2, "2")  # the same file twice in one batch: the latest wins
    done = asyncio.Event()
    durability.wait(durability.seq, done.set)
    await asyncio.wait_for(done.wait(), 10)
    for i in range(50):
        loaded = RaftState(tmp_path / f"g{i}" / "state")
        assert (loaded.term, loaded.voted_for) == (i + 2, "2")
    for i, state in enumerate(states):
        state.set_term(i + 3, "3")  # now in place
    durability.close()
    assert all(RaftState(tmp_path / f"g{i}" / "state").term == i + 3 for i in range(50)), (
        os.listdir(tmp_path)
    )


def test_a_state_too_big_for_its_slot_is_refused_and_the_other_slot_kept(tmp_path: Path) -> None:
    path = tmp_path / "state"
    state = RaftState(path)
    state.set_term(3, "2")
    with pytest.raises(ValueError, match="does not fit"):
        state.set_term(4, "n" * SLOT)
    assert (RaftState(path).term, RaftState(path).voted_for) == (3, "2")
    state.set_term(5, "3")  # the next save goes to the other slot, not over term 3's
    data = bytearray(path.read_bytes())
    newest = 0 if RaftState(path)._seq % 2 == 0 else SLOT
    data[newest + 4 : newest + 18] = b"\xff" * 14  # that save torn
    path.write_bytes(bytes(data))
    assert (RaftState(path).term, RaftState(path).voted_for) == (3, "2")


def test_the_commit_index_file_is_written_in_place_and_closed_with_the_state(tmp_path) -> None:
    """persist_commit keeps its descriptor (one pwrite a commit, no open and close) and
    close() lets it go: a deleted partition's replica must not hold its file."""
    path = tmp_path / "state"
    state = RaftState(path)
    for index in (5, 9, 12):
        state.commit_index = index
        state.persist_commit()
        assert RaftState(path).commit_index == index
    fd = state._commit_fd
    os.fstat(fd)
    state.close()
    with pytest.raises(OSError):
        os.fstat(fd)
    state.close()  # twice is harmless


async def test_failing_saves_are_logged_once_and_their_recovery_once_with_a_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A disk that fails every save logged an ERROR at every batch (one per election wave);
    now the first failure is logged, and the first batch that works again says how many
    failed meanwhile."""
    durability = Durability()
    blocked = tmp_path / "g" / "state"
    blocked.mkdir(parents=True)  # a directory where the file should be: every save fails

    async def save() -> None:
        durability.save(blocked, b"x" * 64, 0, 64)
        done = asyncio.Event()
        durability.wait(durability.seq, done.set)
        await asyncio.wait_for(done.wait(), 10)

    with caplog.at_level(logging.INFO, logger="raftlog.raft.durability"):
        for _ in range(5):
            await save()
        blocked.rmdir()
        await save()
    lines = [(r.levelname, r.getMessage()[:40]) for r in caplog.records]
    assert lines == [
        ("ERROR", "Raft state saves failing: 1 of 1, first:"),
        ("WARNING", "Raft state saves work again (5 failed me"),
    ]
    assert blocked.read_bytes() == b"x" * 64
    durability.close()
