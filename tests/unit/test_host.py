"""Host configs (raftlog_app/host.py): N brokers placed from one config, each a node config
`raftlog serve` accepts, and a host that cannot place them refused in one line saying what to
change; the restart backoff on an injected clock."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.cluster import raftlog_argv

from raftlog.common.errors import ConfigError
from raftlog.config.node_config import NodeConfig
from raftlog_app import cluster, cluster_state, host, local_nodes
from raftlog_app.host import Backoff

GOOD = """
brokers = 3
host_name = "h1"
node_id = 4
data_dir = "data"
kafka_listen = "127.0.0.1:9092"
raft_listen = "127.0.0.1:10092"
cluster_secret = "s"

[[peers]]
id = 1
raft = "other:10092"

[broker]
"num.partitions" = 2
"""


def load(tmp_path: Path, text: str, cores: int = 2) -> host.HostConfig:
    path = tmp_path / "host.toml"
    path.write_text(text)
    return host.load(path, cores=cores)


def test_brokers_get_ids_ports_dirs_peers_and_the_host_as_rack(tmp_path: Path) -> None:
    config = load(tmp_path, GOOD)
    nodes = [b.node for b in config.brokers]
    assert [n.node_id for n in nodes] == [4, 5, 6]
    assert [n.kafka_listen for n in nodes] == [("127.0.0.1", p) for p in (9092, 9093, 9094)]
    assert [n.raft_listen[1] for n in nodes] == [10092, 10093, 10094]
    assert [n.admin_listen[1] for n in nodes] == [11092, 11093, 11094]
    assert [n.proxy_listen for n in nodes] == [("127.0.0.1", p) for p in (12092, 12093, 12094)]
    assert [n.data_dir for n in nodes] == [
        (tmp_path / f"data/broker-{i}").resolve() for i in (4, 5, 6)
    ]
    for n in nodes:
        assert n.peers == {
            1: ("other", 10092),
            4: ("127.0.0.1", 10092),
            5: ("127.0.0.1", 10093),
            6: ("127.0.0.1", 10094),
        }
        assert n.rack == "h1"
        assert n.broker_setting("num.partitions") == 2
    assert config.listen == ("127.0.0.1", 11091)  # below the first admin port
    assert config.name == "h1"


def test_written_broker_config_reads_back_the_same(tmp_path: Path) -> None:
    """What the supervisor writes for `raftlog serve` is the node it checked."""
    for spec in load(tmp_path, GOOD).brokers:
        path = tmp_path / f"{spec.node.node_id}.toml"
        path.write_text(spec.config_text)
        assert NodeConfig.load(path) == spec.node


def test_auto_is_one_broker_per_core_and_a_set_rack_wins(tmp_path: Path) -> None:
    text = GOOD.replace("brokers = 3", 'brokers = "auto"').replace(
        '"num.partitions" = 2', '"broker.rack" = "r9"'
    )
    config = load(tmp_path, text, cores=5)
    assert len(config.brokers) == 5
    assert {b.node.rack for b in config.brokers} == {"r9"}


def test_host_name_defaults_to_the_machine(tmp_path: Path) -> None:
    config = load(tmp_path, GOOD.replace('host_name = "h1"\n', ""))
    assert config.name == socket.gethostname()
    assert config.brokers[0].node.rack == socket.gethostname()


def test_given_addresses_move_with_the_broker(tmp_path: Path) -> None:
    text = GOOD.replace(
        'raft_listen = "127.0.0.1:10092"',
        'raft_listen = "0.0.0.0:10092"\nadvertised_raft = "h1:20092"\n'
        'advertised_kafka = "h1:9092"\nadmin_listen = "0.0.0.0:30000"\nproxy_listen = ""\n'
        'host_listen = "0.0.0.0:31000"',
    )
    config = load(tmp_path, text)
    last = config.brokers[2].node
    assert last.advertised_kafka == ("h1", 9094)
    assert last.advertised_raft == ("h1", 20094)
    assert last.admin_listen == ("0.0.0.0", 30002)
    assert last.proxy_listen is None
    assert last.peers[4] == ("h1", 20092)
    assert config.listen == ("0.0.0.0", 31000)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("brokers = 3", "brokers = 0", 'brokers: expected "auto" (one per core) or a number'),
        ("brokers = 3", 'brokers = "all"', 'brokers: expected "auto"'),
        ("brokers = 3", "brokers = true", 'brokers: expected "auto"'),
        ("brokers = 3", "brokers = 257", "a number from 1 to 256"),
        # more brokers than the port ranges hold
        (
            'raft_listen = "127.0.0.1:10092"',
            'raft_listen = "127.0.0.1:9094"',
            "brokers = 3 do not fit: kafka_listen at 9092 and raft_listen at 9094 are 2 "
            "apart; set them at least 3 apart, or fewer brokers",
        ),
        (
            'kafka_listen = "127.0.0.1:9092"',
            'kafka_listen = "127.0.0.1:65534"\nadmin_listen = "127.0.0.1:2000"\nproxy_listen = ""',
            "kafka_listen 127.0.0.1:65534 + 2 passes 65535; set kafka_listen to a port at "
            "most 65533, or fewer brokers",
        ),
        (
            'kafka_listen = "127.0.0.1:9092"',
            'kafka_listen = "127.0.0.1:9092"\nadmin_listen = "127.0.0.1:12093"',
            "proxy_listen (kafka_listen + 3000) at 12092 and admin_listen at 12093 are 1 apart",
        ),
        (
            'cluster_secret = "s"',
            'cluster_secret = "s"\nhost_listen = "127.0.0.1:11093"',
            "host_listen port 11093 is broker 5's admin_listen; set host_listen",
        ),
        (
            'raft = "other:10092"',
            'raft = "other:10092"\n[[peers]]\nid = 5\nraft = "elsewhere:1"',
            "[[peers]] lists node 5 at 'elsewhere:1', but it is this host's broker at "
            "'127.0.0.1:10093'; fix node_id or that entry",
        ),
        (
            '"num.partitions" = 2',
            '"listeners" = "PLAINTEXT://:9092"',
            "[broker] listeners: a host config gives each broker kafka_listen's port + k",
        ),
        ('"num.partitions" = 2', '"num.partitions" = "x"', "broker 4: [broker] num.partitions"),
        ("node_id = 4\n", "", "missing required setting: node_id"),
        ('host_name = "h1"', "host_name = 3", "host_name: expected up to 255 printable"),
    ],
)
def test_refusals_are_one_line_saying_what_to_change(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    assert old in GOOD
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, GOOD.replace(old, new))
    text = str(caught.value)
    assert message in text
    assert "\n" not in text
    assert text.startswith(str(tmp_path / "host.toml"))


def test_a_listed_own_broker_at_its_own_address_is_fine(tmp_path: Path) -> None:
    """The same [[peers]] list can go into every host's config."""
    text = GOOD.replace(
        'raft = "other:10092"', 'raft = "other:10092"\n[[peers]]\nid = 6\nraft = "127.0.0.1:10094"'
    )
    assert len(load(tmp_path, text).brokers[0].node.peers) == 4


