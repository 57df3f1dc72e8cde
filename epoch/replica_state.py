"""What one replica's log says about its epochs right now: the second input of the epoch audit.

A node serves these at `GET /v1/epochs`; the audit builds the same records from a stopped or
running node's data directory. One definition for the writer (admin endpoint, local reader)
and the reader (analytics/), documented in epoch/README.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

UNKNOWN = -1


@dataclass(frozen=True, slots=True)
class EpochSpan:
    epoch: int
    start_offset: int
    bytes: int  # bytes of this epoch's segments on this replica now (after retention/compaction)


@dataclass(frozen=True, slots=True)
class ReplicaState:
    node: int
    topic: str
    partition: int
    term: int  # the replica's Raft term; UNKNOWN when read from files
    log_start_offset: int
    log_end_offset: int
    high_watermark: int  # UNKNOWN when read from files
    epochs: list[EpochSpan]  # the epoch cache, oldest first

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def spans(segments: list[tuple[int, int, int]]) -> list[EpochSpan]:
    """Epoch spans from (term, base offset, bytes) per segment, in log order: segments are kept
    per term, so the epoch cache is the segment list with each term's sizes summed."""
    out: list[EpochSpan] = []
    for term, base, size in segments:
        if out and out[-1].epoch == term:
            out[-1] = EpochSpan(term, out[-1].start_offset, out[-1].bytes + size)
        else:
            out.append(EpochSpan(term, base, size))
    return out


def parse(data: dict[str, Any]) -> ReplicaState:
    names = {f.name for f in fields(ReplicaState)}
    if set(data) != names:
        raise ValueError(f"replica state has fields {sorted(data)}, expected {sorted(names)}")
    return ReplicaState(**{**data, "epochs": [EpochSpan(**e) for e in data["epochs"]]})
