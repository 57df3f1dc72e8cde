"""The controller quorum's voters (issue 44): a bounded set, as KRaft's controller.quorum.voters.

A new cluster's voters are its `controller.quorum.size` lowest node ids (1, 3 or 5; fewer if
it has fewer nodes); every other node is an observer: it gets the controller log, applies it,
serves metadata from it and forwards its commands to the leader, and never votes or stands
(raft/FORK.md 12). A node that joins becomes a voter only while the set is below its size.
The set changes one node at a time, each change committed before the next (the fork's
membership entries), so no two majorities of successive sets are disjoint: a voter that
leaves is first replaced by an observer (the set grows by one), then removed. The voters are
spread over racks (`broker.rack`; a host's brokers share one) by the same swaps, on the
controller's leader, so that a rack's loss costs at most one voter where there are enough
racks: a new cluster's lowest ids may be one host's brokers.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

RECORD = "voters.json"


class VoterRefused(Exception):
    """The voter set cannot change as asked; the message says what to do."""


def initial_voters(directory: Path, node_ids: Iterable[int], size: int) -> list[int]:
    """The voters this node starts from, before its controller log says otherwise.

    A new controller directory takes the `size` lowest ids of the config's nodes (every node
    of a new cluster lists the same ones) and records them, so a restart starts from the same
    set whatever the config lists by then. A directory written by a release before voter sets
    (a log or a dump, no record) keeps what that release did: every node of the config is a
    voter, until the operator changes the set (`raftlog cluster decommission`)."""
    record = directory / RECORD
    if record.exists():
        voters = json.loads(record.read_text())["initial"]
        return [int(v) for v in voters]
    ids = sorted(set(node_ids))
    written_before = (directory / "dump").exists() or any((directory / "raft").glob("*"))
    voters = ids if written_before else ids[:size]
    directory.mkdir(parents=True, exist_ok=True)
    tmp = record.with_suffix(".tmp")
    with tmp.open("w") as f:
        json.dump({"initial": voters, "all_nodes": written_before}, f)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(record)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return voters


def admits(node: int, voters: set[int], size: int) -> bool:
    """Whether a node that joined becomes a voter (else it observes)."""
    return node not in voters and len(voters) < size


def retire_plan(
    node: int,
    voters: set[int],
    live: set[int],
    size: int,
    racks: Mapping[int, str | None] | None = None,
) -> list[tuple[str, int]]:
    """The changes, in order, that take `node` out of the voters: where the set is above its
    size (a cluster whose every node an older release made a voter), only the removal; else
    a live observer added first (one on a rack no other voter is on, if any; then the lowest
    id), then `node` removed. None if `node` is not a voter; refused where the set would
    fall below its size."""
    if node not in voters:
        return []
    if len(voters) > size:
        return [("remove", node)]
    racks = racks or {}
    used = {racks.get(v) for v in voters - {node}}
    observers = sorted(live - voters - {node}, key=lambda n: (racks.get(n) in used, n))
    if observers:
        return [("add", observers[0]), ("remove", node)]
    raise VoterRefused(
        f"node {node} is one of the {len(voters)} controller voters and no live node that is "
        f"not a voter can take its place: add a node first (raftlog cluster add-node)"
    )


def spread_plan(
    voters: set[int], racks: Mapping[int, str | None], live: set[int], size: int, leader: int
) -> list[tuple[str, int]]:
    """One swap that puts the voters on one more rack: a live observer on a rack no voter is
    on is added, then a voter (not `leader`) of the rack holding the most voters removed.
    None while the set is not at its size, a voter is not live (a swap must not leave a dead
    voter among the three), a live node's rack is unknown (a cluster without racks), or no
    rack holds two voters or no observer is on a rack without one."""
    if len(voters) != size or not voters <= live or any(racks.get(n) is None for n in live):
        return []
    held = Counter(racks[v] for v in voters)
    rack, most = max(held.items(), key=lambda item: (item[1], item[0] or ""))
    free = sorted(n for n in live - voters if racks[n] not in held)
    leaving = [v for v in voters if racks[v] == rack and v != leader]
    if most < 2 or not free or not leaving:
        return []
    return [("add", free[0]), ("remove", max(leaving))]
