"""OffsetDelete (47) with kafka-python's admin delete_group_offsets: a group's committed offsets
of some partitions go, and stay gone after its coordinator moves; a live consumer group keeps
the offsets of the topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC) but not of the
others; an unknown group is GROUP_ID_NOT_FOUND."""

from __future__ import annotations

import urllib.request

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTP
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError
from support import groups as G
from support.cluster import wait_for

from raftlog.config.node_config import NodeConfig

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOPIC, OTHER = "od", "od-other"


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """A standalone commit (no subscription): the group stays Empty."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        done = consumer.commit(
            offsets=[CTP(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
        )
        assert all(tp.error is None for tp in done), done
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """Asked with a new admin client: kafka-python's keeps asking the coordinator it found."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {
            (tp.topic, tp.partition): meta.offset
            for tp, meta in admin.list_group_offsets(group)[group].items()
            if meta.offset >= 0
        }
    finally:
        admin.close()


@pytest.fixture(scope="module")
def cluster(module_cluster):
    module_cluster.create_topic(TOPIC, partitions=2, replication_factor=3)
    module_cluster.create_topic(OTHER, partitions=1, replication_factor=3)
    return module_cluster


def test_an_empty_groups_offsets_are_deleted_and_stay_deleted(cluster) -> None:
    group = "od-empty"
    _commit(cluster.bootstrap, group, {(TOPIC, 0): 5, (TOPIC, 1): 7})
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        result = admin.delete_group_offsets(group, [TopicPartition(TOPIC, 0)])
        assert result == {TopicPartition(TOPIC, 0): NoError}
        assert _committed(cluster.bootstrap, group) == {(TOPIC, 1): 7}
        # The coordinator moves (its __consumer_offsets partition changes leader): the next
        # one reads the tombstone from the log.
        partition = G.coordinator_partition(group)
        leader, term = cluster.leader(G.OFFSETS_TOPIC, partition)
        node = cluster.node(leader)
        url = f"http://{node.admin}/v1/partitions/{G.OFFSETS_TOPIC}/{partition}/transfer-leadership"
        token = NodeConfig.load(node.config).admin_token
        request = urllib.request.Request(
            url, method="POST", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(request, timeout=30) as r:  # noqa: S310 - loopback only
            assert r.status == 200
        cluster.leader(G.OFFSETS_TOPIC, partition, exclude=[leader], min_term=term)
        assert wait_for(
            lambda: _committed(cluster.bootstrap, group), 30, what="the new coordinator"
        ) == {(TOPIC, 1): 7}
    finally:
        admin.close()


def test_a_live_group_keeps_the_offsets_of_its_subscribed_topics(cluster) -> None:
    group = "od-live"
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": group, "session.timeout.ms": 10000}
    )
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        consumer.subscribe([TOPIC])
        wait_for(lambda: consumer.poll(0.2) is None and consumer.assignment(), 60, what="join")
        done = consumer.commit(offsets=[CTP(TOPIC, 0, 3), CTP(OTHER, 0, 4)], asynchronous=False)
        assert all(tp.error is None for tp in done), done
        result = admin.delete_group_offsets(
            group, [TopicPartition(TOPIC, 0), TopicPartition(OTHER, 0)]
        )
        assert result == {
            TopicPartition(TOPIC, 0): GroupSubscribedToTopicError,
            TopicPartition(OTHER, 0): NoError,
        }
        assert _committed(cluster.bootstrap, group) == {(TOPIC, 0): 3}
    finally:
        consumer.close()
        admin.close()


def test_an_unknown_group(cluster) -> None:
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        with pytest.raises(GroupIdNotFoundError):
            admin.delete_group_offsets("od-nobody", [TopicPartition(TOPIC, 0)])
    finally:
        admin.close()
