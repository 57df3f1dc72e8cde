"""`raftlog cluster up|down|status`: a cluster of node processes on this machine's loopback."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from raftlog.config.node_config import NodeConfig, toml_value
from raftlog_app.cluster_state import changing_state, read_state, updating_state, write_state
from raftlog_app.local_nodes import (
    HOST,
    RAFT_OFFSET,
    ClusterError,
    NodeSpec,
    alive,
    busy_ports,
    check_listeners,
    kafka_answers,
    node_specs,
    start_node,
    status,
    write_config,
)

# `cluster up --secure`: Kafka's ACL authorizer, nothing allowed without an ACL, and one
# super user, SUPER_USER, whom the CLI's commands log in as over SASL_PLAINTEXT with the
# client properties written to TOOLS_CONFIG (cluster.json's "tools" names both).
SECURE_BROKER: dict[str, Any] = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": False,
    "super.users": "User:admin",
}
SUPER_USER = "admin"
TOOLS_CONFIG = "admin.properties"


def up(
    data: Path,
    nodes: int,
    kafka_port: int,
    timeout: float,
    broker: dict[str, Any] | None = None,
    progress: bool = True,
    listeners: tuple[str, ...] = ("PLAINTEXT",),
    secure: bool = False,
    racks: tuple[str, ...] = (),
) -> str:
    """`secure`: SECURE_BROKER's settings under `broker`'s, and a super user for the CLI
    (secure_tools); `listeners` must then hold SASL_PLAINTEXT, which the CLI uses. `racks`:
    node i's broker.rack is racks[(i - 1) % len(racks)]."""
    check_listeners(listeners)
    if secure and "SASL_PLAINTEXT" not in listeners:
        raise ClusterError("--secure: the CLI logs in over SASL_PLAINTEXT; --listeners needs it")
    if secure:
        broker = {**SECURE_BROKER, **(broker or {})}
    data = data.resolve()
    with changing_state(data, timeout, progress, create=True):
        _refuse_running(data)
        specs = node_specs(data, nodes, kafka_port, listeners)
        busy = busy_ports(
            [
                p
                for s in specs
                for p in (*s.listener_ports().values(), s.raft_port, s.admin_port, s.proxy_port)
            ]
        )
        if busy:
            raise ClusterError(f"ports in use: {busy}; pick another --kafka-port")
        secret, admin_token = secrets.token_hex(16), secrets.token_hex(16)
        for spec in specs:
            if not spec.config_path.exists():
                rack = racks[(spec.node_id - 1) % len(racks)] if racks else None
                write_config(spec, specs, secret, broker or {}, admin_token, rack)
        pids = {spec.node_id: start_node(spec.config_path, spec.data_dir) for spec in specs}
        bootstrap = ",".join(f"{HOST}:{s.kafka_port}" for s in specs)
        nodes_json = [s.as_json(pids[s.node_id]) for s in specs]
        write_state(data, {"bootstrap": bootstrap, "nodes": nodes_json})
    wait_ready(specs, pids, timeout, progress)
    if secure:
        secure_tools(data, specs, admin_token, timeout)
    return bootstrap


def _refuse_running(data: Path) -> None:
    state_path = data / "cluster.json"
    if state_path.exists():
        state = json.loads(state_path.read_text())
        running = {n["pid"] for n in state["nodes"] if alive(n["pid"])}
        if running:
            raise ClusterError(
                f"a cluster is already running from {data} (pids "
                f"{', '.join(map(str, sorted(running)))}); `raftlog cluster down --data {data}` first"
            )


HOST_OFFSET = 4000  # `cluster up --hosts`: host h's supervisor (/v1/host, /metrics) at +4000+h-1


