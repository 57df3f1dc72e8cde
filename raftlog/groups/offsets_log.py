"""What a group coordinator needs from the `__consumer_offsets` partition it coordinates.

The node implements this over a partition replica this node leads; the coordinator never
touches Raft or storage itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator, Sequence
from typing import NamedTuple, Protocol

TOPIC = "__consumer_offsets"


class LogRecord(NamedTuple):
    """A record of the partition, or (`marker` set) a transaction's commit (True) or abort
    (False) marker for `producer_id`, with no key or value."""

    offset: int
    key: bytes
    value: bytes | None
    producer_id: int = -1  # a transactional record's or marker's producer; -1 otherwise
    marker: bool | None = None


class OffsetsLog(Protocol):
    index: int  # the __consumer_offsets partition

    @property
    def leader_epoch(self) -> int: ...

    def append(
        self,
        records: Sequence[tuple[bytes, bytes | None]],
        producer: tuple[int, int] | None = None,
    ) -> Awaitable[int]:
        """Writes key/value records (None value = tombstone) as one batch, in call order, and
        resolves to the base offset once the batch is committed in Raft; `producer` (id,
        epoch) makes it a transactional batch of that producer's transaction. Fails with
        KafkaError(NOT_COORDINATOR) if this node stops leading the partition first, or
        KafkaError(REQUEST_TIMED_OUT) if the commit takes too long."""

    def read_committed(self) -> Iterator[LogRecord]:
        """Every record and transaction marker from the log start up to the high watermark,
        in offset order, for rebuilding the state when this node becomes coordinator."""
