"""The `__consumer_offsets` side of the group coordinator, as Kafka's GroupMetadataManager:
which partitions this node coordinates and the groups loaded from them, committed offsets
(store and fetch), offset retention and the deletion of empty groups.

Membership (who is in a group, rebalances, sessions) is the GroupCoordinator's; it hands in
what a partition's groups need when they are loaded or unloaded.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from array import array
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from functools import partial
from operator import mul

from raftlog.common.clock import LOOP_CLOCK, Clock, now_ms
from raftlog.common.errors import ErrorCode
from raftlog.groups.config import GroupConfig
from raftlog.groups.group import Group, GroupState, TopicPartition
from raftlog.groups.loader import build_groups, replay
from raftlog.groups.offsets_log import OffsetsLog
from raftlog.groups.records import (
    OffsetCommitValue,
    group_metadata_key,
    offset_commit_key,
    offset_commit_value,
)
from raftlog.groups.results import CommitOffset, DeletedGroup, FetchedOffset, OffsetFetchResult
from raftlog.groups.shard import Records, Shard

log = logging.getLogger(__name__)

E = ErrorCode
EMPTY = GroupState.EMPTY
DEAD = GroupState.DEAD

GroupLoaded = Callable[[Shard, Group], None]
GroupUnloaded = Callable[[Group], None]
# How a caller hands over the groups of one request to be worked on: all at once, or with the
# loop handed back now and then (kafka_api.entry_work.sliced), since a request may name 10,000.
Paced = Callable[[Iterable[str]], AsyncIterator[str]]


async def at_once(group_ids: Iterable[str]) -> AsyncIterator[str]:
    """Every group, the loop never handed back."""
    for group_id in group_ids:
        yield group_id


# UTF-16 in this machine's byte order, read as unsigned 16-bit code units by array("H").
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
# The code units hashed per step, and 31^k mod 2^32 for k up to it.
_HASH_CHUNK = 256
_POWERS_OF_31 = tuple(pow(31, k, 1 << 32) for k in range(_HASH_CHUNK + 1))


def java_string_hash(value: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, 32-bit signed.

    Every group and transactional id a request names is placed by it, so it is summed in C
    (map and sum over a chunk's code units times the powers of 31) rather than one unit at a
    time in Python, which cost 35 us for a 249-character id (10,000 ids: 0.35 s); chunks
    join as hash(s + t) = hash(s) * 31^len(t) + hash(t)."""
    units = array("H", value.encode(_UTF16, "surrogatepass"))
    h = 0
    for start in range(0, len(units), _HASH_CHUNK):
        chunk = units[start : start + _HASH_CHUNK]
        chunk.reverse()  # the last unit has the power 31^0
        h = (h * _POWERS_OF_31[len(chunk)] + sum(map(mul, chunk, _POWERS_OF_31))) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def coordinator_partition(key: str, partitions: int) -> int:
    """Kafka's placement of a group or transactional id: abs(hashCode) % partitions, where
    abs(Integer.MIN_VALUE) is 0."""
    h = java_string_hash(key)
    return (0 if h == -(2**31) else abs(h)) % partitions


