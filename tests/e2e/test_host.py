"""Several brokers per host (issue 45) with real processes: `raftlog cluster up --hosts 1
--brokers-per-host 2` on loopback, a supervisor (`raftlog serve --config host.toml`) of two
brokers. Kafka clients see two brokers, racked by the host, and produce and consume through
them; a broker killed with -9 is started again by the supervisor (its /v1/host and /metrics
count the restart) and serves again. `raftlog cluster add-host`, once another command
changing cluster.json lets go of its lock, then starts a second host of two brokers that
join: Metadata lists them in its rack, a topic created afterwards has a replica of every
partition on it, the controller keeps three voters, `cluster status` shows it, and `cluster
down` stops both supervisors and their brokers cleanly (exit 0, no ERROR in any log, no
process left)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support import node_logs
from support.cluster import (
    pick_base_port,
    port_is_free,
    processes_under,
    raftlog_argv,
    reap,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

HOST = "127.0.0.1"
HOST_OFFSET = (
    4000  # `cluster up --hosts`: host h's supervisor at kafka-port+4000+h-1 (CLI contract)
)


def _get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://{HOST}:{port}{path}", timeout=3) as r:
        return bytes(r.read())


def _brokers(port: int) -> list[dict[str, Any]]:
    answer: list[dict[str, Any]] = json.loads(_get(port, "/v1/host"))["brokers"]
    return answer


def _racks(admin: AdminClient) -> dict[int, str | None]:
    return {int(n.id): n.rack for n in admin.describe_cluster(request_timeout=10).result(15).nodes}


def _cli(*args: str) -> str:
    """`raftlog <args>`'s stdout; fails the test with its output if it fails."""
    done = subprocess.run(
        [*raftlog_argv(), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


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


def test_a_host_of_two_brokers_then_a_second_host(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for _ in range(20):  # the brokers' ports and both hosts' free
        base = pick_base_port(nodes=4)
        if all(port_is_free(base + HOST_OFFSET + h) for h in (0, 1)):
            break
    host_port, second_port = base + HOST_OFFSET, base + HOST_OFFSET + 1
    supervisors: list[int] = []
    try:
        _cli(
            "cluster", "up", "--hosts", "1", "--brokers-per-host", "2", "--data", str(data),
            "--kafka-port", str(base), "--broker", "offsets.topic.replication.factor=2",
            "--broker", "transaction.state.log.replication.factor=2",
        )  # fmt: skip
        state = json.loads((data / "cluster.json").read_text())
        supervisors = [h["pid"] for h in state["hosts"]]
        assert state["hosts"][0]["status"] == f"{HOST}:{host_port}"
        assert all(b["state"] == "running" for b in _brokers(host_port))
        bootstrap = f"{HOST}:{base},{HOST}:{base + 1}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_for(lambda: _racks(admin) == {1: "host-1", 2: "host-1"}, 60,
                 what="both brokers in Metadata, racked by the host")  # fmt: skip
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
        assert 'raftlog_host_broker_restarts_total{host="host-1",node="2"} 1.0' in metrics
        assert 'raftlog_host_broker_failing{host="host-1",node="2"} 0.0' in metrics
        # acks=all on two replicas: every write needs the restarted broker
        after = [b"after-%d" % i for i in range(20)]
        _produce(bootstrap, "t", after)
        assert sorted(_consume(bootstrap, "t", 40)) == sorted(first + after)

        # a second host: brokers 3 and 4, the next ports, rack host-2, its supervisor next;
        # while another command changes cluster.json (its lock held here) add-host waits,
        # then reads what that one wrote: it neither takes the same host number and ports
        # nor writes over it
        before = (data / "cluster.json").read_text()
        with open(data / "cluster.json.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            adding = subprocess.Popen(
                [*raftlog_argv(), "cluster", "add-host", "--data", str(data)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert adding.stderr is not None
            waits = adding.stderr.readline()
            assert waits.startswith("waiting for another `raftlog cluster` command"), waits
            assert (data / "cluster.json").read_text() == before
            assert port_is_free(second_port) and not (data / "host-2").exists()
        stdout, stderr = adding.communicate(timeout=120)
        assert adding.returncode == 0, stdout + stderr
        out = stdout.splitlines()
        assert out[-1] == ",".join(f"{HOST}:{base + i}" for i in range(4)), out
        state = json.loads((data / "cluster.json").read_text())
        supervisors = [h["pid"] for h in state["hosts"]]
        assert [b["node_id"] for b in _brokers(second_port)] == [3, 4]
        assert [n["host"] for n in state["nodes"]] == ["host-1", "host-1", "host-2", "host-2"]
        one, two = (tomllib.loads(Path(h["config"]).read_text()) for h in state["hosts"])
        settings = {
            f"{t}.replication.factor": 2 for t in ("offsets.topic", "transaction.state.log")
        }
        assert one["broker"] == two["broker"] == settings  # the [broker] of `cluster up`
        assert two["cluster_secret"] == one["cluster_secret"]
        racks = {1: "host-1", 2: "host-1", 3: "host-2", 4: "host-2"}
        wait_for(lambda: _racks(admin) == racks, 30, what="the new brokers in Metadata, racked")
        admin.create_topics([NewTopic("grown", 4, 2)])["grown"].result(30)
        placed = admin.list_topics("grown", timeout=10).topics["grown"].partitions
        assert len(placed) == 4
        for partition in placed.values():  # rack-aware: one replica on each host
            assert len(partition.replicas) == 2
            assert {racks[r] for r in partition.replicas} == {"host-1", "host-2"}
        _produce(bootstrap, "grown", [b"grown-%d" % i for i in range(4)])

        status = _cli("cluster", "status", "--data", str(data)).splitlines()
        at = status.index(f"host host-2  supervisor pid {supervisors[1]}  {HOST}:{second_port}")
        assert [line.split()[:2] for line in status[at + 1 :]] == [["node", "3"], ["node", "4"]]
        assert all(" up (pid " in line for line in status if line.startswith("  node"))
        # the controller quorum stays at its size (3) with four brokers
        assert sum("controller voter" in line for line in status) == 3, status

        pids = [b["pid"] for port in (host_port, second_port) for b in _brokers(port)]
        out = _cli("cluster", "down", "--data", str(data)).splitlines()
        assert out == [
            f"host host-{h} (pid {pid}) stopped" for h, pid in enumerate(supervisors, 1)
        ], out
        # ours to reap (conftest made this process their subreaper); reaped, not ours to kill
        assert [os.waitpid(supervisors.pop(), 0)[1] for _ in range(2)] == [0, 0]
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
        assert processes_under(tmp_path) == []
        for h in (1, 2):
            assert "every broker stopped" in (data / f"host-{h}" / "raftlog.log").read_text()
        for node in (1, 2, 3, 4):
            host = "host-1" if node < 3 else "host-2"
            broker_log = data / host / f"broker-{node}" / "raftlog.log"
            assert "stopping: handing over leadership" in broker_log.read_text()
    finally:
        for pid in [*supervisors, *processes_under(tmp_path)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            reap(pid)
        # each supervisor's log, each broker's log and console: no ERROR, no traceback (or
        # conftest fails the test)
        node_logs.check_files(
            "hosts", [*data.glob("host-*/*.log"), *data.glob("host-*/broker-*/*.log")]
        )
