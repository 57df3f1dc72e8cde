"""Run a real raftlog cluster (node processes on loopback) through the `raftlog` CLI.

Everything here talks to the product only through its documented surface: the CLI
(`raftlog cluster up|down`, `raftlog serve --config`, `raftlog topic ...`), the
`cluster.json` that `cluster up` writes, and each node's admin `GET /v1/status`.
Every wait is bounded, and every process a Cluster started (directly or through
`cluster up`) is killed and reaped by `Cluster.stop()`, whatever state the test left.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import re
import resource
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from raftlog.config.node_config import toml_value
from raftlog_app import local_nodes
from raftlog_app.cluster_state import updating_state
from raftlog_app.local_nodes import alive as pid_alive  # the tests call it so
from raftlog_app.local_nodes import reap
from support import node_logs

T = TypeVar("T")

LOOPBACK = "127.0.0.1"
RAFT_OFFSET = 1000  # raft port = kafka port + 1000 (CLI contract)
ADMIN_OFFSET = 2000  # admin port = kafka port + 2000 (CLI contract)
PROXY_OFFSET = 3000  # consume proxy port = kafka port + 3000 (CLI contract)
LISTENER_OFFSET = 1000  # the k-th further listener: kafka port + 3000 + 1000k (CLI contract)

# Clusters currently running in this process; conftest dumps their logs on a failure.
LIVE_CLUSTERS: list[Cluster] = []


class ClusterError(RuntimeError):
    pass


# --------------------------------------------------------------------------- helpers


def raftlog_argv() -> list[str]:
    """argv prefix that runs the `raftlog` command of the interpreter running the tests."""
    script = Path(sys.executable).with_name("raftlog")
    if script.exists():
        return [str(script)]
    return [
        sys.executable,
        "-c",
        "import sys; from raftlog_app.entry import main; sys.exit(main())",
    ]


def wait_for(
    predicate: Callable[[], T],
    timeout: float,
    interval: float = 0.2,
    what: str = "condition",
) -> T:
    """Poll `predicate` until it returns something truthy; raise TimeoutError after `timeout`.

    Exceptions from the predicate count as "not yet" (the last one is chained)."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last_exc = None
        except Exception as exc:  # noqa: BLE001 - polling: any failure means "not yet"
            last_exc = exc
        if time.monotonic() >= deadline:
            msg = f"timed out after {timeout:.0f}s waiting for {what}"
            if last_exc is not None:
                msg += f" (last error: {last_exc!r})"
            raise TimeoutError(msg) from last_exc
        time.sleep(interval)


def ephemeral_port_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def cluster_ports(base: int, nodes: int, listeners: int = 1) -> list[int]:
    """Every port a cluster with Kafka base port `base` and `listeners` Kafka listeners uses
    (CLI contract)."""
    extra = tuple(PROXY_OFFSET + LISTENER_OFFSET * k for k in range(1, listeners))
    offsets = (0, RAFT_OFFSET, ADMIN_OFFSET, PROXY_OFFSET, *extra)
    return [base + off + i for off in offsets for i in range(nodes)]


def pick_base_port(
    nodes: int = 3,
    lo: int = 20000,
    hi: int = 50000,
    attempts: int = 200,
    rng: random.Random | None = None,
    is_free: Callable[[int], bool] = port_is_free,
    listeners: int = 1,
) -> int:
    """A random Kafka base port in [lo, hi] whose 4 x `nodes` ports are all free.

    Ports inside the kernel's ephemeral range are avoided: an outgoing client connection
    could take a killed node's port before the test restarts it."""
    rng = rng or random.Random()
    eph_lo, eph_hi = ephemeral_port_range()
    candidates = [
        b
        for b in range(lo, hi + 1)
        if all(
            not (eph_lo <= p <= eph_hi) and p <= 65535 for p in cluster_ports(b, nodes, listeners)
        )
    ]
    if not candidates:  # the ephemeral range covers everything: take the whole window
        candidates = list(range(lo, hi + 1))
    for _ in range(attempts):
        base = rng.choice(candidates)
        if all(is_free(p) for p in cluster_ports(base, nodes, listeners)):
            return base
    raise ClusterError(f"no free port range for {nodes} nodes after {attempts} attempts")


def wait_pid_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            reap(pid)
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


