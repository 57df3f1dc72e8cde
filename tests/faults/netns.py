"""The test network: one Linux network namespace per node, joined by a bridge in the root
namespace, and the faults applied to it (iptables in the nodes' namespaces, tc on the veths).

Every name carries the prefix `rlf<pid>` of the process that made it, so a later run can tell
a crashed run's leftovers (dead pid) from a parallel run's (live pid). The nodes' namespaces
have no default route: they can only reach each other and the bridge address, which the
clients in the root namespace use. Firewall rules live only in the nodes' own namespaces, so
healing is a flush there and nothing on the host is touched.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from support.cluster import pid_alive, wait_pid_gone

PREFIX = "rlf"
NAME_RE = re.compile(rf"^{PREFIX}(\d+)[a-z]")
SUBNET_FMT = "10.231.{n}"
BRIDGE_HOST = 254
PROBE_PORT = 9


class NetError(RuntimeError):
    """A namespace, link, firewall or tc command failed."""


def run(
    argv: list[str], check: bool = True, timeout: float = 20.0, input: str | None = None
) -> subprocess.CompletedProcess:
    """Run a network command (bounded); NetError with its stderr when it fails and `check`."""
    try:
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetError(f"{' '.join(argv)}: {exc}") from exc
    if check and proc.returncode != 0:
        raise NetError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


# --------------------------------------------------------------------------- availability


def unavailable_reason() -> str | None:
    """Why this machine cannot run the suite (None if it can): root, the tools, and a probe
    namespace with a veth, an iptables statistic rule and a tbf qdisc, removed again."""
    if os.geteuid() != 0:
        return "the network fault suite needs root (network namespaces, iptables, tc)"
    missing = [t for t in ("ip", "iptables", "iptables-restore", "tc") if not shutil.which(t)]
    if missing:
        return f"missing tools: {', '.join(missing)} (apt-get install iproute2 iptables)"
    probe = Net(os.getpid(), 0, nodes=0)
    ns, host, peer = f"{probe.prefix}x", f"{probe.prefix}xa", f"{probe.prefix}xb"
    try:
        run(["ip", "netns", "add", ns])
        run(["ip", "link", "add", host, "type", "veth", "peer", "name", peer])
        run(["ip", "link", "set", peer, "netns", ns])
        rule = "-A INPUT -m statistic --mode random --probability 0.5 -j DROP"
        run(["ip", "netns", "exec", ns, "iptables-restore", "-w", "5"], input=_table(rule))
        run(["tc", "qdisc", "add", "dev", host, "root", "tbf", *TBF_ARGS])
    except NetError as exc:
        return f"network namespaces, iptables or tc do not work here: {exc}"
    finally:
        run(["ip", "link", "del", host], check=False)
        run(["ip", "netns", "del", ns], check=False)
    return None


TBF_ARGS = ["rate", "1mbit", "burst", "32kbit", "latency", "400ms"]


def netem_available() -> bool:
    """`tc ... netem` exists in this kernel (probed on a throwaway veth pair)."""
    probe = Net(os.getpid(), 0, nodes=0)
    host, peer = f"{probe.prefix}ya", f"{probe.prefix}yb"
    try:
        run(["ip", "link", "add", host, "type", "veth", "peer", "name", peer])
        return (
            run(
                ["tc", "qdisc", "add", "dev", host, "root", "netem", "delay", "1ms"], check=False
            ).returncode
            == 0
        )
    except NetError:
        return False
    finally:
        run(["ip", "link", "del", host], check=False)


def _table(*rules: str) -> str:
    """An iptables-restore input that replaces the filter table with `rules`."""
    return "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n" + (
        "".join(r + "\n" for r in rules) + "COMMIT\n"
    )


# --------------------------------------------------------------------------- leftovers


def _owner(name: str) -> int | None:
    m = NAME_RE.match(name)
    return int(m.group(1)) if m else None


def list_namespaces() -> list[str]:
    out = run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def list_links() -> list[str]:
    out = run(["ip", "-o", "link", "show"], check=False).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def kill_namespace_processes(ns: str) -> None:
    """SIGKILL (and reap, if ours) every process living in namespace `ns`."""
    pids = [int(p) for p in run(["ip", "netns", "pids", ns], check=False).stdout.split()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
    for pid in pids:
        wait_pid_gone(pid, 10)


def cleanup_leftovers(owner_alive: object = pid_alive) -> list[str]:
    """Remove namespaces and links of earlier runs whose process is dead; returns their names.

    A crashed run's node processes live on in its namespaces: they are killed first."""
    alive = owner_alive  # injectable for tests
    removed = []
    for ns in list_namespaces():
        pid = _owner(ns)
        if pid is None or pid == os.getpid() or alive(pid):  # type: ignore[operator]
            continue
        kill_namespace_processes(ns)
        run(["ip", "netns", "del", ns], check=False)
        removed.append(ns)
    for link in list_links():
        pid = _owner(link)
        if pid is None or pid == os.getpid() or alive(pid):  # type: ignore[operator]
            continue
        if run(["ip", "link", "del", link], check=False).returncode == 0:
            removed.append(link)
    return removed


