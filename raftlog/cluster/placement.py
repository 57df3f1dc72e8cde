"""Where the replicas of new partitions go: Kafka's replica assignment
(AdminUtils.assignReplicasToBrokers), rack-aware as KIP-36 made it, as a pure function that
topic creation, partition increases and (later) reassignment and rebalance all call.

The brokers are put in one order that takes a broker from each rack in turn (racks by
name, each rack's brokers by id): racks a: 1, 2; b: 3, 4; c: 5 give 1, 3, 5, 2, 4. Partition
leaders walk that order round-robin from a start, so every broker leads as many partitions
as any other, give or take one. Each further replica is found by walking the order again
from just after the leader, offset by a shift (the same for a whole round of partitions,
one more each round so that a broker's partitions do not all have the same followers), and
taking the first broker on a rack the partition has no replica on yet; once every rack has
one, any broker the partition does not have yet. So a partition's replicas are on as many
distinct racks as there are racks, up to the replication factor, and never twice on one
broker.

Brokers without a rack count as one rack of their own (Kafka's KRaft controller, whose
StripedReplicaPlacer groups them under an empty rack): a cluster with no racks at all is
one rack, which is Kafka's rack-unaware assignment. Kafka's ZooKeeper-era assignment
refused a mix of racked and rackless brokers; refusing would stop every topic creation,
the coordinators' own included, while racks are being set node by node.

The placement reads nothing but its arguments; a partition costs at most two walks of
the brokers (one while racks without a replica remain, one after)."""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from itertools import zip_longest


def broker_order(racks: Mapping[int, str | None]) -> list[int]:
    """The brokers interleaved by rack: the first broker of each rack (racks sorted by name,
    the rackless first), then the second of each, and so on, each rack's brokers by id."""
    by_rack: dict[str | None, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    names = sorted(by_rack, key=lambda rack: (rack is not None, rack or ""))
    return [
        broker
        for turn in zip_longest(*(by_rack[name] for name in names))
        for broker in turn
        if broker is not None
    ]


def place(
    racks: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    *,
    existing: Sequence[Sequence[int]] = (),
    start: int | None = None,
    shift: int | None = None,
    rng: random.Random | None = None,
) -> Iterator[list[int]]:
    """The replica lists, leader first, of `partitions` new partitions of a topic whose
    partitions so far are `existing`, over the brokers of `racks` (broker id -> rack), one
    partition at a time (so a caller on the event loop can hand it back between them).

    `start`: where in broker_order() the first new partition's leader is; by default just
    after the leader of the topic's last partition, as if the new partitions had been
    created with the others, or a random place for a new topic (or one whose last leader
    is gone). `shift`: where the followers' walk starts in the topic's first round of as
    many partitions as brokers, one further each round after (random by default, as
    Kafka's); the new partitions are numbered after the existing ones."""
    if partitions < 0:
        raise ValueError(f"partitions must not be negative, got {partitions}")
    if not 0 < replication_factor <= len(racks):
        raise ValueError(
            f"replication factor {replication_factor} needs from 1 to {len(racks)} brokers"
        )
    rng = rng or random.Random()
    order = broker_order(racks)
    if start is None:
        last = existing[-1] if existing else ()
        led = bool(last) and last[0] in racks
        start = order.index(last[0]) + 1 if led else rng.randrange(len(order))
    if shift is None:
        shift = rng.randrange(len(order))
    return _striped(racks, order, partitions, replication_factor, len(existing), start, shift)


def _striped(
    racks: Mapping[int, str | None],
    order: list[int],
    partitions: int,
    replication_factor: int,
    first_index: int,
    start: int,
    shift: int,
) -> Iterator[list[int]]:
    """Kafka's walk: leaders round-robin over `order`; followers from a walk of the order
    that starts (shift + round) times the rack count after the leader and takes a broker
    on a new rack while there is one."""
    count = len(order)
    rack_count = len(set(racks.values()))
    for i in range(partitions):
        offset = (shift + (first_index + i) // count) * rack_count
        first = (start + i) % count
        replicas = [order[first]]
        used_racks = {racks[order[first]]}
        step = 0
        while len(replicas) < replication_factor:
            broker = order[(first + 1 + (offset + step) % (count - 1)) % count]
            step += 1
            rack = racks[broker]
            if broker not in replicas and (rack not in used_racks or len(used_racks) == rack_count):
                replicas.append(broker)
                used_racks.add(rack)
        yield replicas
