"""Kafka client connections past what a node's file descriptors hold.

Nothing bounded them: 19,950 idle connections from one client took every descriptor of a node
(ulimit -n 20,000), and until they closed the node accepted no other client, and a file it
had to open would have failed. A node now holds at most max.connections, by default what its
descriptors leave after its partition replicas and HTTP listeners; at the cap, the connection
quiet longest is closed to let the new one in. Here node 1 runs under ulimit -n 1,500 (its
Kafka connections' share is a few hundred) and one client opens 1,600 connections to it and
holds them: the node still takes new clients, creates and leads new replicas, serves
produce and fetch, and logs no ERROR.

The Raft port likewise: a stranger's connection is closed after 5 s without a handshake, but
nothing bounded how many were in their handshake at once: one client (1,500 connections a
second) held 12,600 of a node's descriptors through it. A node now holds 64 handshakes at
once, a new connection past them taking the place of the oldest. Here a client keeps 1,600
connections to node 1's Raft port open, opening a new one as each is closed.
"""

from __future__ import annotations

import asyncio
import re
import resource
import socket
import threading
import time
import urllib.request
from typing import Any

import pytest
from support import records as R
from support import wire as W
from support.cluster import Cluster, rss_kb

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

OPEN_FILES = 1500
FLOOD = 1600
RAFT_FLOOD = 3000  # (each is closed after 5 s and opened again)
ADDRESS_SPACE = 4 * 1024**3  # node 1's, where memory is pushed: a leak fails it, not the machine


class Flood:
    """`count` connections to `address` kept open from a thread of their own: each the node
    closes is opened again, until stop()."""

    def __init__(self, address: str, count: int) -> None:
        host, port = address.rsplit(":", 1)
        self._address, self._count = (host, int(port)), count
        self._stopping = threading.Event()
        self.opened = 0
        self._thread = threading.Thread(target=asyncio.run, args=(self._run(),), daemon=True)

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._thread.join(30)

    async def _run(self) -> None:
        await asyncio.gather(*(self._hold() for _ in range(self._count)))

    async def _hold(self) -> None:
        while not self._stopping.is_set():
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(*self._address), 2)
            except (OSError, TimeoutError):
                await asyncio.sleep(0.1)
                continue
            self.opened += 1
            while not self._stopping.is_set() and not reader.at_eof():
                try:
                    await asyncio.wait_for(reader.read(4096), 0.2)
                except TimeoutError:
                    pass
                except OSError:
                    break
            writer.close()


def _evicted(cluster, node: int) -> int:
    with urllib.request.urlopen(f"http://{cluster.node(node).admin}/metrics", timeout=10) as r:
        text = r.read().decode()
    found = re.search(r"^raftlog_kafka_connections_evicted_total (\S+)$", text, re.M)
    return int(float(found.group(1))) if found else 0


def _node_1_short_of_files(cluster_factory: Any, flood: int) -> Cluster:
    """A cluster whose node 1 runs under ulimit -n OPEN_FILES, and this process room for a
    flood of `flood` connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < flood + 1000:
        pytest.skip(f"this process may open {hard} files, the flood needs {flood + 1000}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, flood + 1000), hard))
    cluster: Cluster = cluster_factory(broker={"max.partition.replicas.per.node": 40})
    cluster.kill(1)
    cluster.restart(1, open_files=OPEN_FILES)
    cluster.wait_all_ready()
    return cluster


def _serves_a_new_topic(cluster: Cluster, topic: str) -> None:
    """A new topic of three replicas (one on node 1) is made and led, and 60 records written
    to it acks=all are read back whole."""
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    produced = R.produce_confluent(
        cluster.bootstrap, topic, R.make_records("flood", 60, 3), timeout=60
    )
    assert len(produced.acked) == 60, produced.failed[:3]
    ends = W.end_offsets(cluster.bootstrap, topic)
    got = R.consume_confluent(cluster.bootstrap, topic, ends, timeout=60)
    R.check_log(produced.acked, got).raise_if_failed()


def test_a_flood_of_idle_connections_leaves_a_node_its_descriptors_and_its_clients(
    cluster_factory,
) -> None:
    cluster = _node_1_short_of_files(cluster_factory, FLOOD)
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
        _serves_a_new_topic(cluster, "after-flood")
    finally:
        for s in flood:
            s.close()
    assert cluster.is_alive(1), cluster.log_tails([1])
    found = cluster.logged_errors()
    assert not found, found


def test_a_flood_of_handshakes_on_the_raft_port_leaves_a_node_its_descriptors(
    cluster_factory,
) -> None:
    cluster = _node_1_short_of_files(cluster_factory, RAFT_FLOOD)
    with Flood(cluster.node(1).raft, RAFT_FLOOD) as flood:
        for _ in range(100):  # until the flood has opened them all
            if flood.opened >= RAFT_FLOOD:
                break
            time.sleep(0.1)
        with W.KafkaWire(cluster.node(1).kafka, timeout=10) as w:
            assert W.PRODUCE in w.api_versions(), "node 1 stopped answering new clients"
        _serves_a_new_topic(cluster, "during-flood")
    assert cluster.is_alive(1), cluster.log_tails([1])
    found = cluster.logged_errors()
    assert not found, found


def test_strangers_on_the_raft_port_leave_no_memory_behind(module_cluster) -> None:
    """Each connection's 5 s handshake deadline kept it, closed or not, with the 40 KB of its
    msgpack reader: one client reconnecting as fast as it could for 20 s grew a node by
    1.2 GB (and as much again every 20 s). Now a closed connection cancels its deadline."""
    cluster = module_cluster
    pid = cluster.node(1).pid
    resource.prlimit(pid, resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    before = peak = rss_kb(pid) or 0
    with Flood(cluster.node(1).raft, 500) as flood:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            peak = max(peak, rss_kb(pid) or 0)
            time.sleep(0.2)
    growth_mb = (peak - before) // 1024
    print(f"\n{flood.opened} stranger connections: RSS {before // 1024} MB, peak +{growth_mb} MB")
    assert flood.opened > 5000, flood.opened
    assert growth_mb < 100, f"{flood.opened} connections grew node 1 by {growth_mb} MB"
    assert cluster.is_alive(1)
