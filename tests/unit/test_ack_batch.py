"""A node's acknowledgements of one loop turn, from every replica, go into its history in one
write, before anything the loop runs after they were noted (their answers)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from epoch import history
from epoch.history import HistoryJournal
from raftlog.partition.ack_batch import AckBatch


def ack(partition: int, end: int) -> history.Ack:
    return history.Ack(1, 1, "t", partition, term=1, acks=-1, end_offset=end)


def acks_in(path: Path) -> list[tuple[int, int]]:
    records = [history.parse(line) for line in path.read_text().splitlines()]
    return [(r.partition, r.end_offset) for r in records if isinstance(r, history.Ack)]


async def test_every_replicas_records_are_in_the_file_before_their_answers(
    tmp_path: Path,
) -> None:
    journal = HistoryJournal(tmp_path, 1)
    batch = AckBatch(journal)
    loop = asyncio.get_running_loop()
    seen: list[list[tuple[int, int]]] = []
    try:
        for partition in range(3):
            batch.add(loop, lambda p=partition: journal.write(ack(p, 10 * p + 5)))
            # an answer set now wakes its producer's task after this
            loop.call_soon(lambda: seen.append(acks_in(journal.path)))
        assert acks_in(journal.path) == []  # nothing written before the loop turns
        await asyncio.sleep(0)
        assert seen == [[(0, 5), (1, 15), (2, 25)]] * 3
        # a later turn's acknowledgement gets a write of its own
        batch.add(loop, lambda: journal.write(ack(0, 7)))
        await asyncio.sleep(0)
        assert acks_in(journal.path)[-1] == (0, 7)
    finally:
        journal.close()


def test_records_held_reach_the_file_at_the_end_of_the_block(tmp_path: Path) -> None:
    journal = HistoryJournal(tmp_path, 1)
    try:
        with journal.held():
            journal.write(ack(0, 5))
            journal.write(ack(1, 6))
            assert acks_in(journal.path) == []
        assert acks_in(journal.path) == [(0, 5), (1, 6)]
        journal.write(ack(2, 7))  # not held: at once
        assert acks_in(journal.path)[-1] == (2, 7)
    finally:
        journal.close()


async def test_a_replica_that_fails_to_record_does_not_stop_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = HistoryJournal(tmp_path, 1)
    batch = AckBatch(journal)
    loop = asyncio.get_running_loop()

    def broken() -> None:
        raise OSError("disk gone")

    try:
        batch.add(loop, broken)
        batch.add(loop, lambda: journal.write(ack(1, 9)))
        with caplog.at_level(logging.ERROR):
            await asyncio.sleep(0)
        assert acks_in(journal.path) == [(1, 9)]
        assert "recording acknowledgements failed" in caplog.text
    finally:
        journal.close()
