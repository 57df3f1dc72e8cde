"""What a replica writes to its node's history (epoch/history.py) follows its disk: the epoch
audit holds a node's term to never go back in its own journal, and after a kill -9 the node
comes back with the term its Raft state file holds."""

from __future__ import annotations

import json
from pathlib import Path

from support.raftnet import Clock
from support.replicas import Replicas

from raftlog.raft.durability import Durability


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
