"""Rebuilding a partition's groups from its `__consumer_offsets` records, when this node
becomes their coordinator."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from raftlog.groups.group import Group, TopicPartition
from raftlog.groups.offsets_log import OffsetsLog
from raftlog.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordError,
    ShareGroupMetadataKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    decode_share_group_metadata_value,
)

log = logging.getLogger(__name__)

LOAD_YIELD_EVERY = 1000  # records replayed between yields to the loop while loading

Committed = dict[TopicPartition, OffsetCommitValue]


@dataclass(slots=True)
class Replayed:
    metadata: dict[str, GroupMetadataValue] = field(default_factory=dict)
    offsets: defaultdict[str, Committed] = field(default_factory=lambda: defaultdict(dict))
    share_groups: dict[str, int] = field(default_factory=dict)  # share group -> epoch
    # producer id -> group -> offsets of a transaction whose marker is not in the log yet
    txn_offsets: defaultdict[int, defaultdict[str, Committed]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(dict))
    )


async def replay(offsets_log: OffsetsLog) -> Replayed:
    """The latest record per key wins, a tombstone deletes; a partition of millions of records
    yields to the loop as it goes, and an undecodable record is skipped, not fatal. A
    transaction's offsets wait for its marker: a commit applies them, an abort drops them."""
    found = Replayed()
    metadata, offsets, share_groups = found.metadata, found.offsets, found.share_groups
    txn_offsets = found.txn_offsets
    for count, (offset, key, value, producer_id, marker) in enumerate(
        offsets_log.read_committed(), 1
    ):
        if count % LOAD_YIELD_EVERY == 0:
            await asyncio.sleep(0)
        if marker is not None:
            for group_id, pending in txn_offsets.pop(producer_id, {}).items():
                if marker:
                    offsets[group_id].update(pending)
            continue
        try:
            parsed = decode_key(key)
            if isinstance(parsed, OffsetCommitKey) and producer_id >= 0:
                if value is not None:
                    tp = (parsed.topic, parsed.partition)
                    txn_offsets[producer_id][parsed.group][tp] = decode_offset_commit_value(value)
            elif isinstance(parsed, OffsetCommitKey):
                tp = (parsed.topic, parsed.partition)
                if value is None:
                    offsets[parsed.group].pop(tp, None)
                else:
                    offsets[parsed.group][tp] = decode_offset_commit_value(value)
            elif isinstance(parsed, GroupMetadataKey):
                if value is None:
                    metadata.pop(parsed.group, None)
                else:
                    metadata[parsed.group] = decode_group_metadata_value(value)
            elif isinstance(parsed, ShareGroupMetadataKey):
                if value is None:
                    share_groups.pop(parsed.group, None)
                else:
                    share_groups[parsed.group] = decode_share_group_metadata_value(value).epoch
        except RecordError as exc:
            log.warning(
                "__consumer_offsets-%d offset %d: skipping an undecodable record: %s",
                offsets_log.index,
                offset,
                exc,
            )
    return found


def build_groups(
    metadata: dict[str, GroupMetadataValue],
    offsets: dict[str, Committed],
    now_ms: int,
    txn_offsets: dict[int, defaultdict[str, Committed]] | None = None,
) -> dict[str, Group]:
    """A group exists if it has a GroupMetadata record or any committed offset, its
    transactions' included."""
    pending: defaultdict[str, dict[int, Committed]] = defaultdict(dict)
    for producer_id, by_group in (txn_offsets or {}).items():
        for group_id, committed in by_group.items():
            pending[group_id][producer_id] = committed
    groups: dict[str, Group] = {}
    named = {g for g, committed in offsets.items() if committed} | pending.keys()
    for group_id in metadata.keys() | named:
        value = metadata.get(group_id)
        group = (
            Group.from_record(group_id, value, now_ms)
            if value is not None
            else Group(group_id, now_ms)
        )
        group.offsets = offsets.get(group_id, {})
        group.txn_offsets = pending.get(group_id, {})
        groups[group_id] = group
    return groups
