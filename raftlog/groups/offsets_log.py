"""What a group coordinator needs from the `__consumer_offsets` partition it coordinates.

The node implements this over a partition replica this node leads; the coordinator never
touches Raft or storage itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator, Sequence
from typing import Protocol

TOPIC = "__consumer_offsets"


class OffsetsLog(Protocol):
    index: int  # the __consumer_offsets partition

    @property
    def leader_epoch(self) -> int: ...

    def append(self, records: Sequence[tuple[bytes, bytes | None]]) -> Awaitable[int]:
        """Writes key/value records (None value = tombstone) as one batch, in call order, and
        resolves to the base offset once the batch is committed in Raft. Fails with
        KafkaError(NOT_COORDINATOR) if this node stops leading the partition first, or
        KafkaError(REQUEST_TIMED_OUT) if the commit takes too long."""

    def read_committed(self) -> Iterator[tuple[int, bytes, bytes | None]]:
        """(offset, key, value) of every record from the log start up to the high watermark,
        in offset order, for rebuilding the groups when this node becomes coordinator."""
