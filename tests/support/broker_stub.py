"""A base for test fakes of raftlog.api.values.Broker: every member the Protocol has, each
refusing to be used, so a fake overrides only what its tests need and still is a whole
Broker. mypy checks this class against the Protocol, and each fake's overrides against this
class (the fakes' modules are in [tool.mypy] files; tests/unit/test_types.py runs it)."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import TYPE_CHECKING

from raftlog.api.broker import Broker
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
from raftlog.txn.coordinator import Held, TxnCoordinator

if TYPE_CHECKING:
    from raftlog.groups.coordinator import GroupCoordinator
    from raftlog.security.acl import AclBinding, AclBindingFilter
    from raftlog.security.authorizer import Authorizer
    from raftlog.security.users import UserAdmin
    from raftlog.share.manager import ShareManager


class BrokerStub:
    # Declared, not set: a fake sets the ones its tests read (as attributes or properties).
    node_id: int
    cluster_id: str
    groups: GroupCoordinator
    share: ShareManager
    users: UserAdmin
    auto_create_topics: bool
    fetch_max_bytes: int
    # Set: no authorizer, as a node without authorizer.class.name (every request allowed).
    authorizer: Authorizer | None = None

    def controller_id(self) -> int:
        raise NotImplementedError

    def live_brokers(self) -> list[BrokerInfo]:
        raise NotImplementedError

    def client_brokers(self) -> list[BrokerInfo]:
        raise NotImplementedError

    def topics(self) -> dict[str, TopicInfo]:
        raise NotImplementedError

    def topic(self, name: str) -> TopicInfo | None:
        raise NotImplementedError

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        raise NotImplementedError

    def local_partition(self, topic: str, index: int) -> Partition | None:
        raise NotImplementedError

    async def create_topics(
        self, specs: list[TopicSpec], validate_only: bool, timeout_ms: int
    ) -> list[TopicResult]:
        raise NotImplementedError

    async def delete_topics(self, names: list[str], timeout_ms: int) -> list[TopicResult]:
        raise NotImplementedError

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[tuple[int, ...]] | None,
        validate_only: bool,
        timeout_ms: int,
    ) -> TopicResult:
        raise NotImplementedError

    async def alter_partition_reassignments(
        self, topics: list[tuple[str, list[tuple[int, tuple[int, ...] | None]]]], timeout_ms: int
    ) -> list[list[tuple[ErrorCode, str | None]]]:
        raise NotImplementedError

    def reassigning(self) -> dict[str, list[int]]:
        raise NotImplementedError

    async def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
    ) -> tuple[ErrorCode, int, int]:
        raise NotImplementedError

    async def find_coordinator(self, key: str, key_type: int) -> Coordinator:
        raise NotImplementedError

    def coordinator_partition(self, key: str, key_type: int) -> int | None:
        raise NotImplementedError

    async def coordinators(
        self, key_type: int, partitions: Collection[int]
    ) -> dict[int, Coordinator]:
        raise NotImplementedError

    @property
    def transactions(self) -> TxnCoordinator:
        raise NotImplementedError

    async def verify_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str, index: int
    ) -> ErrorCode:
        raise NotImplementedError

    async def producer_held(
        self, producer_id: int, topic: str, index: int
    ) -> tuple[ErrorCode, Held | None]:
        raise NotImplementedError

    async def alter_topic_configs(
        self, name: str, changes: dict[str, str | None], incremental: bool, validate_only: bool
    ) -> TopicResult:
        raise NotImplementedError

    def log_dirs(self) -> list[LogDirInfo]:
        raise NotImplementedError

    async def describe_quorum(self) -> QuorumState | None:
        raise NotImplementedError

    async def elect_preferred_leader(
        self, topic: str, index: int, timeout_ms: int
    ) -> tuple[ErrorCode, str | None]:
        raise NotImplementedError

    def topic_configs(self, name: str) -> list[ConfigEntry] | None:
        raise NotImplementedError

    def broker_configs(self, node_id: int) -> list[ConfigEntry] | None:
        raise NotImplementedError

    def group_configs(self, group_id: str) -> list[ConfigEntry]:
        raise NotImplementedError

    def group_config(self, group_id: str) -> dict[str, str]:
        raise NotImplementedError

    async def alter_group_configs(
        self, group_id: str, changes: dict[str, str | None], incremental: bool, validate_only: bool
    ) -> TopicResult:
        raise NotImplementedError

    async def create_acls(self, bindings: list[AclBinding]) -> AclChange:
        raise NotImplementedError

    async def delete_acls(self, filters: list[AclBindingFilter]) -> AclChange:
        raise NotImplementedError


def _is_a_broker(stub: BrokerStub) -> Broker:
    return stub  # mypy: the stub has every member of the Protocol, with its signature
