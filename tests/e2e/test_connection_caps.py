"""Kafka client connections past what a node's file descriptors hold.

Nothing bounded them: 19,950 idle connections from one client took every descriptor of a node
(ulimit -n 20,000), and until they closed the node accepted no other client, and a file it
had to open would have failed. A node now holds at most max.connections, by default what its
descriptors leave after its partition replicas and HTTP listeners; at the cap, the connection
quiet longest is closed to let the new one in. Here node 1 runs under ulimit -n 1,500 (its
Kafka connections' share is a few hundred) and one client opens 1,600 connections to it and
holds them: the node still takes new clients, creates and leads new replicas, serves
produce and fetch, and logs no ERROR.
"""

from __future__ import annotations

import re
import resource
import socket
import urllib.request

import pytest
from support import records as R
from support import wire as W

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

OPEN_FILES = 1500
FLOOD = 1600


def _evicted(cluster, node: int) -> int:
    with urllib.request.urlopen(f"http://{cluster.node(node).admin}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = re.search(r"^raftlog_kafka_connections_evicted_total (\S+)$", text, re.M)
    return int(float(found.group(1))) if found else 0


def test_a_flood_of_idle_connections_leaves_a_node_its_descriptors_and_its_clients(
    cluster_factory,
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < FLOOD + 1000:
        pytest.skip(f"this process may open {hard} files, the flood needs {FLOOD + 1000}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, FLOOD + 1000), hard))
    cluster = cluster_factory(broker={"max.partition.replicas.per.node": 40})
    cluster.kill(1)
    cluster.restart(1, open_files=OPEN_FILES)
    cluster.wait_all_ready()
    flood: list[socket.socket] = []
    try:
        for _ in range(FLOOD):
            try:
                flood.append(socket.create_connection(cluster.node(1).kafka_addr, timeout=2))
            except OSError:
                break  # not accepted (the node had no descriptor left for it)
        # A new client is answered: an idle flood connection made room for it.
        with W.KafkaWire(cluster.node(1).kafka, timeout=10) as w:
            assert W.PRODUCE in w.api_versions(), "node 1 stopped answering new clients"
        assert _evicted(cluster, 1) > 0
        # Its partitions' files still open: a new topic's replicas on it are made and led.
        cluster.create_topic("after-flood", partitions=3, replication_factor=3)
        produced = R.produce_confluent(
            cluster.bootstrap, "after-flood", R.make_records("flood", 60, 3), timeout=60
        )
        assert len(produced.acked) == 60, produced.failed[:3]
        ends = W.end_offsets(cluster.bootstrap, "after-flood")
        got = R.consume_confluent(cluster.bootstrap, "after-flood", ends, timeout=60)
        R.check_log(produced.acked, got).raise_if_failed()
    finally:
        for s in flood:
            s.close()
    assert cluster.is_alive(1), cluster.log_tails([1])
    found = cluster.logged_errors()
    assert not found, found
