"""What a replica writes to its node's history (epoch/history.py) follows its disk: the epoch
audit holds a node's term to never go back in its own journal, and after a kill -9 the node
comes back with the term its Raft state file holds."""

from __future__ import annotations

import json
from pathlib import Path

from support.raftnet import Clock
from support.replicas import Replicas

from raftlog.raft.durability import Durability
from raftlog.raft.membership import Membership


class SlowDisk(Durability):
    """Raft state saves that reach the disk only when the test says (`finish`)."""

    def __init__(self) -> None:
        super().__init__(inline=True)
        self.holding = True

    def _start(self) -> None:
        if not self.holding:
            super()._start()

    def finish(self) -> None:
        self.holding = False
        self._start()


def history_terms(root: Path, node_id: str) -> list[tuple[str, int]]:
    lines = (root / node_id / "history.jsonl").read_text().splitlines()
    return [(r["kind"], r["term"]) for r in map(json.loads, lines) if "term" in r]


async def test_a_new_term_reaches_the_history_only_once_it_is_on_disk(tmp_path: Path) -> None:
    """A node's term and vote are saved in batches, written when a message needs them (as on
    a real node: raft/durability.py), so a node that moves to a newer term has it in memory
    before it is on disk; killed then, it would come back in the older term. The record of
    the new term waits for the save. Here node 3, cut off while the others elect, hears of
    their term when it comes back, and its disk is slow."""
    disk = SlowDisk()
    replicas = Replicas(tmp_path, Clock(), durabilities={"3": disk})
    p3 = replicas.partitions["3"]
    try:
        replicas.net.isolate("3")
        await replicas.leader(among=("1", "2"))
        await replicas.run(0.3)
        assert p3.group.term == 0
        replicas.net.heal()
        for _ in range(100):
            await replicas.step()
            if p3.group.term > 0:
                break
        term = p3.group.term
        assert term > 0 and p3.journal.state_seq > disk.durable
        assert all(t < term for _, t in history_terms(tmp_path, "3"))
        disk.finish()
        await replicas.settle()
        assert disk.durable >= p3.journal.state_seq
        assert ("leader", term) in history_terms(tmp_path, "3")
    finally:
        replicas.close()


def conf_records(root: Path, node_id: str) -> list[tuple[str, int, list[int]]]:
    lines = (root / node_id / "history.jsonl").read_text().splitlines()
    return [
        (r["kind"], r["index"], r["voters"])
        for r in map(json.loads, lines)
        if r["kind"].startswith("conf_")
    ]


async def test_configuration_entries_are_recorded_appended_committed_and_truncated(
    tmp_path: Path,
) -> None:
    """The epoch audit holds acknowledged records to a majority of the configuration in
    force (issue 44), so each node records the configuration entries of its log: appended,
    committed, and taken back by a truncation. A leader cut off proposes dropping a voter;
    the other two elect a leader without it, and the old leader's entry is cut when it
    hears of them. The new leader then drops the same voter for real."""
    replicas = Replicas(tmp_path, Clock())
    try:
        old = await replicas.leader()
        a, b = (n for n in ("1", "2", "3") if n != old)
        replicas.net.isolate(old)
        cut = replicas.partitions[old].group.change_members(Membership.of({int(old), int(a)}))
        assert isinstance(cut, int)
        await replicas.settle()
        new = await replicas.leader(among=(a, b), above_term=replicas.partitions[old].group.term)
        replicas.net.heal()
        await replicas.run(0.5)
        assert conf_records(tmp_path, old) == [
            ("conf_appended", cut, sorted([int(old), int(a)])),
            ("conf_truncated", cut, sorted([int(old), int(a)])),
        ]
        target = sorted({int(new), int(old)})
        index = replicas.partitions[new].group.change_members(Membership.of(target))
        assert isinstance(index, int)
        await replicas.run(0.5)
        assert conf_records(tmp_path, new)[-2:] == [
            ("conf_appended", index, target),
            ("conf_committed", index, target),
        ]
        for node in map(str, target):  # the voter removed may never hear of the commit
            assert ("conf_committed", index, target) in conf_records(tmp_path, node)
    finally:
        replicas.close()


def ack_ends(root: Path, node_id: str) -> list[int]:
    lines = (root / node_id / "history.jsonl").read_text().splitlines()
    return [r["end_offset"] for r in map(json.loads, lines) if r["kind"] == "ack"]


async def test_an_acknowledgement_is_in_the_history_before_its_answer_leaves(
    tmp_path: Path,
) -> None:
    """The epoch audit holds every answered write to the history's ack records: the leader's
    record of an acknowledgement is in its file (a kill -9 keeps it) before the producer's
    task, woken by the answer, can send it."""
    replicas = Replicas(tmp_path, Clock())
    try:
        leader = await replicas.leader()
        seen: list[list[int]] = []
        answer = replicas.produce(leader, 0, 3)
        # runs where the producer's task would: on the loop, once the answer is set
        answer.add_done_callback(lambda _f: seen.append(ack_ends(tmp_path, leader)))
        result = await replicas.until(answer)
        assert result.base_offset == 0
        assert seen and max(seen[0], default=0) >= 3
    finally:
        replicas.close()
