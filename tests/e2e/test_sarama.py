"""sarama, Go's most used Kafka client, against three real nodes: the release Debian ships
(1.22.1, golang-github-shopify-sarama-dev), built by `make test` into build/sarama-client
from tests/clients/sarama/main.go. An idempotent SyncProducer (acks all, snappy) writes;
a consumer group of two members reads everything once and commits with OffsetCommit v1,
which sarama before 1.40 sends and Kafka 4 no longer serves (Redpanda and Kafka 3.9 do); its
ClusterAdmin runs an operator's calls, DescribeConfigs and the ACL APIs at v0 (likewise
dropped by Kafka 4). The cluster has an authorizer (the ACL calls need one) and every
plaintext client, User:ANONYMOUS, is a super user."""

from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from support import groups as G
from support import segments as S
from support import wire as W

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CLIENT = Path(__file__).resolve().parents[2] / "build" / "sarama-client"
TOPIC = "sarama"
PARTITIONS = 6
RECORDS = 3000
SNAPPY = 2
READ = 3  # Kafka's ACL operation code
BROKER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory: pytest.TempPathFactory):
    """conftest's module cluster, with BROKER's authorizer."""
    with G.running_cluster(tmp_path_factory.mktemp("sarama"), name="sarama", broker=BROKER) as c:
        yield c


def _run(*args: str) -> dict[str, Any]:
    if not CLIENT.exists():
        pytest.fail("build/sarama-client is needed: `make test` builds it (go, sarama from apt)")
    proc = subprocess.run([str(CLIENT), *args], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def produced(module_cluster) -> list[list[int]]:
    module_cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    W.topic_metadata(module_cluster.bootstrap, TOPIC)
    return _run("produce", module_cluster.bootstrap, TOPIC, str(RECORDS), "snappy")["records"]


def test_an_idempotent_producer_gets_every_record_acknowledged_in_order(
    produced, module_cluster
) -> None:
    """Each partition's acknowledged offsets run from 0 without a gap or a repeat, in send
    order; the batches are stored as sarama compressed them."""
    assert sorted(i for i, _, _ in produced) == list(range(RECORDS))
    by_partition: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, partition, offset in produced:
        by_partition[partition].append((i, offset))
    ends = W.end_offsets(module_cluster.bootstrap, TOPIC)
    assert len(by_partition) == PARTITIONS
    for partition, sent in by_partition.items():
        assert [o for _, o in sorted(sent)] == list(range(len(sent))), partition
        assert ends[partition] == len(sent)
    node = module_cluster.node_ids[0]
    codecs = {
        b.data[22] & 0x07
        for p in range(PARTITIONS)
        for b in S.iter_batches(module_cluster.partition_dir(node, TOPIC, p), ends[p])
    }
    assert codecs == {SNAPPY}


def test_a_group_of_two_reads_every_record_once_and_commits_where_it_stopped(
    produced, module_cluster
) -> None:
    """The two members split the partitions; every acknowledged record is read once, at its
    offset, key, value and header intact; the offsets sarama committed (v1) are the log ends,
    as another client reads them."""
    got = _run("group", module_cluster.bootstrap, TOPIC, "sarama-group", str(RECORDS))
    first, second = (set(m) for m in got["members"])
    assert first and second and not first & second
    assert first | second == set(range(PARTITIONS))
    where = {(p, o): i for i, p, o in produced}
    read = [(p, o) for p, o, _, _, _ in got["records"]]
    assert sorted(read) == sorted(where)
    for p, o, key, value, header in got["records"]:
        i = where[(p, o)]
        assert (key, value, header) == (f"k-{i}", f"v-{i}", str(i))
    ends = W.end_offsets(module_cluster.bootstrap, TOPIC)
    consumer = Consumer({"bootstrap.servers": module_cluster.bootstrap, "group.id": "sarama-group"})
    try:
        committed = consumer.committed(
            [TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30
        )
    finally:
        consumer.close()
    assert {tp.partition: tp.offset for tp in committed} == ends


def test_cluster_admin_calls_an_operator_makes_work_and_answer_rightly(module_cluster) -> None:
    """Every call of the flow (tests/clients/sarama/admin.go) returns no error, and what it
    finds is what the calls before it did: ListTopics names the topic's one config set on
    it (a v0 DescribeConfigs says which are defaults), DescribeConfig shows it and then
    AlterConfig's value, DeleteRecords moves the oldest offset, the group's commit is listed,
    the ACL is listed, deleted and gone."""
    topic, group = "sarama-admin", "sarama-admin-group"
    got = _run("admin", module_cluster.bootstrap, topic, group)
    assert {call: r["error"] for call, r in got.items()} == dict.fromkeys(got, "")
    assert {call: r["value"] for call, r in got.items()} == {
        "CreateTopic": None,
        "DescribeTopics": [[topic, 0, 2]],
        "DescribeCluster": [3, -1],  # sarama asks Metadata v0, which has no controller
        "ListTopics": [2, 3, {"retention.ms": "86400000"}],
        "CreatePartitions": None,
        "DescribeConfig": {"retention.ms": ["86400000", False], "cleanup.policy": ["delete", True]},
        "AlterConfig": None,
        "DescribeConfigAfterAlter": {
            "retention.ms": ["3600000", False],
            "cleanup.policy": ["delete", True],
        },
        "LedByController": None,  # the partition DeleteRecords goes to (admin.go)
        "GetOffsetNewest": 5,
        "DeleteRecords": None,
        "GetOffsetOldest": 2,
        "CommitOffset": None,
        "ListConsumerGroups": [True, ""],  # listed; offsets only: no protocol
        "DescribeConsumerGroups": [[group, 0, "Empty", 0]],
        "ListConsumerGroupOffsets": [[3, 0], [-1, 0]],
        "CreateACL": None,
        "ListAcls": [[topic, 0, "User:sarama", READ]],  # v0: no pattern type (LITERAL)
        "DeleteACL": [[0, topic, "User:sarama", READ]],
        "ListAclsAfterDelete": [],
        "DeleteTopic": None,
    }
