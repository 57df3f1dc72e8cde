"""The node processes of a local cluster (`raftlog cluster`, a host's brokers): each node's
ports and config file, starting one in its own process group, and probing whether it, its
admin port or its Kafka port answers."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import socket
import struct
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raftlog.config.node_config import toml_value
from raftlog.security.listeners import PROTOCOLS

RAFT_OFFSET = 1000
ADMIN_OFFSET = 2000
PROXY_OFFSET = 3000  # the consume proxy's HTTP port
# Listeners after the first (`cluster up --listeners PLAINTEXT,SASL_SSL`): the k-th at
# kafka port + 3000 + 1000k.
LISTENER_OFFSET = 1000
HOST = "127.0.0.1"
PR_SET_CHILD_SUBREAPER = 36


class ClusterError(Exception):
    pass


@dataclass
class NodeSpec:
    node_id: int
    data_dir: Path
    kafka_port: int
    raft_port: int
    admin_port: int
    proxy_port: int
    listeners: tuple[str, ...] = ("PLAINTEXT",)  # names, which are also their protocols

    @property
    def config_path(self) -> Path:
        return self.data_dir / "raftlog.toml"

    def listener_ports(self) -> dict[str, int]:
        """The first listener on the Kafka port, each further one LISTENER_OFFSET above the
        last of the node's other ports."""
        return {
            name: self.kafka_port + (PROXY_OFFSET + LISTENER_OFFSET * k if k else 0)
            for k, name in enumerate(self.listeners)
        }

    def as_json(self, pid: int | None) -> dict:
        return {
            "node_id": self.node_id,
            "pid": pid,
            "config": str(self.config_path),
            "data_dir": str(self.data_dir),
            "kafka": f"{HOST}:{self.kafka_port}",
            "raft": f"{HOST}:{self.raft_port}",
            "admin": f"{HOST}:{self.admin_port}",
            "proxy": f"{HOST}:{self.proxy_port}",
            "listeners": {n: f"{HOST}:{port}" for n, port in self.listener_ports().items()},
            "log": str(self.data_dir / "raftlog.log"),
        }


def node_specs(
    data: Path, nodes: int, kafka_port: int, listeners: tuple[str, ...] = ("PLAINTEXT",)
) -> list[NodeSpec]:
    return [
        NodeSpec(
            i,
            data / f"node-{i}",
            kafka_port + i - 1,
            kafka_port + RAFT_OFFSET + i - 1,
            kafka_port + ADMIN_OFFSET + i - 1,
            kafka_port + PROXY_OFFSET + i - 1,
            listeners,
        )
        for i in range(1, nodes + 1)
    ]


def check_listeners(listeners: tuple[str, ...]) -> None:
    """`cluster up` waits for the first listener to answer ApiVersions in the clear."""
    unknown = [x for x in listeners if x not in PROTOCOLS]
    if unknown or len(set(listeners)) != len(listeners) or not listeners:
        raise ClusterError(f"--listeners: a list of distinct {', '.join(PROTOCOLS)}")
    if listeners[0] not in ("PLAINTEXT", "SASL_PLAINTEXT"):
        raise ClusterError("--listeners: the first must be PLAINTEXT or SASL_PLAINTEXT")


def write_config(
    spec: NodeSpec,
    all_specs: list[NodeSpec],
    secret: str,
    broker: dict[str, Any],
    admin_token: str | None,
    rack: str | None = None,
) -> None:
    if rack:
        broker = {**broker, "broker.rack": rack}
    peers = "".join(
        f'\n[[peers]]\nid = {s.node_id}\nraft = "{HOST}:{s.raft_port}"\n' for s in all_specs
    )
    kafka = f'kafka_listen = "{HOST}:{spec.kafka_port}"\n'
    kafka += f'advertised_kafka = "{HOST}:{spec.kafka_port}"\n'
    if spec.listeners != ("PLAINTEXT",):
        kafka = ""
        endpoints = ",".join(f"{n}://{HOST}:{p}" for n, p in spec.listener_ports().items())
        broker = {**broker, "listeners": endpoints}
    settings = "".join(f'"{k}" = {toml_value(v)}\n' for k, v in sorted(broker.items()))
    if settings:
        peers += "\n[broker]\n" + settings
    spec.data_dir.mkdir(parents=True, exist_ok=True)
    spec.config_path.write_text(
        f"node_id = {spec.node_id}\n"
        f'data_dir = "{spec.data_dir}"\n' + kafka + f'raft_listen = "{HOST}:{spec.raft_port}"\n'
        f'admin_listen = "{HOST}:{spec.admin_port}"\n'
        f'proxy_listen = "{HOST}:{spec.proxy_port}"\n'
        f'cluster_secret = "{secret}"\n'
        + (f'admin_token = "{admin_token}"\n' if admin_token else "")
        + peers
    )