def up_hosts(
    data: Path,
    hosts: int,
    per_host: int,
    kafka_port: int,
    timeout: float,
    broker: dict[str, Any] | None = None,
    progress: bool = True,
) -> str:
    """`cluster up --hosts H --brokers-per-host B`: H host supervisors (raftlog_app/host.py)
    on loopback, each running B brokers; broker i (from 1, host by host) has node_id i and
    the ports of `cluster up`'s node i, host h is `host-h`, the rack of its brokers, and its
    files are in DATA/host-h (host.toml, its log, a broker-<i> directory per broker)."""
    data = data.resolve()
    specs = _host_brokers(data, 1, hosts * per_host, per_host, kafka_port)
    by_host = [specs[(h - 1) * per_host : h * per_host] for h in range(1, hosts + 1)]
    ports = [p for h, mine in enumerate(by_host, 1) for p in _host_ports(kafka_port, h, mine)]
    with changing_state(data, timeout, progress, create=True):
        _refuse_running(data)
        busy = busy_ports(ports)
        if busy:
            raise ClusterError(f"ports in use: {busy}; pick another --kafka-port")
        secret, admin_token = secrets.token_hex(16), secrets.token_hex(16)
        state_hosts = [
            _start_host(data, h, mine, specs, kafka_port, secret, admin_token, broker)
            for h, mine in enumerate(by_host, 1)
        ]
        nodes = [
            {**s.as_json(host["pid"]), "host": host["name"]}
            for host, mine in zip(state_hosts, by_host, strict=True)
            for s in mine
        ]
        bootstrap = ",".join(f"{HOST}:{s.kafka_port}" for s in specs)
        write_state(data, {"bootstrap": bootstrap, "hosts": state_hosts, "nodes": nodes})
    _wait_hosts(specs, state_hosts, nodes, timeout, progress)
    return bootstrap


def add_host(data: Path, timeout: float, progress: bool = True) -> tuple[str, list[NodeSpec]]:
    """`cluster add-host`: one more host supervisor of as many brokers as the first host
    runs, which join the running cluster as `add_node`'s node does (each proves the cluster
    secret and the controller admits it: a voter while the voters are fewer than
    controller.quorum.size, else an observer). The next node ids and their ports, host
    H+1 named `host-<H+1>`, the rack of its brokers, its supervisor at kafka-port+4000+H;
    the first host's secret, admin token and [broker] settings. Returns once its brokers
    are registered and answer Kafka clients: the host's name and its brokers."""
    data = data.resolve()
    with updating_state(data, timeout, progress) as state:
        host, specs = _start_added_host(data, state)
    _wait_hosts(specs, [host], state["nodes"], timeout, progress)
    return host["name"], specs


def _start_added_host(data: Path, state: dict) -> tuple[dict[str, Any], list[NodeSpec]]:
    """add_host's part under updating_state: its host started, added to `state`; the host's
    entry there and its brokers."""
    if "hosts" not in state:
        raise ClusterError(
            "a cluster of nodes (cluster up without --hosts) has no hosts to add to: "
            "grow it with `raftlog cluster add-node`"
        )
    if not any(alive(h["pid"]) for h in state["hosts"]):
        raise ClusterError(
            f"no host of the cluster in {data} is running: start it (`raftlog cluster up "
            "--hosts`) before adding a host"
        )
    existing = _state_specs(state, ("PLAINTEXT",))
    first = existing[0]
    kafka_port = first.kafka_port - (first.node_id - 1)
    per_host = sum(n.get("host") == state["hosts"][0]["name"] for n in state["nodes"])
    index = len(state["hosts"]) + 1
    node_id = max(s.node_id for s in existing) + 1
    specs = _host_brokers(data, node_id, per_host, per_host, kafka_port, index)
    busy = busy_ports(_host_ports(kafka_port, index, specs))
    if busy:
        raise ClusterError(
            f"ports in use for host-{index} (brokers {node_id}-{node_id + per_host - 1}): "
            f"{busy}; stop what holds them"
        )
    settings = tomllib.loads(Path(state["hosts"][0]["config"]).read_text())
    host = _start_host(
        data, index, specs, [*existing, *specs], kafka_port, settings["cluster_secret"],
        settings["admin_token"], settings.get("broker"),
    )  # fmt: skip
    state["hosts"].append(host)
    state["nodes"] += [{**s.as_json(host["pid"]), "host": host["name"]} for s in specs]
    state["bootstrap"] = ",".join(n["kafka"] for n in state["nodes"])
    return host, specs


