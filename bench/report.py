"""Figures across runs: median (min-max) per system, raftlog/Tansu ratios from the same run,
and the targets, as the main Markdown table and its notes; the queue and scale sections have
modules of their own (report_queue, report_scale), the files and charts too (outputs)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from bench.systems import SCRAPE_INTERVAL_S
from bench.transactions import TXN_INIT_TIMEOUT_S, TXN_RECORDS
from bench.workloads import E2E_RATE, SPREAD_PARTITIONS

PEER = "tansu"


RAFTLOGS = ("raftlog1", "raftlog1x2", "raftlog3")


# Issue 45: two brokers on one host against one, on small writes (ratio of the medians).
HOSTS_OVER_ONE = ("raftlog1x2", "raftlog1", 1.7)


# A variant is compared with the system it varies, not with the peer: its cost.
VARIANTS = {"raftlog3-tls": "raftlog3"}


@dataclass(frozen=True)
class Target:
    """A floor on the ratio to the peer per raftlog system (`ratio`), a bound on the
    absolute figure (`bound`, met when the figure is below it / at most it), or a floor on
    the absolute figure (`floor`, met when it is at least that)."""

    ratio: dict[str, float] | None = None
    bound: float | None = None
    strict: bool = False
    floor: float | None = None

    def text(self, unit: str) -> str:
        if self.ratio:
            return ", ".join(f"{s} ≥{r:g}x" for s, r in self.ratio.items())
        if self.floor is not None:
            return f"≥ {self.floor:g} {unit}"
        return f"{'<' if self.strict else '≤'} {self.bound:g} {unit}"

    def met(self, system: str, median: float | None, ratio: float | None) -> bool | None:
        if self.ratio:
            floor = self.ratio.get(system)
            return None if floor is None or ratio is None else ratio >= floor
        if median is None:
            return None
        if self.floor is not None:
            return median >= self.floor
        if self.bound is None:
            return None
        return median < self.bound if self.strict else median <= self.bound


@dataclass(frozen=True)
class Metric:
    workload: str  # key in a run's results, e.g. "produce_lz4"
    field: str
    label: str
    unit: str
    higher_is_better: bool
    target: Target | None = None
    # False for a ratio within one system: divided by the peer's it would be a ratio of
    # ratios, which no row of the table means.
    peer_ratio: bool = True

    @property
    def key(self) -> str:
        return f"{self.workload}.{self.field}"


PRODUCE_TARGET = Target(ratio={"raftlog1": 1.0, "raftlog1x2": 1.0, "raftlog3": 0.5})


METRICS = [
    Metric("produce_none", "mb_s", "produce, no compression", "MB/s", True, PRODUCE_TARGET),
    Metric("produce_none", "records_s", "produce, no compression", "records/s", True),
    Metric("produce_lz4", "mb_s", "produce, lz4", "MB/s", True, PRODUCE_TARGET),
    Metric("produce_lz4", "records_s", "produce, lz4", "records/s", True),
    Metric(
        "consume",
        "mb_s",
        "consume from offset 0",
        "MB/s",
        True,
        Target(ratio=dict.fromkeys(RAFTLOGS, 1.0)),
    ),
    Metric("consume", "records_s", "consume from offset 0", "records/s", True),
    Metric("latency", "p50_ms", "produce latency acks=all, p50", "ms", False),
    Metric("latency", "p99_ms", "produce latency acks=all, p99", "ms", False, Target(bound=10)),
    Metric("latency", "max_ms", "produce latency acks=all, max", "ms", False),
    Metric(
        "small",
        "records_s",
        "small requests: 16 producers, one 100 B acks=all record each in flight",
        "records/s",
        True,
        Target(ratio={"raftlog1x2": 1.0, "raftlog3": 0.5}),
    ),
    Metric(
        "small",
        "server_cpu_ms",
        "small requests: server CPU per record (all broker processes)",
        "ms",
        False,
        Target(bound=0.35),
    ),
    # Why a server's CPU per record rises with the clients on its cores: each preemption
    # costs the process its caches (issue 45: raftlog1x2's brokers, 0.7-0.9 per record).
    Metric(
        "small",
        "server_preempted",
        "small requests: server processes preempted per record",
        "",
        False,
    ),
    Metric(
        "spread",
        "mb_s",
        f"produce spread over {SPREAD_PARTITIONS:,} partitions",
        "MB/s",
        True,
        Target(ratio={"raftlog1x2": 1.0}),
    ),
    Metric("e2e", "p50_ms", "end-to-end latency, p50", "ms", False),
    Metric("e2e", "p99_ms", "end-to-end latency, p99", "ms", False),
    Metric(
        "txn",
        "records_s",
        f"transactional produce, {TXN_RECORDS} records per transaction, each committed",
        "records/s",
        True,
    ),
    Metric(
        "txn",
        "idempotent_records_s",
        "the same records, idempotent, no transactions",
        "records/s",
        True,
    ),
    Metric(
        "txn",
        "vs_idempotent",
        "transactional / idempotent produce, same system",
        "x",
        True,
        peer_ratio=False,
    ),
    Metric(
        "failover", "seconds", "failover: leader kill -9 to next ack", "s", False, Target(bound=2)
    ),
    Metric(
        "failover",
        "lost_records",
        "acked records lost by that failover (at least)",
        "records",
        False,
        Target(bound=0),
    ),
    Metric(
        "restart", "seconds", "restart after kill -9 until serving", "s", False, Target(bound=5)
    ),
    Metric(
        "restart",
        "lost_records",
        "acked records lost by that restart",
        "records",
        False,
        Target(bound=0),
    ),
    Metric("move", "seconds", "move one replica of a large partition", "s", False),
    Metric("move", "copy_mb_s", "that move's copy (partition MB / move seconds)", "MB/s", True),
    Metric(
        "move",
        "produce_ratio",
        "produce records/s during that move / before it",
        "x",
        True,
        Target(floor=0.7),
        peer_ratio=False,
    ),
    Metric(
        "memory",
        "rss_mb",
        "RSS after the writes (max node)",
        "MB",
        False,
        Target(bound=400, strict=True),
    ),
    Metric(
        "partitions",
        "cpu_pct",
        "idle CPU with many partitions (max node)",
        "% core",
        False,
        Target(bound=10, strict=True),
    ),
]


def stats_of(values: list[float]) -> dict | None:
    if not values:
        return None
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def _figure(run: dict, system: str, metric: Metric) -> float | None:
    result = run["results"].get(system, {}).get(metric.workload)
    return result.get(metric.field) if isinstance(result, dict) else None


def _state(runs: list[dict], system: str, metric: Metric) -> str:
    """Why a system has no figure: "n/a" (does not apply, or the system lacks the feature:
    "unsupported"), "error", or "absent" (not run)."""
    results = [r["results"].get(system, {}).get(metric.workload) for r in runs]
    if "n/a" in results or any(isinstance(x, dict) and "unsupported" in x for x in results):
        return "n/a"
    if any(isinstance(x, dict) and "error" in x for x in results):
        return "error"
    return "absent"


def summarize(runs: list[dict], systems: list[str]) -> dict:
    """Per metric: each system's median/min/max over the runs, each raftlog system's
    ratio to the peer (per run, then median/min/max), and whether the target is met."""
    summary = {}
    for metric in METRICS:
        entry: dict = {
            "label": metric.label,
            "unit": metric.unit,
            "better": "higher" if metric.higher_is_better else "lower",
            "systems": {},
            "ratios": {},
            "target": metric.target.text(metric.unit) if metric.target else None,
            "met": {},
        }
        for system in systems:
            values = [v for r in runs if (v := _figure(r, system, metric)) is not None]
            entry["systems"][system] = stats_of(values) or _state(runs, system, metric)
            if why := _unsupported(runs, system, metric):
                entry.setdefault("unsupported", {})[system] = why
        for system, base in _ratio_pairs(systems) if metric.peer_ratio else []:
            pairs = [(_figure(r, system, metric), _figure(r, base, metric)) for r in runs]
            entry["ratios"][system] = stats_of([a / b for a, b in pairs if a is not None and b])
        if metric.target:
            for system in (s for s in RAFTLOGS if s in systems):
                if entry["systems"][system] in ("n/a", "absent"):
                    continue
                figure, ratio = entry["systems"][system], entry["ratios"].get(system)
                entry["met"][system] = metric.target.met(
                    system,
                    figure["median"] if isinstance(figure, dict) else None,
                    ratio["median"] if ratio else None,
                )
        if any(isinstance(v, dict) or v == "error" for v in entry["systems"].values()):
            summary[metric.key] = entry
    return summary


def _unsupported(runs: list[dict], system: str, metric: Metric) -> str | None:
    """Why `system` lacks this figure because it lacks the feature (a workload's
    "unsupported"), the first run's reason; None if it has the figure or none says so."""
    for run in runs:
        result = run["results"].get(system, {}).get(metric.workload)
        if isinstance(result, dict) and "unsupported" in result and metric.field not in result:
            return f"run {run['run']}: {result['unsupported']}"
    return None


