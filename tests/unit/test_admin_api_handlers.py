"""ElectLeaders and OffsetDelete as their handlers answer before anything reaches the cluster:
a principal without the permission (Kafka's authorization errors, on what the request names),
an election type Kafka does not know, UNCLEAN where a leader exists or none does, and a
partition named twice; every answer read back as a client reads it."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

from kio.index import load_payload_module
from kio.static.constants import EntityType
from support.answers import client_reads
from support.broker_stub import BrokerStub

from kafka_api.codec import build
from kafka_api.context import RequestContext
from kafka_api.handlers import elect_leaders, offset_delete
from raftlog.api.values import PartitionInfo, TopicInfo
from raftlog.common.errors import ErrorCode
from raftlog.security.acl_index import AclIndex
from raftlog.security.authorizer import Authorizer

E = ErrorCode
ADMIN, ALICE = "User:admin", "User:alice"


class Cluster(BrokerStub):
    """Topic "led" has a leader, "leaderless" none; preferred elections are recorded."""

    def __init__(self) -> None:
        self.authorizer = Authorizer((ADMIN,), False, AclIndex(lambda: {}).synced)
        self.elected: list[tuple[str, int]] = []

    def topic(self, name: str) -> TopicInfo | None:
        leader = {"led": 1, "leaderless": -1}.get(name)
        if leader is None:
            return None
        return TopicInfo(name, uuid.uuid4(), [PartitionInfo(name, 0, (1, 2, 3), leader)])

    async def elect_preferred_leader(
        self, topic: str, index: int, timeout_ms: int
    ) -> tuple[ErrorCode, str | None]:
        self.elected.append((topic, index))
        return E.none, None


def _elect(cluster: Cluster, principal: str, version: int, election: int, named: Any) -> Any:
    m = load_payload_module(elect_leaders.API_KEY, version, EntityType.request)
    request = build(
        m.ElectLeadersRequest,
        election_type=election,
        topic_partitions=None
        if named is None
        else tuple(m.TopicPartitions(topic=t, partitions=tuple(p)) for t, p in named),
        timeout=timedelta(seconds=5),
    )
    ctx = RequestContext(cluster, version, "c", "10.0.0.1", principal=principal)
    response = asyncio.run(elect_leaders.handle(ctx, request))
    return client_reads(response, elect_leaders.API_KEY, version)


def _codes(response: Any) -> dict[tuple[str, int], int]:
    return {
        (r.topic, p.partition_id): p.error_code
        for r in response.replica_election_results
        for p in r.partition_result
    }


def test_elect_leaders_needs_alter_on_the_cluster() -> None:
    cluster = Cluster()
    for version in (0, 1, 2):
        response = _elect(cluster, ALICE, version, 0, [("led", [0, 1])])
        assert _codes(response) == {
            ("led", 0): E.cluster_authorization_failed,
            ("led", 1): E.cluster_authorization_failed,
        }
        if version >= 1:
            assert response.error_code == E.cluster_authorization_failed
    assert _codes(_elect(cluster, ALICE, 2, 0, None)) == {}
    assert cluster.elected == []


def test_elect_leaders_unclean_unknown_types_and_repeats() -> None:
    cluster = Cluster()
    unclean = _elect(cluster, ADMIN, 2, 1, [("led", [0]), ("leaderless", [0]), ("nope", [0])])
    assert _codes(unclean) == {
        ("led", 0): E.election_not_needed,
        ("leaderless", 0): E.eligible_leaders_not_available,
        ("nope", 0): E.unknown_topic_or_partition,
    }
    unknown = _elect(cluster, ADMIN, 2, 7, [("led", [0])])
    assert unknown.error_code == E.invalid_request
    assert _codes(unknown) == {("led", 0): E.invalid_request}
    twice = _elect(cluster, ADMIN, 2, 0, [("led", [0]), ("led", [0]), ("leaderless", [0])])
    assert [p.error_code for r in twice.replica_election_results for p in r.partition_result] == [
        E.invalid_request,
        E.invalid_request,
        E.none,
    ]
    assert cluster.elected == [("leaderless", 0)]


def test_offset_delete_needs_delete_on_the_group() -> None:
    m = load_payload_module(offset_delete.API_KEY, 0, EntityType.request)
    request = build(
        m.OffsetDeleteRequest,
        group_id="g",
        topics=(
            m.OffsetDeleteRequestTopic(
                name="led", partitions=(m.OffsetDeleteRequestPartition(partition_index=0),)
            ),
        ),
    )
    ctx = RequestContext(Cluster(), 0, "c", "10.0.0.1", principal=ALICE)
    response = client_reads(
        asyncio.run(offset_delete.handle(ctx, request)), offset_delete.API_KEY, 0
    )
    assert response.error_code == E.group_authorization_failed and response.topics == ()
