"""Partition reassignments as the controller records them (Kafka's KIP-455), apart from the
replicated machine so the handlers, the node and the tests read them the same way.

A topic's `"moves"` maps a partition index to {"target": [...], "original": [...]}: the
replicas the move goes to, and those the partition had before its first move (a move that
replaces another keeps that original, so cancelling returns there). While a partition moves,
`topic["partitions"][p]` is its full replica set, the target followed by the others that
still hold a copy: every node in it keeps its replica, so none is dropped before the
partition's leader has taken it out of the group's Raft configuration. Adding = target -
original, removing = the full set - target. The leader moves the group's configuration
toward the target and then finishes the move (`finish`): the partition's replicas become
the target. A topic written before moves existed has no "moves": none is in progress.

Every function here is deterministic in the controller's state: the replicated commands
apply them on every node alike.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

UNKNOWN = "unknown"  # no such topic or partition
NO_MOVE = "no reassignment in progress"
STALE = "stale"  # a finish for a move that is no longer the one in progress
INVALID = "invalid replicas: "  # followed by why, in Kafka's words

Move = dict[str, list[int]]


def moves_of(topic: dict[str, Any]) -> dict[int, Move]:
    """The topic's moves in progress (none for a topic recorded before moves existed)."""
    moves: dict[int, Move] = topic.get("moves") or {}
    return moves


def original_replicas(topic: dict[str, Any], index: int) -> list[int]:
    """The replicas the partition had before its move, else its replicas."""
    move = moves_of(topic).get(index)
    return list(move["original"]) if move is not None else list(topic["partitions"][index])


def adding_replicas(topic: dict[str, Any], index: int) -> tuple[int, ...]:
    """The target's replicas that were not in the original (Kafka's addingReplicas)."""
    move = moves_of(topic).get(index)
    if move is None:
        return ()
    return tuple(r for r in move["target"] if r not in move["original"])


def removing_replicas(topic: dict[str, Any], index: int) -> tuple[int, ...]:
    """The replicas holding a copy that the target leaves out (Kafka's removingReplicas)."""
    move = moves_of(topic).get(index)
    if move is None:
        return ()
    return tuple(r for r in topic["partitions"][index] if r not in move["target"])


def replicas_refusal(target: list[int], registered: Collection[int]) -> str | None:
    """Why a target replica list cannot be assigned (ReplicationControlManager's
    validateManualPartitionAssignment, in its words), None if it can."""
    if not target:
        return "The manual partition assignment includes an empty replica list."
    seen: set[int] = set()
    for broker in sorted(target):
        if broker not in registered:
            return (
                f"The manual partition assignment includes broker {broker}, but no such "
                "broker is registered."
            )
        if broker in seen:
            return f"The manual partition assignment includes the broker {broker} more than once."
        seen.add(broker)
    return None


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_partition(topic: dict[str, Any], index: object) -> bool:
    return isinstance(index, int) and _is_index(index) and 0 <= index < len(topic["partitions"])


def _is_replica_list(value: list[Any] | tuple[Any, ...], most: int) -> bool:
    return len(value) <= most and all(map(_is_index, value))


def change(
    topic: dict[str, Any], index: object, target: object, registered: Collection[int]
) -> tuple[str | None, bool]:
    """Applies one AlterPartitionReassignments entry to the topic: a target starts or replaces
    the partition's move, None cancels it. Returns (refusal or None, whether the topic
    changed). A target with the partition's own replicas and no move in progress needs no
    copy: it is its replicas at once, as Kafka completes a reordering at once. While a move
    is in progress every target, a cancellation (a move back to the original) included, is a
    move the leader finishes like any other: its group's voters may already be the first
    move's target, and dropping copies at once could take a majority of them, or leave a
    replica listed that its group's configuration does not count (issue 44)."""
    partitions: list[list[int]] = topic["partitions"]
    if not _is_partition(topic, index):
        return UNKNOWN, False
    assert isinstance(index, int)
    moves = moves_of(topic)
    move = moves.get(index)
    original = list(move["original"]) if move is not None else list(partitions[index])
    if target is None:
        if move is None:
            return NO_MOVE, False
        target = original
    if not isinstance(target, list | tuple) or not _is_replica_list(target, len(registered)):
        return INVALID + f"Not a list of at most {len(registered)} broker ids.", False
    wanted = [int(r) for r in target]
    refusal = replicas_refusal(wanted, registered)
    if refusal is not None:
        return INVALID + refusal, False
    if move is None and set(wanted) == set(partitions[index]):
        changed = partitions[index] != wanted
        partitions[index] = wanted
        moves.pop(index, None)
        return None, changed
    # Every replica holding a copy stays until the leader finishes the move: one a replaced
    # move was adding may already vote in the group's configuration.
    full = wanted + [r for r in partitions[index] if r not in wanted]
    new_move = {"target": wanted, "original": original}
    if move == new_move and partitions[index] == full:
        return None, False
    partitions[index] = full
    topic.setdefault("moves", {})[index] = new_move
    return None, True


def finish(topic: dict[str, Any], index: object, target: object) -> str | None:
    """The partition's leader has its group's configuration at `target`: if that is the
    move in progress, the partition's replicas become the target and the move is over;
    otherwise (another move since, a cancellation, a finish already applied) STALE."""
    if not _is_partition(topic, index):
        return UNKNOWN
    assert isinstance(index, int)
    move = moves_of(topic).get(index)
    if move is None or not isinstance(target, list | tuple) or list(target) != move["target"]:
        return STALE
    topic["partitions"][index] = list(move["target"])
    del topic["moves"][index]
    return None
