"""Figures across runs: median (min-max) per system, raftlog/Tansu ratios from the same run,
the targets, and the outputs (Markdown tables, JSON, PNG charts)."""

from __future__ import annotations

import json
import operator
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.systems import SCRAPE_INTERVAL_S
from bench.workloads import (
    BASELINE_PARTITIONS,
    E2E_RATE,
    HTTP_MAX_RECORDS,
    HTTP_QUEUE_RECORDS,
    HTTP_TIMEOUT_MS,
    METADATA_SAMPLES,
    QUEUE_FIGURES,
    QUEUE_PARTITIONS,
    QUEUE_RECORD_BYTES,
    QUEUE_STALL_S,
    SCALE_CREATE_TIMEOUT,
    SCALE_FAILOVER_TIMEOUT,
    SCRAPE_SAMPLES,
    TXN_INIT_TIMEOUT_S,
    TXN_RECORDS,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

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


def _stats(values: list[float]) -> dict | None:
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
            entry["systems"][system] = _stats(values) or _state(runs, system, metric)
            if why := _unsupported(runs, system, metric):
                entry.setdefault("unsupported", {})[system] = why
        for system, base in _ratio_pairs(systems) if metric.peer_ratio else []:
            pairs = [(_figure(r, system, metric), _figure(r, base, metric)) for r in runs]
            entry["ratios"][system] = _stats([a / b for a, b in pairs if a is not None and b])
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


def _cell(stats: dict | str | None, suffix: str = "") -> str:
    if stats is None:
        return "—"
    if isinstance(stats, str):
        return "—" if stats == "absent" else stats
    text = _num(stats["median"]) + suffix
    if stats["n"] > 1:
        text += f" ({_num(stats['min'])}–{_num(stats['max'])})"
    return text


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
        cell = _ratio_cell if entry["unit"] == "x" else _cell
        row += [cell(entry["systems"][s]) for s in systems]
        row += [_cell(entry["ratios"].get(s), "x") for s in ratio_cols]
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
        f"partitions, for {s.get('small_seconds', 0):g} s; server CPU = all broker processes.",
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


def write_atomic(path: Path, data: bytes) -> None:
    """Write beside the target and rename: a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_outputs(out: Path, doc: dict, markdown: str, caption: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "results.json", (json.dumps(doc, indent=2, default=str) + "\n").encode())
    write_atomic(out / "results.md", (markdown + "\n").encode())
    chart(out / "chart.png", doc["summary"], doc["settings"]["systems"], caption)
    if doc["scale"]:
        scale_chart(out / "scale.png", doc["scale"])
    else:  # not one from an earlier run beside these results
        (out / "scale.png").unlink(missing_ok=True)


# ----------------------------------------------------------------------------- chart

# (title, unit, [(metric key, bar label)], target line, log scale)
PANELS = [
    (
        "throughput (higher is better)",
        "MB/s",
        [
            ("produce_none.mb_s", "produce"),
            ("produce_lz4.mb_s", "produce lz4"),
            ("consume.mb_s", "consume"),
        ],
        None,
        False,
    ),
    (
        "latency (lower is better; log scale)",
        "ms",
        [
            ("latency.p50_ms", "acks=all\np50"),
            ("latency.p99_ms", "acks=all\np99"),
            ("e2e.p50_ms", "end-to-end\np50"),
            ("e2e.p99_ms", "end-to-end\np99"),
        ],
        10,
        True,
    ),
    (
        "failover / restart (lower is better)",
        "s",
        [
            ("failover.seconds", "failover\n(leader kill -9)"),
            ("restart.seconds", "restart\n(kill -9)"),
        ],
        None,
        False,
    ),
    ("memory: RSS of the largest node", "MB", [("memory.rss_mb", "RSS")], 400, False),
    ("idle CPU, largest node", "% of one core", [("partitions.cpu_pct", "idle")], 10, False),
]
COLORS = {
    "tansu": "#888888",
    "raftlog1": "#4c72b0",
    "raftlog3": "#dd8452",
    "raftlog3-tls": "#c44e52",
    "raftlog1x2": "#55a868",
    "raftlog3x2": "#8172b2",
}


def chart(path: Path, summary: dict, systems: list[str], caption: str) -> None:
    """Grouped bars per panel (median, min–max as error bars), target as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    for ax, (title, unit, bars, target, log) in zip(axes.flat, PANELS, strict=False):
        ax.set_title(title)
        ax.set_ylabel(unit)
        _bars(ax, summary, systems, [(k, label) for k, label in bars if k in summary], target, log)
    last = axes.flat[-1]
    last.axis("off")
    last.text(0, 1, caption, va="top", fontsize=8, wrap=True, transform=last.transAxes)
    fig.suptitle("raftlog vs Tansu (confluent-kafka); median of the runs, min–max as error bars")
    _save(fig, path)


def _save(fig: Figure, path: Path) -> None:
    """tight_layout, then written beside the target and renamed (see write_atomic)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, dpi=90, format="png")
    plt.close(fig)
    os.replace(tmp, path)


def _bars(
    ax: Axes, summary: dict, systems: list[str], bars: list, target: float | None, log: bool
) -> None:
    if not bars:
        ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
        return
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        xs, heights, low, high = [], [], [], []
        for j, (key, _) in enumerate(bars):
            stats = summary[key]["systems"].get(system)
            if isinstance(stats, dict):
                xs.append(j + (i - (len(systems) - 1) / 2) * width)
                heights.append(stats["median"])
                low.append(stats["median"] - stats["min"])
                high.append(stats["max"] - stats["median"])
        if xs:
            ax.bar(
                xs, heights, width, yerr=[low, high], capsize=3, label=system, color=COLORS[system]
            )
    ax.set_xticks(range(len(bars)), [label for _, label in bars], fontsize=9)
    if log:
        ax.set_yscale("log")
    if target is not None:
        ax.axhline(target, color="red", linestyle="--", linewidth=1, label=f"target {target:g}")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


# ----------------------------------------------------------------------------- queue

QUEUE_SYSTEM = "raftlog3"
QUEUE_LABELS = {key: key.replace("_", " ") for key in QUEUE_FIGURES}
QUEUE_LABELS["consume"] = "consume from offset"
VS_CONSUME = "vs_consume"  # records_s over its run's consume records_s, shown with an "x"
# (field, column header)
QUEUE_COLUMNS = [
    ("records_s", "records/s"),
    (VS_CONSUME, "vs consume"),
    ("redelivered", "redelivered"),
    ("http_errors", "HTTP errors"),
    ("ack_p50_ms", "ack p50 ms"),
    ("ack_p99_ms", "ack p99 ms"),
    ("ack_max_ms", "ack max ms"),
    ("first_s", "start-up s"),
]


def _queue_run(figure: dict | None, consume: dict | None) -> dict:
    """One run's values of one figure by QUEUE_COLUMNS field ("error" when it failed, None
    when the field does not apply to it)."""
    if not isinstance(figure, dict):
        return {}
    if "error" in figure:
        return dict.fromkeys((f for f, _ in QUEUE_COLUMNS), "error")
    ok = isinstance(consume, dict) and consume.get("records_s")
    values = {field: figure.get(field) for field, _ in QUEUE_COLUMNS}
    values[VS_CONSUME] = figure["records_s"] / consume["records_s"] if ok else None
    if "errors" in figure:  # the HTTP figures: every answer other than 200
        values["http_errors"] = sum(figure["errors"].values())
    return values


def queue_summary(runs: list[dict]) -> dict:
    """{} if queue did not run on QUEUE_SYSTEM; else per figure (QUEUE_FIGURES order) each
    column's median/min/max over the runs, or "error", and the failures and HTTP errors as
    notes."""
    measured = [
        (run["run"], queue)
        for run in runs
        if isinstance(queue := run["results"].get(QUEUE_SYSTEM, {}).get("queue"), dict)
    ]
    if not measured:
        return {}
    rows = {}
    for key in QUEUE_FIGURES:
        per_run = [_queue_run(queue.get(key), queue.get("consume")) for _, queue in measured]
        figures = {}
        for field, _ in QUEUE_COLUMNS:
            got = [values.get(field) for values in per_run]
            figures[field] = _stats([g for g in got if isinstance(g, float | int)]) or (
                "error" if "error" in got else None
            )
        notes = []
        for run, queue in measured:
            result = queue.get(key)
            if isinstance(result, dict) and "error" in result:
                notes.append(f"run {run}: {result['error']}")
            elif isinstance(result, dict) and result.get("errors"):
                notes.append(f"run {run}: {result['errors']} {result.get('error_samples', {})}")
        rows[key] = {
            "label": QUEUE_LABELS[key],
            "figures": figures,
            "failed_runs": sum(1 for values in per_run if values.get("records_s") == "error"),
            "notes": notes,
        }
    fills = [q["fill"]["records"] for _, q in measured if "records" in q.get("fill", {})]
    return {"records": max(fills, default=None), "rows": rows}


def queue_table(queue: dict) -> str:
    """Markdown: one row per figure, median (min–max) over the runs, and how many runs
    failed where the others gave a figure."""
    head = ["figure", *(header for _, header in QUEUE_COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in queue["rows"].values():
        cells = [
            _ratio_cell(row["figures"][field])
            if field == VS_CONSUME
            else _cell(row["figures"][field])
            for field, _ in QUEUE_COLUMNS
        ]
        if row["failed_runs"] and isinstance(row["figures"]["records_s"], dict):
            cells[0] += f", {row['failed_runs']} failed"
        lines.append("| " + " | ".join([row["label"], *cells]) + " |")
    return "\n".join(lines)


def _ratio_cell(stats: dict | str | None) -> str:
    """Two significant digits: the HTTP figures are far below consume's (0.0031x)."""
    if not isinstance(stats, dict):
        return _cell(stats)
    text = f"{stats['median']:.2g}x"
    return text + (f" ({stats['min']:.2g}–{stats['max']:.2g})" if stats["n"] > 1 else "")


