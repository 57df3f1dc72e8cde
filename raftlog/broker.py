"""The facade Kafka handlers call. Handlers never reach into Raft or storage directly,
so the protocol layer stays testable against any node and the core can change shape."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, overload

from epoch import NO_EPOCH
from raftlog.errors import ErrorCode

if TYPE_CHECKING:
    from raftlog.groups.coordinator import GroupCoordinator
    from raftlog.security.acl import AclBinding, AclBindingFilter, Authorizer
    from raftlog.security.users import UserAdmin
    from raftlog.share.manager import ShareManager
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


class LazyPartitions(Sequence[PartitionInfo]):
    """A topic's partitions, each looked up when first read. A produce to one partition of a
    thousand-partition topic resolves the topic; building all thousand views per request
    took 40 % of a node's loop under spread produce."""

    __slots__ = ("_look_up", "_count", "_seen")

    def __init__(self, look_up: Callable[[int], PartitionInfo], count: int) -> None:
        self._look_up = look_up
        self._count = count
        self._seen: dict[int, PartitionInfo] = {}

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> PartitionInfo: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[PartitionInfo]: ...

    def __getitem__(self, index: int | slice) -> PartitionInfo | Sequence[PartitionInfo]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self._count)))
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        info = self._seen.get(index)
        if info is None:
            info = self._seen[index] = self._look_up(index)
        return info


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


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error: ErrorCode = ErrorCode.none
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None


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
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def produce(self, records: bytes, acks: int, timeout_ms: int) -> Awaitable[ProduceResult]:
        """Validates the batches in `records` (CRC, magic, sizes) and proposes them *before
        returning*, so calls made in request order reach the log in request order. The awaitable
        resolves after the local append (acks=1) or the Raft commit (acks=-1); for acks=0 it
        resolves at once. Errors come back as ProduceResult.error, never as exceptions."""

    def read(self, offset: int, max_bytes: int, min_one: bool) -> bytes:
        """Whole batches from `offset` up to the high watermark, at most max_bytes unless
        min_one and the first batch is larger. Raises KafkaError(OFFSET_OUT_OF_RANGE)."""

    def sent(self, size: int, records: int) -> None:
        """Counts what an answer hands a consumer (bytes and records out, a metric)."""

    async def wait_for_data(self, offset: int, timeout: float) -> None:
        """Returns when the high watermark passes `offset`, leadership is lost or timeout."""

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch answer (epoch, end offset) as DESIGN.md section 3."""

    def epoch_for_offset(self, offset: int) -> int:
        """Leader epoch of the batch holding `offset` (-1 if unknown)."""

    async def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """First offset whose record timestamp >= timestamp; None when there is none. Records
        are read off the event loop. Also answers the special timestamps above."""

    @property
    def term_committed(self) -> bool:
        """This leader has committed an entry of its own term, so its log (and the share
        state applied from it) holds everything any earlier leader committed."""

    def share_state(self, group_id: str) -> StoredShare | None:
        """The group's committed share state of this partition (raftlog/share/store.py)."""

    def write_share(self, update: ShareUpdate) -> Awaitable[ErrorCode]:
        """Replicates a share-state update; resolves to NONE once it is committed."""


class Broker(Protocol):
    # Read-only to handlers: a plain attribute of the node satisfies them as well.
    @property
    def node_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def groups(self) -> GroupCoordinator: ...

    @property
    def share(self) -> ShareManager:
        """Share groups' partition states on this node's leaders, and the share sessions."""
        ...

    @property
    def users(self) -> UserAdmin:
        """SCRAM credentials, for SASL and the user APIs."""
        ...

    def controller_id(self) -> int:
        """Node id of the controller Raft leader, -1 if none."""

    def live_brokers(self) -> list[BrokerInfo]: ...

    def client_brokers(self) -> list[BrokerInfo]:
        """The brokers Metadata and DescribeCluster name to clients."""

    def topics(self) -> dict[str, TopicInfo]: ...

    def topic(self, name: str) -> TopicInfo | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...

    def local_partition(self, topic: str, index: int) -> Partition | None:
        """The replica hosted on this node, None if this node hosts none."""

    async def create_topics(
        self, specs: list[TopicSpec], validate_only: bool, timeout_ms: int
    ) -> list[TopicResult]: ...

    async def delete_topics(self, names: list[str], timeout_ms: int) -> list[TopicResult]: ...

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[tuple[int, ...]] | None,
        validate_only: bool,
        timeout_ms: int,
    ) -> TopicResult: ...

    async def init_producer_id(
        self, transactional_id: str | None, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for an idempotent producer; a known id gets its epoch
        bumped (KIP-360). Transactions are not supported."""

    async def find_coordinator(self, key: str, key_type: int) -> Coordinator:
        """The node coordinating `key` (key type 0: group; 1, transactions, is not served).
        Creates __consumer_offsets when it is missing and enough nodes are live (KIP-115)."""

    async def alter_topic_configs(
        self, name: str, changes: dict[str, str | None], incremental: bool, validate_only: bool
    ) -> TopicResult:
        """AlterConfigs (incremental=False: `changes` replaces every explicit config) or
        IncrementalAlterConfigs (only `changes`; a None value deletes the setting)."""

    def log_dirs(self) -> list[LogDirInfo]: ...

    def topic_configs(self, name: str) -> list[ConfigEntry] | None:
        """Every topic config with its effective value and source; None if no such topic."""

    def broker_configs(self, node_id: int) -> list[ConfigEntry] | None:
        """None if node_id is not a known broker."""

    def group_configs(self, group_id: str) -> list[ConfigEntry]:
        """Every group config with its effective value and source. Always answers: as in
        Kafka, a group's configs are kept apart from the group, which need not exist."""

    def group_config(self, group_id: str) -> dict[str, str]:
        """The effective value of every group config (the group's own, else the default),
        for the code that runs the group."""

    async def alter_group_configs(
        self, group_id: str, changes: dict[str, str | None], incremental: bool, validate_only: bool
    ) -> TopicResult:
        """As alter_topic_configs, for a group (the result is named after the group)."""

    @property
    def auto_create_topics(self) -> bool: ...

    @property
    def fetch_max_bytes(self) -> int:
        """fetch.max.bytes: the most one Fetch response carries, whatever the client asks."""

    @property
    def authorizer(self) -> Authorizer | None:
        """Judges requests by the cluster's ACLs (handlers ask it through kafka_api.authz);
        None while authorizer.class.name is empty, and then every request is allowed."""

    async def create_acls(self, bindings: list[AclBinding]) -> AclChange:
        """Stores valid bindings through the controller (CreateAcls): all of them, or none and
        one error for all (the cluster's bound on ACLs, checked where the controller applies
        the command)."""

    async def delete_acls(self, filters: list[AclBindingFilter]) -> AclChange:
        """Deletes what the filters match through the controller (DeleteAcls), or nothing and
        one error for every filter (more matches than one request may delete)."""