def test_ports_in_use_names_each_with_its_broker_and_setting(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        text = GOOD.replace("9092", str(port)).replace("brokers = 3", "brokers = 1")
        text = text.replace(
            'raft_listen = "127.0.0.1:10092"',
            f'raft_listen = "127.0.0.1:{port + 1}"\nadmin_listen = "127.0.0.1:{port + 2}"\nproxy_listen = ""\nhost_listen = "127.0.0.1:{port + 3}"',
        )
        config = load(tmp_path, text)
        assert host.ports_in_use(config) == f"{port} (broker 4's kafka_listen)"
    assert host.ports_in_use(config) is None


def test_a_node_config_is_not_a_host_config(tmp_path: Path) -> None:
    node, hosted = tmp_path / "node.toml", tmp_path / "host.toml"
    node.write_text(GOOD.replace("brokers = 3\n", ""))
    hosted.write_text(GOOD)
    assert not host.is_host_config(node)
    assert host.is_host_config(hosted)
    assert not host.is_host_config(tmp_path / "missing.toml")


def test_backoff_doubles_per_exit_in_a_row_up_to_the_cap() -> None:
    b = Backoff(first=1.0, cap=8.0, stable=60.0, failing_after=3)
    now = 0.0
    delays = []
    for _ in range(6):
        b.started(now)
        now += 0.5  # crashes half a second after each start
        delays.append(b.exited(now))
        now += delays[-1]
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert b.restarts == 6 and b.in_a_row == 6


def test_backoff_failing_after_three_quick_exits_until_a_stable_run() -> None:
    b = Backoff(first=1.0, cap=60.0, stable=60.0, failing_after=3)
    for t in (0.0, 10.0):
        b.started(t)
        b.exited(t + 1)
        assert not b.failing(t + 1)
    b.started(20.0)
    assert b.exited(21.0) == 4.0
    assert b.failing(21.0)
    b.started(25.0)
    assert b.failing(84.9)  # running, but not yet for `stable` seconds
    assert not b.failing(85.0)
    # an exit after a stable run starts the row again: the first delay, not failing
    assert b.exited(200.0) == 1.0
    assert b.in_a_row == 1 and not b.failing(200.0)
    assert b.restarts == 4


def test_cluster_up_hosts_configs_place_every_broker_once(tmp_path: Path) -> None:
    """`cluster up --hosts 3 --brokers-per-host 2`'s host configs: nodes 1-6 with `cluster up`'s
    ports for node i, two per host, every one a peer of every other, racked by host."""
    specs = local_nodes.node_specs(tmp_path, 6, 9092)
    nodes = []
    for h in range(3):
        text = cluster.host_config(
            f"host-{h + 1}", tmp_path / f"host-{h + 1}", specs[2 * h : 2 * h + 2], specs,
            13092 + h, "secret", "token", {"num.partitions": 3},
        )  # fmt: skip
        config = host.from_dict(tomllib.loads(text), tmp_path, cores=2)
        assert config.listen == ("127.0.0.1", 13092 + h)
        nodes += [b.node for b in config.brokers]
    assert [n.node_id for n in nodes] == [1, 2, 3, 4, 5, 6]
    for n, spec in zip(nodes, specs, strict=True):
        assert n.kafka_listen[1] == spec.kafka_port and n.raft_listen[1] == spec.raft_port
        assert n.admin_listen[1] == spec.admin_port and n.proxy_listen == (
            "127.0.0.1",
            spec.proxy_port,
        )
        assert n.peers == {s.node_id: ("127.0.0.1", s.raft_port) for s in specs}
        assert n.rack == f"host-{(n.node_id + 1) // 2}"
        assert n.data_dir == tmp_path / f"host-{(n.node_id + 1) // 2}" / f"broker-{n.node_id}"
        assert n.broker_setting("num.partitions") == 3


def test_status_line_of_a_failing_broker_says_so() -> None:
    node = {"node_id": 2, "kafka": "127.0.0.1:9093", "admin": "127.0.0.1:1", "pid": 1}
    waiting = {
        "pid": None, "state": "failing", "restarts": 5, "exits_in_a_row": 5, "last_exit": 1,
        "next_start_in": 16.0,
    }  # fmt: skip
    assert cluster._node_line(node, False, waiting) == (
        "node 2  127.0.0.1:9093  FAILING: exited 5 times in a row (last exit 1), "
        "next start in 16.0 s"
    )
    again = {**waiting, "pid": 77, "next_start_in": None}
    assert cluster._node_line(node, True, again).endswith(", running again (pid 77)")
    between = {**waiting, "state": "starting again", "exits_in_a_row": 1}
    assert cluster._node_line(node, False, between) == (
        "node 2  127.0.0.1:9093  starting again  restarts: 5"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Stand-ins for `raftlog serve` (real processes, no node): one exits at once with 3 every
# time, the other runs until SIGTERM and exits 0 on it.
CRASHES = "import sys; sys.exit(3)"
RUNS = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); "
    "time.sleep(60)"
)