def parse_setting(item: str) -> tuple[str, Any]:
    """KEY=VALUE from the command line, the value typed as TOML would type it."""
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise ClusterError(f"expected KEY=VALUE, got {item!r}")
    if text in ("true", "false"):
        return key, text == "true"
    for kind in (int, float):
        try:
            return key, kind(text)
        except ValueError:
            pass
    return key, text


def become_subreaper() -> bool:
    """Makes this process the subreaper of its descendants (Linux PR_SET_CHILD_SUBREAPER).
    `raftlog cluster up` starts detached nodes and exits; without this they go to PID 1
    (which in a container may never reap them) and a node killed with -9 stays a zombie.
    Tests and the benchmark call it, so they can waitpid() the nodes they kill."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def start_node(config: Path, data_dir: Path) -> int:
    """Starts `raftlog serve` detached from this terminal, logging to raftlog.log; its
    console (what never reaches the log, such as a crash's traceback) goes to console.log."""
    console = open(data_dir / "console.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "raftlog_app", "serve", "--config", str(config)),
            *("--log-file", str(data_dir / "raftlog.log")),
        ],
        stdin=subprocess.DEVNULL,
        stdout=console,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=data_dir,
    )
    console.close()
    return proc.pid


def alive(pid: int | None) -> bool:
    """Running and not a zombie: the one check of a node's process for the CLI, the tests and
    the benchmark. A zombie child of ours (or an orphan we reap as subreaper) is reaped on the
    way, so a node killed with -9 does not stay in the process table."""
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # comm may hold spaces and parentheses: the state follows the last ')'
    if stat[stat.rfind(")") + 2] in "ZX":
        reap(pid)
        return False
    return True


def reap(pid: int) -> None:
    """waitpid() a child of ours (or an orphan re-parented to us as subreaper); others are
    left alone."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def status(admin: str, timeout: float = 1.0) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://{admin}/v1/status", timeout=timeout) as r:
            return json.load(r)
    except (urllib.error.URLError, OSError, ValueError):
        return None


# ApiVersions v0, correlation id 1, client id "raftlog-cli"
_API_VERSIONS = struct.pack(">hhih", 18, 0, 1, 11) + b"raftlog-cli"


def kafka_answers(port: int, timeout: float = 1.0) -> bool:
    """The node's Kafka listener answers ApiVersions without an error: what every client
    asks first. A node can be registered with the controller while its listener refuses
    or drops clients, and `cluster up` must not call that cluster up."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS)
            head = b""
            while len(head) < 10:  # size, correlation id, error code
                chunk = s.recv(10 - len(head))
                if not chunk:
                    return False
                head += chunk
    except OSError:
        return False
    _, correlation, error = struct.unpack(">iih", head)
    return correlation == 1 and error == 0


def _port_free(port: int) -> bool:
    """Whether a node could listen there: bound as its listeners bind (SO_REUSEADDR), so a
    closed server's TIME-WAIT does not count; one left by a client connection whose local
    port this was does, since it stops the node's bind as well."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def busy_ports(ports: list[int]) -> str | None:
    """The ports no node could listen on, each a port in TIME-WAIT only so marked."""
    busy = [p for p in ports if not _port_free(p)]
    if not busy:
        return None
    waiting = _time_wait_only(busy)
    return ", ".join(
        f"{p} (a closed connection's TIME-WAIT: free within 60 s)" if p in waiting else str(p)
        for p in busy
    )


def _time_wait_only(ports: list[int]) -> set[int]:
    """Of `ports`, those whose only TCP sockets (from /proc/net/tcp) are in TIME-WAIT."""
    states: dict[int, set[str]] = {}
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return set()
    for line in lines:
        fields = line.split()
        port = int(fields[1].rsplit(":", 1)[1], 16)
        if port in ports:
            states.setdefault(port, set()).add(fields[3])
    return {port for port, seen in states.items() if seen == {"06"}}  # 06: TCP_TIME_WAIT
