"""Process and port helpers: the benchmark starts brokers, kills them, and must leave none
behind, so every process it starts goes through here."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

from raftlog_app.local_nodes import alive

HOST = "127.0.0.1"


class BenchError(RuntimeError):
    """A system under test misbehaved (did not start, did not answer, lost a record)."""


def wait_until(predicate: Callable[[], object], timeout: float, what: str, step: float = 0.05):
    """Polls until `predicate` returns something truthy. Exceptions count as "not yet",
    except BenchError, which says waiting longer cannot help."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except BenchError:
            raise
        except Exception as exc:  # noqa: BLE001 - polling: any other failure is "not yet"
            last, value = exc, None
        if value:
            return value
        time.sleep(step)
    raise BenchError(
        f"timed out after {timeout:.0f}s waiting for {what}" + (f": {last!r}" if last else "")
    )


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_base_port(offsets: list[int]) -> int:
    """A base port below the kernel's ephemeral range (so no client socket takes a killed
    node's port before it restarts) with base+offset free for every offset."""
    low, _ = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    ceiling = min(int(low), 65536) - max(offsets) - 1
    for _ in range(500):
        base = random.randrange(20000, ceiling)
        if all(port_free(base + off) for off in offsets):
            return base
    raise BenchError("no free loopback ports")


def accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((HOST, port)) == 0


def kill9(pid: int, timeout: float = 15.0) -> None:
    """SIGKILL and wait until the process is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not alive(pid), timeout, f"pid {pid} to die")


def processes_under(path: Path) -> list[int]:
    """Pids whose command line names a file under `path`: every raftlog node of a data
    dir, also one a failed `cluster up` left without a cluster.json."""
    root, found = str(path) + "/", []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
                if any(a.startswith(root) for a in args):
                    found.append(int(entry.name))
    return found


def rss_mb(pid: int) -> float | None:
    """VmRSS in MB (10^6 bytes)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    return None


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def preemptions(pid: int) -> int:
    """Times the process's threads were switched out while they could still have run
    (nonvoluntary_ctxt_switches; threads that exited no longer count). Each costs the
    process its caches: on a machine shared with the clients, the clients' threads take the
    core whenever an answer wakes them."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that exited meanwhile
            for line in (task / "status").read_text().splitlines():
                if line.startswith("nonvoluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


def tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_bytes()[-16384:].decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
