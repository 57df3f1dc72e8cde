"""Several brokers per host (issue 45) with real processes: `raftlog serve --config host.toml`
with brokers = 2 on loopback. Kafka clients see two brokers, racked by the host, and produce
and consume through them; a broker killed with -9 is started again by the supervisor (its
/v1/host and /metrics count the restart) and serves again; SIGTERM to the supervisor stops
both brokers cleanly (exit 0, no ERROR in any log)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support import groups as G
from support import node_logs
from support import wire as W
from support.cluster import (
    ADMIN_OFFSET,
    RAFT_OFFSET,
    pick_base_port,
    port_is_free,
    processes_under,
    raftlog_argv,
    reap,
    tail,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

HOST = "127.0.0.1"


def _get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=3) as r:
        return bytes(r.read())


def _brokers(port: int) -> list[dict[str, Any]]:
    answer: list[dict[str, Any]] = json.loads(_get(port, "/v1/host"))["brokers"]
    return answer


def _racks(bootstrap: str) -> dict[int, str | None]:
    with W.KafkaWire(bootstrap) as w:
        response = G.call(
            w,
            W.METADATA,
            {
                "topics": [],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
            timeout=10,
        )
    return {int(b.node_id): b.rack for b in response.brokers}


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failed: list[object] = []
    for i, value in enumerate(values):
        producer.produce(
            topic, value, partition=i % 2, on_delivery=lambda e, _m: e and failed.append(e)
        )
    assert producer.flush(60) == 0 and not failed, failed


def _consume(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            for m in consumer.consume(count, timeout=1.0):
                assert not m.error(), m.error()
                got.append(m.value())
    finally:
        consumer.close()
    return got


def test_a_host_of_two_brokers(tmp_path: Path) -> None:
    base = pick_base_port(nodes=2)
    host_port = base + ADMIN_OFFSET - 1
    assert port_is_free(host_port)
    config = tmp_path / "host.toml"
    config.write_text(
        "brokers = 2\n"
        'host_name = "testhost"\n'
        "node_id = 1\n"
        'data_dir = "data"\n'
        f'kafka_listen = "{HOST}:{base}"\n'
        f'raft_listen = "{HOST}:{base + RAFT_OFFSET}"\n'
        'cluster_secret = "host-test-secret"\n'
        "\n[broker]\n"
        '"offsets.topic.replication.factor" = 2\n'
        '"transaction.state.log.replication.factor" = 2\n'
    )
    log = tmp_path / "supervisor.log"
    supervisor = subprocess.Popen(
        [*raftlog_argv(), "serve", "--config", str(config), "--log-file", str(log)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    bootstrap = f"{HOST}:{base},{HOST}:{base + 1}"
    try:
        # the supervisor's default host_listen: the port below the first admin port
        wait_for(
            lambda: all(b["state"] == "running" for b in _brokers(host_port)), 30, what="brokers"
        )
        wait_for(lambda: _racks(f"{HOST}:{base}") == {1: "testhost", 2: "testhost"}, 60,
                 what="both brokers in Metadata, racked by the host")  # fmt: skip
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("t", 2, 2)])["t"].result(30)
        first = [b"before-%d" % i for i in range(20)]
        _produce(bootstrap, "t", first)
        assert sorted(_consume(bootstrap, "t", 20)) == sorted(first)

        killed = _brokers(host_port)[1]["pid"]
        os.kill(killed, signal.SIGKILL)
        back = wait_for(
            lambda: [
                b
                for b in _brokers(host_port)
                if b["node_id"] == 2 and b["state"] == "running" and b["pid"] != killed
            ],
            30,
            what="broker 2 started again",
        )[0]
        assert back["restarts"] == 1 and back["last_exit"] == -signal.SIGKILL
        metrics = _get(host_port, "/metrics").decode()
        assert 'raftlog_host_broker_restarts_total{host="testhost",node="2"} 1.0' in metrics
        assert 'raftlog_host_broker_failing{host="testhost",node="2"} 0.0' in metrics
        # acks=all on two replicas: every write needs the restarted broker
        after = [b"after-%d" % i for i in range(20)]
        _produce(bootstrap, "t", after)
        assert sorted(_consume(bootstrap, "t", 40)) == sorted(first + after)

        pids = [b["pid"] for b in _brokers(host_port)]
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(60) == 0, tail(log)
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
        assert "every broker stopped" in log.read_text()
        for node in (1, 2):
            broker_log = tmp_path / "data" / f"broker-{node}" / "raftlog.log"
            assert "stopping: handing over leadership" in broker_log.read_text()
        assert len(list((tmp_path / "data").glob("broker-*/*.log"))) == 4
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(supervisor.pid, signal.SIGKILL)
        for pid in processes_under(tmp_path):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            reap(pid)
        supervisor.wait(10)
        # the supervisor's log, each broker's log and console: no ERROR, no traceback (or
        # conftest fails the test)
        node_logs.check_files("host testhost", [log, *(tmp_path / "data").glob("broker-*/*.log")])
