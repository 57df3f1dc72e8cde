"""A node cut off from its peers sends clients to the majority.

Three nodes in network namespaces; node 1's traffic to and from its peers is dropped while
clients still reach it. librdkafka asks only the brokers it is connected to for metadata,
so a producer that knows node 1 alone kept hearing "no leader" from it until the heal. Now
node 1, once it hears from no majority, names the other brokers and not itself, and the
producer's writes are acknowledged by the majority while node 1 is still cut off.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from support import node_logs
from support.cluster import wait_for

from . import netns
from .faults import Injector
from .nodes import Nodes

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOPIC = "cutoff"


@pytest.fixture
def cluster(artifacts_dir: Path) -> Iterator[Nodes]:
    reason = netns.unavailable_reason()
    if reason:
        pytest.skip(reason)
    netns.cleanup_leftovers()
    pid = os.getpid()
    net = netns.Net(pid, netns.pick_subnet(pid))
    nodes: Nodes | None = None
    try:
        net.create()
        net.check_connectivity()
        nodes = Nodes(net, artifacts_dir / f"cut-off-{pid}")
        nodes.write_configs()
        for i in nodes.ids:
            nodes.start(i)
        nodes.wait_ready(timeout=90)
        nodes.create_topic(TOPIC, 3)
        yield nodes
    finally:
        if nodes is not None:
            nodes.stop_all(graceful=False)
            logs = [p for n in nodes.nodes.values() for p in (n.log, n.console)]
            node_logs.check_files("cut-off nodes", logs)  # conftest fails the test on any
        net.teardown()


def brokers_named_by(nodes: Nodes, i: int) -> set[int]:
    admin = AdminClient({"bootstrap.servers": nodes.nodes[i].kafka})
    return set(admin.list_topics(timeout=10).brokers)


def test_a_node_cut_off_from_its_peers_sends_clients_to_the_majority(cluster: Nodes) -> None:
    nodes = cluster
    assert brokers_named_by(nodes, 1) == {1, 2, 3}
    injector = Injector(nodes.net, nodes)
    injector.apply("isolate_leader", 1)  # peers only: the clients still reach node 1
    wait_for(
        lambda: brokers_named_by(nodes, 1) == {2, 3},
        20,
        what="node 1 to name only the majority's brokers",
    )
    # A producer that knows node 1 alone, with librdkafka's default timeouts.
    producer = Producer({"bootstrap.servers": nodes.nodes[1].kafka, "acks": "all"})
    results: list[tuple[KafkaError | None, int]] = []
    for p in range(3):
        producer.produce(
            TOPIC,
            b"while node 1 is cut off",
            partition=p,
            on_delivery=lambda err, msg: results.append((err, msg.partition())),
        )
    assert producer.flush(60) == 0
    assert sorted(results, key=lambda r: r[1]) == [(None, 0), (None, 1), (None, 2)]
    injector.heal()
    wait_for(
        lambda: brokers_named_by(nodes, 1) == {1, 2, 3},
        20,
        what="node 1 to name itself again after the heal",
    )