def queue_notes(settings: dict, queue: dict) -> list[str]:
    """How the queue figures were taken, and what went wrong (first line of each reason)."""
    s = settings
    records = queue["records"] or s["queue_records"]
    text = [
        f"{QUEUE_SYSTEM} only (three nodes, RF 3), one fresh cluster per run; median of "
        f"{s['runs']} run(s), (min–max) when more than one. Tansu has neither share groups "
        "nor an HTTP proxy (n/a); raftlog1 is left out to keep the bench short. One topic of "
        f"{records:,} records of {QUEUE_RECORD_BYTES} bytes over {QUEUE_PARTITIONS} "
        "partitions, produced as in produce (acks=all, linger.ms=5, large batches); the "
        f"share consumer and consume read all of it, each http figure its first "
        f"{min(records, HTTP_QUEUE_RECORDS):,}; the share figures each in a fresh share group set to "
        "share.auto.offset.reset=earliest (a group config through IncrementalAlterConfigs).",
        f"http N: N concurrent aiohttp workers, worker i at node (i mod 3)'s proxy, each "
        f"looping: read (max_records {HTTP_MAX_RECORDS}, timeout_ms {HTTP_TIMEOUT_MS}), then "
        "acknowledge what it got as one batch, until every record is acknowledged once. "
        "share consumer: confluent-kafka's ShareConsumer, implicit acknowledgement, until "
        "every record was read, then commit_sync. consume from offset: a plain consumer "
        "assigned every partition from offset 0 (as consume). records/s: all records over the "
        "time from the figure's first request (read, subscribe, assign) to the last record "
        "acknowledged, committed or read; start-up s: the part of it until the first records "
        "came back (the cluster's first group coordinator lookup is done before the figures). "
        "redelivered: reads of a record already read. "
        "HTTP errors: answers other than 200. ack ms: each acknowledge request's wall time. "
        f"vs consume: records/s over consume from offset's in the same run. A figure fails "
        f"when no record is newly settled for {QUEUE_STALL_S:g} s.",
    ]
    missing = [
        f"{row['label']}, {note.splitlines()[0][:300]}"
        for row in queue["rows"].values()
        for note in row["notes"]
    ]
    return text + (["Errors: " + "; ".join(missing) + "."] if missing else [])