def _host_brokers(
    data: Path, first: int, count: int, per_host: int, kafka_port: int, host: int = 1
) -> list[NodeSpec]:
    """Brokers `first` to `first + count - 1` with `cluster up`'s ports, `per_host` to a
    host from host number `host` on, each in DATA/host-<h>/broker-<id>."""
    return [
        NodeSpec(
            s.node_id,
            data / f"host-{host + (s.node_id - first) // per_host}" / f"broker-{s.node_id}",
            s.kafka_port,
            s.raft_port,
            s.admin_port,
            s.proxy_port,
        )
        for s in node_specs(data, first + count - 1, kafka_port)[first - 1 :]
    ]


def _host_ports(kafka_port: int, host: int, brokers: list[NodeSpec]) -> list[int]:
    """The ports host number `host`'s supervisor and its `brokers` listen on; refuses, in
    one line saying what to change, ports past 65535 or running into each other."""
    top = max(s.node_id for s in brokers)
    if top > RAFT_OFFSET:
        raise ClusterError(
            f"broker {top} does not fit `cluster up`'s ports (broker i's Kafka port is "
            f"kafka-port+i-1, below the Raft ports at +{RAFT_OFFSET}): at most {RAFT_OFFSET} "
            "brokers"
        )
    port = kafka_port + HOST_OFFSET + host - 1
    if port > 65535:
        raise ClusterError(
            f"--kafka-port {kafka_port}: host {host}'s port (+{HOST_OFFSET + host - 1}) "
            "must lie below 65536"
        )
    return [
        port,
        *(p for s in brokers for p in (s.kafka_port, s.raft_port, s.admin_port, s.proxy_port)),
    ]


def _start_host(
    data: Path,
    index: int,
    mine: list[NodeSpec],
    every: list[NodeSpec],
    kafka_port: int,
    secret: str,
    admin_token: str,
    broker: dict[str, Any] | None,
) -> dict[str, Any]:
    """Writes host-<index>'s host config and starts its supervisor; its cluster.json entry."""
    name, directory = f"host-{index}", data / f"host-{index}"
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "host.toml"
    port = kafka_port + HOST_OFFSET + index - 1
    config.write_text(host_config(name, directory, mine, every, port, secret, admin_token, broker))
    return {
        "name": name,
        "pid": start_node(config, directory),
        "config": str(config),
        "status": f"{HOST}:{port}",
        "log": str(directory / "raftlog.log"),
    }


def _wait_hosts(
    specs: list[NodeSpec],
    hosts: list[dict[str, Any]],
    nodes: list[dict[str, Any]],
    timeout: float,
    progress: bool,
) -> None:
    """wait_ready for brokers `specs` of the supervisors `hosts`; a supervisor that exited
    meanwhile (it refused its config) is named with its console's last words."""
    pids = {n["node_id"]: n["pid"] for n in nodes}
    try:
        wait_ready(specs, pids, timeout, progress)
    except ClusterError:
        dead = [h for h in hosts if not alive(h["pid"])]
        if dead:  # a host refused its config: its console says why
            console = Path(dead[0]["config"]).parent / "console.log"
            tail = console.read_text(errors="replace").strip() if console.exists() else ""
            raise ClusterError(f"{dead[0]['name']} exited during start-up: {tail}") from None
        raise


