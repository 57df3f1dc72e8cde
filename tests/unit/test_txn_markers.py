"""When the coordinator's marker writer (raftlog/txn/markers.py) stops: a newer coordinator's
marker on the partition (TRANSACTION_COORDINATOR_FENCED) gives the marker up quietly, and so
does this node losing the decision's `__transaction_state` partition, however often the
partition was failing. The partition side of the fence is tests/unit/test_partition_txn.py."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from support.clock import ManualClock

from epoch import history
from raftlog.api.values import ProduceResult
from raftlog.common.errors import ErrorCode as E
from raftlog.common.mesh_calls import MeshCalls
from raftlog.node.transactions import TransactionCalls
from raftlog.txn.markers import Markers, MarkerWrite

ME = 1
MARKER = MarkerWrite("t", 0, 7, 0, True, 13, 10, 3990)  # coordinator epoch 13, decision 10/3990


class NoPeers:
    def on_control(self, kind: str, handler: Any) -> None:
        pass

    def send_control(self, peer_id: str, kind: str, payload: Any) -> None:
        raise AssertionError("no mesh call expected: this node leads the partition")

    def connected(self, peer_id: str) -> bool:
        return False


class Answering:
    """The partition this node leads, answering each marker write with `error`."""

    is_leader = True
    leader_epoch = 5

    def __init__(self, error: E) -> None:
        self.error = error
        self.writes = 0

    async def write_marker(self, *_args: object) -> ProduceResult:
        self.writes += 1
        return ProduceResult(self.error, 3690 if self.error == E.none else -1)


def markers(
    clock: ManualClock,
    partition: Answering,
    coordinating: list[bool],
    written: Any = lambda _marker, _offset, _term: None,
) -> Markers:
    return Markers(
        ME,
        MeshCalls(NoPeers(), clock),
        lambda _topic, _index: partition,
        lambda _topic, _index: ME,
        lambda _topic, _index: True,
        written,
        lambda index, epoch: (index, epoch) == (10, 13) and coordinating[0],
        clock,
    )


async def test_a_newer_coordinators_marker_gives_the_marker_up_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, partition = ManualClock(), Answering(E.transaction_coordinator_fenced)
    with caplog.at_level(logging.INFO, logger="raftlog.txn.markers"):
        code = await clock.run(markers(clock, partition, [True]).write(MARKER))
    assert code == E.transaction_coordinator_fenced and partition.writes == 1
    assert [r.levelno for r in caplog.records] == [logging.INFO]


async def test_a_node_that_no_longer_coordinates_stops_retrying(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The partition fails in a way that passes; meanwhile this node loses the decision's
    partition (its term moved on): the next attempt is not made."""
    clock, partition = ManualClock(), Answering(E.request_timed_out)
    coordinating = [True]
    with caplog.at_level(logging.INFO, logger="raftlog.txn.markers"):
        writing = asyncio.ensure_future(markers(clock, partition, coordinating).write(MARKER))
        await clock.advance(0)
        assert partition.writes == 1
        await clock.advance(0.35)  # retried after 0.1 s and 0.2 s more
        assert partition.writes == 3
        coordinating[0] = False
        await clock.advance(0.4)
        assert writing.done() and writing.result() == E.not_coordinator
    assert partition.writes == 3
    assert all(r.levelno < logging.WARNING for r in caplog.records)


async def test_a_committed_marker_is_recorded_with_the_coordinator_epoch_that_sent_it(
    tmp_path: Any,
) -> None:
    """The epoch audit (stale_markers_fenced) compares the coordinator epochs of a producer's
    markers along a partition: the node's history record of a marker carries it, besides the
    partition's term and the decision."""
    calls = TransactionCalls()
    calls.node_id = ME
    calls.history = history.HistoryJournal(tmp_path, ME)
    clock, partition = ManualClock(), Answering(E.none)
    written = markers(clock, partition, [True], calls._marker_written)
    assert await clock.run(written.write(MARKER)) == E.none
    calls.history.close()
    (line,) = (tmp_path / history.HistoryJournal.FILE_NAME).read_text().splitlines()
    record = history.parse(line)
    assert isinstance(record, history.TxnMarker)
    assert (record.node, record.topic, record.partition, record.term) == (ME, "t", 0, 5)
    assert (record.marker_offset, record.decision_partition, record.decision_offset) == (
        3690,
        10,
        3990,
    )
    assert (record.producer_id, record.commit, record.coordinator_epoch) == (7, 1, 13)