async def test_supervisor_restarts_an_exiting_broker_until_failing_and_stops_the_rest(
    tmp_path: Path,
) -> None:
    port = _free_port()
    text = GOOD.replace("brokers = 3", "brokers = 2").replace(
        'cluster_secret = "s"', f'cluster_secret = "s"\nhost_listen = "127.0.0.1:{port}"'
    )
    config = load(tmp_path, text)

    def command(path: Path) -> list[str]:
        return [sys.executable, "-c", CRASHES if "broker-4" in str(path) else RUNS]

    supervisor = host.Supervisor(
        config,
        log_to_files=True,
        backoff=lambda: Backoff(first=0.02, cap=0.05, stable=60.0, failing_after=3),
        command=command,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(supervisor.run(stop))

    def scrape(path: str) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return bytes(r.read())

    try:
        deadline = time.monotonic() + 20
        while not supervisor.slots[0].backoff.failing(time.monotonic()):
            assert time.monotonic() < deadline, supervisor.status()
            await asyncio.sleep(0.02)
        status = json.loads(await asyncio.to_thread(scrape, "/v1/host"))
        crashing, runs = status["brokers"]
        assert crashing["state"] == "failing" and crashing["last_exit"] == 3
        assert crashing["exits_in_a_row"] >= 3 and crashing["restarts"] >= 3
        assert runs["state"] == "running" and runs["restarts"] == 0 and runs["pid"]
        metrics = (await asyncio.to_thread(scrape, "/metrics")).decode()
        assert 'raftlog_host_broker_failing{host="h1",node="4"} 1.0' in metrics
        assert 'raftlog_host_broker_failing{host="h1",node="5"} 0.0' in metrics
        assert 'raftlog_host_broker_up{host="h1",node="5"} 1.0' in metrics
        assert 'raftlog_host_broker_restarts_total{host="h1",node="5"} 0.0' in metrics
        # the node config each broker was started with, as `raftlog serve` reads it
        written = config.brokers[1].config_path
        assert NodeConfig.load(written) == config.brokers[1].node
        pid = runs["pid"]
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)
    assert supervisor.slots[1].last_exit == 0  # stopped by SIGTERM, cleanly
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert supervisor.status()["brokers"][1]["state"] == "stopped"


