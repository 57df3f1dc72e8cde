"""cluster.json, the state of a local cluster (`raftlog cluster`): read, written whole, and
changed by one command at a time. Every writer of it goes through here: the CLI, and
bench/'s and the tests' clusters when they restart a node and write its new pid."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from raftlog_app.local_nodes import ClusterError

LOCK = "cluster.json.lock"  # beside cluster.json: see changing_state


def read_state(data: Path) -> dict:
    path = data / "cluster.json"
    if not path.exists():
        raise ClusterError(_no_cluster(data))
    return json.loads(path.read_text())


def _no_cluster(data: Path) -> str:
    return f"no cluster in {data} (no cluster.json); start one with `raftlog cluster up`"


def write_state(data: Path, state: dict) -> None:
    """cluster.json replaced whole: a command reading it meanwhile (`cluster status`)
    sees the old file or the new one, never half of one."""
    path = data / "cluster.json"
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    part.write_text(json.dumps(state, indent=2))
    part.replace(path)


@contextlib.contextmanager
def changing_state(
    data: Path, timeout: float, progress: bool = True, create: bool = False
) -> Iterator[None]:
    """Held by each command that rewrites cluster.json (up, add-node, add-host), from
    reading it to writing it: two at once would both read the same nodes, pick the same next
    node id, host number and ports, and each write its own cluster.json over the other's. A
    second one waits for the first, saying so in a line, as both were meant to happen (a
    script adding hosts in parallel), and the first holds it the moment it takes to write
    configs and start processes, not while they get ready; it gives up, in one line, after
    `timeout` s. An flock: a command that dies lets go of it with its process. `create`:
    the data directory too (`cluster up`)."""
    if create:
        data.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(data / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except FileNotFoundError:
        raise ClusterError(_no_cluster(data)) from None
    with os.fdopen(fd, "r+") as lock:
        deadline = time.monotonic() + timeout
        said = False
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder(lock)
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"another `raftlog cluster` command{holder} is still changing "
                        f"{data / 'cluster.json'} after {timeout:.0f}s; try again once it ends"
                    ) from None
                if progress and not said:
                    print(
                        f"waiting for another `raftlog cluster` command{holder} changing "
                        f"{data / 'cluster.json'}",
                        file=sys.stderr,
                        flush=True,
                    )
                    said = True
                time.sleep(0.1)
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")  # whom a waiting command names
        lock.flush()
        yield  # closing the file lets go of the lock


@contextlib.contextmanager
def updating_state(data: Path, timeout: float, progress: bool = True) -> Iterator[dict]:
    """cluster.json read under changing_state, changed in place by the block and written back
    whole: for a change of a few fields (a restarted node's pid, the tools entry) that must
    not lose a `cluster add-node` written meanwhile, nor be lost to it. A block that raises
    writes nothing."""
    with changing_state(data, timeout, progress):
        state = read_state(data)
        yield state
        write_state(data, state)


def _holder(lock: IO[str]) -> str:
    """ " (pid N)": the holder of `lock`, as it wrote itself into the file."""
    lock.seek(0)
    pid = lock.read().strip()
    return f" (pid {pid})" if pid.isdigit() else ""