class GroupMetadataManager:
    def __init__(self, config: GroupConfig, *, clock: Clock = LOOP_CLOCK) -> None:
        self.config = config
        self._clock = clock
        self._shards: dict[int, Shard] = {}

    # ------------------------------------------------------------------ partitions

    def partition_for(self, group_id: str) -> int:
        return coordinator_partition(group_id, self.config.num_partitions)

    def shards(self) -> Iterable[Shard]:
        return self._shards.values()

    def attach(
        self,
        index: int,
        offsets_log: OffsetsLog,
        on_loaded: GroupLoaded,
        share_loaded: Callable[[str, int], None] = lambda _g, _epoch: None,
    ) -> None:
        """This node now leads `__consumer_offsets` partition `index`: rebuild its groups from
        the log (share groups: share_loaded(group, epoch)); until that is done their requests
        get COORDINATOR_LOAD_IN_PROGRESS."""
        shard = Shard(index, offsets_log)
        self._shards[index] = shard
        shard.spawn(self._load(shard, on_loaded, share_loaded))

    def detach(self, index: int, on_unloaded: GroupUnloaded) -> None:
        """Leadership of partition `index` is gone: forget its groups, after `on_unloaded` has
        answered whatever waits on each."""
        shard = self._shards.pop(index, None)
        if shard is None:
            return
        shard.close()
        for group in shard.groups.values():
            on_unloaded(group)
        shard.groups.clear()

    def close(self, on_unloaded: GroupUnloaded) -> None:
        for index in list(self._shards):
            self.detach(index, on_unloaded)

    async def _load(
        self, shard: Shard, on_loaded: GroupLoaded, share_loaded: Callable[[str, int], None]
    ) -> None:
        started = time.monotonic()  # how long the replay really took, whatever the clock
        found = await replay(shard.log)
        shard.groups.update(
            build_groups(found.metadata, found.offsets, now_ms(self._clock), found.txn_offsets)
        )
        for group in shard.groups.values():
            on_loaded(shard, group)
        for group_id, epoch in found.share_groups.items():
            share_loaded(group_id, epoch)
        shard.loading = False
        log.info(
            "coordinating __consumer_offsets-%d: %d groups loaded in %.3fs",
            shard.index,
            len(shard.groups),
            time.monotonic() - started,
        )
        shard.spawn(self._expire_periodically(shard))

    def lookup(self, group_id: str, allow_empty: bool = False) -> Shard | ErrorCode:
        """The attached partition of a group, or why it cannot be served here. Offset and admin
        APIs accept the empty group id, as Kafka does for old clients."""
        too_long = len(group_id.encode()) > self.config.max_group_id_bytes
        if too_long or not (group_id or allow_empty):
            return E.invalid_group_id
        shard = self._shards.get(self.partition_for(group_id))
        if shard is None:
            return E.not_coordinator
        if shard.loading:
            return E.coordinator_load_in_progress
        return shard

    # ------------------------------------------------------------------ offsets

    async def store_offsets(
        self, shard: Shard, group: Group, offsets: Sequence[CommitOffset]
    ) -> list[ErrorCode]:
        """One error per entry, in order; the caller has checked the committer's membership.
        Accepted offsets are written in one append and answered (and visible to OffsetFetch)
        only once it resolved."""
        errors, accepted = self._accepted(offsets)
        if not accepted:
            shard.discard_if_unused(group)
            return errors
        group.pending_commits.update(accepted.keys())
        written = await shard.append(
            _records(group, accepted),
            partial(self._offsets_written, shard, group, accepted),
            commit=True,
        )
        return [written if e is E.none else e for e in errors]

    def _accepted(
        self, offsets: Sequence[CommitOffset]
    ) -> tuple[list[ErrorCode], dict[TopicPartition, OffsetCommitValue]]:
        """One error per entry, and the offsets to write."""
        now = now_ms(self._clock)
        errors: list[ErrorCode] = []
        accepted: dict[TopicPartition, OffsetCommitValue] = {}
        for entry in offsets:
            metadata = entry.metadata or ""
            # Kafka compares the string's length in characters, despite the setting's name.
            if len(metadata) > self.config.offset_metadata_max_bytes:
                errors.append(E.offset_metadata_too_large)
                continue
            errors.append(E.none)
            accepted[(entry.topic, entry.partition)] = OffsetCommitValue(
                entry.offset, entry.leader_epoch, metadata, now
            )
        return errors, accepted

    async def store_txn_offsets(
        self,
        shard: Shard,
        group: Group,
        offsets: Sequence[CommitOffset],
        producer: tuple[int, int],
    ) -> list[ErrorCode]:
        """TxnOffsetCommit: the offsets go into the log in the producer's transaction and are
        held aside until its marker lands here (end_transaction)."""
        errors, accepted = self._accepted(offsets)
        if not accepted:
            shard.discard_if_unused(group)
            return errors

        def written(error: ErrorCode) -> None:
            if error is E.none:
                group.txn_offsets.setdefault(producer[0], {}).update(accepted)
            else:
                shard.discard_if_unused(group)

        result = await shard.append(
            _records(group, accepted), written, commit=True, producer=producer
        )
        return [result if e is E.none else e for e in errors]

    def end_transaction(self, index: int, producer_id: int, commit: bool) -> None:
        """A transaction's marker is in partition `index`'s log: its offsets are applied or
        dropped in every group there."""
        shard = self._shards.get(index)
        if shard is None:
            return
        for group in list(shard.groups.values()):
            if producer_id in group.txn_offsets:
                group.end_transaction(producer_id, commit)
                shard.discard_if_unused(group)

    @staticmethod
    def _offsets_written(
        shard: Shard,
        group: Group,
        accepted: dict[TopicPartition, OffsetCommitValue],
        error: ErrorCode,
    ) -> None:
        group.pending_commits -= Counter(accepted.keys())
        if error is E.none:
            group.offsets.update(accepted)
        else:
            shard.discard_if_unused(group)

    async def fetch_offsets(
        self,
        group_id: str,
        partitions: Sequence[tuple[str, int]] | None,
        require_stable: bool = False,
    ) -> OffsetFetchResult:
        """Committed offsets of the given partitions (-1 for none), or of every partition the
        group committed when `partitions` is None. Answers mid-rebalance too. `require_stable`
        (a read_committed consumer): a partition an open transaction holds an offset for is
        UNSTABLE_OFFSET_COMMIT, for the client to ask again."""
        shard = self.lookup(group_id, allow_empty=True)
        if isinstance(shard, ErrorCode):
            return OffsetFetchResult(shard)
        group = shard.groups.get(group_id)
        committed = group.offsets if group is not None and group.state is not DEAD else {}
        if partitions is None:
            wanted: Collection[TopicPartition] = sorted(committed)
        else:
            wanted = partitions
        return OffsetFetchResult(
            E.none,
            tuple(
                FetchedOffset(tp[0], tp[1], error=E.unstable_offset_commit)
                if require_stable and group is not None and group.unstable(tp)
                else _fetched(tp, committed.get(tp))
                for tp in wanted
            ),
        )

    # ------------------------------------------------------------------ deletion

    async def delete_offsets(
        self, shard: Shard, group: Group, partitions: Sequence[TopicPartition]
    ) -> ErrorCode:
        """Tombstones for the group's offsets of `partitions`, committed or held by an open
        transaction (as Kafka writes them), in one append; gone from memory once written."""
        records: Records = [
            (offset_commit_key(group.group_id, topic, partition), None)
            for topic, partition in partitions
        ]
        return await shard.append(
            records, partial(self._offsets_deleted, shard, group, tuple(partitions))
        )

    @staticmethod
    def _offsets_deleted(
        shard: Shard, group: Group, partitions: tuple[TopicPartition, ...], error: ErrorCode
    ) -> None:
        if error is not E.none:
            return
        for tp in partitions:
            group.offsets.pop(tp, None)
            for pending in group.txn_offsets.values():
                pending.pop(tp, None)
        shard.discard_if_unused(group)

    async def delete_groups(
        self, group_ids: Sequence[str], paced: Paced = at_once
    ) -> list[DeletedGroup]:
        """Deletes Empty groups: a GroupMetadata tombstone and one per committed offset, one
        append per partition. The group is Dead (refusing requests) while that is written, and
        from when it is checked: `paced` may hand the loop back between groups (a request
        names up to 10,000), and a group checked stays reserved for this deletion meanwhile."""
        errors: list[ErrorCode] = []
        batches: defaultdict[int, list[tuple[int, Group, int]]] = defaultdict(list)
        records: defaultdict[int, Records] = defaultdict(list)
        shards: dict[int, Shard] = {}
        async for group_id in paced(group_ids):
            shard = self.lookup(group_id, allow_empty=True)
            group = None if isinstance(shard, ErrorCode) else shard.groups.get(group_id)
            if isinstance(shard, ErrorCode):
                errors.append(shard)
            elif group is None or group.state is DEAD:
                errors.append(E.group_id_not_found)
            elif group.state is not EMPTY:
                errors.append(E.non_empty_group)
            else:
                batches[shard.index].append((len(errors), group, group.state_timestamp))
                errors.append(E.none)  # the write's outcome, below
                shards[shard.index] = shard
                group.transition(DEAD, now_ms(self._clock))
                committed = set(group.offsets) | set(group.pending_commits)
                records[shard.index] += [
                    (offset_commit_key(group.group_id, topic, partition), None)
                    for topic, partition in sorted(committed)
                ]
                records[shard.index].append((group_metadata_key(group.group_id), None))
        writes = [
            shards[index].append(
                records[index], partial(self._groups_deleted, shards[index], batch)
            )
            if shards[index].attached
            else _not_coordinator()  # its leadership went while groups were handed over
            for index, batch in batches.items()
        ]
        for batch, error in zip(batches.values(), await asyncio.gather(*writes), strict=True):
            for position, _, _ in batch:
                errors[position] = error
        return [
            DeletedGroup(group_id, error) for group_id, error in zip(group_ids, errors, strict=True)
        ]

    @staticmethod
    def _groups_deleted(
        shard: Shard, batch: list[tuple[int, Group, int]], error: ErrorCode
    ) -> None:
        for _, group, state_timestamp in batch:
            if error is E.none:
                shard.forget(group)
            else:
                group.transition(EMPTY, state_timestamp)

    # ------------------------------------------------------------------ retention

    async def _expire_periodically(self, shard: Shard) -> None:
        while True:
            await self._clock.sleep(self.config.offsets_retention_check_interval_ms / 1000)
            self._expire_offsets(shard)

    def _expire_offsets(self, shard: Shard) -> None:
        """Kafka's offset retention for groups without members: a consumer group's offsets go
        once it has been Empty for the retention period, a standalone group's each retention
        period after its commit. A group left with nothing is deleted (tombstone)."""
        now = now_ms(self._clock)
        retention = self.config.offsets_retention_minutes * 60_000
        records: Records = []
        expired: list[tuple[Group, dict[TopicPartition, OffsetCommitValue]]] = []
        dead: list[tuple[Group, int]] = []
        for group in shard.groups.values():
            if group.state is not EMPTY:
                continue
            gone = {
                tp: value
                for tp, value in group.offsets.items()
                if tp not in group.pending_commits and _is_expired(group, value, now, retention)
            }
            if gone:
                expired.append((group, gone))
                records += [
                    (offset_commit_key(group.group_id, topic, partition), None)
                    for topic, partition in gone
                ]
            if len(gone) == len(group.offsets) and not (
                group.pending_commits or group.members or group.pending_members
            ):
                dead.append((group, group.state_timestamp))
                group.transition(DEAD, now)
                records.append((group_metadata_key(group.group_id), None))
        if records:
            shard.append(records, partial(self._expiry_written, shard, expired, dead))

    @staticmethod
    def _expiry_written(
        shard: Shard,
        expired: list[tuple[Group, dict[TopicPartition, OffsetCommitValue]]],
        dead: list[tuple[Group, int]],
        error: ErrorCode,
    ) -> None:
        if error is not E.none:
            log.warning(
                "__consumer_offsets-%d: offset expiry not written: %s", shard.index, error.name
            )
            for group, state_timestamp in dead:
                group.transition(EMPTY, state_timestamp)
            return
        for group, gone in expired:
            for tp, value in gone.items():
                if group.offsets.get(tp) is value:  # not recommitted meanwhile
                    del group.offsets[tp]
        for group, _ in dead:
            shard.forget(group)


async def _not_coordinator() -> ErrorCode:
    return E.not_coordinator


def _records(group: Group, accepted: dict[TopicPartition, OffsetCommitValue]) -> Records:
    return [
        (offset_commit_key(group.group_id, topic, partition), offset_commit_value(value))
        for (topic, partition), value in accepted.items()
    ]


def _fetched(tp: TopicPartition, value: OffsetCommitValue | None) -> FetchedOffset:
    if value is None:
        return FetchedOffset(tp[0], tp[1])
    return FetchedOffset(tp[0], tp[1], value.offset, value.leader_epoch, value.metadata)


def _is_expired(group: Group, value: OffsetCommitValue, now: int, retention_ms: int) -> bool:
    if value.expire_timestamp >= 0:  # an old v1 record chose its own expiry
        return now >= value.expire_timestamp
    since = (
        group.state_timestamp
        if group.protocol_type is not None and group.state_timestamp >= 0
        else value.commit_timestamp
    )
    return now - since >= retention_ms