def test_compose_hosts_place_six_brokers_that_know_each_other() -> None:
    """deploy/compose/hosts.yml's host configs, as the containers' supervisors load them."""
    compose = Path(__file__).resolve().parents[2] / "deploy" / "compose"
    nodes = [
        b.node for h in (1, 2, 3) for b in host.load(compose / f"host-{h}.toml", cores=64).brokers
    ]
    assert [n.node_id for n in nodes] == [1, 2, 3, 4, 5, 6]
    everyone = {n.node_id: n.advertised_raft for n in nodes}
    for n in nodes:
        assert n.peers == everyone
        assert n.rack == f"host{(n.node_id + 1) // 2}"
        assert n.advertised_raft[0] == n.rack  # the service name
        assert n.advertised_kafka == ("127.0.0.1", n.kafka_listen[1])  # published 1:1
    assert len({n.kafka_listen[1] for n in nodes}) == 6


def test_serve_refuses_a_host_whose_port_is_taken_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`raftlog serve --config host.toml` starts nothing, and makes no directory, then."""
    from raftlog_app.cli import main

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        text = GOOD.replace("brokers = 3", "brokers = 2").replace(
            '"127.0.0.1:9092"', f'"127.0.0.1:{port - 1}"'
        )
        text = text.replace('"127.0.0.1:10092"', f'"127.0.0.1:{port + 1000}"')
        (tmp_path / "host.toml").write_text(text)
        assert main(["serve", "--config", str(tmp_path / "host.toml")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("raftlog: host h1: ports in use: ") and err.count("\n") == 1
    assert f"{port} (broker 5's kafka_listen)" in err  # and nothing else, unless held elsewhere
    assert err.endswith("; stop what holds them or move kafka_listen, raft_listen, "
                        "admin_listen or proxy_listen\n")  # fmt: skip
    assert not (tmp_path / "data").exists()


def _hosts_state(data: Path, kafka_port: int, pid: int) -> dict:
    """cluster.json and host-1/host.toml as `cluster up --hosts 1 --brokers-per-host 2`
    writes them, its supervisor `pid` (no process is started)."""
    specs = cluster._host_brokers(data, 1, 2, 2, kafka_port)
    config = data / "host-1" / "host.toml"
    config.parent.mkdir(parents=True)
    port = kafka_port + cluster.HOST_OFFSET
    config.write_text(
        cluster.host_config("host-1", config.parent, specs, specs, port, "s", "t", {"a": 1})
    )
    state = {
        "bootstrap": ",".join(f"127.0.0.1:{s.kafka_port}" for s in specs),
        "hosts": [{"name": "host-1", "pid": pid, "config": str(config)}],
        "nodes": [{**s.as_json(pid), "host": "host-1"} for s in specs],
    }
    (data / "cluster.json").write_text(json.dumps(state))
    return state


def test_add_host_refuses_in_one_line_and_starts_nothing(tmp_path: Path) -> None:
    """`cluster add-host` where it cannot be met: the next host's ports taken, no host
    running, a cluster of nodes; and `add-node` on a cluster of hosts names add-host."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]  # broker 3's Kafka port: the next host's first
        assert port - 2 + cluster.HOST_OFFSET + 1 <= 65535
        state = _hosts_state(tmp_path, port - 2, os.getpid())
        with pytest.raises(local_nodes.ClusterError) as refused:
            cluster.add_host(tmp_path, timeout=1)
    assert str(refused.value).startswith("ports in use for host-2 (brokers 3-4): ")
    assert f" {port}" in str(refused.value) and "\n" not in str(refused.value)
    assert str(refused.value).endswith("; stop what holds them")
    assert not (tmp_path / "host-2").exists()
    assert json.loads((tmp_path / "cluster.json").read_text()) == state

    with pytest.raises(local_nodes.ClusterError, match=r"`raftlog cluster add-host`$"):
        cluster.add_node(tmp_path, timeout=1)

    stopped = tmp_path / "stopped"
    _hosts_state(stopped, port - 2, 0)  # pid 0: not running
    with pytest.raises(local_nodes.ClusterError, match="no host of the cluster .* is running"):
        cluster.add_host(stopped, timeout=1)

    nodes = tmp_path / "nodes"
    nodes.mkdir()
    (nodes / "cluster.json").write_text(json.dumps({"bootstrap": "", "nodes": []}))
    with pytest.raises(local_nodes.ClusterError, match="`raftlog cluster add-node`$"):
        cluster.add_host(nodes, timeout=1)


