"""The run's files: results.json, results.md and the charts (chart.png, scale.png), each
written beside its target and renamed into place."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from bench.report_scale import SCALE_SYSTEM, SCALE_TARGETS

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


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
