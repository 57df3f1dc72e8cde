"""What the hot paths count, in plain ints (an add per request, Raft entry or batch: no locks,
no label lookups): the low half of the node's metrics. Kept apart from raftlog/node/metrics.py,
whose collector walks the node at scrape time, so that the partition, its produce queue and
the loop-stall monitor count without importing the node above them."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate

from prometheus_client.utils import floatToGoString

# Raft commit latency of produce entries: about a millisecond on loopback, tens under load.
COMMIT_BUCKETS = (0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
# Event-loop stalls (raftlog/node/loop_stall.py): under 50 ms is scheduling noise; an election
# timeout is 1-2 s.
STALL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Histogram:
    """Observations in fixed buckets, counted in plain ints: prometheus_client's Histogram
    takes a lock per observation, and these are observed per request on the event loop."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def read(self) -> tuple[list[tuple[str, float]], float]:
        """Cumulative (le, count) pairs, +Inf last, as HistogramMetricFamily takes them, and
        the sum."""
        totals = list(accumulate(self.counts))
        buckets = [
            (floatToGoString(b), float(n)) for b, n in zip(self.bounds, totals, strict=False)
        ]
        return [*buckets, ("+Inf", float(totals[-1]))], self.sum


class PartitionCounters:
    """A replica's client traffic: produce appended while it led (in) and what Fetch and
    ShareFetch answers carried (out)."""

    __slots__ = ("bytes_in", "bytes_out", "records_in", "records_out")

    def __init__(self) -> None:
        self.bytes_in = self.records_in = self.bytes_out = self.records_out = 0


class RaftMetrics:
    """Raft events of every replica of a node (node-wide, to keep series per partition few)."""

    __slots__ = (
        "commit_latency",
        "elections",
        "leader_changes",
        "truncated_entries",
        "truncations",
    )

    def __init__(self) -> None:
        self.elections = 0  # replicas of this node that became leader
        self.leader_changes = 0  # new (leader, term) seen by a replica of this node
        self.truncations = 0
        self.truncated_entries = 0
        self.commit_latency = Histogram(COMMIT_BUCKETS)
