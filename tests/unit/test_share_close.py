"""A share consumer's close never loses its acknowledgements (issue 43): three replicas of a
partition (real Raft, support/replicas.py), the real ShareFetch / ShareAcknowledge handlers on
its leader, and the group's coordinator (a real ShareGroups and ShareMembers) on the leader's
node or on another one, its `share-left` carried over the in-process network.

librdkafka's close sends its last acknowledgements to each partition leader (ShareAcknowledge,
epoch -1) and its leave to the coordinator (ShareGroupHeartbeat, epoch -1) at the same time, so
the coordinator's word that the member left may reach the leader first. Before, that word
dropped the member's session on the spot and released what it held: the final request then
got SHARE_SESSION_NOT_FOUND and the records it acknowledged went to the next consumer again
(confluent-kafka's test_explicit_close_partial_acks_releases_remainder and
test_commit_async_then_immediate_close_persists). Now the acknowledgements on their way (an
earlier commit_async's, and the final request's own) are applied first and only the rest is
released, in either order."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType
from support.broker_stub import BrokerStub
from support.clock import ManualClock
from support.raftnet import Clock, NetMesh
from support.replicas import IDS, Replicas
from support.wire import make_batch

from kafka_api.codec import build
from kafka_api.context import ConnectionScope, RequestContext
from kafka_api.handlers import share_acknowledge, share_fetch
from raftlog.api.values import BrokerInfo, Partition, PartitionInfo, TopicInfo
from raftlog.common.errors import ErrorCode
from raftlog.config import group_config as gc
from raftlog.share.manager import ShareManager
from raftlog.share.members import ShareMembers
from raftlog.share.membership import ShareGroups
from raftlog.share.partition_state import AckType
from raftlog.share.sessions import LEAVE_GRACE_SECONDS

E = ErrorCode
ACCEPT = AckType.ACCEPT
Acks = Sequence[tuple[int, int, AckType]]


class Control:
    """What ShareMembers uses of a node's mesh (raftlog.raft.mesh.Mesh), over a replica's
    NetMesh: every peer is connected; faults and order are the Net's."""

    def __init__(self, mesh: NetMesh, node: str) -> None:
        self._mesh = mesh
        self._peers = [i for i in IDS if i != node]

    def on_control(self, kind: str, handler: Callable[[str, Any], None]) -> None:
        self._mesh.on_control(kind, handler)

    def send_control(self, peer_id: str, kind: str, payload: Any) -> None:
        self._mesh.send_control(peer_id, kind, payload)

    def broadcast(self, kind: str, payload: Any) -> None:
        for peer in self._peers:
            self._mesh.send_control(peer, kind, payload)

    def connected(self, peer_id: str) -> bool:
        return True


class LeaderBroker(BrokerStub):
    """What the share handlers ask of the node leading t-0."""

    fetch_max_bytes = 1 << 20

    def __init__(self, replicas: Replicas, node: str, share: ShareManager) -> None:
        self.node_id = int(node)
        self.share = share
        self._replicas = replicas
        self._node = node
        info = PartitionInfo("t", 0, (1, 2, 3), int(node), 1, (1, 2, 3))
        self.info = TopicInfo("t", uuid.uuid4(), (info,))

    def live_brokers(self) -> list[BrokerInfo]:
        return []

    def topic(self, name: str) -> TopicInfo | None:
        return self.info if name == "t" else None

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self.info if topic_id == self.info.topic_id else None

    def local_partition(self, topic: str, index: int) -> Partition | None:
        return self._replicas.partitions[self._node] if (topic, index) == ("t", 0) else None


