"""The three raftlog node processes, each `raftlog serve` inside its own namespace.

The data layout is the one `raftlog cluster up` writes (`<root>/node-<i>/raftlog.toml`,
`<root>/cluster.json`), so `raftlog audit --data <root>` and `raftlog cluster status --data
<root>` read it unchanged. `ip netns exec` execs the node, so the pid we hold is the node's
own: kill -9 and SIGSTOP hit the node, not a wrapper (checked at every start).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.cluster import (
    http_get_json,
    pid_alive,
    raftlog_argv,
    reap,
    tail,
    wait_for,
    wait_pid_gone,
)

from raftlog_app.cluster_state import changing_state, write_state

from .netns import Net

KAFKA_PORT, RAFT_PORT, ADMIN_PORT = 9092, 10092, 11092
BROKER = {"default.replication.factor": 3, "offsets.topic.replication.factor": 3}

Statuses = dict[int, dict[str, Any]]


class NodeError(RuntimeError):
    pass


@dataclass
class NodeProc:
    node_id: int
    ip: str
    data_dir: Path
    popen: subprocess.Popen | None = None
    paused: bool = False

    @property
    def config(self) -> Path:
        return self.data_dir / "raftlog.toml"

    @property
    def log(self) -> Path:
        return self.data_dir / "raftlog.log"

    @property
    def console(self) -> Path:
        """The process's stdout and stderr: its log (`raftlog serve` logs to stderr) and what
        dies unlogged."""
        return self.data_dir / "console.log"

    @property
    def kafka(self) -> str:
        return f"{self.ip}:{KAFKA_PORT}"

    @property
    def admin(self) -> str:
        return f"{self.ip}:{ADMIN_PORT}"

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def alive(self) -> bool:
        return self.pid is not None and pid_alive(self.pid)


class Nodes:
    """Start, kill, pause and query the nodes; every process is reaped by stop_all()."""

    def __init__(self, net: Net, root: Path) -> None:
        self.net = net
        self.root = root
        self.secret = secrets.token_hex(16)
        self.nodes = {i: NodeProc(i, net.ip(i), root / f"node-{i}") for i in net.ids}
        self._pool = ThreadPoolExecutor(max_workers=len(self.nodes), thread_name_prefix="status")

    @property
    def ids(self) -> list[int]:
        return sorted(self.nodes)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.kafka for n in self.nodes.values())

    # ----------------------------------------------------------------- configs

    def write_configs(self) -> None:
        peers = "".join(
            f'\n[[peers]]\nid = {n.node_id}\nraft = "{n.ip}:{RAFT_PORT}"\n'
            for n in self.nodes.values()
        )
        broker = "\n[broker]\n" + "".join(f'"{k}" = {v}\n' for k, v in BROKER.items())
        for n in self.nodes.values():
            n.data_dir.mkdir(parents=True, exist_ok=True)
            n.config.write_text(
                f"node_id = {n.node_id}\n"
                f'data_dir = "{n.data_dir}"\n'
                f'kafka_listen = "{n.kafka}"\n'
                f'advertised_kafka = "{n.kafka}"\n'
                f'raft_listen = "{n.ip}:{RAFT_PORT}"\n'
                f'admin_listen = "{n.admin}"\n'
                f'cluster_secret = "{self.secret}"\n' + peers + broker
            )

    def write_cluster_json(self) -> None:
        """cluster.json as `raftlog cluster up` writes it (pids current)."""
        doc = {
            "bootstrap": self.bootstrap,
            "nodes": [
                {
                    "node_id": n.node_id,
                    "pid": n.pid,
                    "config": str(n.config),
                    "data_dir": str(n.data_dir),
                    "kafka": n.kafka,
                    "raft": f"{n.ip}:{RAFT_PORT}",
                    "admin": n.admin,
                    "log": str(n.log),
                }
                for n in self.nodes.values()
            ],
        }
        with changing_state(self.root, timeout=60, progress=False):
            write_state(self.root, doc)

    # ----------------------------------------------------------------- processes

    def start(self, i: int) -> None:
        """`ip netns exec <ns> raftlog serve --config FILE`, own session, log appended."""
        n = self.nodes[i]
        if n.alive():
            raise NodeError(f"node {i} is already running (pid {n.pid})")
        self._reap(n)
        marker = f"\n==== fault suite: starting node {i} at {time.ctime()} ====\n".encode()
        with open(n.log, "ab") as log:
            log.write(marker)
        with open(n.console, "ab") as console:
            console.write(marker)
            console.flush()
            n.popen = subprocess.Popen(
                self.net.exec_argv(i, [*raftlog_argv(), "serve", "--config", str(n.config)]),
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                cwd=n.data_dir,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,
            )
        n.paused = False
        pid = n.popen.pid
        # `ip netns exec` must have exec'd the node in place: its pid is the node's.
        wait_for(lambda: _is_node(pid, n.config), 10, 0.02, what=f"node {i} exec (pid {pid})")
        self.write_cluster_json()

    def kill(self, i: int) -> None:
        """kill -9 the node process and reap it."""
        n = self.nodes[i]
        if n.pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(n.pid, signal.SIGKILL)
        if not wait_pid_gone(n.pid, 15):
            raise NodeError(f"node {i} (pid {n.pid}) survived SIGKILL")
        self._reap(n)
        n.paused = False

    def pause(self, i: int) -> None:
        n = self.nodes[i]
        if n.pid is not None and n.alive():
            os.kill(n.pid, signal.SIGSTOP)
            n.paused = True

    def resume(self, i: int) -> None:
        n = self.nodes[i]
        if n.pid is not None and n.paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(n.pid, signal.SIGCONT)
        n.paused = False

    def terminate(self, i: int, timeout: float = 30.0) -> bool:
        """SIGTERM (graceful: leaderships handed over); SIGKILL after `timeout`."""
        n = self.nodes[i]
        if not n.alive():
            self._reap(n)
            return True
        self.resume(i)
        os.kill(n.pid, signal.SIGTERM)  # type: ignore[arg-type]
        if wait_pid_gone(n.pid, timeout):  # type: ignore[arg-type]
            self._reap(n)
            return True
        self.kill(i)
        return False

    def stop_all(self, graceful: bool = True) -> None:
        """Every node stopped and reaped, whatever state it is in. Never raises."""
        for i in self.ids:
            with contextlib.suppress(Exception):
                if graceful:
                    self.terminate(i)
                else:
                    self.resume(i)
                    self.kill(i)
        for n in self.nodes.values():
            with contextlib.suppress(Exception):
                if n.alive():
                    os.kill(n.pid, signal.SIGKILL)  # type: ignore[arg-type]
                    wait_pid_gone(n.pid, 10)  # type: ignore[arg-type]
                self._reap(n)
        self._pool.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def _reap(n: NodeProc) -> None:
        if n.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                n.popen.wait(timeout=5)
            reap(n.popen.pid)

    # ----------------------------------------------------------------- status

    def status(self, i: int, timeout: float = 1.0) -> dict[str, Any] | None:
        """Node i's /v1/status, None if it does not answer (down, paused, cut off)."""
        n = self.nodes[i]
        if not n.alive() or n.paused:
            return None
        try:
            return http_get_json(f"http://{n.admin}/v1/status", timeout=timeout)
        except Exception:  # noqa: BLE001 - any failure means "no answer"
            return None

    def statuses(self, timeout: float = 1.0) -> Statuses:
        """Every answering node's status, fetched in parallel (bounded by `timeout`)."""
        futures = {i: self._pool.submit(self.status, i, timeout) for i in self.ids}
        out = {}
        for i, f in futures.items():
            st = f.result()
            if st is not None:
                out[i] = st
        return out

    def epochs(self, i: int, timeout: float = 10.0) -> dict[str, Any]:
        return http_get_json(f"http://{self.nodes[i].admin}/v1/epochs", timeout=timeout)

    def ready(self, i: int) -> bool:
        st = self.status(i)
        return bool(
            st
            and st.get("node_id") == i
            and st.get("controller_leader") is not None
            and i in (st.get("registered_nodes") or [])
        )

    def wait_ready(self, ids: Iterable[int] | None = None, timeout: float = 90.0) -> None:
        ids = list(ids) if ids is not None else self.ids
        deadline = time.monotonic() + timeout
        for i in ids:
            n = self.nodes[i]
            try:
                wait_for(
                    lambda i=i, n=n: _alive_or_raise(n) and self.ready(i),
                    max(1.0, deadline - time.monotonic()),
                    what=f"node {i} ready",
                )
            except (TimeoutError, NodeError) as exc:
                raise NodeError(f"{exc}\n{self.log_tail(i)}") from exc

    def log_tail(self, i: int, lines: int = 30) -> str:
        n = self.nodes[i]
        return f"----- node {i} console {n.console} -----\n{tail(n.console, lines)}"

    def create_topic(
        self, name: str, partitions: int, timeout: float = 90.0, replication_factor: int = 3
    ) -> None:
        """`raftlog topic create` through the Kafka API (retried: a fresh cluster may still
        be electing controller and offsets leaders)."""
        argv = [
            *raftlog_argv(),
            *("topic", "create", name, "--partitions", str(partitions)),
            *("--replication-factor", str(replication_factor), "--bootstrap", self.bootstrap),
        ]

        def attempt() -> bool:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
            )
            if proc.returncode != 0 and "already exists" not in proc.stderr.lower():
                raise NodeError(proc.stderr.strip() or proc.stdout.strip())
            return True

        wait_for(attempt, timeout, interval=1.0, what=f"topic {name} created")


