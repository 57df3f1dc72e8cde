"""Replicas moved by the operator (issue 44), through the same reassignments a Kafka tool sends
(AlterPartitionReassignments, raftlog/reassignment.py), with progress on the terminal.

`raftlog cluster decommission NODE`: every replica a live node holds moves to the other nodes.
Each goes to the node holding the fewest replicas so far among those on a rack the
partition's other replicas do not use (any node if there is none); a replica that was its
partition's preferred leader hands that place to the next one. The node's leaderships leave
with its replicas (a leader being removed hands over first). The node itself is not removed:
it then holds nothing, and can be stopped. A node that is gone for good (its disk lost) is
replaced the same way: its replicas are made again on the live nodes, which copy them from
the partitions' leaders.

`raftlog cluster rebalance`: replicas move from the nodes holding the most to those holding
the fewest until no two differ by more than one (a node added later takes its share), onto
the move that leaves its partition on the most racks; then each partition's replicas are
reordered, which needs no copy, so every node is the preferred leader of as many partitions
as any other, give or take one.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from raftlog.config import ConfigError

POLL_SECONDS = 1.0
CHUNK = 1000  # partitions per AlterPartitionReassignments request

Key = tuple[str, int]


def plan(
    node: int, racks: Mapping[int, str | None], replicas: Mapping[Key, list[int]]
) -> dict[Key, list[int]]:
    """New replica lists for the partitions `node` holds, over the other brokers of `racks`."""
    others = sorted(b for b in racks if b != node)
    load = Counter(b for held in replicas.values() for b in held if b != node)
    moves: dict[Key, list[int]] = {}
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


def balance(
    racks: Mapping[int, str | None], replicas: Mapping[Key, list[int]]
) -> dict[Key, list[int]]:
    """New replica lists that even out the replicas per node (within one), then the preferred
    leaders (first replicas) per node (within one where the replica sets allow it)."""
    lists = {key: list(held) for key, held in replicas.items()}
    nodes = sorted(racks)
    load = Counter({n: 0 for n in nodes})
    load.update(b for held in lists.values() for b in held if b in racks)
    while True:
        most = max(nodes, key=lambda n: (load[n], n))
        least = min(nodes, key=lambda n: (load[n], n))
        if load[most] - load[least] <= 1:
            break
        choices = [k for k in sorted(lists) if most in lists[k] and least not in lists[k]]
        if not choices:
            break

        def spread(key: Key, most: int = most, least: int = least) -> int:
            """Racks the partition's replicas would be on after the move."""
            return len({racks.get(least if b == most else b) for b in lists[key]})

        key = max(choices, key=spread)
        lists[key] = [least if b == most else b for b in lists[key]]
        load[most] -= 1
        load[least] += 1
    leads = Counter({n: 0 for n in nodes})
    leads.update(held[0] for held in lists.values())
    for _ in range(len(lists)):  # each pass hands one leadership from the most to the fewest
        most = max(nodes, key=lambda n: (leads[n], n))
        fewest = min(nodes, key=lambda n: (leads[n], n))
        if leads[most] - leads[fewest] <= 1:
            break
        found = next((k for k in sorted(lists) if lists[k][0] == most and fewest in lists[k]), None)
        if found is None:
            break
        lists[found] = [fewest, *(b for b in lists[found] if b != fewest)]
        leads[most] -= 1
        leads[fewest] += 1
    return {key: held for key, held in lists.items() if held != replicas[key]}


def decommission(admin: Any, node: int, timeout: float, say: Callable[[str], None] = print) -> int:
    """Moves every replica off `node` and waits for the moves to end (0), or says why not."""
    brokers, replicas = _cluster(admin)
    gone = node not in brokers
    if gone and not any(node in held for held in replicas.values()):
        raise ConfigError(f"node {node} is neither a live broker ({sorted(brokers)}) nor a replica")
    if gone:
        say(
            f"node {node} is not live: its replicas are made again on the live nodes, copied from their leaders"
        )
    moves = plan(node, {**brokers, node: None}, replicas)
    if not moves:
        say(f"node {node} holds no replica")
        return 0
    say(f"moving {len(moves)} replicas off node {node}")
    if not _move(admin, moves, timeout, say, f"moved off node {node}"):
        return 1
    say(f"node {node} holds no replica now; it can be stopped")
    return 0


def rebalance(admin: Any, timeout: float, say: Callable[[str], None] = print) -> int:
    """Evens out replicas and preferred leaders per node; waits for the moves to end (0)."""
    brokers, replicas = _cluster(admin)
    moves = balance(brokers, replicas)
    if not moves:
        say("balanced already")
        return 0
    say(f"moving or reordering the replicas of {len(moves)} partitions")
    if not _move(admin, moves, timeout, say, "done"):
        return 1
    load = Counter(b for held in {**replicas, **moves}.values() for b in held)
    say("replicas per node now: " + ", ".join(f"{n}: {load[n]}" for n in sorted(brokers)))
    return 0


def _cluster(admin: Any) -> tuple[dict[int, str | None], dict[Key, list[int]]]:
    """The live brokers with their racks, and every partition's replicas."""
    brokers = {
        int(b["broker_id"]): b.get("rack")
        for b in admin.describe_cluster()["brokers"]
        if not b.get("is_fenced")
    }
    replicas = {
        (t["name"], int(p["partition_index"])): [int(r) for r in p["replica_nodes"]]
        for t in admin.describe_topics()
        for p in t["partitions"]
    }
    return brokers, replicas


def _move(
    admin: Any, moves: dict[Key, list[int]], timeout: float, say: Callable[[str], None], what: str
) -> bool:
    """Sends the moves and waits until none of them is in progress; False if `timeout` ran
    out first (the moves go on)."""
    from kafka import TopicPartition

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
        listed = {(tp.topic, tp.partition) for tp in admin.list_partition_reassignments()}
        moving = listed & set(moves)
        done = len(moves) - len(moving)
        if done != said:
            said = done
            say(f"  {done} of {len(moves)} {what}")
        if not moving:
            return True
        if time.monotonic() >= deadline:
            say(f"{len(moving)} moves still under way after {timeout:.0f}s (they go on)")
            return False
        time.sleep(POLL_SECONDS)