def _ratio_pairs(systems: list[str]) -> list[tuple[str, str]]:
    """(system, what it is divided by): raftlog by the peer, a variant by its base."""
    pairs = [(s, PEER) for s in RAFTLOGS if s in systems and PEER in systems]
    return pairs + [(v, b) for v, b in VARIANTS.items() if v in systems and b in systems]


def _num(value: float) -> str:
    if isinstance(value, int) or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def stats_cell(stats: dict | str | None, suffix: str = "") -> str:
    if stats is None:
        return "—"
    if isinstance(stats, str):
        return "—" if stats == "absent" else stats
    text = _num(stats["median"]) + suffix
    if stats["n"] > 1:
        text += f" ({_num(stats['min'])}–{_num(stats['max'])})"
    return text


def ratio_cell(stats: dict | str | None) -> str:
    """Two significant digits: the HTTP figures are far below consume's (0.0031x)."""
    if not isinstance(stats, dict):
        return stats_cell(stats)
    text = f"{stats['median']:.2g}x"
    return text + (f" ({stats['min']:.2g}–{stats['max']:.2g})" if stats["n"] > 1 else "")


def _met(entry: dict) -> str:
    words = {True: "yes", False: "**NO**", None: "?"}
    return ", ".join(f"{s}: {words[m]}" for s, m in entry["met"].items()) or ""