# ----------------------------------------------------------------------------- scale

SCALE_SYSTEM = "raftlog3"
# The scale section's systems, each a table of its own, and how its notes describe it.
SCALE_SHAPES = {
    "raftlog3": "three nodes",
    "raftlog3x2": "three hosts of two brokers, 6 broker processes and 3 supervisors",
}
RATIO = "spread_ratio"  # spread_mb_s over its run's six_mb_s, shown with an "x"
# (field, column header, name in the "met" column)
SCALE_COLUMNS = [
    ("create_s", "create s", "create"),
    ("idle_cpu_pct", "idle CPU % core", "idle CPU"),
    ("rss_mb", "RSS MB", "RSS"),
    ("metadata_ms", "metadata ms", "metadata"),
    ("scrape_ms", "scrape CPU ms", "scrape"),
    ("spread_mb_s", "spread MB/s", "spread"),
    (RATIO, f"spread/{BASELINE_PARTITIONS}-partition", "spread ratio"),
    ("failover_s", "failover s", "failover"),
]
OPS = {"<": operator.lt, "≤": operator.le, "≥": operator.ge}


@dataclass(frozen=True)
class ScaleTarget:
    """The scale issue's bound on one figure at one partition count."""

    field: str
    partitions: int
    op: str  # a key of OPS: met when `figure op bound`
    bound: float

    def text(self) -> str:
        suffix = "x" if self.field == RATIO else ""
        return f"{self.partitions:,}: {self.op} {self.bound:,g}{suffix}"

    def met(self, figure: dict | str | None, failed_runs: int) -> bool | None:
        """Judged on the median, and not met if any run's figure failed (a create that
        timed out is slower than any figure); unknown if not measured for another reason."""
        if failed_runs:
            return False
        return OPS[self.op](figure["median"], self.bound) if isinstance(figure, dict) else None


