"""The Broker the Kafka handlers are given (raftlog.api.broker.Broker): one object that answers
for this node, reading the cluster through ClusterView, changing topics through TopicAdmin and
group configs through GroupAdmin, and reaching local replicas and the group coordinator through
the Node."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Collection
from functools import partial
from typing import TYPE_CHECKING

from raftlog.api.values import (
    AclChange,
    BrokerInfo,
    ConfigEntry,
    Coordinator,
    LogDirInfo,
    ReplicaDirInfo,
    TopicInfo,
    TopicResult,
    TopicSpec,
)
from raftlog.broker.group_admin import GroupAdmin
from raftlog.broker.topic_admin import TopicAdmin
from raftlog.cluster.controller_quorum import QuorumState
from raftlog.common.errors import ErrorCode
from raftlog.config import group_config, topic_config
from raftlog.config.broker_settings import BROKER_DEFAULTS, SENSITIVE, TOPIC_SYNONYMS, broker_type
from raftlog.config.config_def import INT, STRING
from raftlog.controller import ControllerUnavailable
from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC
from raftlog.node.cluster_view import ClusterView
from raftlog.security.acl import AclBinding, AclBindingFilter
from raftlog.security.authorizer import Authorizer
from raftlog.security.listeners import Listener
from raftlog.security.users import UserAdmin
from raftlog.txn.coordinator import TOPIC as TXN_TOPIC
from raftlog.txn.coordinator import Held

if TYPE_CHECKING:
    import uuid

    from raftlog.groups.coordinator import GroupCoordinator
    from raftlog.node.node import Node
    from raftlog.partition.partition import Partition
    from raftlog.share.manager import ShareManager
    from raftlog.txn.coordinator import TxnCoordinator

MAX_PRODUCER_EPOCH = 32767
GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator's key types


class BrokerFacade:
    """One per Kafka listener: brokers and coordinators are named by that listener's
    addresses."""

    def __init__(self, node: Node, listener: str | None = None) -> None:
        self._node = node
        self.node_id = node.node_id
        self.view = ClusterView(node, listener)
        self.users = UserAdmin(node)
        self.admin = TopicAdmin(node, self.view)
        self.group_admin = GroupAdmin(node)
        self._creating: dict[str, asyncio.Future[TopicResult]] = {}

    @property
    def cluster_id(self) -> str:
        return self.view.cluster_id

    @property
    def authorizer(self) -> Authorizer | None:
        return self._node.authorizer

    @property
    def groups(self) -> GroupCoordinator:
        return self._node.groups

    @property
    def transactions(self) -> TxnCoordinator:
        return self._node.transactions

    @property
    def share(self) -> ShareManager:
        return self._node.share

    def controller_id(self) -> int:
        return self.view.controller_id()

    def live_brokers(self) -> list[BrokerInfo]:
        return self.view.live_brokers()

    def client_brokers(self) -> list[BrokerInfo]:
        return self.view.client_brokers()

    def topics(self) -> dict[str, TopicInfo]:
        return self.view.topics()

    def topic(self, name: str) -> TopicInfo | None:
        return self.view.topic(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.view.topic_by_id(topic_id)

    async def create_topics(
        self, specs: list[TopicSpec], validate_only: bool, timeout_ms: int
    ) -> list[TopicResult]:
        return await self.admin.create_topics(specs, validate_only, timeout_ms)

    async def delete_topics(self, names: list[str], timeout_ms: int) -> list[TopicResult]:
        return await self.admin.delete_topics(names, timeout_ms)

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[tuple[int, ...]] | None,
        validate_only: bool,
        timeout_ms: int,
    ) -> TopicResult:
        return await self.admin.create_partitions(
            name, count, assignments, validate_only, timeout_ms
        )

    async def alter_partition_reassignments(
        self, topics: list[tuple[str, list[tuple[int, tuple[int, ...] | None]]]], timeout_ms: int
    ) -> list[list[tuple[ErrorCode, str | None]]]:
        return await self.admin.alter_reassignments(topics, timeout_ms)

    def reassigning(self) -> dict[str, list[int]]:
        return self.view.reassigning()

    async def alter_topic_configs(
        self, name: str, changes: dict[str, str | None], incremental: bool, validate_only: bool
    ) -> TopicResult:
        return await self.admin.alter_topic_configs(name, changes, incremental, validate_only)

    async def alter_group_configs(
        self, group_id: str, changes: dict[str, str | None], incremental: bool, validate_only: bool
    ) -> TopicResult:
        return await self.group_admin.alter_group_configs(
            group_id, changes, incremental, validate_only
        )

    def group_configs(self, group_id: str) -> list[ConfigEntry]:
        return group_config.effective(
            self.group_admin.explicit(group_id), self._node.config.group_bounds()
        )

    def group_config(self, group_id: str) -> dict[str, str]:
        return group_config.values(
            self.group_admin.explicit(group_id), self._node.config.group_bounds()
        )

    def local_partition(self, topic: str, index: int) -> Partition | None:
        return self._node.partitions.get((topic, index))

    @property
    def fetch_max_bytes(self) -> int:
        return int(self._node.config.broker_setting("fetch.max.bytes"))

    @property
    def auto_create_topics(self) -> bool:
        return bool(self._node.config.broker_setting("auto.create.topics.enable"))

    async def create_acls(self, bindings: list[AclBinding]) -> AclChange:
        return await self._change_acls("update_acls_create", bindings)

    async def delete_acls(self, filters: list[AclBindingFilter]) -> AclChange:
        return await self._change_acls("update_acls_delete", filters)

    async def _change_acls(
        self, command: str, items: list[AclBinding] | list[AclBindingFilter]
    ) -> AclChange:
        """The controller's `command` over `items`; REQUEST_TIMED_OUT while it cannot commit."""
        try:
            change: AclChange = await self._node.controller.call(
                command, [_plain(x) for x in items]
            )
        except ControllerUnavailable as e:
            return AclChange(ErrorCode.request_timed_out, str(e))
        return change

    async def init_producer_id(
        self,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
    ) -> tuple[ErrorCode, int, int]:
        if transactional_id is not None:
            return await self._node.transactions.init_producer_id(
                transactional_id, transaction_timeout_ms, producer_id, producer_epoch
            )
        if producer_id >= 0 and 0 <= producer_epoch < MAX_PRODUCER_EPOCH:
            return ErrorCode.none, producer_id, producer_epoch + 1
        try:
            return ErrorCode.none, await self._node.producer_ids.allocate(), 0
        except ControllerUnavailable:
            return ErrorCode.coordinator_not_available, -1, -1

    async def find_coordinator(self, key: str, key_type: int) -> Coordinator:
        if key_type not in (GROUP_KEY, TRANSACTION_KEY):
            return Coordinator(ErrorCode.invalid_request, message=f"unknown key type {key_type}")
        index = self.coordinator_partition(key, key_type)
        if index is None:
            return Coordinator(ErrorCode.invalid_request, message="empty group or transactional id")
        return (await self.coordinators(key_type, (index,)))[index]

    def coordinator_partition(self, key: str, key_type: int) -> int | None:
        if not key:
            return None
        if key_type == GROUP_KEY:
            return self._node.groups.partition_for(key)
        if key_type == TRANSACTION_KEY:
            return self._node.transactions.partition_for(key)
        return None

    async def coordinators(
        self, key_type: int, partitions: Collection[int]
    ) -> dict[int, Coordinator]:
        name = OFFSETS_TOPIC if key_type == GROUP_KEY else TXN_TOPIC
        topic = self._node.controller.state.topics.get(name)
        if topic is None:
            result = await self._create_internal(name)
            topic = self._node.controller.state.topics.get(name)
            if topic is None:
                missing = Coordinator(ErrorCode.coordinator_not_available, message=result.message)
                return dict.fromkeys(partitions, missing)
        found = {}
        for index in partitions:  # at most the topic's partitions
            replicas = tuple(topic["partitions"][index])
            info = self.view.partition_info(name, topic["id"], index, replicas)
            address = self.view.address(info.leader) if info.leader >= 0 else None
            if address is None:
                found[index] = Coordinator(
                    ErrorCode.coordinator_not_available,
                    message=f"{name} partition {index} has no leader yet",
                )
            else:
                found[index] = Coordinator(ErrorCode.none, info.leader, *address)
        return found

    async def _create_internal(self, name: str) -> TopicResult:
        """Creates __consumer_offsets or __transaction_state (KIP-115), once for however many
        ask at the same time: one FindCoordinator of 10,000 keys before the topic existed
        asked the controller for it 10,000 times, and the nodes lost about a hundred leaderships."""
        creating = self._creating.get(name)
        if creating is None:
            creating = asyncio.ensure_future(self.admin.create_topic(TopicSpec(name), False, 5000))
            self._creating[name] = creating
            creating.add_done_callback(partial(self._created, name))
        # A caller that goes away (its connection closed) leaves the creation to the others.
        return await asyncio.shield(creating)

    def _created(self, name: str, creation: asyncio.Future[TopicResult]) -> None:
        del self._creating[name]
        if not creation.cancelled():
            creation.exception()  # seen, so not logged as unread when every caller went away

    async def verify_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str, index: int
    ) -> ErrorCode:
        return await self._node.verify_transaction(
            transactional_id, producer_id, epoch, topic, index
        )

    async def producer_held(
        self, producer_id: int, topic: str, index: int
    ) -> tuple[ErrorCode, Held | None]:
        return await self._node.producer_held(producer_id, topic, index)

    async def describe_quorum(self) -> QuorumState | None:
        return await self._node.quorum.describe()

    async def elect_preferred_leader(
        self, topic: str, index: int, timeout_ms: int
    ) -> tuple[ErrorCode, str | None]:
        return await self._node.preferred_leaders.elect(topic, index, timeout_ms)

    def log_dirs(self) -> list[LogDirInfo]:
        path = self._node.config.data_dir / "data"
        usage = shutil.disk_usage(path)
        replicas = tuple(
            ReplicaDirInfo(
                topic,
                index,
                sum(s.size for s in p.log.segments()),
                max(0, p.high_watermark - p.log_end_offset),
            )
            for (topic, index), p in sorted(self._node.partitions.items())
        )
        return [LogDirInfo(str(path), replicas, usage.total, usage.free)]

    def topic_configs(self, name: str) -> list[ConfigEntry] | None:
        topic = self._node.controller.state.topics.get(name)
        if topic is None:
            return None
        return topic_config.effective(
            topic["configs"], self._node.config.topic_defaults(), _BROKER_NAMES
        )

    def broker_configs(self, node_id: int) -> list[ConfigEntry] | None:
        if node_id not in self._node.controller.state.nodes and node_id != self._node.node_id:
            return None
        entries = [
            ConfigEntry(
                "broker.id",
                str(node_id),
                topic_config.STATIC_BROKER,
                read_only=True,
                config_type=INT,
            )
        ]
        given = dict(self._node.config.broker)
        if node_id == self._node.node_id:  # kafka_listen / advertised_kafka set them too
            given.setdefault("listeners", _endpoints(self._node.config.listeners, False))
            given.setdefault("advertised.listeners", _endpoints(self._node.config.listeners, True))
        for name, default in BROKER_DEFAULTS.items():
            synonyms = [(name, _text(default), topic_config.DEFAULT)]
            if name in given:
                synonyms.insert(0, (name, _text(given[name]), topic_config.STATIC_BROKER))
            _, text, source = synonyms[0]
            entries.append(
                ConfigEntry(
                    name,
                    text,
                    source,
                    read_only=True,
                    sensitive=name in SENSITIVE,
                    config_type=broker_type(name),
                    synonyms=tuple(synonyms),
                )
            )
        entries.append(self._rack_entry(node_id))
        return entries

    def _rack_entry(self, node_id: int) -> ConfigEntry:
        """The node's broker.rack: this node's from its config, another's as it registered."""
        if node_id == self._node.node_id:
            rack = self._node.config.rack
        else:
            rack = self._node.controller.state.nodes.get(node_id, {}).get("rack")
        source = topic_config.STATIC_BROKER if rack is not None else topic_config.DEFAULT
        return ConfigEntry(
            "broker.rack",
            rack,
            source,
            read_only=True,
            config_type=STRING,
            synonyms=(("broker.rack", rack, source),),
        )


# Topic setting -> the [broker] setting that stands in for it (its synonym in DescribeConfigs).
_BROKER_NAMES = {topic: broker for broker, topic in TOPIC_SYNONYMS.items()}


def _endpoints(listeners: list[Listener], advertised: bool) -> str:
    """The node's listeners as Kafka's `listeners` / `advertised.listeners` show them."""
    return ",".join(
        f"{x.name}://{x.advertised_host if advertised else x.host}:"
        f"{x.advertised_port if advertised else x.port}"
        for x in listeners
    )


def _text(value: object) -> str:
    """A [broker] value as Kafka's properties show it (booleans in lower case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _plain(entry: AclBinding | AclBindingFilter) -> tuple[int | str | None, ...]:
    """A binding or filter as the controller journals it: a plain tuple of ints and strings
    (a NamedTuple or an IntEnum would pickle as a reference to raftlog's classes)."""
    return tuple(int(v) if isinstance(v, int) else v for v in entry)
