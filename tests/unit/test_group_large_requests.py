"""The group handlers at the entry bound (issue 42): FindCoordinator, OffsetFetch,
DescribeGroups, DeleteGroups and ShareGroupDescribe naming 10,000 groups (249 characters each,
as tests/support/big_requests.py builds the largest request the bound admits) never hold the
event loop for long, and answer every group as before.

Before: each group was placed by a Python loop over its characters and looked up in one go
(or in a task each), and the answer built on the loop: 10,000 groups held the loop 0.4-1.0 s
here, and on a 3-node cluster FindCoordinator, sent before `__consumer_offsets` existed,
asked for the topic's creation once per key: 11 s to answer, about a hundred leaderships
lost. "Held" is the longest a watcher task on the loop waited for its turn, with the test's
long-lived objects frozen as a node freezes its own (raftlog/common/heap.py)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType
from support.answers import client_reads
from support.broker_stub import BrokerStub
from support.clock import settle
from support.loop_holds import LoopHolds

from kafka_api.codec import build, encode_response
from kafka_api.context import RequestContext
from kafka_api.handlers import (
    delete_groups,
    describe_groups,
    find_coordinator,
    offset_fetch,
    share_group_describe,
)
from raftlog.api.values import PartitionInfo, TopicInfo, TopicResult, TopicSpec
from raftlog.broker.facade import BrokerFacade
from raftlog.common.errors import ErrorCode as E
from raftlog.groups.coordinator import GroupConfig, GroupCoordinator
from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC
from raftlog.groups.results import CommitOffset
from raftlog.security.acl_index import AclIndex
from raftlog.security.authorizer import Authorizer

ENTRIES = 10_000  # kafka_api/entry_bounds.py's MAX_ENTRIES
PARTITIONS = 50  # offsets.topic.num.partitions' default
# This node leads every third partition: its groups are answered here, the others are
# NOT_COORDINATOR.
LED = frozenset(range(0, PARTITIONS, 3))
COMMITTED = 100  # groups with an offset committed, spread over the led partitions
# Each handler held the loop 0.4-1.0 s for 10,000 groups before and holds it 20-35 ms now
# (the collector's passes, mostly); a quarter of the shortest election timeout.
MOST_HELD_S = 0.12


class Log:
    """An OffsetsLog whose appends always succeed at once."""

    index = 0
    leader_epoch = 1

    def __init__(self) -> None:
        self.records: list[Any] = []

    async def append(self, records: Any, producer: Any = None) -> int:
        self.records += records
        return len(self.records)

    def read_committed(self) -> Any:
        return iter(())


class Broker(BrokerStub):
    node_id = 1

    def __init__(self, groups: GroupCoordinator, deny: bool = False) -> None:
        self.groups = groups
        if deny:  # no ACL at all: every principal is denied everything
            self.authorizer = Authorizer((), False, AclIndex(lambda: {}).synced)

    def topic(self, name: str) -> TopicInfo | None:
        parts = (PartitionInfo("t", 0, (1,), 1, 1, (1,)),)
        return TopicInfo("t", uuid.UUID(int=7), parts) if name == "t" else None


def group_ids() -> list[str]:
    return [f"group-{i:05d}-".ljust(249, "x") for i in range(ENTRIES)]


async def coordinator() -> tuple[GroupCoordinator, list[str], list[str], str]:
    """A coordinator of the LED partitions; (it, every group id, the committed ones, the
    share group's)."""
    coord = GroupCoordinator(1, GroupConfig(num_partitions=PARTITIONS))
    for index in LED:
        coord.attach(index, Log())
    await settle()
    ids = group_ids()
    here = [g for g in ids if coord.partition_for(g) in LED]
    committed = here[:COMMITTED]
    for g in committed:
        offset = CommitOffset("t", 0, 42, -1, "")
        assert await coord.offset_commit(g, -1, "", None, [offset]) == [E.none]
    share = here[COMMITTED]
    assert coord.share_heartbeat(share, "m1", 0, None, ["t"], "c", "/h").error is E.none
    await settle()
    return coord, ids, committed, share


def request(module: Any, version: int, ids: list[str]) -> Any:
    m = load_payload_module(module.API_KEY, version, EntityType.request)
    if module is find_coordinator:
        return build(m.FindCoordinatorRequest, key_type=0, coordinator_keys=tuple(ids))
    if module is offset_fetch:
        return build(
            m.OffsetFetchRequest,
            groups=tuple(
                m.OffsetFetchRequestGroup(group_id=g, member_id=None, member_epoch=-1, topics=None)
                for g in ids
            ),
            require_stable=False,
        )
    if module is describe_groups:
        return build(m.DescribeGroupsRequest, groups=tuple(ids), include_authorized_operations=True)
    if module is delete_groups:
        return build(m.DeleteGroupsRequest, groups_names=tuple(ids))
    assert module is share_group_describe
    return build(
        m.ShareGroupDescribeRequest, group_ids=tuple(ids), include_authorized_operations=True
    )


async def handled(module: Any, version: int, req: Any, broker: Any) -> tuple[Any, float]:
    """(the answer as a client reads it, the longest the loop was held), the answer encoded
    as the server encodes one on the loop when the handler did not."""
    ctx = RequestContext(broker, version, "c", "10.0.0.1", principal="User:alice")
    async with LoopHolds() as holds:
        response = await module.handle(ctx, req)
        b"".join(encode_response(7, response))
    return client_reads(response, module.API_KEY, version), holds.longest


async def test_offset_fetch_of_10000_groups() -> None:
    coord, ids, committed, _ = await coordinator()
    read, held = await handled(offset_fetch, 9, request(offset_fetch, 9, ids), Broker(coord))
    assert held < MOST_HELD_S, f"the loop was held {held:.3f} s"
    assert [g.group_id for g in read.groups] == ids
    for g in read.groups:
        offsets = [
            (t.name, p.partition_index, p.committed_offset) for t in g.topics for p in t.partitions
        ]
        if coord.partition_for(g.group_id) not in LED:
            assert (g.error_code, offsets) == (E.not_coordinator, [])
        else:
            assert g.error_code == E.none
            assert offsets == ([("t", 0, 42)] if g.group_id in committed else [])


@pytest.mark.parametrize("deny", [False, True], ids=["open", "denied"])
async def test_describe_groups_of_10000_groups(deny: bool) -> None:
    coord, ids, committed, share = await coordinator()
    broker = Broker(coord, deny)
    read, held = await handled(describe_groups, 6, request(describe_groups, 6, ids), broker)
    assert held < MOST_HELD_S, f"the loop was held {held:.3f} s"
    assert [g.group_id for g in read.groups] == ids
    for g in read.groups:
        if deny:
            expected = E.group_authorization_failed
        elif coord.partition_for(g.group_id) not in LED:
            expected = E.not_coordinator
        elif g.group_id in committed:
            expected = E.none
            assert g.group_state == "Empty" and g.authorized_operations > 0
        else:  # unknown here, or a share group
            expected = E.group_id_not_found
            assert g.error_message.endswith(
                "is not a classic group." if g.group_id == share else "not found."
            )
        assert g.error_code == expected, g.group_id


async def test_delete_groups_of_10000_groups() -> None:
    coord, ids, committed, share = await coordinator()
    read, held = await handled(delete_groups, 2, request(delete_groups, 2, ids), Broker(coord))
    assert held < MOST_HELD_S, f"the loop was held {held:.3f} s"
    assert [r.group_id for r in read.results] == ids
    for r in read.results:
        if coord.partition_for(r.group_id) not in LED:
            expected = E.not_coordinator
        elif r.group_id in committed:
            expected = E.none
        elif r.group_id == share:
            expected = E.non_empty_group  # its member is still in it
        else:
            expected = E.group_id_not_found
        assert r.error_code == expected, r.group_id
    assert all(coord.describe_group(g).error is E.group_id_not_found for g in committed)


async def test_share_group_describe_of_10000_groups() -> None:
    coord, ids, committed, share = await coordinator()
    module = share_group_describe
    read, held = await handled(module, 1, request(module, 1, ids), Broker(coord))
    assert held < MOST_HELD_S, f"the loop was held {held:.3f} s"
    assert [g.group_id for g in read.groups] == ids
    for g in read.groups:
        if coord.partition_for(g.group_id) not in LED:
            assert g.error_code == E.not_coordinator
        elif g.group_id == share:
            assert (g.error_code, g.group_state) == (E.none, "Stable")
            assert [m.member_id for m in g.members] == ["m1"]
        else:
            assert g.error_code == E.group_id_not_found, g.group_id
            classic = g.group_id in committed
            assert g.error_message.endswith("is not a share group." if classic else "not found.")


class Controller:
    """The controller as BrokerFacade reads it: the cluster's topics and nodes."""

    def __init__(self) -> None:
        endpoints = {"PLAINTEXT": ["node-1", 9092]}
        self.state = SimpleNamespace(topics={}, nodes={1: {"endpoints": endpoints}})


class Admin:
    """Creates a topic as the controller would, a loop turn after being asked; counts the
    requests."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.asked: list[str] = []

    async def create_topic(self, spec: TopicSpec, validate_only: bool, timeout_ms: int) -> Any:
        self.asked.append(spec.name)
        await asyncio.sleep(0.01)
        partitions = [[1]] * PARTITIONS
        self.controller.state.topics[spec.name] = {"id": "offsets", "partitions": partitions}
        return TopicResult(spec.name)


async def test_find_coordinator_of_10000_keys_creates_the_offsets_topic_once() -> None:
    """Asked before `__consumer_offsets` exists, as a fresh cluster's first clients do: one
    creation, however many keys (it was asked for once per key), and the keys placed
    without holding the loop."""
    controller = Controller()
    leadership = SimpleNamespace(
        lookup=lambda _group: SimpleNamespace(leader=1, term=1, isr=(1,)),
        alive=lambda _node: True,
    )
    node = SimpleNamespace(
        node_id=1,
        controller=controller,
        groups=GroupCoordinator(1, GroupConfig(num_partitions=PARTITIONS)),
        leadership=leadership,
        partitions={},
        authorizer=None,
    )
    broker = BrokerFacade(node, "PLAINTEXT")  # type: ignore[arg-type]  # a partial node
    admin = broker.admin = Admin(controller)  # type: ignore[assignment]
    ids = group_ids()
    read, held = await handled(find_coordinator, 6, request(find_coordinator, 6, ids), broker)
    assert held < MOST_HELD_S, f"the loop was held {held:.3f} s"
    assert admin.asked == [OFFSETS_TOPIC]
    assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in read.coordinators] == [
        (g, E.none, 1, "node-1", 9092) for g in ids
    ]
    # Concurrent requests share the creation too, and an empty key is refused, not placed.
    del controller.state.topics[OFFSETS_TOPIC]
    answers = await asyncio.gather(broker.find_coordinator("a", 0), broker.find_coordinator("b", 0))
    assert [a.error for a in answers] == [E.none, E.none]
    assert admin.asked == [OFFSETS_TOPIC] * 2
    assert (await broker.find_coordinator("", 0)).error is E.invalid_request
