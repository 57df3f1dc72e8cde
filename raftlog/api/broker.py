"""The facade Kafka handlers call. Handlers never reach into Raft or storage directly,
so the protocol layer stays testable against any node and the core can change shape."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import Protocol

from raftlog.api.values import (
    AclChange,
    BrokerInfo,
    ConfigEntry,
    Coordinator,
    LogDirInfo,
    Partition,
    TopicInfo,
    TopicResult,
    TopicSpec,
)
from raftlog.cluster.controller_quorum import QuorumState
from raftlog.common.errors import ErrorCode
from raftlog.groups.coordinator import GroupCoordinator
from raftlog.security.acl import AclBinding, AclBindingFilter
from raftlog.security.authorizer import Authorizer
from raftlog.security.users import UserAdmin
from raftlog.share.manager import ShareManager
from raftlog.txn.coordinator import Held, TxnCoordinator


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

    async def alter_partition_reassignments(
        self, topics: list[tuple[str, list[tuple[int, tuple[int, ...] | None]]]], timeout_ms: int
    ) -> list[list[tuple[ErrorCode, str | None]]]:
        """Starts, replaces (a replica list) or cancels (None) the partitions' moves, in one
        controller command: each entry's error and message, in order (KIP-455)."""

    def reassigning(self) -> dict[str, list[int]]:
        """The topics with partitions moving, and those partitions (ListPartitionReassignments
        of every topic); each one's replicas are in topic(name)."""

    async def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for an idempotent producer, whose known id gets its
        epoch bumped (KIP-360), or from the transaction coordinator for a transactional id."""

    async def find_coordinator(self, key: str, key_type: int) -> Coordinator:
        """The node coordinating `key` (key type 0: group; 1: transactional id). Creates
        __consumer_offsets or __transaction_state when missing and enough nodes are live
        (KIP-115)."""

    def coordinator_partition(self, key: str, key_type: int) -> int | None:
        """The partition of the key type's topic that coordinates `key` (Kafka's placement);
        None for a key find_coordinator refuses (empty, or an unknown key type). Reads only
        settings fixed at start, so a thread may ask: a request's many keys are placed there."""

    async def coordinators(
        self, key_type: int, partitions: Collection[int]
    ) -> dict[int, Coordinator]:
        """The coordinator of each of those partitions of the key type's topic (its leader),
        that topic created when missing as for find_coordinator: one request's many keys cost
        one look per partition, and one creation."""

    @property
    def transactions(self) -> TxnCoordinator:
        """This node's transaction coordinator (the ids it coordinates)."""

    async def verify_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str, index: int
    ) -> ErrorCode:
        """NONE if the producer's ongoing transaction includes the partition (KIP-890), as its
        coordinator says, wherever it is."""

    async def producer_held(
        self, producer_id: int, topic: str, index: int
    ) -> tuple[ErrorCode, Held | None]:
        """What the transaction coordinators hold of a producer id: its epoch, and whether
        its transaction on the partition is theirs to end (None: no transactional id uses
        it); COORDINATOR_NOT_AVAILABLE when they cannot say now."""

    async def alter_topic_configs(
        self, name: str, changes: dict[str, str | None], incremental: bool, validate_only: bool
    ) -> TopicResult:
        """AlterConfigs (incremental=False: `changes` replaces every explicit config) or
        IncrementalAlterConfigs (only `changes`; a None value deletes the setting)."""

    def log_dirs(self) -> list[LogDirInfo]: ...

    async def describe_quorum(self) -> QuorumState | None:
        """The controller's Raft quorum as its leader sees it; None while none answers."""

    async def elect_preferred_leader(
        self, topic: str, index: int, timeout_ms: int
    ) -> tuple[ErrorCode, str | None]:
        """ElectLeaders PREFERRED for one partition: its leadership handed to its first
        replica (NONE once that leads), or why not (ELECTION_NOT_NEEDED, ...)."""

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