SCALE_TARGETS = [
    ScaleTarget("create_s", 1000, "<", 10),
    ScaleTarget("idle_cpu_pct", 1000, "<", 5),
    ScaleTarget("idle_cpu_pct", 3000, "<", 10),
    ScaleTarget("rss_mb", 3000, "<", 1000),
    ScaleTarget("metadata_ms", 1000, "<", 50),
    ScaleTarget("spread_ratio", 1000, "≥", 0.5),
    ScaleTarget("failover_s", 1000, "≤", 5),
]


def _scale_run(result: dict, six: float | None) -> tuple[dict, list[str]]:
    """One run's figures at one count ("failed", "skipped" or "error" in place of a missing
    one; the spread's ratio to `six`, its run's six-partition produce), and why any is
    missing."""
    if "error" in result:
        return dict.fromkeys((f for f, _, _ in SCALE_COLUMNS), "error"), [result["error"]]
    figures: dict = {}
    for field, _, _ in SCALE_COLUMNS:
        source = "spread_mb_s" if field == RATIO else field
        value = result.get(source)
        if value is None:
            missing = "failed" if source in result["failed"] else "skipped"
            figures[field] = missing if source in result[missing] else None
        elif field == RATIO:
            figures[field] = value / six if six else None
        else:
            figures[field] = value
    why = [f"{f} failed: {msg}" for f, msg in result["failed"].items()]
    why += [f"{f} skipped: {reason}" for f, reason in result["skipped"].items()]
    return figures, why


