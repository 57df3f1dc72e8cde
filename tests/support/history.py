"""Read the nodes' history journals (JSON lines, `<node data_dir>/history.jsonl`; the
schema is epoch/history.py and epoch/README.md) and check cluster-wide invariants."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FILE_NAME = "history.jsonl"


def read_history(data_dir: Path) -> list[dict[str, Any]]:
    """Every record one node wrote (a torn last line, from kill -9, is skipped)."""
    path = Path(data_dir) / FILE_NAME
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def records(
    cluster, kind: str | None = None, topic: str | None = None, partition: int | None = None
) -> list[dict]:
    """History records of every node of a Cluster, filtered."""
    out = []
    for n in cluster.node_ids:
        for r in read_history(cluster.node(n).data_dir):
            if kind is not None and r.get("kind") != kind:
                continue
            if topic is not None and r.get("topic") != topic:
                continue
            if partition is not None and r.get("partition") != partition:
                continue
            out.append(r)
    return out


def leaders_per_term(history: Iterable[dict]) -> list[str]:
    """Problems: any (topic, partition, term) with elections by more than one node."""
    winners: dict[tuple[str, int, int], set[int]] = defaultdict(set)
    for r in history:
        if r.get("kind") == "election":
            winners[(r["topic"], r["partition"], r["term"])].add(r["node"])
    return [
        f"{t}-{p} term {term}: elected {sorted(nodes)}"
        for (t, p, term), nodes in sorted(winners.items())
        if len(nodes) > 1
    ]
