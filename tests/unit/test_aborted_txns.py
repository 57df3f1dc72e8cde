"""The aborted transactions a read_committed Fetch lists: the same answer as checking every
abort, while looking at only those a read can overlap; kept across snapshots, old and new."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raftlog.aborted_txns import AbortedTxn, AbortedTxns
from raftlog.producer_state import ProducerState
from raftlog.storage.batch import BatchHeader
from raftlog.storage.control import Marker


def _batch(pid: int) -> BatchHeader:
    return BatchHeader(0, 100, 0, 2, 0, 0x10, 0, 0, 0, pid, 0, -1, 1)


def _marker(pid: int) -> BatchHeader:
    return BatchHeader(0, 66, 0, 2, 0, 0x30, 0, 0, 0, pid, 0, -1, 1)


# (producer, ends its transaction, commits) at consecutive offsets
steps = st.lists(st.tuples(st.integers(0, 4), st.booleans(), st.booleans()), max_size=60)


def _log(events: list[tuple[int, bool, bool]]) -> tuple[ProducerState, list[AbortedTxn]]:
    """A partition's producer state after the events, and every abort it saw."""
    state, opened, aborts = ProducerState(), {}, []
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


@given(steps)
def test_a_read_is_told_every_abort_it_may_hold_records_of(events) -> None:
    state, aborts = _log(events)
    for start in range(len(events) + 1):
        for end in range(start, len(events) + 2):
            expected = [a for a in aborts if a.last_offset >= start and a.first_offset < end]
            assert state.aborted(start, end) == expected, (start, end)


@given(steps, st.integers(0, 61))
def test_forgetting_below_the_log_start_keeps_the_rest_and_survives_a_snapshot(
    events, log_start
) -> None:
    state, aborts = _log(events)
    state.forget_aborted_before(log_start)
    kept = [a for a in aborts if a.last_offset >= log_start]
    assert state.aborted(0, 100) == kept
    again = AbortedTxns.undump(state._aborted.dump())
    assert again.overlapping(0, 100) == kept


def test_a_snapshot_written_before_the_columns_still_loads() -> None:
    old = AbortedTxns.undump([[7, 10, 20], [8, 30, 40]])
    assert old.overlapping(21, 100) == [AbortedTxn(8, 30, 40)]
    assert old.overlapping(0, 25) == [AbortedTxn(7, 10, 20)]


def test_forgotten_entries_are_cut_away() -> None:
    aborted = AbortedTxns()
    for i in range(100):
        aborted.append(AbortedTxn(i, 2 * i, 2 * i + 1), 2 * i + 2)
    aborted.forget_before(150)
    assert len(aborted) == 25
    assert len(aborted._lasts) == 25  # not merely skipped
    assert aborted.overlapping(0, 1000)[0] == AbortedTxn(75, 150, 151)