def scale_summary(runs: list[dict], system: str = SCALE_SYSTEM) -> dict:
    """{} if scale did not run; else the six-partition produce's figures and, per partition
    count (ascending), each figure's median/min/max over the runs or why there is none,
    the targets at that count and whether they are met, and notes on what is missing."""
    per_count: dict[int, list[tuple[int, dict, list[str]]]] = {}
    sixes = []
    for run in runs:
        counts = run["results"].get(system, {}).get("scale")
        if not isinstance(counts, dict):
            continue
        six = next((r["six_mb_s"] for r in counts.values() if r.get("six_mb_s")), None)
        sixes += [six] if six else []
        for count, result in counts.items():
            per_count.setdefault(int(count), []).append((run["run"], *_scale_run(result, six)))
    if not per_count:
        return {}
    rows = {}
    for count, measured in sorted(per_count.items()):
        figures, failed_runs = {}, {}
        for field, _, _ in SCALE_COLUMNS:
            got = [figs[field] for _, figs, _ in measured]
            figures[field] = _stats([g for g in got if isinstance(g, float | int)]) or next(
                (state for state in ("failed", "error", "skipped") if state in got), None
            )
            failed_runs[field] = got.count("failed")
        targets = [t for t in SCALE_TARGETS if t.partitions == count]
        rows[str(count)] = {
            "partitions": count,
            "figures": figures,
            "failed_runs": failed_runs,
            "met": {t.field: t.met(figures[t.field], failed_runs[t.field]) for t in targets},
            "notes": [f"run {run}: {note}" for run, _, notes in measured for note in notes],
        }
    return {"six_mb_s": _stats(sixes), "rows": rows}