def _alive_or_raise(n: NodeProc) -> bool:
    if not n.alive():
        raise NodeError(f"node {n.node_id} exited")
    return True


def _is_node(pid: int, config: Path) -> bool:
    """/proc/<pid> is the `raftlog serve` process itself (not `ip netns exec`)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        raise NodeError(f"pid {pid} exited during start") from None
    return b"serve" in args and str(config).encode() in args and b"netns" not in args


# --------------------------------------------------------------------------- leadership


def agreed_leaders(statuses: Statuses, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """{partition: (leader, term)} for partitions whose leader is confirmed by a majority of
    all nodes at the same term (the leader itself included). A deposed leader that still
    believes it leads, cut off from the others, does not count."""
    out = {}
    majority = 2  # of three nodes
    for p in range(partitions):
        votes: dict[tuple[int, int], int] = {}
        claims = set()
        for i, st in statuses.items():
            for e in st.get("partitions") or []:
                if e.get("topic") != topic or e.get("partition") != p:
                    continue
                if e.get("leader") is not None:
                    key = (int(e["leader"]), int(e["term"]))
                    votes[key] = votes.get(key, 0) + 1
                if e.get("is_leader"):
                    claims.add((i, int(e["term"])))
        agreed = [k for k, v in votes.items() if v >= majority and k in claims]
        if agreed:
            out[p] = max(agreed, key=lambda k: k[1])
    return out


def max_terms(statuses: Statuses, topic: str) -> dict[int, int]:
    """{partition: highest term any answering node reports}."""
    out: dict[int, int] = {}
    for st in statuses.values():
        for e in st.get("partitions") or []:
            if e.get("topic") == topic:
                p = int(e["partition"])
                out[p] = max(out.get(p, -1), int(e["term"]))
    return out


def caught_up(statuses: Statuses, topic: str, partitions: int, nodes: int) -> bool:
    """Every node answers and holds, for every partition, the leader's high watermark as
    its own high watermark and log end (nothing is being produced)."""
    if len(statuses) < nodes:
        return False
    leaders = agreed_leaders(statuses, topic, partitions)
    if len(leaders) < partitions:
        return False
    for p in leaders:
        entries = [
            e
            for st in statuses.values()
            for e in st.get("partitions") or []
            if e.get("topic") == topic and e.get("partition") == p
        ]
        hw = {int(e["high_watermark"]) for e in entries} | {
            int(e["log_end_offset"]) for e in entries
        }
        if len(entries) < nodes or len(hw) != 1:
            return False
    return True


def caught_up_hosted(statuses: Statuses, topic: str, partitions: int) -> bool:
    """caught_up for a topic whose partitions live on some nodes only (the moves' topic):
    every partition has an agreed leader, exactly the replicas its leader lists hold a copy
    (a node a move took out dropped its own), and all hold the leader's high watermark as
    their high watermark and log end."""
    leaders = agreed_leaders(statuses, topic, partitions)
    if len(leaders) < partitions:
        return False
    for p, (leader, _) in leaders.items():
        entries = {
            i: e
            for i, st in statuses.items()
            for e in st.get("partitions") or []
            if e.get("topic") == topic and e.get("partition") == p
        }
        replicas = set(entries.get(leader, {}).get("replicas") or [])
        hw = {int(e["high_watermark"]) for e in entries.values()} | {
            int(e["log_end_offset"]) for e in entries.values()
        }
        if set(entries) != replicas or len(hw) != 1:
            return False
    return True
