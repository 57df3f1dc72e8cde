"""Idempotent producers (KIP-98, without transactions): per-partition producer sequences.

A producer with enable.idempotence numbers its batches per partition; a retry after a lost
answer resends the same numbers, and the leader must not write it twice. Only the leader
judges a batch, when its proposal is appended; followers get the leader's log with rejected
batches already left out and simply record what they append, so replicas never disagree
over a verdict. The state is rebuilt at start from a snapshot plus the batches after it.
"""

from __future__ import annotations

import os
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path

import msgpack

from raftlog.errors import ErrorCode
from raftlog.storage.batch import BatchHeader

# Kafka keeps the last five batches of each producer for duplicate detection; a producer
# never has more than five requests in flight when idempotent.
BATCHES_KEPT = 5
MAX_PRODUCERS = 10_000
SEQUENCE_WRAP = 2**31


@dataclass(slots=True)
class _Producer:
    epoch: int
    # (first sequence, last sequence, base offset) of the newest batches
    batches: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to answer for a batch that was not appended."""

    error: ErrorCode
    base_offset: int = -1  # for a duplicate: where the original landed
    message: str | None = None


class ProducerState:
    def __init__(self) -> None:
        # least recently written first, so the state stays bounded whatever the traffic
        self._producers: OrderedDict[int, _Producer] = OrderedDict()

    def __len__(self) -> int:
        return len(self._producers)

    def check(self, header: BatchHeader) -> Verdict | None:
        """None if the batch may be appended, else why not (a duplicate is not an error)."""
        pid = header.producer_id
        if pid < 0:
            return None
        known = self._producers.get(pid)
        if known is None:
            return None  # a producer we never saw, or forgot: accept, as Kafka does
        epoch, first = header.producer_epoch, header.base_sequence
        last = (first + header.last_offset_delta) % SEQUENCE_WRAP
        if epoch < known.epoch:
            return Verdict(
                ErrorCode.invalid_producer_epoch,
                message=f"producer {pid} epoch {epoch} is older than {known.epoch}",
            )
        if epoch > known.epoch:
            if first != 0:
                return Verdict(
                    ErrorCode.out_of_order_sequence_number,
                    message=f"producer {pid} new epoch {epoch} must start at sequence 0",
                )
            return None
        for seen_first, seen_last, base_offset in known.batches:
            if (seen_first, seen_last) == (first, last):
                return Verdict(ErrorCode.none, base_offset=base_offset)
        expected = (known.batches[-1][1] + 1) % SEQUENCE_WRAP if known.batches else first
        if first != expected:
            return Verdict(
                ErrorCode.out_of_order_sequence_number,
                message=f"producer {pid} sent sequence {first}, expected {expected}",
            )
        return None

    def record(self, header: BatchHeader, base_offset: int) -> None:
        """Notes a batch that went into the log (on every replica)."""
        pid = header.producer_id
        if pid < 0:
            return
        entry = self._producers.pop(pid, None)
        if entry is None or header.producer_epoch != entry.epoch:
            entry = _Producer(header.producer_epoch)
        last = (header.base_sequence + header.last_offset_delta) % SEQUENCE_WRAP
        entry.batches.append((header.base_sequence, last, base_offset))
        self._producers[pid] = entry
        while len(self._producers) > MAX_PRODUCERS:
            self._producers.popitem(last=False)

    # --- persistence ---------------------------------------------------------------------------

    def save(self, path: Path, offset: int) -> None:
        """The state as of `offset` (every batch before it recorded); atomic replace."""
        payload = msgpack.packb(
            [offset, [[pid, p.epoch, list(p.batches)] for pid, p in self._producers.items()]]
        )
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> tuple[ProducerState, int]:
        """The saved state and the offset it is valid at; an empty state at 0 if none."""
        state = cls()
        if not path.exists():
            return state, 0
        offset, producers = msgpack.unpackb(path.read_bytes())
        for pid, epoch, batches in producers:
            entry = _Producer(epoch)
            entry.batches.extend(tuple(b) for b in batches)
            state._producers[pid] = entry
        return state, offset