def scale_table(scale: dict) -> str:
    """Markdown: one row per partition count, median (min–max) over the runs, the targets
    as the last row."""
    names = {field: name for field, _, name in SCALE_COLUMNS}
    words = {True: "yes", False: "**NO**", None: "?"}
    head = ["partitions", *(header for _, header, _ in SCALE_COLUMNS), "met"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in scale["rows"].values():
        cells = [_scale_cell(row, field) for field, _, _ in SCALE_COLUMNS]
        met = ", ".join(f"{names[f]}: {words[m]}" for f, m in row["met"].items())
        lines.append("| " + " | ".join([f"{row['partitions']:,}", *cells, met]) + " |")
    targets = [
        "; ".join(t.text() for t in SCALE_TARGETS if t.field == field)
        for field, _, _ in SCALE_COLUMNS
    ]
    lines.append("| " + " | ".join(["target", *targets, ""]) + " |")
    return "\n".join(lines)


def _scale_cell(row: dict, field: str) -> str:
    """median (min–max), and how many runs failed where the others gave a figure."""
    figure, failed = row["figures"][field], row["failed_runs"][field]
    text = _cell(figure, "x" if field == RATIO else "")
    return f"{text}, {failed} failed" if isinstance(figure, dict) and failed else text


def scale_notes(settings: dict, scale: dict, system: str = SCALE_SYSTEM) -> list[str]:
    """How the scale figures were taken, and why any is missing (the first line of each
    reason; results.json has them whole)."""
    s = settings
    broker = ", ".join(f"{k}={v}" for k, v in s["scale_broker"].items())
    six = _cell(scale["six_mb_s"])
    text = [
        f"A fresh {system} ({SCALE_SHAPES[system]}; {broker}) per partition count, one topic of that "
        f"many partitions at RF 3; median of {s['runs']} run(s), (min–max) when more than "
        f"one. create: from CreateTopics until Metadata shows a leader for every partition "
        f"(at most {SCALE_CREATE_TIMEOUT:g} s). idle CPU: the busiest node, % of one core "
        f"over {s['idle_seconds']:g} s, {s['settle_seconds']:g} s after the create, no "
        f"clients; RSS: the largest node after that. metadata: median of "
        f"{METADATA_SAMPLES} AdminClient.list_topics(topic) after one warm-up, librdkafka's "
        f"decoding included. scrape CPU: the CPU one GET /metrics costs the busiest node "
        f"(mean of {SCRAPE_SAMPLES} fresh listings, the bench's scraper paused; its idle CPU "
        f"taken off). spread: {s['scale_records']:,} records of {s['record_bytes']} bytes, "
        f"acks=all, round-robin over all partitions; ratio to the same produce over "
        f"{BASELINE_PARTITIONS} partitions on the first count's cluster in the same run "
        f"({six} MB/s). failover: kill -9 of the node leading the most partitions, until a "
        f"live node's Metadata shows every partition led by a live node (at most "
        f"{SCALE_FAILOVER_TIMEOUT:g} s). 'failed': no figure (a timeout, say); a target "
        "is not met if any run's figure failed. 'skipped': needs the create, which failed.",
    ]
    missing = [
        f"{row['partitions']:,} partitions, {note.splitlines()[0][:200]}"
        for row in scale["rows"].values()
        for note in row["notes"]
    ]
    return text + (["Missing figures: " + "; ".join(missing) + "."] if missing else [])


def scale_beside(system: str, scale: dict, base: dict) -> list[str]:
    """`system`'s spread and create time over raftlog3's at each count both measured in the
    same run (ratios of the medians): what more processes per host bought."""
    parts = []
    for count, row in scale["rows"].items():
        other = base.get("rows", {}).get(count)
        if other is None:
            continue
        for field, what in (("spread_mb_s", "spread"), ("create_s", "create")):
            a, b = row["figures"][field], other["figures"][field]
            if isinstance(a, dict) and isinstance(b, dict) and b["median"]:
                parts.append(f"{int(count):,} {what} {a['median'] / b['median']:.2f}x")
    return [f"{system} / {SCALE_SYSTEM}, same run: {', '.join(parts)}."] if parts else []


def scale_chart(path: Path, scale: dict) -> None:
    """Create time and idle CPU against the partition count (log x): median, min–max as
    error bars, the targets as red marks, a count without a figure labelled with why."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    panels = [("create_s", "create until every partition is led", "s")]
    panels += [("idle_cpu_pct", "idle CPU, busiest node", "% of one core")]
    for ax, (field, title, unit) in zip(axes, panels, strict=True):
        points = [(row["partitions"], row["figures"][field]) for row in scale["rows"].values()]
        got = [(n, f) for n, f in points if isinstance(f, dict)]
        if got:
            ax.errorbar(
                [n for n, _ in got],
                [f["median"] for _, f in got],
                yerr=[
                    [f["median"] - f["min"] for _, f in got],
                    [f["max"] - f["median"] for _, f in got],
                ],
                marker="o",
                capsize=3,
                color=COLORS[SCALE_SYSTEM],
                label=SCALE_SYSTEM,
            )
        for n, figure in points:
            if isinstance(figure, str):
                ax.text(n, 0.02, figure, transform=ax.get_xaxis_transform(), ha="center")
        targets = [t for t in SCALE_TARGETS if t.field == field]
        ax.scatter(
            [t.partitions for t in targets],
            [t.bound for t in targets],
            marker="_",
            s=400,
            color="red",
            label="target",
        )
        ax.set_xscale("log")
        ax.minorticks_off()
        counts = sorted({n for n, _ in points} | {t.partitions for t in targets})
        ax.set_xticks(counts, [f"{n:,}" for n in counts])
        # Every count in view, also one shown only by its "failed" label; room for the marks.
        ax.set_xlim(counts[0] / 1.5, counts[-1] * 1.5)
        ax.set_ylim(bottom=0)
        ax.set(title=title, xlabel="partitions (log scale)", ylabel=unit)
        ax.legend(fontsize=8)
    fig.suptitle(f"{SCALE_SYSTEM} with many partitions, a fresh cluster per count")
    _save(fig, path)
