"""Kafka's internal topics (its Topic.isInternal): what holds the cluster's own state and is
never consumed as data by share groups or the consume proxy. raftlog creates
`__consumer_offsets` and `__transaction_state` (the controller marks them internal); the
other name is internal to Kafka's clients and tools whether or not it exists here."""

from __future__ import annotations

from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC
from raftlog.txn.coordinator import TOPIC as TXN_TOPIC

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TXN_TOPIC, "__share_group_state"})


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS
