"""What the Kafka handlers and the node exchange: topic, partition, config and produce
results as plain values, and a partition as the handlers see it (`Partition`). The facade
itself is raftlog/api/broker.py's `Broker`."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol, overload

from epoch import NO_EPOCH
from raftlog.api.produce_result import ProduceResult as ProduceResult
from raftlog.common.errors import ErrorCode
from raftlog.security.acl import AclBinding
from raftlog.share.store import ShareUpdate, StoredShare


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """Cluster-wide view of one partition, as Metadata reports it."""

    topic: str
    index: int
    replicas: tuple[int, ...]
    leader: int = -1  # -1 while no leader is known
    leader_epoch: int = NO_EPOCH  # while unknown; never goes down
    isr: tuple[int, ...] = ()
    offline: tuple[int, ...] = ()
    # While the partition moves (raftlog/controller/moves.py): `replicas` is its full set,
    # these its replicas being added and removed, as Kafka's PartitionRegistration has them.
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()


class LazyPartitions(Sequence[PartitionInfo]):
    """A topic's partitions, each looked up when read, and again at every read: a TopicInfo
    is kept from one request to the next (ClusterView), who leads its partitions is not. A
    produce to one partition of a thousand-partition topic resolves the topic; building all
    thousand views per request took 40 % of a node's loop under spread produce. `look_up`
    gives the partitions of a range of indexes, in order, asking once for the whole range
    which nodes are up (an iteration or a slice is one range)."""

    __slots__ = ("_look_up", "_count")

    def __init__(self, look_up: Callable[[range], Iterator[PartitionInfo]], count: int) -> None:
        self._look_up = look_up
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[PartitionInfo]:
        return self._look_up(range(self._count))

    @overload
    def __getitem__(self, index: int) -> PartitionInfo: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[PartitionInfo]: ...

    def __getitem__(self, index: int | slice) -> PartitionInfo | Sequence[PartitionInfo]:
        if isinstance(index, slice):
            return tuple(self._look_up(range(*index.indices(self._count))))
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        return next(self._look_up(range(index, index + 1)))


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: Sequence[PartitionInfo]
    configs: dict[str, str] = field(default_factory=dict)  # explicitly set topic configs only
    internal: bool = False


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A CreateTopics entry after defaults are resolved by the handler (-1 means broker default)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: dict[int, tuple[int, ...]] | None = None
    configs: dict[str, str | None] = field(default_factory=dict)  # CreateTopics allows nulls


@dataclass(frozen=True, slots=True)
class TopicResult:
    """The outcome of a change to one topic, or to one group's configs (alter_group_configs)."""

    name: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    topic: TopicInfo | None = None


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int  # Kafka ConfigSource: 1 DYNAMIC_TOPIC, 4 STATIC_BROKER, 5 DEFAULT, 8 GROUP
    read_only: bool = False
    sensitive: bool = False
    config_type: int = 0  # Kafka ConfigType (DescribeConfigs v3+): 1 BOOLEAN 2 STRING 3 INT 4 SHORT 5 LONG 6 DOUBLE 7 LIST
    documentation: str | None = None
    # DescribeConfigs' synonyms, (name, value, source) in Kafka's order of precedence, the
    # entry's own first; empty: the entry is its only synonym.
    synonyms: tuple[tuple[str, str | None, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Coordinator:
    """FindCoordinator's answer for one key."""

    error: ErrorCode
    node_id: int = -1
    host: str = ""
    port: int = -1
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ReplicaDirInfo:
    """One partition replica in a log directory (DescribeLogDirs)."""

    topic: str
    partition: int
    size: int  # bytes of segment files
    offset_lag: int  # how far this replica's log end is behind the high watermark it knows


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    path: str
    replicas: tuple[ReplicaDirInfo, ...]
    total_bytes: int = -1  # of the file system, -1 if unknown
    usable_bytes: int = -1


@dataclass(frozen=True, slots=True)
class AclChange:
    """What the controller made of a CreateAcls or DeleteAcls request."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    deleted: tuple[tuple[AclBinding, ...], ...] = ()  # DeleteAcls: each filter's matches


# ListOffsets' special timestamps (Kafka's ListOffsetsRequest): not times but questions.
LATEST_TIMESTAMP = -1  # the high watermark
EARLIEST_TIMESTAMP = -2  # the log start offset
MAX_TIMESTAMP = -3  # the record with the largest timestamp (KIP-734)


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    timestamp: int
    offset: int
    leader_epoch: int


class AbortedTransaction(Protocol):
    @property
    def producer_id(self) -> int: ...

    @property
    def first_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...


class ActiveProducer(Protocol):
    """A producer of a partition as DescribeProducers reports it."""

    @property
    def producer_id(self) -> int: ...

    @property
    def producer_epoch(self) -> int: ...

    @property
    def last_sequence(self) -> int: ...

    @property
    def txn_start_offset(self) -> int: ...

    @property
    def coordinator_epoch(self) -> int: ...


class Partition(Protocol):
    """A replica hosted on this node. Every method that serves clients must be called on the
    leader; they raise KafkaError(NOT_LEADER_OR_FOLLOWER) otherwise."""

    topic: str
    index: int

    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_epoch(self) -> int:
        """The current Raft term; the epoch clients are fenced against."""

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int:
        """The high watermark, or below it the first offset of the oldest open transaction."""

    def aborted_transactions(self, start: int, end: int) -> Sequence[AbortedTransaction]:
        """Aborted transactions that may have records in [start, end) (read_committed Fetch)."""

    def active_producers(self) -> Sequence[ActiveProducer]:
        """The producers this replica's producer state knows, those with a transaction open
        first; bounded (raftlog.partition.producer_state.MAX_PRODUCERS). Read-only."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def produce(
        self, records: bytes, acks: int, timeout_ms: int, transactional: bool = False
    ) -> Awaitable[ProduceResult]:
        """Validates the batches in `records` (CRC, magic, sizes) and proposes them *before
        returning*, so calls made in request order reach the log in request order. The awaitable
        resolves after the local append (acks=1) or the Raft commit (acks=-1); for acks=0 it
        resolves at once. Errors come back as ProduceResult.error, never as exceptions.
        `transactional`: the coordinator confirmed that the producer's transaction includes
        this partition; transactional batches are refused (INVALID_TXN_STATE) otherwise."""

    def write_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> Awaitable[ProduceResult]:
        """Appends a transaction's commit or abort marker; resolves once it is committed."""

    def transaction_start(self, producer_id: int) -> int | None:
        """The first offset of the producer's transaction open here, None with none."""

    def delete_records(self, offset: int, timeout_ms: int) -> Awaitable[tuple[ErrorCode, int]]:
        """DeleteRecords: moves the log start offset to `offset` (-1: the high watermark)
        through the partition's Raft log; resolves to (error, low watermark) once committed,
        or REQUEST_TIMED_OUT after `timeout_ms`. Errors come back, never as exceptions."""

    def read(self, offset: int, max_bytes: int, min_one: bool, committed: bool = False) -> bytes:
        """Whole batches from `offset` up to the high watermark (`committed`: the last stable
        offset), at most max_bytes unless min_one and the first batch is larger. Raises
        KafkaError(OFFSET_OUT_OF_RANGE)."""

    def sent(self, size: int, records: int) -> None:
        """Counts what an answer hands a consumer (bytes and records out, a metric)."""

    async def wait_for_data(self, offset: int, timeout: float, committed: bool = False) -> None:
        """Returns when the high watermark (`committed`: the last stable offset) passes
        `offset`, leadership is lost or timeout."""

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch answer (epoch, end offset) as DESIGN.md section 3."""

    def epoch_for_offset(self, offset: int) -> int:
        """Leader epoch of the batch holding `offset` (-1 if unknown)."""

    async def offset_for_timestamp(
        self, timestamp: int, committed: bool = False
    ) -> TimestampOffset | None:
        """First offset whose record timestamp >= timestamp; None when there is none. Records
        are read off the event loop. Also answers the special timestamps above. `committed`
        (read_committed) looks only below the last stable offset."""

    @property
    def term_committed(self) -> bool:
        """This leader has committed an entry of its own term, so its log (and the share
        state applied from it) holds everything any earlier leader committed."""

    def share_state(self, group_id: str) -> StoredShare | None:
        """The group's committed share state of this partition (raftlog/share/store.py)."""

    def write_share(self, update: ShareUpdate) -> Awaitable[ErrorCode]:
        """Replicates a share-state update; resolves to NONE once it is committed."""
