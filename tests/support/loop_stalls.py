"""Every node's loop-stall histogram (raftlog_event_loop_stall_seconds) and leader changes, read
from its /metrics, for tests that judge a request by the stalls it caused."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from support.cluster import Cluster

Figures = dict[str, float]  # "le <bound>": stalls so far, and "leader changes"


def node_figures(cluster: Cluster) -> dict[int, Figures]:
    """Per node: its stall buckets ("le 0.05" ... "le +Inf") and its leader changes."""
    out = {}
    for n in cluster.node_ids:
        url = f"http://{cluster.node(n).admin}/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 (loopback)
            text = response.read().decode()
        seen: Figures = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "raftlog_event_loop_stall_seconds_bucket":
                    seen[f"le {sample.labels['le']}"] = sample.value
                elif sample.name == "raftlog_raft_leader_changes_total":
                    seen["leader changes"] = sample.value
        out[n] = seen
    return out


def stalls_over(before: Figures, after: Figures, limit: str) -> float:
    """Stalls of more than `limit` s (a bucket bound, e.g. "0.5") between the two readings."""
    return (after["le +Inf"] - after[f"le {limit}"]) - (
        before.get("le +Inf", 0.0) - before.get(f"le {limit}", 0.0)
    )


def worst_stall(before: Figures, after: Figures) -> str:
    """The least bucket bound that holds every stall between the two readings."""
    new = {k[3:]: after[k] - before.get(k, 0.0) for k in after if k.startswith("le ")}
    if not new["+Inf"]:
        return "none over 50 ms"
    return "<= " + min((k for k, v in new.items() if v == new["+Inf"]), key=float) + " s"


def worst_seconds(worst: str) -> float:
    """worst_stall's words as a number, to compare them."""
    return 0.0 if worst.startswith("none") else float(worst.split()[1])
