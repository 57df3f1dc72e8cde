"""Rack-aware placement (KIP-36) on real nodes: four nodes started with `raftlog cluster up
--racks a,a,b,c` (nodes 1 and 2 share rack a). confluent-kafka's and kafka-python's admin
clients create topics at RF 3 and add partitions to them; Metadata names every broker's
rack, each partition's three replicas are on the three racks, and each broker is the
preferred leader (first replica) of as many partitions as any other, give or take one.
(The rack-unaware placement put consecutive nodes together: 1, 2, 3 is racks a, a, b.)
DescribeConfigs shows each broker's broker.rack."""

from __future__ import annotations

from collections import Counter

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic, ResourceType
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KafkaNewPartitions
from kafka.admin import NewTopic as KafkaNewTopic
from support import groups as G
from support import wire as W
from support.cluster import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

RACKS = {1: "a", 2: "a", 3: "b", 4: "c"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    racks = tuple(RACKS[n] for n in sorted(RACKS))
    with G.running_cluster(
        tmp_path_factory.mktemp("racks"), nodes=len(RACKS), name="racks", racks=racks
    ) as c:
        yield c


def _metadata(cluster: Cluster, topics: list[str]) -> tuple[dict[int, str | None], dict]:
    """Metadata from node 1: ({broker: rack}, {topic: [replicas of each partition]})."""
    with W.KafkaWire(cluster.node(1).kafka) as w:
        response = G.call(
            w,
            W.METADATA,
            {
                "topics": [{"name": t, "topic_id": W._ZERO_UUID} for t in topics],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
            timeout=30,
        )
    racks = {int(b.node_id): b.rack for b in response.brokers}
    placed = {
        str(t.name): [
            tuple(int(r) for r in p.replica_nodes)
            for p in sorted(t.partitions, key=lambda p: int(p.partition_index))
        ]
        for t in response.topics
    }
    return racks, placed


def _assert_rack_aware(replica_lists: list[tuple[int, ...]], partitions: int) -> None:
    assert len(replica_lists) == partitions
    for replicas in replica_lists:
        assert sorted(RACKS[b] for b in replicas) == ["a", "b", "c"], replica_lists
    leaders = Counter(r[0] for r in replica_lists)
    led = [leaders[b] for b in RACKS]
    assert max(led) - min(led) <= 1, replica_lists


def test_created_and_added_partitions_span_distinct_racks(cluster: Cluster) -> None:
    confluent = AdminClient({"bootstrap.servers": cluster.bootstrap})
    confluent.create_topics([NewTopic("racked-c", num_partitions=8, replication_factor=3)])[
        "racked-c"
    ].result(60)
    kafka = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=60000)
    try:
        kafka.create_topics([KafkaNewTopic("racked-k", num_partitions=6, replication_factor=3)])
        racks, placed = _metadata(cluster, ["racked-c", "racked-k"])
        assert racks == RACKS
        _assert_rack_aware(placed["racked-c"], 8)
        _assert_rack_aware(placed["racked-k"], 6)

        confluent.create_partitions([NewPartitions("racked-c", 14)])["racked-c"].result(60)
        kafka.create_partitions({"racked-k": KafkaNewPartitions(11)})
    finally:
        kafka.close()
    _, grown = _metadata(cluster, ["racked-c", "racked-k"])
    assert grown["racked-c"][:8] == placed["racked-c"]
    assert grown["racked-k"][:6] == placed["racked-k"]
    _assert_rack_aware(grown["racked-c"], 14)  # the added ones continue the stripe
    _assert_rack_aware(grown["racked-k"], 11)

    for node, rack in ((1, "a"), (3, "b")):  # one broker a call, as librdkafka allows
        (future,) = confluent.describe_configs(
            [ConfigResource(ResourceType.BROKER, str(node))]
        ).values()
        assert future.result(30)["broker.rack"].value == rack
