"""Gathers every node's history journal and replica states into one audit directory.

Two sources, one layout, so the Spark job reads a cluster the same way wherever it runs:
the data directories of a local cluster (running or stopped: nothing here writes to them),
or each node's admin endpoint (a compose or remote cluster). Layout of the result:

    <dest>/nodes/node-<id>/history.jsonl   the node's journal, as written (epoch/history.py)
    <dest>/nodes/node-<id>/replicas.jsonl  one ReplicaState per line (epoch/replica_state.py)
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import aiohttp

from epoch.history import HistoryJournal
from epoch.replica_state import UNKNOWN, ReplicaState, parse, spans
from raftlog.common.errors import ConfigError
from raftlog.config.node_config import NodeConfig
from raftlog.storage.batch import HEADER_SIZE, MIN_BATCH_LENGTH, parse_header
from raftlog.storage.log import read_start_checkpoint
from raftlog.storage.segment import parse_segment_name

CONFIG_NAME = "raftlog.toml"


class CollectError(Exception):
    """Nothing to audit could be gathered; the message says what was looked for."""


def node_dir(dest: Path, node: int) -> Path:
    path = dest / "nodes" / f"node-{node}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_replicas(path: Path, replicas: list[ReplicaState]) -> None:
    """One ReplicaState per line: the layout the audit reads."""
    with open(path, "w", encoding="utf-8") as f:
        for replica in replicas:
            f.write(json.dumps(replica.to_dict()) + "\n")


# -- local data directories ----------------------------------------------------------------


def _log_end(directory: Path, base: int, term: int) -> int:
    """Next offset after the last whole batch of a segment, reading batch headers only."""
    path = directory / f"{base:020d}-{term}.log"
    size = path.stat().st_size
    end = base
    with open(path, "rb") as f:
        pos = 0
        while pos + HEADER_SIZE <= size:
            header = parse_header(os.pread(f.fileno(), HEADER_SIZE, pos))
            if header.batch_length < MIN_BATCH_LENGTH or pos + header.size > size:
                break  # a torn tail: the node cuts it at its next start
            end = header.next_offset
            pos += header.size
    return end


def read_replica(node: int, directory: Path) -> ReplicaState | None:
    """A partition directory's epochs read off its segment files, its log start from them and
    the start DeleteRecords set (term and high watermark are not on disk in a form worth
    parsing here; the audit takes them from the history)."""
    topic, _, index = directory.name.rpartition("-")
    if not topic or not index.isdigit():
        return None
    segments = []
    for entry in os.scandir(directory):
        parsed = parse_segment_name(entry.name)
        if parsed is not None and parsed[2] == "log":
            segments.append((parsed[1], parsed[0], entry.stat().st_size))
    segments.sort(key=lambda s: (s[1], s[0]))
    if not segments:
        return None
    last_term, last_base, _ = segments[-1]
    return ReplicaState(
        node=node,
        topic=topic,
        partition=int(index),
        term=UNKNOWN,
        log_start_offset=max(segments[0][1], read_start_checkpoint(directory)),
        log_end_offset=_log_end(directory, last_base, last_term),
        high_watermark=UNKNOWN,
        epochs=spans(segments),
    )


def collect_local(data: Path, dest: Path) -> list[int]:
    """Copies each node's journal and reads its replicas from a `raftlog cluster` data
    directory (one `node-N/` per node) or a single node's data directory."""
    configs = sorted(data.glob(f"*/{CONFIG_NAME}")) or sorted(data.glob(CONFIG_NAME))
    if not configs:
        raise CollectError(f"{data}: no node directories (looked for */{CONFIG_NAME})")
    nodes = []
    for config_path in configs:
        try:
            config = NodeConfig.load(config_path)
        except ConfigError as e:
            raise CollectError(str(e)) from None
        out = node_dir(dest, config.node_id)
        history = config.data_dir / HistoryJournal.FILE_NAME
        if history.exists():
            shutil.copyfile(history, out / "history.jsonl")
        else:
            (out / "history.jsonl").touch()
        partitions = config.data_dir / "data"
        replicas = []
        if partitions.is_dir():
            for entry in sorted(partitions.iterdir()):
                replica = read_replica(config.node_id, entry) if entry.is_dir() else None
                if replica is not None:
                    replicas.append(replica)
        write_replicas(out / "replicas.jsonl", replicas)
        nodes.append(config.node_id)
    return nodes


# -- admin endpoints -------------------------------------------------------------------------


async def _fetch_node(session: aiohttp.ClientSession, admin: str, dest: Path) -> int:
    async with session.get(f"http://{admin}/v1/epochs") as r:
        r.raise_for_status()
        answer = await r.json()
    node = int(answer["node_id"])
    out = node_dir(dest, node)
    write_replicas(out / "replicas.jsonl", [parse(p) for p in answer["partitions"]])
    async with session.get(f"http://{admin}/v1/history") as r:
        r.raise_for_status()
        with open(out / "history.jsonl", "wb") as f:
            async for chunk in r.content.iter_chunked(1 << 20):
                f.write(chunk)
    return node


async def _collect_admin(admins: list[str], dest: Path) -> list[int]:
    timeout = aiohttp.ClientTimeout(total=600, connect=5)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        results = await asyncio.gather(
            *(_fetch_node(session, a, dest) for a in admins), return_exceptions=True
        )
    failed = [f"{a}: {r}" for a, r in zip(admins, results, strict=True) if isinstance(r, Exception)]
    if failed:
        raise CollectError("could not fetch history from " + "; ".join(failed))
    return [r for r in results if isinstance(r, int)]


def collect_admin(admins: list[str], dest: Path) -> list[int]:
    """Fetches each node's journal and replica states over its admin listener."""
    return asyncio.run(_collect_admin(admins, dest))
