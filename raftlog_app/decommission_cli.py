"""`raftlog cluster decommission NODE`: every replica a live node holds moves to the other
nodes (issue 44), through the same reassignments a Kafka tool sends (AlterPartitionReassignments,
raftlog/reassignment.py), with its progress on the terminal. Each replica goes to the node
holding the fewest replicas so far among those on a rack the partition's other replicas do
not use (any node if there is none); a replica that was its partition's preferred leader hands
that place to the next one. The node's leaderships leave with its replicas (a leader being
removed hands over first). The node itself is not removed: it then holds nothing, and can be
stopped."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from raftlog.config import ConfigError

POLL_SECONDS = 1.0
CHUNK = 1000  # partitions per AlterPartitionReassignments request


def plan(
    node: int, racks: Mapping[int, str | None], replicas: Mapping[tuple[str, int], list[int]]
) -> dict[tuple[str, int], list[int]]:
    """New replica lists for the partitions `node` holds, over the other brokers of `racks`."""
    others = sorted(b for b in racks if b != node)
    load = Counter(b for held in replicas.values() for b in held if b != node)
    moves: dict[tuple[str, int], list[int]] = {}
    for key in sorted(replicas):
        held = replicas[key]
        if node not in held:
            continue
        staying = [b for b in held if b != node]
        used = {racks.get(b) for b in staying}
        free = [b for b in others if b not in staying]
        if not free:
            raise ConfigError(
                f"{key[0]}-{key[1]} has replicas on every other node: no node can take node "
                f"{node}'s; add a node first (`raftlog cluster add-node`)"
            )
        fresh = [b for b in free if racks.get(b) not in used] or free
        to = min(fresh, key=lambda b: (load[b], b))
        load[to] += 1
        moves[key] = staying + [to] if held[0] == node else [to if b == node else b for b in held]
    return moves


def decommission(admin: Any, node: int, timeout: float, say: Callable[[str], None] = print) -> int:
    """Moves every replica off `node` and waits for the moves to end (0), or says why not."""
    from kafka import TopicPartition

    brokers = {
        int(b["broker_id"]): b.get("rack")
        for b in admin.describe_cluster()["brokers"]
        if not b.get("is_fenced")
    }
    if node not in brokers:
        raise ConfigError(f"node {node} is not a live broker of this cluster ({sorted(brokers)})")
    replicas = {
        (t["name"], int(p["partition_index"])): [int(r) for r in p["replica_nodes"]]
        for t in admin.describe_topics()
        for p in t["partitions"]
    }
    moves = plan(node, brokers, replicas)
    if not moves:
        say(f"node {node} holds no replica")
        return 0
    say(f"moving {len(moves)} replicas off node {node}")
    keys = sorted(moves)
    for i in range(0, len(keys), CHUNK):
        chunk = {TopicPartition(*k): moves[k] for k in keys[i : i + CHUNK]}
        refused = {tp: e for tp, e in admin.alter_partition_reassignments(chunk).items() if e}
        if refused:
            first = next(iter(refused.items()))
            raise ConfigError(f"{len(refused)} moves refused, e.g. {first[0]}: {first[1]}")
    deadline = time.monotonic() + timeout
    said = -1
    while True:
        moving = {(tp.topic, tp.partition) for tp in admin.list_partition_reassignments()} & set(
            moves
        )
        done = len(moves) - len(moving)
        if done != said:
            said = done
            say(f"  {done} of {len(moves)} moved off node {node}")
        if not moving:
            say(f"node {node} holds no replica now; it can be stopped")
            return 0
        if time.monotonic() >= deadline:
            say(f"{len(moving)} moves still under way after {timeout:.0f}s (they go on)")
            return 1
        time.sleep(POLL_SECONDS)