# --------------------------------------------------------------------------- the network


def _subnet_in_use(n: int) -> bool:
    text = run(["ip", "-o", "-4", "addr", "show"], check=False).stdout
    text += run(["ip", "-4", "route", "show"], check=False).stdout
    return f"{SUBNET_FMT.format(n=n)}." in text


def pick_subnet(pid: int) -> int:
    """N of 10.231.N.0/24, derived from the pid and unused on this host."""
    for i in range(254):
        n = 1 + (pid + i) % 253
        if not _subnet_in_use(n):
            return n
    raise NetError("no free 10.231.N.0/24 subnet")


@dataclass
class Net:
    """The bridge, one namespace and veth pair per node, and the faults' plumbing."""

    pid: int
    subnet: int
    nodes: int = 3
    created: list[str] = field(default_factory=list)

    @property
    def prefix(self) -> str:
        return f"{PREFIX}{self.pid}"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}b"

    def ns(self, i: int) -> str:
        return f"{self.prefix}n{i}"

    def veth_host(self, i: int) -> str:
        return f"{self.prefix}h{i}"

    def veth_ns(self, i: int) -> str:
        return f"{self.prefix}p{i}"

    def ip(self, i: int) -> str:
        return f"{SUBNET_FMT.format(n=self.subnet)}.{i}"

    @property
    def bridge_ip(self) -> str:
        return self.ip(BRIDGE_HOST)

    @property
    def ids(self) -> list[int]:
        return list(range(1, self.nodes + 1))

    def exec_argv(self, i: int, argv: list[str]) -> list[str]:
        """argv run inside node i's namespace (`ip netns exec` execs: same pid)."""
        return ["ip", "netns", "exec", self.ns(i), *argv]

    # ----------------------------------------------------------------- life cycle

    def create(self) -> None:
        """Bridge with .254 in the root namespace; node i at .i in its namespace."""
        run(["ip", "link", "add", self.bridge, "type", "bridge"])
        self.created.append(self.bridge)
        run(["ip", "addr", "add", f"{self.bridge_ip}/24", "dev", self.bridge])
        run(["ip", "link", "set", self.bridge, "up"])
        for i in self.ids:
            run(["ip", "netns", "add", self.ns(i)])
            self.created.append(self.ns(i))
            run(
                [
                    "ip",
                    "link",
                    "add",
                    self.veth_host(i),
                    "type",
                    "veth",
                    "peer",
                    "name",
                    self.veth_ns(i),
                ]
            )
            self.created.append(self.veth_host(i))
            run(["ip", "link", "set", self.veth_ns(i), "netns", self.ns(i)])
            run(["ip", "link", "set", self.veth_host(i), "master", self.bridge, "up"])
            inside = ["ip", "netns", "exec", self.ns(i), "ip"]
            run([*inside, "link", "set", "lo", "up"])
            run([*inside, "addr", "add", f"{self.ip(i)}/24", "dev", self.veth_ns(i)])
            run([*inside, "link", "set", self.veth_ns(i), "up"])

    def teardown(self) -> list[str]:
        """Kill whatever runs in our namespaces, delete them and our links. Never raises;
        returns what could not be removed."""
        for i in self.ids:
            ns = self.ns(i)
            if ns in list_namespaces():
                kill_namespace_processes(ns)
                run(["ip", "netns", "del", ns], check=False)
        links = set(list_links())
        for name in [self.bridge, *(self.veth_host(i) for i in self.ids)]:
            if name in links:
                run(["ip", "link", "del", name], check=False)
        names = set(list_namespaces()) | set(list_links())
        return sorted(n for n in names if _owner(n) == self.pid)

    def check_connectivity(self, timeout: float = 15.0) -> None:
        """Every node reaches every other node and the root namespace reaches every node
        (TCP, Python sockets: there is no ping). Raises NetError naming the failing paths,
        e.g. when the host's FORWARD chain drops bridged traffic."""
        listeners = [
            subprocess.Popen(
                self.exec_argv(i, [sys.executable, "-c", _LISTENER, self.ip(i), str(PROBE_PORT)]),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            for i in self.ids
        ]
        try:
            failures = []
            for i in self.ids:
                targets = [self.ip(j) for j in self.ids if j != i]
                proc = run(
                    self.exec_argv(
                        i,
                        [sys.executable, "-c", _PROBER, str(PROBE_PORT), str(timeout), *targets],
                    ),
                    check=False,
                    timeout=timeout + 10,
                )
                failures += [f"node {i} -> {t}" for t in proc.stdout.split()]
            for i in self.ids:
                if not _connects(self.ip(i), PROBE_PORT, timeout):
                    failures.append(f"root namespace -> {self.ip(i)}")
            if failures:
                raise NetError(
                    "no TCP connectivity: "
                    + ", ".join(failures)
                    + " (does the host's iptables FORWARD chain drop bridged traffic?)"
                )
        finally:
            for p in listeners:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(5)

    # ----------------------------------------------------------------- faults

    def set_rules(self, i: int, rules: list[str]) -> None:
        """Replace node i's filter table with `rules` (iptables-restore: atomic, one exec)."""
        run(self.exec_argv(i, ["iptables-restore", "-w", "5"]), input=_table(*rules))

    def flush_rules(self, i: int) -> None:
        self.set_rules(i, [])

    def shape(self, i: int, qdisc: list[str]) -> None:
        """Root qdisc `qdisc` (e.g. tbf ...) on both ends of node i's veth: both directions."""
        run(self.exec_argv(i, ["tc", "qdisc", "replace", "dev", self.veth_ns(i), "root", *qdisc]))
        run(["tc", "qdisc", "replace", "dev", self.veth_host(i), "root", *qdisc])

    def unshape(self, i: int) -> None:
        run(self.exec_argv(i, ["tc", "qdisc", "del", "dev", self.veth_ns(i), "root"]), check=False)
        run(["tc", "qdisc", "del", "dev", self.veth_host(i), "root"], check=False)

    def heal_all(self) -> None:
        for i in self.ids:
            self.flush_rules(i)
            self.unshape(i)


def _connects(host: str, port: int, timeout: float) -> bool:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            time.sleep(0.2)
    return False


_LISTENER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
while True:
    c, _ = s.accept(); c.close()
"""

_PROBER = """
import socket, sys, time
port, timeout, targets = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
deadline = time.monotonic() + timeout
for t in targets:
    while True:
        try:
            socket.create_connection((t, port), timeout=1).close(); break
        except OSError:
            if time.monotonic() > deadline:
                print(t); break
            time.sleep(0.2)
"""