def host_config(
    name: str,
    directory: Path,
    mine: list[NodeSpec],
    every: list[NodeSpec],
    host_port: int,
    secret: str,
    admin_token: str,
    broker: dict[str, Any] | None,
) -> str:
    """A host config (raftlog_app/host.py) running the brokers `mine`, whose ports follow
    each other, with every broker of the cluster as a peer."""
    peers = "".join(
        f'\n[[peers]]\nid = {s.node_id}\nraft = "{HOST}:{s.raft_port}"\n' for s in every
    )
    settings = "".join(f'"{k}" = {toml_value(v)}\n' for k, v in sorted((broker or {}).items()))
    first = mine[0]
    return (
        "# written by `raftlog cluster up --hosts`\n"
        f"brokers = {len(mine)}\n"
        f'host_name = "{name}"\n'
        f'host_listen = "{HOST}:{host_port}"\n'
        f"node_id = {first.node_id}\n"
        f"data_dir = {toml_value(str(directory))}\n"
        f'kafka_listen = "{HOST}:{first.kafka_port}"\n'
        f'raft_listen = "{HOST}:{first.raft_port}"\n'
        f'admin_listen = "{HOST}:{first.admin_port}"\n'
        f'proxy_listen = "{HOST}:{first.proxy_port}"\n'
        f'cluster_secret = "{secret}"\n'
        f'admin_token = "{admin_token}"\n' + peers + (f"\n[broker]\n{settings}" if settings else "")
    )