class Rig:
    """The replicas, the leader's broker, and the coordinator's group membership."""

    def __init__(self, replicas: Replicas, leader: str, coordinator: str) -> None:
        self.replicas = replicas
        self.leader = leader
        self.connections: dict[str, ConnectionScope] = {}  # each member's, to the leader
        self.clock = ManualClock()  # locks, the leave's grace, the coordinator's sessions
        self.groups = ShareGroups(lambda _t: 1, self.clock)
        self.members: dict[str, ShareMembers] = {}
        self.managers: dict[str, ShareManager] = {}
        for node in IDS:  # each node as raftlog/node/node.py wires it
            self.managers[node] = self._manager(node, coordinator)
            if node == coordinator:
                self.groups.on_member_left.append(self.members[node].left)
        self.broker = LeaderBroker(replicas, leader, self.managers[leader])

    def _manager(self, node: str, coordinator: str) -> ShareManager:
        def known(group: str, member: str) -> ErrorCode:
            if node != coordinator:
                return E.not_coordinator
            return E.none if self.groups.is_member(group, member) else E.unknown_member_id

        configs = gc.values({gc.AUTO_OFFSET_RESET: "earliest"})
        manager = ShareManager(
            lambda _g: configs, lambda g, m: self.members[node].check(g, m), self.clock
        )
        self.members[node] = ShareMembers(
            int(node),
            Control(self.replicas.meshes[node], node),
            lambda _g: int(coordinator),
            known,
            manager.member_left,
            self.clock,
        )
        return manager

    @property
    def share(self) -> ShareManager:
        return self.managers[self.leader]

    def heartbeat(self, member: str, epoch: int) -> None:
        result = self.groups.heartbeat("g", member, epoch, None, ["t"], "c", "/127.0.0.1")
        assert result.error is E.none

    async def fetch(self, member: str, epoch: int, acks: Acks = (), wait_s: float = 0.0) -> Any:
        """A ShareFetch of t-0, waiting up to `wait_s` (loop time) for records."""
        m = load_payload_module(share_fetch.API_KEY, 1, EntityType.request)
        request = build(
            m.ShareFetchRequest,
            group_id="g",
            member_id=member,
            share_session_epoch=epoch,
            max_wait=timedelta(seconds=wait_s),
            min_bytes=1,
            max_bytes=1 << 20,
            max_records=500,
            batch_size=500,
            topics=(
                m.FetchTopic(
                    topic_id=self.broker.info.topic_id,
                    partitions=(
                        m.FetchPartition(
                            partition_index=0, acknowledgement_batches=_batches(m, acks)
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        return await self.replicas.until(share_fetch.handle(self._ctx(member), request))

    async def acknowledge(self, member: str, epoch: int, acks: Acks = ()) -> Any:
        m = load_payload_module(share_acknowledge.API_KEY, 1, EntityType.request)
        partition = m.AcknowledgePartition(
            partition_index=0, acknowledgement_batches=_batches(m, acks)
        )
        topic = m.AcknowledgeTopic(topic_id=self.broker.info.topic_id, partitions=(partition,))
        topics = (topic,) if acks else ()
        request = build(
            m.ShareAcknowledgeRequest,
            group_id="g",
            member_id=member,
            share_session_epoch=epoch,
            topics=topics,
        )
        return await self.replicas.until(share_acknowledge.handle(self._ctx(member), request))

    def _ctx(self, member: str) -> RequestContext:
        return RequestContext(
            broker=self.broker,
            api_version=1,
            client_id="c",
            client_host="h",
            connection=self.connections.setdefault(member, ConnectionScope()),
        )

    async def leave(self, member: str) -> None:
        """Its ShareGroupHeartbeat at epoch -1, and the coordinator's word to every node."""
        self.heartbeat(member, -1)
        await self.replicas.settle()


def _batches(m: Any, acks: Acks) -> tuple[Any, ...]:
    return tuple(
        m.AcknowledgementBatch(first_offset=first, last_offset=last, acknowledge_types=(kind,))
        for first, last, kind in acks
    )


def acquired(response: Any) -> dict[int, int]:
    """offset -> delivery count of what a ShareFetch handed out."""
    return {
        offset: r.delivery_count
        for topic in response.responses
        for p in topic.partitions
        for r in p.acquired_records
        for offset in range(r.first_offset, r.last_offset + 1)
    }


def ack_codes(response: Any, field: str = "error_code") -> list[int]:
    return [getattr(p, field) for t in response.responses for p in t.partitions]


@pytest.fixture(params=["coordinator on the leader", "coordinator elsewhere"])
async def rig(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Rig]:
    replicas = Replicas(tmp_path, Clock())
    leader = await replicas.leader()
    await replicas.run(0.3)
    elsewhere = next(i for i in IDS if i != leader)
    rig = Rig(replicas, leader, leader if request.param.endswith("leader") else elsewhere)
    for i in range(10):  # ten one-record batches: offsets 0..9
        replicas.send(leader, make_batch([(None, b"v%d" % i)]))
    await replicas.run(0.5)
    assert replicas.partitions[leader].high_watermark == 10
    yield rig
    for manager in rig.managers.values():
        manager.close()
    rig.groups.close()
    replicas.close()


@pytest.mark.parametrize("left_first", [True, False], ids=["leave first", "final request first"])
@pytest.mark.parametrize("via", ["ShareAcknowledge", "ShareFetch"])
async def test_acknowledgements_sent_at_close_are_kept_and_only_the_rest_released(
    rig: Rig, left_first: bool, via: str
) -> None:
    """a holds 0..9; it accepts 0..2 in a request still on its way when it closes (commit_async
    then close), and 3..4 in its final request (close() after acknowledging half a batch).
    librdkafka sends both as ShareAcknowledge; Kafka's own client sends ShareFetch."""
    rig.heartbeat("a", 0)
    opened = await rig.fetch("a", 0)
    assert (opened.error_code, acquired(opened)) == (E.none, dict.fromkeys(range(10), 1))
    if left_first:
        await rig.leave("a")
        session = rig.share.sessions.get("g", "a")
        assert session is not None and session.left
    if via == "ShareAcknowledge":
        in_flight = await rig.acknowledge("a", 1, [(0, 2, ACCEPT)])
        final = await rig.acknowledge("a", -1, [(3, 4, ACCEPT)])
        field = "error_code"
    else:
        in_flight = await rig.fetch("a", 1, [(0, 2, ACCEPT)])
        final = await rig.fetch("a", -1, [(3, 4, ACCEPT)])
        field = "acknowledge_error_code"
        assert acquired(in_flight) == {}
    for answer in (in_flight, final):
        assert answer.error_code == E.none
        assert ack_codes(answer, field) == [E.none]
    if not left_first:
        await rig.leave("a")
    assert rig.share.sessions.get("g", "a") is None  # the final request ended it
    # a has left: neither it nor a stranger opens a session again without joining
    assert (await rig.fetch("a", 0)).error_code == E.unknown_member_id
    assert (await rig.fetch("stranger", 0)).error_code == E.unknown_member_id
    rig.heartbeat("b", 0)
    got = await rig.fetch("b", 0)
    assert acquired(got) == dict.fromkeys(range(5, 10), 2)  # released at once, not by a lock
    await rig.replicas.run(0.5)
    for node, p in rig.replicas.partitions.items():  # committed on all three
        stored = p.share_state("g")
        assert stored is not None and stored.start_offset == 5, node


async def test_a_member_that_left_only_acknowledges_and_its_grace_runs_out(rig: Rig) -> None:
    """After the leave, a's session takes acknowledgements but hands out nothing (a fetch
    without any is SHARE_SESSION_NOT_FOUND), and without a final request what a still holds
    goes back after LEAVE_GRACE_SECONDS, well before its 30 s locks."""
    rig.heartbeat("a", 0)
    assert len(acquired(await rig.fetch("a", 0))) == 10
    await rig.leave("a")
    released = await rig.fetch("a", 1, [(0, 0, ACCEPT), (1, 1, AckType.RELEASE)])
    assert released.error_code == E.none and acquired(released) == {}
    assert ack_codes(released, "acknowledge_error_code") == [E.none]
    assert (await rig.fetch("a", 2)).error_code == E.share_session_not_found
    rig.heartbeat("b", 0)
    assert acquired(await rig.fetch("b", 0)) == {1: 2}  # only what a released
    await rig.clock.advance(LEAVE_GRACE_SECONDS)
    assert rig.share.sessions.get("g", "a") is None
    assert acquired(await rig.fetch("b", 1)) == dict.fromkeys(range(2, 10), 2)
    assert (await rig.acknowledge("a", -1, [(2, 2, ACCEPT)])).error_code == (
        E.share_session_not_found
    )


@pytest.mark.parametrize("left_first", [True, False], ids=["leave first", "final request only"])
async def test_a_fetch_still_waiting_when_its_member_closes_takes_nothing(
    rig: Rig, left_first: bool
) -> None:
    """librdkafka may have a ShareFetch waiting at the leader (fetch.wait.max.ms) as it
    closes. The release at the close wakes it: it must not take back what was released (it
    would hold it for its lock, 30 s, from a member that is gone), nor anything produced after
    its member left."""
    rig.heartbeat("a", 0)
    assert len(acquired(await rig.fetch("a", 0))) == 10
    waiting = asyncio.ensure_future(rig.fetch("a", 1, wait_s=2.0))
    await rig.replicas.run(0.1)
    assert not waiting.done()  # a holds everything: it waits for more
    if left_first:
        await rig.leave("a")
        rig.replicas.send(rig.leader, make_batch([(None, b"v10")]))  # wakes it
        await rig.replicas.run(0.3)
    final = await rig.acknowledge("a", -1, [(0, 4, ACCEPT)])
    assert (final.error_code, ack_codes(final)) == (E.none, [E.none])
    assert acquired(await waiting) == {}
    rig.heartbeat("b", 0)
    got = await rig.fetch("b", 0)
    expected = dict.fromkeys(range(5, 10), 2) | ({10: 1} if left_first else {})
    assert acquired(got) == expected


@pytest.mark.parametrize("left_first", [True, False], ids=["leave first", "no leave"])
async def test_a_consumer_killed_without_closing_hands_its_records_back_at_its_connections_close(
    rig: Rig, left_first: bool
) -> None:
    """kill -9: no final request. The close of the connection that opened a's session ends it
    (as Kafka's disconnect listener does) after what a acknowledged before it: the rest goes
    to b at once, not after the 30 s locks nor the leave's grace, and what a accepted never
    comes back."""
    rig.heartbeat("a", 0)
    assert len(acquired(await rig.fetch("a", 0))) == 10
    assert ack_codes(await rig.acknowledge("a", 1, [(0, 2, ACCEPT)])) == [E.none]
    if left_first:
        await rig.leave("a")  # its coordinator heard of it first: its grace runs
    rig.heartbeat("b", 0)
    assert acquired(await rig.fetch("b", 0)) == {}
    rig.connections["a"].close()
    assert rig.share.sessions.get("g", "a") is None
    assert rig.share.sessions.get("g", "b") is not None  # b's connection is open
    assert acquired(await rig.fetch("b", 1)) == dict.fromkeys(range(3, 10), 2)
    rig.connections["b"].close()
    assert rig.share.sessions.get("g", "b") is None
