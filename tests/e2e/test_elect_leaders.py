"""ElectLeaders (43) with real admin clients: a preferred election moves a partition's Raft
leadership back to its first replica, an election that is not needed says so, an unclean one
is answered as Kafka answers it where a leader exists, and a preferred replica that is down
is PREFERRED_LEADER_NOT_AVAILABLE (kafka-leader-election and the clients' elect_leaders)."""

from __future__ import annotations

import urllib.request

import pytest
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient
from support import wire as W
from support.cluster import wait_for

from raftlog.config.node_config import NodeConfig

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOPIC = "elect"
PARTITIONS = 3
ELECTION_NOT_NEEDED = 84
PREFERRED_LEADER_NOT_AVAILABLE = 80


def _transfer(node, partition: int) -> None:
    """The admin listener's transfer to the most caught-up follower."""
    url = f"http://{node.admin}/v1/partitions/{TOPIC}/{partition}/transfer-leadership"
    token = NodeConfig.load(node.config).admin_token
    request = urllib.request.Request(
        url, method="POST", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as r:  # noqa: S310 - loopback only
        assert r.status == 200


def _move_away(cluster, partition: int) -> int:
    """Leadership handed from the preferred replica to another; the preferred replica's id."""
    meta, _ = W.find_partition_leader(cluster.bootstrap, TOPIC, partition)
    preferred = meta.replicas[0]
    leader, _ = cluster.leader(TOPIC, partition)
    assert leader == preferred, "each partition starts led by its first replica"
    _transfer(cluster.node(leader), partition)
    cluster.leader(TOPIC, partition, exclude=[preferred])
    wait_for(
        lambda: W.find_partition_leader(cluster.bootstrap, TOPIC, partition)[0].leader != preferred,
        30,
        what="metadata to name the new leader",
    )
    return preferred


def _metadata_leader(cluster, partition: int) -> int:
    return W.find_partition_leader(cluster.bootstrap, TOPIC, partition)[0].leader


@pytest.fixture(scope="module")
def cluster(module_cluster):
    module_cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    for p in range(PARTITIONS):
        meta, _ = W.find_partition_leader(module_cluster.bootstrap, TOPIC, p)
        wait_for(
            lambda p=p, first=meta.replicas[0]: module_cluster.leader(TOPIC, p)[0] == first,
            30,
            what=f"{TOPIC}-{p} led by its preferred replica",
        )
    return module_cluster


def test_confluent_preferred_election_moves_leadership_back(cluster) -> None:
    """(confluent-kafka 2.16.1's elect_leaders raises SystemError when given either timeout
    keyword: its defaults, 60 s, are used.)"""
    preferred = _move_away(cluster, 0)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    partition = TopicPartition(TOPIC, 0)
    done = admin.elect_leaders(ElectionType.PREFERRED, [partition])
    assert done.result(30) == {partition: None}
    # answered once the election is done: the preferred replica leads already
    assert cluster.current_leader(TOPIC, 0)[0] == preferred
    wait_for(lambda: _metadata_leader(cluster, 0) == preferred, 10, what="metadata")
    again = admin.elect_leaders(ElectionType.PREFERRED, [partition]).result(30)
    assert again[partition].code() == ELECTION_NOT_NEEDED


def test_kafka_python_preferred_and_unclean(cluster) -> None:
    preferred = _move_away(cluster, 1)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        response = admin.elect_leaders(0, {TOPIC: [1, 2]}, timeout_ms=20_000)
        codes = {
            p.partition_id: p.error_code
            for r in response.replica_election_results
            for p in r.partition_result
        }
        assert codes == {1: 0, 2: ELECTION_NOT_NEEDED}
        assert cluster.current_leader(TOPIC, 1)[0] == preferred
        # Unclean: Kafka elects only where no leader exists, and here one does.
        unclean = admin.elect_leaders(1, {TOPIC: [0]}, raise_errors=False)
        assert [
            p.error_code for r in unclean.replica_election_results for p in r.partition_result
        ] == [ELECTION_NOT_NEEDED]
    finally:
        admin.close()


def test_every_partition_lists_only_the_elections_held(cluster) -> None:
    preferred = _move_away(cluster, 2)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    done = admin.elect_leaders(ElectionType.PREFERRED, None).result(30)
    assert done == {TopicPartition(TOPIC, 2): None}, done
    assert cluster.current_leader(TOPIC, 2)[0] == preferred


def test_a_preferred_replica_that_is_down(cluster) -> None:
    """Last in the module: it kills a node."""
    meta, _ = W.find_partition_leader(cluster.bootstrap, TOPIC, 0)
    preferred = meta.replicas[0]
    cluster.kill(preferred)
    cluster.leader(TOPIC, 0, exclude=[preferred])
    others = ",".join(cluster.node(i).kafka for i in cluster.node_ids if i != preferred)
    partition = TopicPartition(TOPIC, 0)

    def answered() -> KafkaError | None:
        """A new client each time: librdkafka's admin keeps sending to the controller it
        knew, and the node killed may have been it."""
        admin = AdminClient({"bootstrap.servers": others})
        try:
            return admin.elect_leaders(ElectionType.PREFERRED, [partition]).result(10)[partition]
        except (KafkaException, TimeoutError):
            return None

    error = wait_for(answered, 90, what="an answer from the live nodes")
    assert error.code() == PREFERRED_LEADER_NOT_AVAILABLE