def secure_tools(data: Path, specs: list[NodeSpec], admin_token: str, timeout: float) -> None:
    """The super user's SCRAM credential, made through the first node's admin API with a
    fresh password (the admin token proves the caller), then written, readable by this user
    only, as the client properties the CLI's commands use when they talk to this cluster;
    cluster.json's "tools" names them and the SASL_PLAINTEXT bootstrap."""
    token = NodeConfig.load(specs[0].config_path).admin_token or admin_token
    password = secrets.token_urlsafe(24)
    body = json.dumps({"name": SUPER_USER, "password": password, "mechanism": "SCRAM-SHA-512"})
    request = urllib.request.Request(
        f"http://{HOST}:{specs[0].admin_port}/v1/users",
        method="POST",
        data=body.encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(request, timeout=10):
                break
        except (urllib.error.URLError, OSError) as e:  # the controller may still be settling
            if time.monotonic() > deadline:
                raise ClusterError(f"--secure: the super user could not be made: {e}") from None
            time.sleep(0.5)
    path = data / TOOLS_CONFIG
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(
            "# the super user raftlog's CLI logs in as (written by `raftlog cluster up --secure`)\n"
            "security.protocol=SASL_PLAINTEXT\n"
            "sasl.mechanism=SCRAM-SHA-512\n"
            f"sasl.username={SUPER_USER}\n"
            f"sasl.password={password}\n"
        )
    # cluster.json read again here: an add-node may have written it meanwhile
    with updating_state(data, timeout) as state:
        state["tools"] = {
            "bootstrap": ",".join(f"{HOST}:{s.listener_ports()['SASL_PLAINTEXT']}" for s in specs),
            "command_config": str(path),
        }


def tools(data: Path) -> tuple[str, Path | None] | None:
    """(bootstrap, client properties) for the CLI's commands against the local cluster in
    `data`: a --secure cluster's super user, else its first listener in the clear; None
    without a cluster there."""
    path = data.resolve() / "cluster.json"
    if not path.exists():
        return None
    state = json.loads(path.read_text())
    secured = state.get("tools")
    if secured:
        return secured["bootstrap"], Path(secured["command_config"])
    return state["bootstrap"], None


def add_node(
    data: Path, timeout: float, progress: bool = True, rack: str | None = None
) -> NodeSpec:
    """Starts one more node that joins the running cluster: it knows every existing node,
    proves the cluster secret, and the cluster adds it to its controller group. It takes the
    first node's [broker] settings, but not its rack: `rack` is its own."""
    data = data.resolve()
    with updating_state(data, timeout, progress) as state:
        spec, specs = _start_added_node(data, state, rack)
    pids = {n["node_id"]: n["pid"] for n in state["nodes"]}
    wait_ready([s for s in specs if alive(pids[s.node_id])], pids, timeout, progress)
    return spec


def _start_added_node(data: Path, state: dict, rack: str | None) -> tuple[NodeSpec, list[NodeSpec]]:
    """add_node's part under updating_state: its node started, added to `state`; the node
    and every node."""
    if "hosts" in state:
        raise ClusterError(
            "a cluster of hosts (cluster up --hosts) grows by a host of its brokers: "
            "`raftlog cluster add-host`"
        )
    first = NodeConfig.load(Path(state["nodes"][0]["config"]))
    base = first.kafka_listen[1] - (first.node_id - 1)
    node_id = max(n["node_id"] for n in state["nodes"]) + 1
    listeners = tuple(x.name for x in first.listeners)
    spec = node_specs(data, node_id, base, listeners)[-1]
    ports = (*spec.listener_ports().values(), spec.raft_port, spec.admin_port, spec.proxy_port)
    busy = busy_ports(list(ports))
    if busy:
        raise ClusterError(f"ports in use for node {node_id}: {busy}")
    existing = _state_specs(state, listeners)
    broker = {k: v for k, v in first.broker.items() if k != "listeners"}  # the new node's own
    write_config(spec, [*existing, spec], first.cluster_secret, broker, first.admin_token, rack)
    pid = start_node(spec.config_path, spec.data_dir)
    state["nodes"].append(spec.as_json(pid))
    state["bootstrap"] = ",".join(n["kafka"] for n in state["nodes"])
    return spec, [*existing, spec]


def _state_specs(state: dict, listeners: tuple[str, ...]) -> list[NodeSpec]:
    """The nodes cluster.json lists, as specs."""
    existing = []
    for n in state["nodes"]:
        kafka, raft, admin, proxy = (
            int(n.get(k, f"{HOST}:0").rsplit(":", 1)[1])
            for k in ("kafka", "raft", "admin", "proxy")
        )
        existing.append(
            NodeSpec(n["node_id"], Path(n["data_dir"]), kafka, raft, admin, proxy, listeners)
        )
    return existing


def wait_ready(specs: list[NodeSpec], pids: dict[int, int], timeout: float, progress: bool) -> None:
    """Returns once a controller leader exists, every node is registered with it and every
    node's Kafka listener answers ApiVersions."""
    deadline = time.monotonic() + timeout
    wanted = {s.node_id for s in specs}
    last = ""
    while time.monotonic() < deadline:
        dead = [s for s in specs if not alive(pids[s.node_id])]
        if dead:
            raise ClusterError(_failure(dead[0], "exited during start-up"))
        answers = [status(f"{HOST}:{s.admin_port}") for s in specs]
        up_count = sum(a is not None for a in answers)
        leaders = {a["controller_leader"] for a in answers if a and a["controller_leader"]}
        registered = set()
        for a in answers:
            if a:
                registered |= set(a["registered_nodes"])
        kafka = sum(kafka_answers(s.kafka_port) for s in specs) if up_count == len(specs) else 0
        line = (
            f"nodes answering {up_count}/{len(specs)}, controller leader "
            f"{next(iter(leaders)) if leaders else 'none yet'}, registered {len(registered & wanted)}/{len(wanted)}, "
            f"Kafka listeners answering {kafka}/{len(specs)}"
        )
        if progress and line != last:
            print(line, file=sys.stderr, flush=True)
            last = line
        if (
            up_count == len(specs)
            and kafka == len(specs)
            and leaders
            and all(a and wanted <= set(a["registered_nodes"]) and a["cluster_id"] for a in answers)
        ):
            return
        time.sleep(0.2)
    raise ClusterError(f"cluster not ready after {timeout:.0f}s ({last})")


def _failure(spec: NodeSpec, what: str) -> str:
    tail = ""
    for name in ("console.log", "raftlog.log"):
        path = spec.data_dir / name
        if path.exists():
            lines = path.read_text(errors="replace").splitlines()[-15:]
            tail += f"\n--- {path} (last lines) ---\n" + "\n".join(lines)
    return f"node {spec.node_id} {what}{tail}"


def down(data: Path, timeout: float = 20.0) -> list[str]:
    """Stops the nodes one after the other: each hands its leaderships to nodes that stay up,
    instead of all of them handing over to each other at once."""
    state = read_state(data.resolve())
    if "hosts" in state:  # each host's supervisor stops its brokers one after the other
        per_host = len(state["nodes"]) // len(state["hosts"])
        return [_stop(f"host {h['name']}", h["pid"], timeout * per_host) for h in state["hosts"]]
    return [_stop(f"node {n['node_id']}", n["pid"], timeout) for n in state["nodes"]]


def _stop(what: str, pid: int, timeout: float) -> str:
    """SIGTERM, then SIGKILL after `timeout`; what happened, in a line."""
    if not alive(pid):
        return f"{what} was not running"
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.05)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return f"{what} (pid {pid}) did not stop in {timeout:.0f}s: killed"
    return f"{what} (pid {pid}) stopped"


