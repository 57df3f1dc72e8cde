"""The group coordinator's broker settings, shared by the coordinator and the offsets side."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class GroupConfig:
    """Kafka's broker settings of the same names. Mutable: the node follows the real partition
    count of `__consumer_offsets` once the topic exists."""

    num_partitions: int = 16  # offsets.topic.num.partitions
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_minutes: int = 10080  # offsets.retention.minutes
    max_group_id_bytes: int = 32767  # a group id is an int16-length string in the record key
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    # Kafka's fixed 5 minutes: a new member's parked JoinGroup expires after it, so a client
    # that gave up on its request cannot hold every later rebalance for good.
    new_member_join_timeout_ms: int = 300_000
