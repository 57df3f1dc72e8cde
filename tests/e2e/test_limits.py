"""Partition counts a node could not hold are refused with Kafka's error, not attempted.

CreateTopics with 2^31-1 partitions (even validate_only) grew a node to 24 GB until the
kernel killed it; 100,000 partitions ran two nodes out of file descriptors and the cluster
could not be brought back. Now one request creates at most 10,000 partitions, as Kafka's
controller bounds one operation (POLICY_VIOLATION, the whole request refused), and each
node has a budget of partition replicas (from its file descriptors, or
`max.partition.replicas.per.node`): a topic or partition increase that would exceed it on
any node gets INVALID_PARTITIONS.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from support import groups as G
from support import wire as W

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

BUDGET = 40
POLICY_VIOLATION = 44


def outcome(futures: dict, name: str) -> KafkaError | None:
    try:
        futures[name].result(60)
    except KafkaException as exc:
        return exc.args[0]
    return None


def test_partition_counts_beyond_the_budget_are_refused(cluster_factory) -> None:
    cluster = cluster_factory(broker={"max.partition.replicas.per.node": BUDGET})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # confluent-kafka refuses more than 100,000 partitions itself; the wire does not.
    with W.KafkaWire(cluster.node(1).kafka) as w:
        error_code, message = G.create_topic(w, "huge", 2**31 - 1, 3)
    assert error_code == POLICY_VIOLATION, (error_code, message)
    assert message == (
        "Excessively large number of partitions per request: 2147483647, at most 10000."
    )
    for validate_only in (True, False):
        # One request of 10,001 partitions: the topic that would fit is refused with the rest.
        futures = admin.create_topics(
            [NewTopic("one", 1, 1), NewTopic("many", 10_000, 1)],
            validate_only=validate_only,
            operation_timeout=30,
        )
        for name in ("one", "many"):
            error = outcome(futures, name)
            assert error is not None and error.code() == KafkaError.POLICY_VIOLATION, error
            assert "Excessively large number of partitions per request" in error.str()
        error = outcome(
            admin.create_topics(
                [NewTopic("many", 5_000, 1)], validate_only=validate_only, operation_timeout=30
            ),
            "many",
        )
        assert error is not None and error.code() == KafkaError.INVALID_PARTITIONS, error
        assert "partition replicas" in error.str()
    # Within the budget (the 16 __consumer_offsets partitions may hold 16 of it per node).
    assert (
        outcome(admin.create_topics([NewTopic("fits", 10, 3)], operation_timeout=30), "fits")
        is None
    )
    error = outcome(
        admin.create_topics([NewTopic("second", 31, 3)], operation_timeout=30), "second"
    )
    assert error is not None and error.code() == KafkaError.INVALID_PARTITIONS, error
    assert outcome(admin.create_partitions([NewPartitions("fits", 14)]), "fits") is None
    error = outcome(admin.create_partitions([NewPartitions("fits", 41)]), "fits")
    assert error is not None and error.code() == KafkaError.INVALID_PARTITIONS, error
    error = outcome(admin.create_partitions([NewPartitions("fits", 14 + 10_001)]), "fits")
    assert error is not None and error.code() == KafkaError.POLICY_VIOLATION, error
    assert "10001 new partitions in one request, at most 10000" in error.str()
    for n in cluster.node_ids:
        assert cluster.is_alive(n), cluster.log_tails([n])
    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics["fits"].partitions) == 14
    assert not {"second", "many", "one", "huge"} & set(metadata.topics)