def cluster_status(data: Path) -> list[str]:
    state = read_state(data.resolve())
    lines = [f"bootstrap: {state['bootstrap']}"]
    if "hosts" not in state:
        for node in state["nodes"]:
            lines.append(_node_line(node, alive(node["pid"]), None))
        return lines
    for host in state["hosts"]:
        answer = _host_status(host["status"]) if alive(host["pid"]) else None
        if answer is None:
            what = "running, not answering" if alive(host["pid"]) else "stopped"
            lines.append(f"host {host['name']}  {what}")
        else:
            lines.append(f"host {host['name']}  supervisor pid {host['pid']}  {host['status']}")
        brokers = {b["node_id"]: b for b in (answer or {}).get("brokers", [])}
        for node in state["nodes"]:
            if node.get("host") == host["name"]:
                supervised = brokers.get(node["node_id"])
                running = supervised is not None and supervised["pid"] is not None
                lines.append("  " + _node_line(node, running, supervised))
    return lines


def _host_status(address: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://{address}/v1/host", timeout=1.0) as r:
            return json.load(r)
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _node_line(node: dict, running: bool, supervised: dict | None) -> str:
    """A node's line; `supervised`: its host supervisor's word on it (pid, state, restarts)."""
    pid = supervised["pid"] if supervised else node["pid"]
    restarts = f"  restarts: {supervised['restarts']}" if supervised else ""
    if supervised and supervised["state"] == "failing":
        return (
            f"node {node['node_id']}  {node['kafka']}  FAILING: exited "
            f"{supervised['exits_in_a_row']} times in a row (last exit {supervised['last_exit']})"
            + (f", running again (pid {pid})" if running else "")
            + (
                f", next start in {supervised['next_start_in']} s"
                if supervised["next_start_in"] is not None and not running
                else ""
            )
        )
    answer = status(node["admin"]) if running else None
    if answer is None:
        if supervised and not running:
            what = supervised["state"]
        else:
            what = "running, admin not answering" if running else "stopped"
        return f"node {node['node_id']}  {node['kafka']}  {what}{restarts}"
    led = sum(p["is_leader"] for p in answer["partitions"])
    voter = answer.get("controller_voter")  # None: a node of an older release
    role = "" if voter is None else "  controller voter" if voter else "  controller observer"
    return (
        f"node {node['node_id']}  {node['kafka']}  up (pid {pid}){role}  "
        f"controller leader: {answer['controller_leader']}  "
        f"replicas: {len(answer['partitions'])}  leading: {led}{restarts}"
    )
