"""Request checks and constants more than one handler needs, kept here so each exists once."""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Hashable, Iterable
from datetime import timedelta
from typing import TypeVar

from epoch.fencing import check_leader_epoch
from raftlog.api.broker import Broker
from raftlog.api.values import BrokerInfo, Partition, TopicInfo
from raftlog.common.errors import ErrorCode

NO_THROTTLE = timedelta(0)
# Kafka's "authorized operations not requested / not known" marker (INT32_MIN).
UNKNOWN_AUTHORIZED_OPERATIONS = -(2**31)

K = TypeVar("K", bound=Hashable)

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME_LENGTH = 249


def millis(delta: timedelta) -> int:
    """kio hands durations over as timedelta; the facade wants Kafka's milliseconds."""
    return round(delta.total_seconds() * 1000)


def topic_name_error(name: str | None) -> str | None:
    """Kafka's Topic.validate: why `name` is not a legal topic name, None when it is."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is longer than the maximum of {MAX_TOPIC_NAME_LENGTH} characters"
    if not _TOPIC_NAME.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


def duplicates(names: Iterable[K | None]) -> set[K]:
    """Names given more than once in one request. Every copy is answered INVALID_REQUEST and
    nothing is done for it, as Kafka does for admin requests and ListOffsets: an answer is
    never bigger than what the distinct names in the request justify."""
    return {name for name, count in Counter(names).items() if count > 1 and name is not None}


def named_twice(what: str) -> str:
    """The message for each copy of a name given twice (the name is in the answer already)."""
    return f"The request names this {what} more than once"


def resolve_topic(
    broker: Broker, name: str | None, topic_id: uuid.UUID | None, by_id: bool
) -> tuple[TopicInfo | None, ErrorCode]:
    """Versions that address topics by id report an unknown one as UNKNOWN_TOPIC_ID (100)."""
    if by_id:
        topic = broker.topic_by_id(topic_id) if topic_id is not None else None
        return topic, ErrorCode.none if topic is not None else ErrorCode.unknown_topic_id
    topic = broker.topic(name) if name is not None else None
    return topic, ErrorCode.none if topic is not None else ErrorCode.unknown_topic_or_partition


def leader_partition(
    broker: Broker, topic: TopicInfo, index: int, client_epoch: int
) -> tuple[Partition | None, ErrorCode]:
    """The local leader replica of topic/index, or why a client must not be served here. Like
    Kafka, the leader epoch is checked before leadership, so a stale client learns it is fenced
    rather than being sent to a leader it already knows about."""
    if not 0 <= index < len(topic.partitions):
        return None, ErrorCode.unknown_topic_or_partition
    partition = broker.local_partition(topic.name, index)
    if partition is None:
        return None, ErrorCode.not_leader_or_follower
    error = check_leader_epoch(client_epoch, partition.leader_epoch)
    if error is not ErrorCode.none:
        return None, error
    if not partition.is_leader:
        return None, ErrorCode.not_leader_or_follower
    return partition, ErrorCode.none


# Errors after which KIP-951 (Produce v10+, Fetch v12+) tells the client the current leader.
LEADER_MOVED = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})


def current_leader(broker: Broker, topic: TopicInfo | None, index: int) -> tuple[int, int] | None:
    """(leader id, leader epoch) of topic/index in this node's latest metadata, when another
    node leads it: a client told that it reached the wrong leader can go straight there
    instead of refreshing metadata first (KIP-951)."""
    if topic is None:
        return None
    latest = broker.topic(topic.name)
    if latest is None or not 0 <= index < len(latest.partitions):
        return None
    info = latest.partitions[index]
    if info.leader < 0 or info.leader == broker.node_id:
        return None
    return info.leader, info.leader_epoch


def endpoints(broker: Broker, node_ids: Iterable[int]) -> list[BrokerInfo]:
    """The listeners of the given nodes, for KIP-951's node_endpoints."""
    wanted = set(node_ids)
    if not wanted:  # most answers name no leader: the broker list is not built for them
        return []
    return [b for b in broker.live_brokers() if b.node_id in wanted]


def fenced_as(error: ErrorCode, version: int, fenced_since: int) -> ErrorCode:
    """PRODUCER_FENCED as a request of `version` may be told it: INVALID_PRODUCER_EPOCH before
    `fenced_since` (Kafka's rule; aiokafka, which sends v0, raises on a code it does not know)."""
    if error == ErrorCode.producer_fenced and version < fenced_since:
        return ErrorCode.invalid_producer_epoch
    return error
