"""A node's log as `raftlog cluster up` starts it (raftlog_app/logs.py): every event once, in
raftlog.log, one JSON object per line with `log.format=json`; console.log beside it gets
none of them (it used to get a copy of every line). Without an authorizer the node says so,
once, at WARNING."""

from __future__ import annotations

import json
import socket

import pytest
from support.cluster import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def test_a_node_logs_each_event_once_as_json(cluster_factory) -> None:
    cluster = cluster_factory(nodes=1, name="logs", broker={"log.format": "json"})
    node = cluster.node(1)
    cluster.create_topic("logged", partitions=1, replication_factor=1)
    # an event with a known text: a Kafka connection the node drops (a frame size it refuses)
    host, port = node.kafka_addr
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall((2**31 - 1).to_bytes(4, "big"))
        s.settimeout(10)
        assert s.recv(1) == b""

    def events() -> list[dict]:
        return [json.loads(line) for line in node.log.read_text().splitlines()]

    dropped = wait_for(
        lambda: [e for e in events() if "closing Kafka connection" in e["message"]],
        30,
        what="the node to log the dropped connection",
    )
    assert len(dropped) == 1, dropped
    assert dropped[0]["level"] == "WARNING" and dropped[0]["node"] == 1
    assert dropped[0]["logger"] == "kafka_api.connection"
    serving = [e for e in events() if e["message"].startswith("node 1 serving Kafka")]
    assert len(serving) == 1, serving
    # no authorizer: one WARNING at start says what any client may then do
    (unguarded,) = [e for e in events() if e["message"].startswith("no authorizer")]
    assert unguarded["level"] == "WARNING" and "any client" in unguarded["message"]
    console = (node.data_dir / "console.log").read_text()
    assert "serving Kafka" not in console and "closing Kafka connection" not in console, console
