"""The share-group partition assignor: Kafka's SimpleAssignor (KIP-932), built the way its
SimpleHomogeneousAssignmentBuilder and SimpleHeterogeneousAssignmentBuilder build it.

Unlike a consumer group, a share group may put several members on one partition (records are
handed out one at a time, under locks), so more members than partitions still keeps every
member busy. Each partition wants `sharing = ceil(members / partitions)` members, which makes
`sharing * partitions` slots; each member's quota is its even share of those slots, so quotas
differ by one at most. Balance comes first, then stickiness:

1. each member keeps its previous partitions that are still assignable to it;
2. partitions held by more than `sharing` members lose the surplus (members above quota first);
3. members above their quota give up the surplus;
4. partitions short of `sharing` members go to members short of their quota, round robin,
   never twice to the same member. If every member short of its quota already has the
   partition, it stays short (Kafka tolerates that slight imbalance too).

When all members subscribe to the same topics (homogeneous) their partitions form one pool;
otherwise each topic is a pool of its own, shared among the members subscribed to it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

TopicPartition = tuple[str, int]


def assign(
    subscriptions: Mapping[str, Collection[str]],
    partition_counts: Mapping[str, int],
    current: Mapping[str, Mapping[str, Collection[int]]],
) -> dict[str, dict[str, frozenset[int]]]:
    """The target assignment {member: {topic: partitions}} of every member of `subscriptions`
    (member -> subscribed topic names). `partition_counts` has the topics that exist; a
    subscribed topic missing from it is ignored until it exists. `current` is the previous
    target, kept where balance allows. Ties go by the order of `subscriptions` (join order),
    so the same inputs always give the same answer."""
    members = list(subscriptions)
    result: dict[str, dict[str, set[int]]] = {m: {} for m in members}
    held = {
        m: {(topic, p) for topic, ps in current.get(m, {}).items() for p in ps} for m in members
    }
    for pool_members, partitions in _pools(subscriptions, partition_counts):
        for member, taken in _assign_pool(pool_members, partitions, held).items():
            for topic, p in taken:
                result[member].setdefault(topic, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in result.items()}


def _pools(
    subscriptions: Mapping[str, Collection[str]], partition_counts: Mapping[str, int]
) -> list[tuple[list[str], list[TopicPartition]]]:
    """(members, partitions) to balance together: one pool if everyone subscribes to the same
    topics, else one per topic, since a member may only get partitions of its own topics."""
    members = list(subscriptions)

    def partitions(topic: str) -> list[TopicPartition]:
        return [(topic, p) for p in range(partition_counts.get(topic, 0))]

    if len({frozenset(s) for s in subscriptions.values()}) <= 1:
        topics = sorted(set(subscriptions[members[0]])) if members else []
        return [(members, [tp for t in topics for tp in partitions(t)])]
    topics = sorted({t for s in subscriptions.values() for t in s})
    return [([m for m in members if t in subscriptions[m]], partitions(t)) for t in topics]


def _assign_pool(
    members: Sequence[str],
    partitions: Sequence[TopicPartition],
    held: Mapping[str, set[TopicPartition]],
) -> dict[str, set[TopicPartition]]:
    """Shares `partitions` among `members` (steps 1-4 of the module docstring)."""
    if not members or not partitions:
        return {m: set() for m in members}
    sharing = -(-len(members) // len(partitions))
    assignable = set(partitions)
    kept = {m: held.get(m, set()) & assignable for m in members}

    # Kafka hands the larger quotas out by member index; giving them to the members that
    # keep the most moves fewer partitions and balances just the same.
    base, extra = divmod(sharing * len(partitions), len(members))
    ranked = sorted(members, key=lambda m: -len(kept[m]))  # stable: ties in member order
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(ranked)}

    holders = {tp: [m for m in members if tp in kept[m]] for tp in partitions}
    for tp in partitions:
        surplus = len(holders[tp]) - sharing
        if surplus > 0:
            # the members furthest above their quota let go first
            for m in sorted(holders[tp], key=lambda m: quota[m] - len(kept[m]))[:surplus]:
                kept[m].discard(tp)
                holders[tp].remove(m)

    for m in members:
        for tp in sorted(kept[m])[quota[m] :]:
            kept[m].discard(tp)
            holders[tp].remove(m)

    unfilled = [m for m in members if len(kept[m]) < quota[m]]
    turn = 0
    for tp in partitions:
        need = sharing - len(holders[tp])
        while need > 0 and unfilled:
            at = _next_without(unfilled, turn, tp, kept)
            if at is None:
                break  # every member short of its quota has it already
            member = unfilled[at]
            kept[member].add(tp)
            holders[tp].append(member)
            need -= 1
            if len(kept[member]) >= quota[member]:
                unfilled.pop(at)
                turn = at
            else:
                turn = at + 1
    return kept


def _next_without(
    unfilled: Sequence[str], turn: int, tp: TopicPartition, kept: Mapping[str, set[TopicPartition]]
) -> int | None:
    """Index of the first member of `unfilled`, going round from `turn`, that lacks `tp`."""
    for step in range(len(unfilled)):
        i = (turn + step) % len(unfilled)
        if tp not in kept[unfilled[i]]:
            return i
    return None
