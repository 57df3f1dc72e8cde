"""The aborted transactions a read_committed Fetch lists: the same answer as checking every
abort, while looking at only those a read can overlap; kept across snapshots, with the
oldest spilled to files of their own once there are many, and those files cleaned up."""

from __future__ import annotations

import tempfile
from pathlib import Path

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftlog.partition import aborted_txns
from raftlog.partition.aborted_txns import AbortedTxn, AbortedTxns
from raftlog.partition.producer_state import ProducerState
from raftlog.storage.batch import BatchHeader
from raftlog.storage.control import Marker


def _batch(pid: int) -> BatchHeader:
    return BatchHeader(0, 100, 0, 2, 0, 0x10, 0, 0, 0, pid, 0, -1, 1)


def _marker(pid: int) -> BatchHeader:
    return BatchHeader(0, 66, 0, 2, 0, 0x30, 0, 0, 0, pid, 0, -1, 1)


# (producer, ends its transaction, commits) at consecutive offsets
steps = st.lists(st.tuples(st.integers(0, 4), st.booleans(), st.booleans()), max_size=60)


def _log(
    events: list[tuple[int, bool, bool]], state: ProducerState | None = None
) -> tuple[ProducerState, list[AbortedTxn]]:
    """A partition's producer state after the events, and every abort it saw."""
    state = state if state is not None else ProducerState()
    opened: dict[int, int] = {}
    aborts = []
    for offset, (pid, ends, commit) in enumerate(events):
        if ends:
            state.record(_marker(pid), offset, Marker(commit, 0))
            first = opened.pop(pid, None)
            if first is not None and not commit:
                aborts.append(AbortedTxn(pid, first, offset))
        else:
            state.record(_batch(pid), offset)
            opened.setdefault(pid, offset)
    return state, aborts


def _every_read(state: ProducerState, aborts: list[AbortedTxn], ends: int) -> None:
    for start in range(ends + 1):
        for end in range(start, ends + 2):
            expected = [a for a in aborts if a.last_offset >= start and a.first_offset < end]
            assert state.aborted(start, end) == expected, (start, end)


@pytest.fixture
def spill_small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aborted_txns, "SPILL_AT", 3)
    monkeypatch.setattr(aborted_txns, "SPILL_CHUNK", 2)
    monkeypatch.setattr(aborted_txns, "CACHED_FILES", 1)


@given(steps)
def test_a_read_is_told_every_abort_it_may_hold_records_of(events) -> None:
    state, aborts = _log(events)
    _every_read(state, aborts, len(events))


@pytest.mark.usefixtures("spill_small")
@given(steps, st.integers(0, 61))
def test_spilled_and_forgotten_aborts_answer_the_same_after_a_restart(events, log_start) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "producer-state"
        state, aborts = _log(events, ProducerState(path.parent))
        state.save(path, len(events))  # spills all but the newest three
        assert len(state._aborted) <= 3
        _every_read(state, aborts, len(events))
        state.forget_aborted_before(log_start)
        state.save(path, len(events))
        loaded, offset = ProducerState.load(path)
        loaded.forget_aborted_before(log_start)
        kept = [a for a in aborts if a.last_offset >= log_start]
        assert offset == len(events)
        _every_read(loaded, kept, len(events))
        named = {n for n, _ in msgpack.unpackb(path.read_bytes())[3]["spilled"]}
        assert {p.name for p in Path(tmp).glob("aborted-*")} == named


@pytest.mark.usefixtures("spill_small")
def test_a_forgotten_file_stays_until_a_snapshot_no_longer_names_it(tmp_path: Path) -> None:
    path = tmp_path / "producer-state"
    events = [(p, e, False) for p in range(1, 9) for e in (False, True)]  # 8 aborts
    state, _ = _log(events, ProducerState(tmp_path))
    state.save(path, len(events))
    spilled = sorted(tmp_path.glob("aborted-*"))
    assert len(spilled) == 3  # 2 + 2 + 2 spilled, 2 kept in memory
    state.forget_aborted_before(4)  # the first file's aborts end at offsets 1 and 3
    assert spilled[0].exists()  # the snapshot on disk still names it
    state.save(path, len(events))
    assert not spilled[0].exists() and spilled[1].exists()


@pytest.mark.usefixtures("spill_small")
def test_left_over_files_go_and_a_missing_one_means_a_rebuild(tmp_path: Path) -> None:
    path = tmp_path / "producer-state"
    events = [(p, e, False) for p in range(1, 9) for e in (False, True)]
    state, _ = _log(events, ProducerState(tmp_path))
    state.save(path, len(events))
    leftover = tmp_path / "aborted-00000000000000000099-00000000000000000100.txns.tmp"
    leftover.write_bytes(b"half written")
    loaded, offset = ProducerState.load(path)
    loaded.remove_unnamed_files()
    assert not leftover.exists() and offset == len(events)
    next(tmp_path.glob("aborted-*")).unlink()
    rebuilt, offset = ProducerState.load(path)
    assert offset == 0 and rebuilt.aborted(0, 100) == []  # the partition replays its log


def test_a_snapshot_written_before_the_columns_still_loads() -> None:
    old = AbortedTxns.undump([[7, 10, 20], [8, 30, 40]], None)
    assert old is not None
    assert old.overlapping(21, 100) == [AbortedTxn(8, 30, 40)]
    assert old.overlapping(0, 25) == [AbortedTxn(7, 10, 20)]


def test_forgotten_entries_are_cut_away() -> None:
    aborted = AbortedTxns()
    for i in range(100):
        aborted.append(AbortedTxn(i, 2 * i, 2 * i + 1), 2 * i + 2)
    aborted.forget_before(150)
    assert len(aborted) == 25
    assert len(aborted._memory.lasts) == 25  # not merely skipped
    assert aborted.overlapping(0, 1000)[0] == AbortedTxn(75, 150, 151)
