"""A synthetic history for sizing the audit: `python -m analytics.generate --events 1000000`.

It plays a cluster that keeps failing over: terms with writes, acks and high watermark moves,
leaders lost with an acks=1 tail that the next leader's followers truncate, OffsetForLeaderEpoch
answers. Records are built with the nodes' own dataclasses (epoch/history.py) and the result
has the layout `collect` produces, so `raftlog audit --collected DIR` reads it. Every
invariant holds in what it writes; the counts it prints are what the audit must find.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from analytics.collect import node_dir, write_replicas
from epoch.history import (
    Ack,
    Election,
    EpochAnswer,
    HighWatermark,
    LeaderSeen,
    Record,
    Truncation,
    to_json,
)
from epoch.replica_state import EpochSpan, ReplicaState

RECORD_BYTES = 1024


@dataclass
class Stats:
    events: int = 0
    elections: int = 0
    truncations: int = 0
    lost_acks1: int = 0
    epochs: dict[tuple[str, int], int] = field(default_factory=dict)


class _Writer:
    def __init__(self, files: Mapping[int, TextIO], stats: Stats) -> None:
        self.files, self.stats = files, stats

    def __call__(self, record: Record) -> None:
        self.files[record.node].write(to_json(record) + "\n")
        self.stats.events += 1


def _partition(
    write: _Writer, rng: random.Random, topic: str, index: int, nodes: list[int], events: int
) -> list[ReplicaState]:
    t, term, leo, hw = 1_700_000_000_000 + index, 0, 0, 0
    epochs: list[tuple[int, int]] = []
    leader = None
    start = write.stats.events
    while write.stats.events - start < events:
        # the old leader (if any) is lost; the others give up on it and one wins the next term
        term += 1
        t += rng.randint(150, 400)
        new = rng.choice([n for n in nodes if n != leader])
        for n in nodes:
            if n != leader:
                write(LeaderSeen(t, n, topic, index, term, -1))
        tail = leo - hw  # an acks=1 tail the old leader wrote but never committed
        if tail and leader is not None:
            cut_terms = [epochs[-1][0]]
            write(
                Truncation(
                    t + 5, leader, topic, index, term, "raft", 0, 0, hw, leo, cut_terms,
                    tail, 1, tail * RECORD_BYTES,
                )
            )  # fmt: skip
            write.stats.truncations += 1
            write.stats.lost_acks1 += 1
            leo = hw
        t += rng.randint(1, 20)
        write(Election(t, new, topic, index, term, leo, hw))
        write.stats.elections += 1
        epochs.append((term, leo))
        for n in nodes:
            if n != new:
                write(LeaderSeen(t + 1, n, topic, index, term, new))
        leader = new
        for _ in range(rng.randint(5, 30)):
            t += rng.randint(20, 200)
            leo += rng.randint(1, 500)
            write(Ack(t, leader, topic, index, term, -1, leo))
            hw = leo
            for n in nodes:
                write(HighWatermark(t + 1, n, topic, index, term, hw))
            if len(epochs) > 1 and rng.random() < 0.1:
                i = rng.randrange(len(epochs) - 1)
                asked, next_start = epochs[i][0], epochs[i + 1][1]
                write(EpochAnswer(t + 2, leader, topic, index, term, asked, asked, next_start))
        if rng.random() < 0.2:  # the leader takes acks=1 writes and dies before committing
            t += 50
            leo += rng.randint(1, 100)
            write(Ack(t, leader, topic, index, term, 1, leo))
    write.stats.epochs[(topic, index)] = len(epochs)
    spans = [
        EpochSpan(e, s, ((epochs[i + 1][1] if i + 1 < len(epochs) else hw) - s) * RECORD_BYTES)
        for i, (e, s) in enumerate(epochs)
    ]
    return [ReplicaState(n, topic, index, term, 0, hw, hw, spans) for n in nodes]


def generate(out: Path, events: int, partitions: int = 50, nodes: int = 3, seed: int = 7) -> Stats:
    rng = random.Random(seed)
    ids = list(range(1, nodes + 1))
    stats = Stats()
    files = {n: open(node_dir(out, n) / "history.jsonl", "w") for n in ids}  # noqa: SIM115
    replicas: dict[int, list[ReplicaState]] = {n: [] for n in ids}
    try:
        write = _Writer(files, stats)
        for p in range(partitions):
            budget = (events - stats.events) // (partitions - p)
            for r in _partition(write, rng, "generated", p, ids, budget):
                replicas[r.node].append(r)
    finally:
        for f in files.values():
            f.close()
    for n, states in replicas.items():
        write_replicas(node_dir(out, n) / "replicas.jsonl", states)
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path("audit/generated"))
    args = parser.parse_args()
    stats = generate(args.out, args.events, args.partitions)
    print(
        f"{stats.events:,} events, {stats.elections:,} elections, "
        f"{stats.truncations:,} truncations ({stats.lost_acks1:,} losing acks=1 records) "
        f"in {args.out}"
    )


if __name__ == "__main__":
    main()