def rss_kb(pid: int) -> int | None:
    """VmRSS of a process in KiB (from /proc/<pid>/status), None if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def processes_under(path: Path) -> list[int]:
    """PIDs (other than ours) with a command-line argument that is `path` or lies under it."""
    root = str(path)
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for raw in args:
            arg = raw.decode(errors="replace")
            if arg == root or arg.startswith(root + "/") or arg.startswith(root + os.sep):
                found.append(int(entry.name))
                break
    return found


def tail(path: Path, lines: int = 60, max_bytes: int = 64 * 1024) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    text = data.decode(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def http_get_json(url: str, timeout: float = 3.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback only
        return json.loads(resp.read())


# --------------------------------------------------------------------------- cluster


@dataclass
class Node:
    node_id: int
    pid: int
    config: Path
    data_dir: Path
    kafka: str
    raft: str
    admin: str
    proxy: str  # the consume proxy's HTTP address
    log: Path
    listeners: dict[str, str] = field(default_factory=dict)  # name -> host:port
    popen: subprocess.Popen | None = None  # set when this helper (re)started the node

    @property
    def kafka_addr(self) -> tuple[str, int]:
        host, port = self.kafka.rsplit(":", 1)
        return host, int(port)

    @property
    def status_url(self) -> str:
        return f"http://{self.admin}/v1/status"


class Cluster:
    """A local raftlog cluster in `workdir`, started with `raftlog cluster up`.

    Typical use (the fixtures in tests/conftest.py do this):

        c = Cluster(tmp_path / "cluster").start()
        c.create_topic("t", partitions=6, replication_factor=3)
        leader, term = c.leader("t", 0)
        c.kill(leader)              # kill -9
        c.restart(leader)           # raftlog serve --config <its config>, detached
        c.stop()                    # cluster down, then SIGKILL and reap whatever is left
    """

    def __init__(
        self,
        workdir: Path,
        nodes: int = 3,
        base_port: int | None = None,
        name: str = "cluster",
        env: dict[str, str] | None = None,
        broker: dict[str, Any] | None = None,
        port_slots: int | None = None,
        listeners: tuple[str, ...] = ("PLAINTEXT",),
        up_flags: tuple[str, ...] = (),
        racks: tuple[str, ...] = (),
    ) -> None:
        """`broker`: `[broker]` settings for every node's config (Kafka names, e.g.
        {"group.initial.rebalance.delay.ms": 100}); `port_slots`: how many nodes' ports
        must be free when picking the base port (more than `nodes` for a cluster that
        will grow with add_node()); `listeners`: `cluster up --listeners`; `up_flags`: more
        `cluster up` flags (e.g. --secure); `racks`: `cluster up --racks` (node i's
        broker.rack is racks[(i - 1) % len(racks)])."""
        self.listeners = listeners
        self.up_flags = up_flags
        self.racks = racks
        self.workdir = Path(workdir).resolve()
        self.data_root = self.workdir  # `--data DIR`
        self.num_nodes = nodes
        self.broker: dict[str, Any] = dict(broker or {})
        self.port_slots = max(port_slots or nodes, nodes)
        self.base_port = base_port
        self.name = name
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.nodes: dict[int, Node] = {}
        self.bootstrap = ""
        self.up_output = ""
        self.failed = False  # set by conftest when a test fails while this cluster runs
        self._started = False
        self.expected_log_errors: list[re.Pattern[str]] = []
        self._log_read: dict[Path, int] = {}  # how far stop() has read each log file

    # ----------------------------------------------------------------- CLI

    def cli(
        self, *args: str, timeout: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess:
        """Run `raftlog <args>`; raise ClusterError with its output if it fails (and check)."""
        argv = [*raftlog_argv(), *args]
        try:
            proc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=self.env,
                cwd=self.workdir,
            )
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(
                f"`raftlog {' '.join(args)}` did not finish within {timeout:.0f}s\n"
                f"stdout:\n{exc.stdout}\nstderr:\n{exc.stderr}"
            ) from exc
        if check and proc.returncode != 0:
            raise ClusterError(
                f"`raftlog {' '.join(args)}` exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc

    def start(self, timeout: float = 120.0, attempts: int = 3) -> Cluster:
        """`raftlog cluster up` on a free port range; returns once cluster.json is read and
        every node answers /v1/status with a controller leader and all nodes registered."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        LIVE_CLUSTERS.append(self)
        self._started = True
        last: Exception | None = None
        for _ in range(attempts):
            base = (
                self.base_port
                if self.base_port is not None
                else pick_base_port(self.port_slots, listeners=len(self.listeners))
            )
            broker_flags = self._broker_flags("up")
            try:
                proc = self.cli(
                    "cluster",
                    "up",
                    "--nodes",
                    str(self.num_nodes),
                    "--data",
                    str(self.data_root),
                    "--kafka-port",
                    str(base),
                    *broker_flags,
                    *(["--listeners", ",".join(self.listeners)] if len(self.listeners) > 1 else []),
                    *self.up_flags,
                    *(["--racks", ",".join(self.racks)] if self.racks else []),
                    timeout=timeout,
                )
            except ClusterError as exc:
                last = exc
                # A port taken between our check and the node's bind: clean up, try another.
                self._kill_everything()
                if self.base_port is not None or "in use" not in str(exc).lower():
                    raise ClusterError(f"{exc}\n{self.log_tails()}") from exc
                continue
            self.base_port = base
            self.up_output = proc.stdout
            self._load_cluster_json()
            printed = proc.stdout.strip().splitlines()[-1:] or [""]
            if printed[0].strip() != self.bootstrap:
                raise ClusterError(
                    "`cluster up` must print the bootstrap servers as its last stdout line; "
                    f"got {printed[0]!r}, cluster.json says {self.bootstrap!r}"
                )
            self.wait_all_ready(timeout=timeout)
            if self.broker and not broker_flags:
                self.apply_broker_settings(self.node_ids, timeout=timeout)
            return self
        raise ClusterError(f"cluster up failed {attempts} times: {last}")

    # ----------------------------------------------------------------- [broker] settings

    _cli_help: dict[str, str] = {}

    def cli_supports(self, action: str, flag: str) -> bool:
        """Does `raftlog cluster <action> --help` mention `flag`? (cached per process)"""
        if action not in Cluster._cli_help:
            proc = self.cli("cluster", action, "--help", check=False, timeout=30)
            Cluster._cli_help[action] = proc.stdout + proc.stderr if proc.returncode == 0 else ""
        return flag in Cluster._cli_help[action]

    def _broker_flags(self, action: str) -> list[str]:
        """`--broker KEY=VALUE ...` when the CLI has that flag; [] otherwise (the settings
        are then written into each node's config and the node restarted)."""
        if not self.broker or not self.cli_supports(action, "--broker"):
            return []
        flags = []
        for key, value in self.broker.items():
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            flags += ["--broker", f"{key}={text}"]
        return flags

    def apply_broker_settings(self, node_ids: Iterable[int], timeout: float = 120.0) -> None:
        """Write `self.broker` into the `[broker]` table of each node's raftlog.toml and
        restart those nodes (SIGTERM, then `raftlog serve --config`). cluster.json gets
        the new pids so the CLI (`cluster down`, `add-node`) still sees them running."""
        ids = list(node_ids)
        for i in ids:
            self.terminate(i)
        for i in ids:
            cfg = self.nodes[i].config
            cfg.write_text(with_broker_settings(cfg.read_text(), self.broker))
        for i in ids:
            self.restart(i, wait=False)
        self.wait_all_ready(timeout=timeout)
        self._write_json_pids()

    def _has_broker_settings(self, node_id: int) -> bool:
        """Does the node's config already hold every `self.broker` setting?"""
        try:
            raw = tomllib.loads(self.nodes[node_id].config.read_text())
        except (OSError, tomllib.TOMLDecodeError):
            return False
        have = raw.get("broker", {})
        return all(have.get(k) == v for k, v in self.broker.items())

    def _write_json_pids(self) -> None:
        with (
            contextlib.suppress(OSError, ValueError, KeyError, local_nodes.ClusterError),
            updating_state(self.data_root, timeout=60, progress=False) as doc,
        ):
            for n in doc["nodes"]:
                node = self.nodes.get(int(n["node_id"]))
                if node is not None:
                    n["pid"] = node.pid

    # ----------------------------------------------------------------- growth

    def add_node(self, timeout: float = 120.0, rack: str | None = None) -> Node:
        """`raftlog cluster add-node --data DIR [--rack RACK]`: one more node joins the
        running cluster (next node id and ports; cluster.json gains it). Waits until every
        node is ready and registered, with this Cluster's `[broker]` settings applied to the
        new node."""
        before = set(self.nodes)
        flags = self._broker_flags("add-node")
        proc = self.cli(
            "cluster",
            "add-node",
            "--data",
            str(self.data_root),
            *flags,
            *(["--rack", rack] if rack else []),
            timeout=timeout,
        )
        self.up_output += proc.stdout
        self.num_nodes += 1
        try:
            self._load_cluster_json()
        except (ClusterError, OSError, ValueError, KeyError) as exc:
            self.num_nodes -= 1
            raise ClusterError(f"after `cluster add-node`: {exc}\n{proc.stdout}") from exc
        (new,) = set(self.nodes) - before
        if self.broker and not flags and not self._has_broker_settings(new):
            self.apply_broker_settings([new], timeout=timeout)
        self.wait_all_ready(timeout=timeout)
        return self.nodes[new]

    def wait_live(self, timeout: float = 60.0, nodes: Iterable[int] | None = None) -> None:
        """Until every node's /v1/status lists all of `nodes` (default: all) as live."""
        ids = set(nodes) if nodes is not None else set(self.node_ids)

        def all_live() -> bool:
            return all(
                ids <= set(self.status(i).get("live_nodes") or []) for i in self.live_nodes()
            )

        wait_for(all_live, timeout, what=f"nodes {sorted(ids)} live on every node")

    def _load_cluster_json(self) -> None:
        path = self.data_root / "cluster.json"
        doc = json.loads(path.read_text())
        self.bootstrap = doc["bootstrap"]
        nodes = {}
        for n in doc["nodes"]:
            node = Node(
                node_id=int(n["node_id"]),
                pid=int(n["pid"]),
                config=Path(n["config"]),
                data_dir=Path(n["data_dir"]),
                kafka=n["kafka"],
                raft=n["raft"],
                admin=n["admin"],
                proxy=n["proxy"],
                log=Path(n["log"]),
                listeners=dict(n.get("listeners", {})),
            )
            old = self.nodes.get(node.node_id)
            if old is not None and old.popen is not None:
                node.pid, node.popen = old.pid, old.popen
            nodes[node.node_id] = node
        if len(nodes) != self.num_nodes:
            raise ClusterError(f"cluster.json lists {len(nodes)} nodes, expected {self.num_nodes}")
        self.nodes = nodes

    @property
    def node_ids(self) -> list[int]:
        return sorted(self.nodes)

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def pid(self, node_id: int) -> int:
        return self.nodes[node_id].pid

    def pids(self) -> dict[int, int]:
        return {i: n.pid for i, n in self.nodes.items()}

    def is_alive(self, node_id: int) -> bool:
        return pid_alive(self.nodes[node_id].pid)

    def live_nodes(self) -> list[int]:
        return [i for i in self.node_ids if self.is_alive(i)]

    # ----------------------------------------------------------------- signals

    def signal(self, node_id: int, sig: int) -> None:
        node = self.nodes[node_id]
        if not pid_alive(node.pid):
            raise ClusterError(f"node {node_id} (pid {node.pid}) is not running")
        os.kill(node.pid, sig)

    def kill(self, node_id: int, timeout: float = 15.0) -> None:
        """kill -9 the node and wait until it is gone (reaped)."""
        node = self.nodes[node_id]
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.pid, signal.SIGKILL)
        if not wait_pid_gone(node.pid, timeout):
            raise ClusterError(f"node {node_id} (pid {node.pid}) survived SIGKILL for {timeout}s")
        self._reap_popen(node)

    def terminate(self, node_id: int, timeout: float = 30.0) -> bool:
        """SIGTERM (graceful stop); SIGKILL if still running after `timeout`.

        Returns True if the node exited on SIGTERM alone."""
        node = self.nodes[node_id]
        if not pid_alive(node.pid):
            return True
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.pid, signal.SIGTERM)
        graceful = wait_pid_gone(node.pid, timeout)
        if not graceful:
            self.kill(node_id)
        self._reap_popen(node)
        return graceful

    def pause(self, node_id: int) -> None:
        self.signal(node_id, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        self.signal(node_id, signal.SIGCONT)

    @staticmethod
    def _reap_popen(node: Node) -> None:
        if node.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.popen.wait(timeout=5)
        reap(node.pid)

    def restart(
        self,
        node_id: int,
        wait: bool = True,
        timeout: float = 90.0,
        open_files: int | None = None,
    ) -> Node:
        """Start a stopped node again: `raftlog serve --config <its config>`, detached, its
        stdout/stderr appended to the node's log file. Waits for readiness if `wait`.
        `open_files`: its RLIMIT_NOFILE, soft and hard (`ulimit -n`)."""
        node = self.nodes[node_id]
        if pid_alive(node.pid):
            raise ClusterError(f"node {node_id} is still running (pid {node.pid})")
        self._reap_popen(node)
        node.log.parent.mkdir(parents=True, exist_ok=True)
        with open(node.log, "ab") as log:
            log.write(
                f"\n==== test harness: restarting node {node_id} at {time.ctime()} ====\n".encode()
            )
            log.flush()
            node.popen = subprocess.Popen(
                [*raftlog_argv(), "serve", "--config", str(node.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=node.data_dir if node.data_dir.exists() else self.workdir,
                env=self.env,
                start_new_session=True,
                preexec_fn=None if open_files is None else partial(_limit_files, open_files),
            )
        node.pid = node.popen.pid
        if wait:
            self.wait_ready(node_id, timeout=timeout)
        return node

    # ----------------------------------------------------------------- status

    def status(self, node_id: int, timeout: float = 3.0) -> dict[str, Any]:
        return http_get_json(self.nodes[node_id].status_url, timeout=timeout)

    def try_status(self, node_id: int) -> dict[str, Any] | None:
        try:
            return self.status(node_id)
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def statuses(self) -> dict[int, dict[str, Any]]:
        """/v1/status of every live node that answers."""
        out = {}
        for i in self.live_nodes():
            st = self.try_status(i)
            if st is not None:
                out[i] = st
        return out

    def _node_ready(self, node_id: int) -> bool:
        if not self.is_alive(node_id):
            raise ClusterError(f"node {node_id} exited\n{self.log_tails([node_id])}")
        st = self.status(node_id)
        return (
            st.get("node_id") == node_id
            and st.get("controller_leader") is not None
            and node_id in (st.get("registered_nodes") or [])
        )

    def wait_ready(self, node_id: int, timeout: float = 60.0) -> None:
        """Until the node answers /v1/status, knows a controller leader, and is registered."""
        try:
            wait_for(lambda: self._node_ready(node_id), timeout, what=f"node {node_id} ready")
        except TimeoutError as exc:
            raise ClusterError(f"{exc}\n{self.log_tails([node_id])}") from exc

    def wait_all_ready(self, timeout: float = 90.0, nodes: Iterable[int] | None = None) -> None:
        deadline = time.monotonic() + timeout
        ids = list(nodes) if nodes is not None else self.node_ids
        for i in ids:
            self.wait_ready(i, timeout=max(1.0, deadline - time.monotonic()))

        def all_registered() -> bool:
            st = self.status(ids[0])
            return set(ids) <= set(st.get("registered_nodes") or [])

        wait_for(all_registered, max(1.0, deadline - time.monotonic()), what="all nodes registered")

    def partition_status(self, topic: str, partition: int) -> dict[int, dict[str, Any]]:
        """{node_id: that node's /v1/status entry for the partition} over live nodes."""
        out = {}
        for i, st in self.statuses().items():
            for p in st.get("partitions") or []:
                if p.get("topic") == topic and p.get("partition") == partition:
                    out[i] = p
        return out

    def current_leader(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(node_id, term) of the live node that says it leads the partition at the highest
        term, or None if no live node says so."""
        leaders = [
            (int(p.get("term", -1)), i)
            for i, p in self.partition_status(topic, partition).items()
            if p.get("is_leader")
        ]
        if not leaders:
            return None
        term, node_id = max(leaders)
        return node_id, term

    def leader(
        self,
        topic: str,
        partition: int,
        timeout: float = 60.0,
        exclude: Iterable[int] = (),
        min_term: int | None = None,
    ) -> tuple[int, int]:
        """Wait for a leader of the partition (not in `exclude`, term > `min_term`)."""
        excluded = set(exclude)

        def found() -> tuple[int, int] | None:
            cur = self.current_leader(topic, partition)
            if cur is None or cur[0] in excluded:
                return None
            if min_term is not None and cur[1] <= min_term:
                return None
            return cur

        try:
            return wait_for(found, timeout, what=f"a leader for {topic}-{partition}")
        except TimeoutError as exc:
            raise ClusterError(f"{exc}\n{self.log_tails()}") from exc

    def followers(self, topic: str, partition: int) -> list[int]:
        leader, _ = self.leader(topic, partition)
        return [i for i in self.node_ids if i != leader]

    def controller_leader(self) -> int | None:
        for st in self.statuses().values():
            if st.get("controller_leader") is not None:
                return int(st["controller_leader"])
        return None

    def wait_caught_up(
        self, node_id: int, topic: str, partition: int, timeout: float = 120.0
    ) -> dict[int, dict[str, Any]]:
        """Until `node_id` has the leader's high watermark for the partition (with no
        production going on). Returns the partition status of all live nodes."""

        def caught_up() -> dict[int, dict[str, Any]] | None:
            ps = self.partition_status(topic, partition)
            leaders = [p for p in ps.values() if p.get("is_leader")]
            mine = ps.get(node_id)
            if not leaders or mine is None:
                return None
            hw = max(int(p["high_watermark"]) for p in leaders)
            if int(mine["high_watermark"]) >= hw and int(mine["log_end_offset"]) >= hw:
                return ps
            return None

        try:
            return wait_for(
                caught_up,
                timeout,
                interval=0.5,
                what=f"node {node_id} to catch up on {topic}-{partition}",
            )
        except TimeoutError as exc:
            ps = self.partition_status(topic, partition)
            raise ClusterError(f"{exc}\npartition status: {ps}\n{self.log_tails()}") from exc

    # ----------------------------------------------------------------- topics

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 3,
        timeout: float = 90.0,
    ) -> None:
        """`raftlog topic create`, then wait until every partition has a leader."""
        self.cli(
            "topic",
            "create",
            name,
            "--partitions",
            str(partitions),
            "--replication-factor",
            str(replication_factor),
            "--bootstrap",
            self.bootstrap,
            timeout=timeout,
        )
        self.wait_topic_leaders(name, partitions, timeout=timeout)

    def wait_topic_leaders(
        self, name: str, partitions: int, timeout: float = 90.0
    ) -> dict[int, tuple[int, int]]:
        deadline = time.monotonic() + timeout
        return {
            p: self.leader(name, p, timeout=max(1.0, deadline - time.monotonic()))
            for p in range(partitions)
        }

    def partition_dir(self, node_id: int, topic: str, partition: int) -> Path:
        return self.nodes[node_id].data_dir / "data" / f"{topic}-{partition}"

    # ----------------------------------------------------------------- teardown & logs

    def log_tails(self, node_ids: Iterable[int] | None = None, lines: int = 60) -> str:
        """The last lines of each node's log files (its log and any console log beside it)."""
        parts = []
        for i in node_ids if node_ids is not None else self.node_ids:
            node = self.nodes.get(i)
            if node is None:
                continue
            alive = "alive" if pid_alive(node.pid) else "not running"
            logs = [node.log, *sorted(p for p in node.log.parent.glob("*.log") if p != node.log)]
            for log in logs:
                if log.exists():
                    parts.append(
                        f"----- {self.name} node {i} (pid {node.pid}, {alive}) {log} -----"
                    )
                    parts.append(tail(log, lines))
        if not parts:  # cluster.json never appeared: show whatever node logs exist
            for log in sorted(self.workdir.glob("node-*/*.log")):
                parts.append(f"----- {log} -----")
                parts.append(tail(log, lines))
        return "\n".join(parts)

    def expect_log_errors(self, *patterns: str) -> None:
        """ERROR events or tracebacks this cluster's nodes may log because its test provokes
        them on purpose (regular expressions, searched in each event): for this cluster only."""
        self.expected_log_errors.extend(re.compile(p) for p in patterns)

    def log_files(self) -> list[Path]:
        """Every node's log and console log (also of nodes cluster.json never listed)."""
        files = {n.log for n in self.nodes.values()}
        for n in self.nodes.values():
            files.update(n.log.parent.glob("*.log"))
        files.update(self.workdir.glob("node-*/*.log"))
        return sorted(files)

    def logged_errors(self) -> dict[Path, list[str]]:
        """The ERROR events and tracebacks the nodes logged so far, by file, less those
        expect_log_errors allows."""
        found = {}
        for path in self.log_files():
            events, _ = node_logs.file_bad_events(path, self.expected_log_errors)
            if events:
                found[path] = events
        return found

    def _check_logs(self) -> None:
        """What the nodes logged since the last stop() that they must not goes to
        node_logs.LOG_ERRORS, for conftest to fail the test that stopped the cluster."""
        owner = f"cluster {self.name} ({self.workdir})"
        node_logs.check_files(owner, self.log_files(), self.expected_log_errors, self._log_read)

    def rss(self) -> dict[int, int | None]:
        """VmRSS (KiB) of every node process."""
        return {i: rss_kb(n.pid) if pid_alive(n.pid) else None for i, n in self.nodes.items()}

    def down(self, timeout: float = 60.0) -> None:
        """`raftlog cluster down` (graceful). Raises if it fails or leaves a node running."""
        self.cli("cluster", "down", "--data", str(self.data_root), timeout=timeout)
        left = [i for i in self.node_ids if not wait_pid_gone(self.nodes[i].pid, 10)]
        for n in self.nodes.values():
            self._reap_popen(n)
        if left:
            raise ClusterError(f"nodes {left} still running after `cluster down`")

    def stop(self, graceful: bool = True) -> None:
        """Stop everything this cluster started, whatever state it is in. Never raises for
        a node that is already gone; always ends with SIGKILL + reap of leftovers."""
        if not self._started:
            return
        try:
            if graceful and any(pid_alive(n.pid) for n in self.nodes.values()):
                from_json = self._json_pids()
                if from_json == self.pids():
                    # nothing was restarted by us: the CLI's own pids are current
                    with contextlib.suppress(ClusterError, OSError):
                        self.cli("cluster", "down", "--data", str(self.data_root), timeout=60)
                for i in self.node_ids:
                    with contextlib.suppress(ClusterError, OSError):
                        self.terminate(i, timeout=20)
        finally:
            self._kill_everything()
            if self in LIVE_CLUSTERS:
                LIVE_CLUSTERS.remove(self)
            self._started = False
            self._check_logs()

    def _json_pids(self) -> dict[int, int] | None:
        try:
            doc = json.loads((self.data_root / "cluster.json").read_text())
            return {int(n["node_id"]): int(n["pid"]) for n in doc["nodes"]}
        except (OSError, ValueError, KeyError):
            return None

    def _kill_everything(self) -> None:
        pids = {n.pid for n in self.nodes.values()}
        # anything else started for this cluster (e.g. by a failed `cluster up`)
        pids.update(processes_under(self.workdir))
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for pid in pids:
            wait_pid_gone(pid, 10)
        for n in self.nodes.values():
            self._reap_popen(n)

    def wipe_data(self) -> None:
        """Free the disk a passed test's cluster used (logs and configs are kept)."""
        import shutil

        for n in self.nodes.values():
            shutil.rmtree(n.data_dir / "data", ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self.start() if not self._started else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<Cluster {self.name} {self.bootstrap or self.workdir}>"


def with_broker_settings(config_text: str, settings: dict[str, Any]) -> str:
    """A node config (TOML text) with `settings` in its `[broker]` table (created if
    missing; keys already there are replaced)."""
    lines = config_text.splitlines()
    new = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in settings.items()]
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "[broker]")
    except StopIteration:
        return config_text.rstrip("\n") + "\n\n[broker]\n" + "\n".join(new) + "\n"
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].strip().startswith("[")), len(lines)
    )
    keep = []
    for line in lines[start + 1 : end]:
        key = line.split("=", 1)[0].strip().strip('"')
        if "=" in line and key in settings:
            continue
        keep.append(line)
    return "\n".join([*lines[: start + 1], *new, *keep, *lines[end:]]) + "\n"


def _limit_files(count: int) -> None:
    """In a node's child process before it runs raftlog: its descriptors' limit."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


def wait_port_free(port: int, timeout: float = 10.0) -> None:
    wait_for(lambda: port_is_free(port), timeout, what=f"port {port} to be free")


def connect_refused(addr: tuple[str, int]) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        try:
            s.connect(addr)
        except OSError as exc:
            return exc.errno == errno.ECONNREFUSED
    return False
