"""The scale section of the results: per partition count, each figure over the runs against
the scale issue's targets, as tables and notes."""

from __future__ import annotations

import operator
from dataclasses import dataclass

from bench.report import stats_cell, stats_of
from bench.scale import (
    BASELINE_PARTITIONS,
    METADATA_SAMPLES,
    SCALE_CREATE_TIMEOUT,
    SCALE_FAILOVER_TIMEOUT,
    SCRAPE_SAMPLES,
)

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
            figures[field] = stats_of([g for g in got if isinstance(g, float | int)]) or next(
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
    return {"six_mb_s": stats_of(sixes), "rows": rows}


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
    text = stats_cell(figure, "x" if field == RATIO else "")
    return f"{text}, {failed} failed" if isinstance(figure, dict) and failed else text


def scale_notes(settings: dict, scale: dict, system: str = SCALE_SYSTEM) -> list[str]:
    """How the scale figures were taken, and why any is missing (the first line of each
    reason; results.json has them whole)."""
    s = settings
    broker = ", ".join(f"{k}={v}" for k, v in s["scale_broker"].items())
    six = stats_cell(scale["six_mb_s"])
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