def table(summary: dict, systems: list[str]) -> str:
    """Markdown: one row per metric, median (min–max) per system, then the ratios."""
    pairs = _ratio_pairs(systems)
    ratio_cols = [s for s, _ in pairs]
    head = (
        ["metric", "unit", "better"]
        + systems
        + [f"{s}/{base}" for s, base in pairs]
        + ["target", "met"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for entry in summary.values():
        row = [entry["label"], entry["unit"], entry["better"]]
        # A ratio within one system (unit "x") keeps two significant digits: 0.025x.
        cell = ratio_cell if entry["unit"] == "x" else stats_cell
        row += [cell(entry["systems"][s]) for s in systems]
        row += [stats_cell(entry["ratios"].get(s), "x") for s in ratio_cols]
        row += [entry["target"] or "", _met(entry)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def notes(settings: dict, runs: int, values: str, summary: dict | None = None) -> list[str]:
    """How to read the table, what each workload did, and why a system that lacks a
    feature has n/a (from `summary`) (paragraphs)."""
    s = settings
    workloads = [
        f"produce: {s['produce_mb']:g} MB per run over {s['partitions']} partitions, acks=all, "
        "linger.ms=5, batch.size=1 MiB.",
        "consume: the uncompressed topic from offset 0, timed from the first batch; "
        "fetch.queue.backoff.ms=10 (librdkafka's 1 s pause when its queue is full measured "
        "the Python loop, not the broker).",
        f"latency: {s['latency_records']} records, one in flight (acks=all, linger.ms=0).",
        f"end-to-end: {s['latency_records']} records at {E2E_RATE}/s, librdkafka's fetch "
        "defaults (fetch.wait.max.ms 500).",
        f"failover: {s['failover_rate']} records/s, kill -9 of the partition leader, until a "
        "record produced after the kill is acked.",
        f"restart: {s['restart_mb']:g} MB of log, kill -9 right after the last ack, from the "
        "start of `raftlog serve` until an acks=all produce is acked.",
        f"move (raftlog3): a partition of {s.get('move_mb', 0):g} MB on nodes 1, 2 moves to "
        "1, 3 (AlterPartitionReassignments until none is listed; node 3 copies node 1's log "
        "at leader.replication.throttled.rate's default, 32 MiB/s) while a producer writes "
        f"as fast as it can over {s['partitions']} other partitions (produce's settings); "
        f"its committed records/s during the move over those of the "
        f"{2 * s['settle_seconds']:g} s before.",
        "lost records: acked ones missing below the high watermarks afterwards.",
        f"memory: VmRSS once {s['memory_mb']:g} MB were written in total.",
        f"idle CPU: {s['idle_partitions']} partitions, no clients, over {s['idle_seconds']:g} s.",
        f"small requests: 16 producers, each one 100-byte acks=all record in flight, over 12 "
        f"partitions, for {s.get('small_seconds', 0):g} s; server CPU = all broker processes; "
        "preempted = their threads' involuntary context switches (the clients share the "
        "cores).",
        f"spread: {s['scale_records']:,} records, produce's settings, round-robin over one "
        f"topic of {SPREAD_PARTITIONS:,} partitions on a fresh instance (raftlog's nodes with "
        "max.partition.replicas.per.node=10000, as scale).",
        f"transactional produce: {s.get('txn_mb', 0):g} MB per run on a fresh instance, in "
        f"transactions of {TXN_RECORDS} records round-robin over {s['partitions']} partitions, "
        "each committed before the next begins, with produce's batching (acks=all, "
        "linger.ms=5, batch.size=1 MiB), timed from after init_transactions to the last "
        "commit, then checked visible to read_committed; idempotent: the same records "
        "produced just before without transactions, enable.idempotence=true, the same "
        "batching, so transactional / idempotent is what transactions cost that system "
        f"(no peer ratio). A peer whose init_transactions fails or takes over "
        f"{TXN_INIT_TIMEOUT_S:g} s has n/a, and the reason in these notes.",
    ]
    # One line per system and reason (a workload's rows share it), under its first row.
    reasons: dict[tuple[str, str], str] = {}
    for entry in (summary or {}).values():
        for system, why in entry.get("unsupported", {}).items():
            reasons.setdefault((system, why.splitlines()[0][:300]), entry["label"])
    unsupported = [f"{system}, {label}: {why}" for (system, why), label in reasons.items()]
    na = ["n/a where a system lacks the feature: " + "; ".join(unsupported) + "."]
    return [
        f"Median of {runs} run(s), (min–max) when more than one. MB = 10^6 bytes of record "
        f"values. Ratio = raftlog / {PEER} in the same run: above 1 is better for "
        "throughput, below 1 for latency, time, memory and CPU (column 'better').",
        f"Records of {s['record_bytes']} bytes; {values}.",
        " ".join(workloads),
        f"{PEER}: memory engine, no replication (RF 1), so failover and restart do not "
        "apply and its RSS holds all data written. raftlog1: 1 node, RF 1; raftlog3: 3 "
        "nodes, RF 3. raftlog1x2: one host of 2 brokers (`cluster up --hosts 1 "
        "--brokers-per-host 2`: a supervisor and two broker processes), RF 1, the leaders "
        "spread over both. raftlog3-tls: raftlog3 with every client on an SSL listener (TLS 1.3, "
        "no client certificates; the peer mesh in the clear); raftlog3-tls/raftlog3 is the "
        "cost of TLS. "
        "Every raftlog node's /metrics is scraped every "
        f"{SCRAPE_INTERVAL_S:g} s throughout, as a Prometheus server would.",
        *(na if unsupported else []),
        *_hosts_over_one(summary),
    ]


def _hosts_over_one(summary: dict | None) -> list[str]:
    """raftlog1x2's small writes over raftlog1's (issue 45's target), when both ran."""
    many, one, floor = HOSTS_OVER_ONE
    entry = (summary or {}).get("small.records_s", {}).get("systems", {})
    a, b = entry.get(many), entry.get(one)
    if not (isinstance(a, dict) and isinstance(b, dict) and b["median"]):
        return []
    ratio = a["median"] / b["median"]
    met = "met" if ratio >= floor else "NOT met"
    return [f"small writes {many}/{one}: {ratio:.2f}x (medians; target ≥{floor:g}x, {met})."]
