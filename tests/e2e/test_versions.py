"""Every API version a node advertises answers a well-formed request with a response the
client can decode, for real: a version listed in ApiVersions but broken would make a
client that picks it fail on its first request."""

from __future__ import annotations

import dataclasses
import types
import typing
import uuid
from datetime import timedelta

import pytest
from support import wire as W

from kafka_api.codec import request_schema
from raftlog.groups.metadata_manager import coordinator_partition

pytestmark = pytest.mark.e2e

TOPIC = "versions"
TXN_PARTITIONS = 16  # transaction.state.log.num.partitions
# Field values that take each handler down its main path rather than a rejection.
VALUES = {
    "acks": -1,
    "transactional_id": None,
    "num_partitions": -1,
    "replication_factor": -1,
    "resource_type": 2,
    "endpoint_type": 1,
    "count": 2,
    "max_wait": timedelta(milliseconds=10),
    "timeout": timedelta(milliseconds=5000),
    "session_id": 0,
    "session_epoch": -1,
    "current_leader_epoch": -1,
    "leader_epoch": -1,
    "timestamp": -1,
    "records": W.make_batch(),
    # the ACL APIs: a code Kafka does not know (0) closes the connection
    "resource_type_filter": 2,
    "pattern_type_filter": 3,
    "resource_pattern_type": 3,
    "operation": 3,
    "permission_type": 3,
}


def sample(kind, name, topic_id):
    """A value of a kio field type: one element per array, so every level is built."""
    if name == "topic_id":
        return topic_id
    if name in ("name", "topic", "resource_name"):
        return TOPIC
    if name == "transactional_id" and type(None) not in typing.get_args(kind):
        return "versions-txn"  # the transaction APIs' own id: a string, never null
    if name in VALUES:
        return VALUES[name]
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        return sample(next(a for a in typing.get_args(kind) if a is not type(None)), name, topic_id)
    if origin is tuple:
        return (sample(typing.get_args(kind)[0], name, topic_id),)
    if dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        return kind(
            **{f.name: sample(hints[f.name], f.name, topic_id) for f in dataclasses.fields(kind)}
        )
    if kind is uuid.UUID:
        return topic_id
    if issubclass(kind, timedelta):
        return timedelta(0)
    for base, value in ((bool, False), (bytes, b""), (str, "raftlog-tests"), (int, 0)):
        if issubclass(kind, base):
            return value
    raise TypeError(f"no sample for {kind}")


def _open_transaction_coordinated_by(bootstrap: str, node: str) -> str:
    """A transactional id `node` coordinates, with a transaction left open on TOPIC: its
    DescribeTransactions answer then carries a start time. Kafka answers -1 where there is
    none, which kio, this test's decoder, cannot read into a datetime (real clients read it
    as an int64)."""
    from confluent_kafka import Producer

    for i in range(500):
        txn_id = f"versions-{i}"
        index = coordinator_partition(txn_id, TXN_PARTITIONS)
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
        producer.init_transactions()  # creates __transaction_state the first time
        if W.find_partition_leader(bootstrap, "__transaction_state", index)[1] == node:
            producer.begin_transaction()
            producer.produce(TOPIC, b"open")
            producer.flush()
            return txn_id
    raise AssertionError(f"no transactional id coordinated by {node}")


def test_every_advertised_version_answers(module_cluster):
    module_cluster.create_topic(TOPIC, partitions=1, replication_factor=3)
    _, leader = W.find_partition_leader(module_cluster.bootstrap, TOPIC, 0)
    VALUES["transactional_ids"] = (
        _open_transaction_coordinated_by(module_cluster.bootstrap, leader),
    )
    with W.KafkaWire(leader) as w:
        md = w.call(
            W.METADATA,
            12,
            {
                "topics": [{"name": TOPIC, "topic_id": None}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        topic_id = md.topics[0].topic_id
        versions = w.api_versions()
        tried = []
        for api_key, (low, high) in sorted(versions.items()):
            for version in range(low, high + 1):
                request = sample(request_schema(api_key, version), "", topic_id)
                response = w.request(request)
                assert response.__version__ == version, (api_key, version)
                tried.append((api_key, version))
    assert len(tried) == sum(high - low + 1 for low, high in versions.values())