def test_a_change_of_cluster_json_waits_for_the_one_under_way_then_gives_up_in_one_line(
    tmp_path: Path,
) -> None:
    """Two `cluster add-host` at once would read one cluster.json, both start host-2 on the
    same ports and each write cluster.json over the other's: the CLI takes cluster.json.lock
    (held here, as a running add-host holds it) before it reads, says it waits and for whom,
    and past --timeout gives up in one line, having started and written nothing. (Host-2's
    first port is taken too, so a CLI that ignored the lock would be refused for that.)"""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        state = _hosts_state(tmp_path, port - 2, os.getpid())
        with open(tmp_path / cluster_state.LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            lock.write(f"{os.getpid()}\n")
            lock.flush()
            done = subprocess.run(
                [*raftlog_argv(), "cluster", "add-host", "--data", str(tmp_path)]
                + ["--timeout", "1"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
    changing = f"`raftlog cluster` command (pid {os.getpid()})"
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.splitlines() == [
        f"waiting for another {changing} changing {tmp_path / 'cluster.json'}",
        f"raftlog: another {changing} is still changing {tmp_path / 'cluster.json'} after 1s; "
        "try again once it ends",
    ]
    assert json.loads((tmp_path / "cluster.json").read_text()) == state
    assert not (tmp_path / "host-2").exists()


def test_a_change_of_a_few_fields_of_cluster_json_keeps_the_one_written_meanwhile(
    tmp_path: Path,
) -> None:
    """A restarted node's new pid written into cluster.json (bench/, the tests' Cluster)
    while an add-node is under way: updating_state waits for the add-node's lock, then reads
    the cluster.json it wrote, so neither change is lost; a change that raises writes
    nothing."""
    (tmp_path / "cluster.json").write_text(json.dumps({"bootstrap": "a", "nodes": [{"pid": 1}]}))
    with open(tmp_path / cluster_state.LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the add-node under way

        def restarted() -> None:
            with cluster_state.updating_state(tmp_path, timeout=30, progress=False) as state:
                state["nodes"][0]["pid"] = 2

        with ThreadPoolExecutor(1) as pool:
            change = pool.submit(restarted)
            time.sleep(0.3)
            assert not change.done()
            cluster_state.write_state(tmp_path, {"bootstrap": "a,b", "nodes": [{"pid": 1}, {}]})
            fcntl.flock(lock, fcntl.LOCK_UN)
            change.result(timeout=30)
    written = {"bootstrap": "a,b", "nodes": [{"pid": 2}, {}]}
    assert cluster_state.read_state(tmp_path) == written

    with (
        pytest.raises(KeyError),
        cluster_state.updating_state(tmp_path, timeout=1) as state,
    ):
        state["bootstrap"] = "lost"
        state["no such key"]  # noqa: B018 - the change fails half-way
    assert cluster_state.read_state(tmp_path) == written


def test_host_clusters_past_the_port_scheme_are_refused_before_any_start(
    tmp_path: Path,
) -> None:
    """Broker i's Kafka port is kafka-port+i-1, below the Raft ports at +1000: at most 1000
    brokers; and host h's supervisor at +4000+h-1 below 65536."""
    with pytest.raises(local_nodes.ClusterError, match="broker 1024 does not fit"):
        cluster.up_hosts(tmp_path, 16, 64, 9092, timeout=1)
    with pytest.raises(local_nodes.ClusterError, match="host 2's port .* below 65536"):
        cluster.up_hosts(tmp_path, 2, 1, 61535, timeout=1)
    assert list(tmp_path.iterdir()) == []
