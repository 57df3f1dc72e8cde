"""What this node can tell of the cluster: its brokers, topics and partition leaders, read
from the controller's replicated state and the leadership directory. Metadata, the topic
administration and the admin listener all read it; nothing here changes the cluster."""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from raftlog.api.values import BrokerInfo, LazyPartitions, PartitionInfo, TopicInfo
from raftlog.controller.moves import adding_replicas, moves_of, removing_replicas

if TYPE_CHECKING:
    from raftlog.node.node import Node


class ClusterView:
    """`listener`: the Kafka listener whose advertised addresses this view names brokers by;
    a broker without that listener is left out, as Kafka leaves it out of Metadata."""

    def __init__(self, node: Node, listener: str | None = None) -> None:
        self._node = node
        self._listener = listener
        # Each topic's TopicInfo, built once (a frozen dataclass's construction was most of
        # resolving a produce request's topic) and kept while the controller's topics are the
        # same dict at the same topics_version. Who leads is read afresh (LazyPartitions).
        self._infos: dict[str, TopicInfo] = {}
        self._infos_of: tuple[dict[str, dict[str, Any]], int] | None = None

    @property
    def listener(self) -> str:
        """(Read when a broker is named, so a view over a partial node, as tests build, needs
        no config.)"""
        return self._listener or self._node.config.listeners[0].name

    @property
    def cluster_id(self) -> str:
        return self._node.controller.state.cluster_id

    def controller_id(self) -> int:
        return self._node.controller.leader_id

    def registered_nodes(self) -> dict[int, dict[str, Any]]:
        return dict(self._node.controller.state.nodes)

    def live_brokers(self) -> list[BrokerInfo]:
        return self._brokers(self._node.leadership.alive)

    def client_brokers(self) -> list[BrokerInfo]:
        if self._node.leadership.in_majority(self._node.controller.state.nodes):
            return self.live_brokers()
        # Cut off from its majority: it names the others and not itself, so a client that
        # asks only the brokers it is connected to drops this one and asks them who leads
        # (librdkafka kept asking the isolated old leader, which answered "no leader",
        # until the heal: fault suite, isolate_leader).
        return self._brokers(lambda node_id: node_id != self._node.node_id)

    def _brokers(self, wanted: Callable[[int], bool]) -> list[BrokerInfo]:
        found = []
        for node_id, info in sorted(self._node.controller.state.nodes.items()):
            address = self._address(info)
            if address is not None and wanted(node_id):
                found.append(BrokerInfo(node_id, *address, info.get("rack")))
        return found

    def address(self, node_id: int) -> tuple[str, int] | None:
        """The node's advertised address on this view's listener."""
        info = self._node.controller.state.nodes.get(node_id)
        return self._address(info) if info is not None else None

    def _address(self, info: dict[str, Any]) -> tuple[str, int] | None:
        endpoints = info.get("endpoints")
        if not endpoints:  # registered before listeners existed: its one listener
            return info["host"], info["port"]
        address = endpoints.get(self.listener)
        return (address[0], address[1]) if address is not None else None

    def topics(self) -> dict[str, TopicInfo]:
        infos = self._current_infos()
        return {
            name: self._info(infos, name, t)
            for name, t in self._node.controller.state.topics.items()
        }

    def topic(self, name: str) -> TopicInfo | None:
        infos = self._current_infos()
        info = infos.get(name)
        if info is not None:
            return info
        topic = self._node.controller.state.topics.get(name)
        return self._info(infos, name, topic) if topic is not None else None

    def reassigning(self) -> dict[str, list[int]]:
        """The topics with partitions moving, and those partitions."""
        return {
            name: sorted(moves_of(topic))
            for name, topic in self._node.controller.state.topics.items()
            if moves_of(topic)
        }

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        wanted = str(topic_id)
        infos = self._current_infos()
        for name, topic in self._node.controller.state.topics.items():
            if topic["id"] == wanted:
                return self._info(infos, name, topic)
        return None

    def _current_infos(self) -> dict[str, TopicInfo]:
        """The kept TopicInfos, emptied first if the controller's topics changed since they
        were built: a command changed them (topics_version), or a snapshot replaced them."""
        state = self._node.controller.state
        topics = state.topics
        if (
            self._infos_of is None
            or self._infos_of[0] is not topics
            or self._infos_of[1] != state.topics_version
        ):
            self._infos.clear()
            self._infos_of = (topics, state.topics_version)
        return self._infos

    def _info(self, infos: dict[str, TopicInfo], name: str, topic: dict[str, Any]) -> TopicInfo:
        info = infos.get(name)
        if info is None:
            info = infos[name] = self._topic_info(name, topic)
        return info

    def _topic_info(self, name: str, topic: dict[str, Any]) -> TopicInfo:
        assigned = tuple(topic["partitions"])
        topic_id = topic["id"]

        def look_up(indexes: range) -> Iterator[PartitionInfo]:
            alive = self._alive_now()  # (a produce resolves the topic, reads no partition)
            for i in indexes:
                info = self.partition_info(name, topic_id, i, tuple(assigned[i]), alive)
                if i in moves_of(topic):
                    adding, removing = adding_replicas(topic, i), removing_replicas(topic, i)
                    info = dataclasses.replace(info, adding=adding, removing=removing)
                yield info

        partitions = LazyPartitions(look_up, len(assigned))
        return TopicInfo(
            name, _topic_uuid(topic_id), partitions, dict(topic["configs"]), topic["internal"]
        )

    def _alive_now(self) -> Callable[[int], bool]:
        """Which nodes are up, asked once a node for a whole topic instead of three times a
        partition (9,000 times for a Metadata answer of 3,000 partitions)."""
        alive = self._node.leadership.alive
        up = {node_id: alive(node_id) for node_id in self._node.controller.state.nodes}
        return lambda node_id: up[node_id] if node_id in up else alive(node_id)

    def partition_info(
        self,
        name: str,
        topic_id: str,
        index: int,
        replicas: tuple[int, ...],
        alive: Callable[[int], bool] | None = None,
    ) -> PartitionInfo:
        alive = alive or self._node.leadership.alive
        group = f"{topic_id}/{index}"
        known = self._node.leadership.lookup(group)
        local = self._node.partitions.get((name, index))
        offline = tuple(r for r in replicas if not alive(r))
        if known is None:
            return PartitionInfo(name, index, replicas, offline=offline)
        leader = known.leader
        electing = local is not None and local.group.leader_id is None
        if electing or not alive(leader):
            leader = -1
        isr = tuple(r for r in known.isr if r not in offline) or tuple(
            r for r in replicas if r not in offline
        )
        return PartitionInfo(name, index, replicas, leader, known.term, isr, offline)


@functools.lru_cache(maxsize=4096)
def _topic_uuid(topic_id: str) -> uuid.UUID:
    """Parsed once: every topic's TopicInfo is built again after any change to the topics
    (the parse was half of resolving a produce request's topic before they were kept)."""
    return uuid.UUID(topic_id)
