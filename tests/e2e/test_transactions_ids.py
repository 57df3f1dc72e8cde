"""The transactional ids a cluster keeps are bounded (transactional.id.max.per.partition), with
confluent-kafka's transactional producers on three real nodes: with room for two ids, a third
producer's id takes the place of the idle id used longest ago; that id's old producer is then
refused (its next transaction fails) and a new instance of it starts afresh, and a
read_committed consumer reads exactly the transactions that committed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaException
from support import groups as G
from support import transactions as T

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TOPIC = "bounded-ids"
BROKER = {
    # one coordinator partition, so every id competes for the same room
    "transaction.state.log.num.partitions": 1,
    "transactional.id.max.per.partition": 2,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with G.running_cluster(tmp_path_factory.mktemp("txn_ids"), name="txn_ids", broker=BROKER) as c:
        c.create_topic(TOPIC, partitions=1, replication_factor=3)
        yield c


def _commit(producer: Any, value: bytes) -> None:
    producer.begin_transaction()
    producer.produce(TOPIC, value, partition=0)
    producer.commit_transaction()


def test_a_new_id_past_the_bound_takes_the_place_of_the_longest_idle(cluster: Any) -> None:
    first = T.transactional(cluster.bootstrap, "first")
    _commit(first, b"first-1")
    second = T.transactional(cluster.bootstrap, "second")
    _commit(second, b"second-1")
    third = T.transactional(cluster.bootstrap, "third")  # "first" is forgotten for it
    _commit(third, b"third-1")
    with pytest.raises(KafkaException):
        _commit(first, b"first-lost")
    again = T.transactional(cluster.bootstrap, "first")  # "second" makes room now
    _commit(again, b"first-2")
    _commit(third, b"third-2")
    values = T.read_values(cluster.bootstrap, TOPIC, [0], expected=5)
    assert sorted(values) == [b"first-1", b"first-2", b"second-1", b"third-1", b"third-2"]
