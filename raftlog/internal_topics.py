"""Kafka's internal topics (its Topic.isInternal): what holds the cluster's own state and is
never consumed as data by share groups or the consume proxy. raftlog creates only
`__consumer_offsets` (the controller marks it internal); the other names are internal to
Kafka's clients and tools whether or not they exist here."""

from __future__ import annotations

from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state", "__share_group_state"})


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS
