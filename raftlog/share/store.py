"""The durable half of share-partition state: what every replica of a partition knows of each
share group reading it, applied from the partition's own Raft log.

Kafka keeps this in `__share_group_state`, written by the partition leader through a share
coordinator that may sit on another broker. raftlog keeps it alongside the partition's log
instead: a leader's update is an inline Raft command (`SHARE` + msgpack) in the partition's
own group, committed by the same majority as its records, and applied by every replica once
committed. A new leader therefore already holds the state when it takes over; no second
writer, no cross-node call, no second log to keep in step. The fields are Kafka's ShareUpdate
ones: the start offset (SPSO) and state batches (first, last, state, delivery count).

Only committed commands are applied, so a truncation never undoes anything here. The window
of inline commands is cut at compaction, so the store is saved first (`share-state`, with the
Raft index it is valid at) and a restart replays only the commands after that index; a
snapshot sent to a follower carries the store the same way (`dump`/`adopt`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

SHARE = 0x53  # b"S": a Raft command carrying share-group state updates
SHARE_PREFIX = bytes([SHARE])
# Record states as Kafka numbers them (partition_state.RecordState); 2 and 4 are done.
_DONE = frozenset((2, 4))

Run = tuple[int, int, int, int]  # first offset, last offset, state, delivery count


def to_runs(records: Iterable[tuple[int, int, int]]) -> list[Run]:
    """Ascending (offset, state, count) -> runs of contiguous offsets with one (state,
    count): the state batches of an update and of a stored state."""
    runs: list[Run] = []
    for offset, state, count in records:
        if runs:
            first, last, run_state, run_count = runs[-1]
            if last == offset - 1 and run_state == state and run_count == count:
                runs[-1] = (first, offset, state, count)
                continue
        runs.append((offset, offset, state, count))
    return runs


@dataclass(frozen=True, slots=True)
class ShareUpdate:
    """One group's change to one partition: its new start offset and the offsets whose state
    changed (ACQUIRED is never written: a lock does not outlive its leader). `deleted` drops
    the group's state (DeleteGroups)."""

    group_id: str
    start_offset: int
    runs: tuple[Run, ...] = ()
    deleted: bool = False
    incarnation: int = 0  # how often the group was deleted before (controller)


@dataclass(slots=True)
class StoredShare:
    """One group's persisted state of a partition: SPSO and the offsets past it with a state
    other than 'never delivered' (AVAILABLE, count 0)."""

    start_offset: int
    records: dict[int, tuple[int, int]] = field(default_factory=dict)  # offset -> state, count
    incarnation: int = 0

    def runs(self) -> list[Run]:
        return to_runs((o, *self.records[o]) for o in sorted(self.records))

    def apply(self, update: ShareUpdate) -> None:
        """A later incarnation (the group was deleted and used again) starts over; an earlier
        one is a deposed leader's late word and changes nothing."""
        if update.incarnation < self.incarnation:
            return
        if update.incarnation > self.incarnation:
            self.incarnation, self.start_offset = update.incarnation, update.start_offset
            self.records.clear()
        start = max(self.start_offset, update.start_offset)
        records = self.records
        if start > self.start_offset:
            for offset in [o for o in records if o < start]:
                del records[offset]
        for first, last, state, count in update.runs:
            for offset in range(max(first, start), last + 1):
                records[offset] = (state, count)
        while (record := records.get(start)) is not None and record[0] in _DONE:
            del records[start]
            start += 1
        self.start_offset = start


def encode(updates: Iterable[ShareUpdate]) -> bytes:
    packed: bytes = msgpack.packb(
        [
            [u.group_id, u.start_offset, [list(r) for r in u.runs], u.deleted, u.incarnation]
            for u in updates
        ]
    )
    return SHARE_PREFIX + packed


def decode(command: bytes | memoryview) -> list[ShareUpdate]:
    fields = msgpack.unpackb(bytes(command[1:]))
    return [
        ShareUpdate(group, start, tuple((a, b, c, d) for a, b, c, d in runs), deleted, incarnation)
        for group, start, runs, deleted, incarnation in fields
    ]


class ShareStore:
    """Every share group's persisted state of one partition replica, as of Raft index
    `applied`."""

    def __init__(self) -> None:
        self.applied = 0
        self._groups: dict[str, StoredShare] = {}

    def __len__(self) -> int:
        return len(self._groups)

    def __iter__(self) -> Iterator[str]:
        return iter(self._groups)

    def get(self, group_id: str) -> StoredShare | None:
        return self._groups.get(group_id)

    def apply(self, idx: int, command: bytes | memoryview) -> None:
        """A committed SHARE command at Raft index `idx`; one already applied is skipped (a
        store saved or adopted past it)."""
        if idx <= self.applied:
            return
        self.applied = idx
        for update in decode(command):
            if update.deleted:
                self._groups.pop(update.group_id, None)
                continue
            stored = self._groups.get(update.group_id)
            if stored is None:
                stored = self._groups[update.group_id] = StoredShare(
                    update.start_offset, incarnation=update.incarnation
                )
            stored.apply(update)

    # --- persistence -----------------------------------------------------------------------

    def dump(self) -> list[Any]:
        return [
            self.applied,
            [
                [g, s.start_offset, [list(r) for r in s.runs()], s.incarnation]
                for g, s in self._groups.items()
            ],
        ]

    @classmethod
    def undump(cls, data: list[Any]) -> ShareStore:
        store = cls()
        store.applied, groups = data
        for group_id, start, runs, incarnation in groups:
            store._groups[group_id] = stored = StoredShare(start, incarnation=incarnation)
            for first, last, state, count in runs:
                for offset in range(first, last + 1):
                    stored.records[offset] = (state, count)
        return store

    def adopt(self, other: ShareStore) -> bool:
        """A snapshot's store replaces this one if it is newer (a follower installing a
        snapshot whose window no longer holds the commands it lacks)."""
        if other.applied <= self.applied:
            return False
        self.applied, self._groups = other.applied, other._groups
        return True

    def save(self, path: Path) -> None:
        """Atomic replace, synced: the window that held the commands is cut right after."""
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(msgpack.packb(self.dump()))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> ShareStore:
        if not path.exists():
            return cls()
        return cls.undump(msgpack.unpackb(path.read_bytes()))
