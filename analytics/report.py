"""report.html for a person and summary.json for machines, from the audit's (small, already
aggregated or capped) results. Charts are matplotlib PNGs embedded in the page, so the report
is one file that can be mailed or attached to a CI run."""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - the backend must be chosen first

Row = dict[str, Any]

# Columns holding a time as epoch milliseconds (summary.json and tables/ keep them so), and how
# the page heads them.
TIME_COLUMNS = {"start_ms": "start", "time_ms": "time"}


@dataclass
class Verdict:
    name: str
    description: str
    violations: int
    rows: list[Row]  # the first offending rows

    @property
    def held(self) -> bool:
        return self.violations == 0


@dataclass
class ReportData:
    source: str
    master: str
    nodes: list[int]
    events: int
    unreadable: int
    unreadable_sample: list[str]
    verdicts: list[Verdict]
    partitions: list[Row]  # partition summary
    timeline: list[Row]  # epochs of the charted partitions
    timeline_total: int
    elections: list[Row]
    elections_total: int
    election_bucket_s: int
    election_buckets: list[Row]  # bucket_ms, leader, count
    truncations: list[Row]
    truncations_total: int
    seconds: float = 0.0
    charts: dict[str, bytes] = field(default_factory=dict)

    @property
    def held(self) -> bool:
        return all(v.held for v in self.verdicts)


def summary(data: ReportData) -> dict[str, Any]:
    return {
        "source": data.source,
        "spark_master": data.master,
        "nodes": data.nodes,
        "events": data.events,
        "unreadable_lines": data.unreadable,
        "seconds": round(data.seconds, 1),
        "all_invariants_held": data.held,
        "invariants": {
            v.name: {
                "held": v.held,
                "violations": v.violations,
                "description": v.description,
                "rows": v.rows[:20],
            }
            for v in data.verdicts
        },
        "partitions": data.partitions,
    }


# -- charts --------------------------------------------------------------------------------


def _png(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _origin(data: ReportData) -> int:
    """The first election's time (epoch ms), where the charts and tables count seconds from;
    without one, the earliest time the report shows."""
    elected = [r["time_ms"] for r in data.elections if r["time_ms"] is not None]
    elected += [r["start_ms"] for r in data.timeline if r["start_ms"] is not None]
    if elected:
        return min(elected)
    shown = _shown_times(data) + [r["bucket_ms"] for r in data.election_buckets]
    return min(shown) if shown else 0


def _shown_times(data: ReportData) -> list[int]:
    rows = [*data.timeline, *data.elections, *data.truncations]
    rows += [r for v in data.verdicts for r in v.rows]
    return [r[c] for r in rows for c in TIME_COLUMNS if r.get(c) is not None]


def timeline_chart(data: ReportData) -> bytes:
    """One row per partition, one bar per epoch, coloured by its leader."""
    rows = [r for r in data.timeline if r["start_ms"] is not None]
    names = sorted({(r["topic"], r["partition"]) for r in rows})
    fig, ax = plt.subplots(figsize=(11, max(2.0, 0.38 * len(names) + 1.2)))
    if not rows:
        ax.text(0.5, 0.5, "no elections recorded", ha="center", va="center")
        ax.set_axis_off()
        return _png(fig)
    t0 = _origin(data)
    last = max((r["start_ms"] + (r["duration_ms"] or 0)) for r in rows)
    colours = plt.get_cmap("tab10")
    leaders = sorted({r["leader"] for r in rows if r["leader"] is not None})
    for y, name in enumerate(names):
        for r in (r for r in rows if (r["topic"], r["partition"]) == name):
            start = (r["start_ms"] - t0) / 1000
            width = max((r["duration_ms"] or 0) / 1000, (last - t0) / 1000 * 0.002)
            colour = colours(leaders.index(r["leader"]) % 10) if r["leader"] is not None else "grey"
            ax.broken_barh([(start, width)], (y - 0.4, 0.8), facecolors=colour, edgecolor="white")
            if width > (last - t0) / 1000 * 0.03:
                ax.text(start + width / 2, y, str(r["epoch"]), ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(names)), [f"{t}-{p}" for t, p in names], fontsize=8)
    ax.set_xlabel("seconds since the first recorded election")
    ax.set_title("Leader epochs per partition (number = epoch, colour = leader)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours(i % 10)) for i in range(len(leaders))]
    ax.legend(handles, [f"node {n}" for n in leaders], loc="upper left", bbox_to_anchor=(1, 1))
    ax.invert_yaxis()
    return _png(fig)


def elections_chart(data: ReportData) -> bytes:
    """Elections per time bucket, stacked by the node that won."""
    fig, ax = plt.subplots(figsize=(11, 3.2))
    if not data.election_buckets:
        ax.text(0.5, 0.5, "no elections recorded", ha="center", va="center")
        ax.set_axis_off()
        return _png(fig)
    t0 = _origin(data)
    buckets = sorted({r["bucket_ms"] for r in data.election_buckets})
    width = data.election_bucket_s * 0.9
    bottom = dict.fromkeys(buckets, 0)
    for leader in sorted({r["leader"] for r in data.election_buckets}):
        xs = [r for r in data.election_buckets if r["leader"] == leader]
        ax.bar(
            [(r["bucket_ms"] - t0) / 1000 for r in xs],
            [r["count"] for r in xs],
            width=width,
            bottom=[bottom[r["bucket_ms"]] for r in xs],
            label=f"won by node {leader}",
            align="edge",
        )
        for r in xs:
            bottom[r["bucket_ms"]] += r["count"]
    ax.set_xlabel("seconds since the first recorded election")
    ax.set_ylabel(f"elections per {data.election_bucket_s} s")
    ax.set_title("Elections over time")
    ax.legend(loc="upper left", bbox_to_anchor=(1, 1))
    return _png(fig)


def truncation_chart(data: ReportData) -> bytes:
    """Bytes cut by truncations, per partition."""
    rows = [r for r in data.partitions if r["truncated_bytes"]]
    fig, ax = plt.subplots(figsize=(11, 3.2))
    if not rows:
        ax.text(0.5, 0.5, "no truncations: no replica ever cut its log", ha="center", va="center")
        ax.set_axis_off()
        return _png(fig)
    labels = [f"{r['topic']}-{r['partition']}" for r in rows]
    ax.bar(labels, [r["truncated_bytes"] for r in rows], color="#c0392b")
    ax.set_ylabel("bytes truncated")
    ax.set_title("Truncated bytes per partition")
    ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    return _png(fig)


# -- HTML ------------------------------------------------------------------------------------


def _iso(ms: int) -> str:
    at = datetime.fromtimestamp(ms / 1000, UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Times:
    """How the page shows an epoch-millisecond time: UTC in ISO 8601, and the seconds since
    the run's first election. When every time shown falls on that election's UTC day, the
    page says the date once and the cells give the time of day."""

    origin_ms: int
    day: str | None  # the one UTC date of every time shown, if there is one

    @classmethod
    def of(cls, data: ReportData) -> Times:
        origin = _origin(data)
        days = {_iso(ms)[:10] for ms in [origin, *_shown_times(data)]}
        return cls(origin, days.pop() if len(days) == 1 else None)

    def cell(self, ms: int) -> str:
        iso = _iso(ms)
        shown = iso[11:] if self.day else iso
        since = (ms - self.origin_ms) / 1000
        return f'<span title="{iso}">{shown}</span><br><span class="since">{since:+.3f} s</span>'

    def note(self, data: ReportData) -> str:
        first = "the first election" if data.elections or data.timeline else "the first event"
        date = f", all on {self.day}" if self.day else ""
        return (
            f"Times are UTC (ISO 8601){date}; under each, the seconds since {first} "
            f"({_iso(self.origin_ms)}), as on the charts."
        )


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px;max-width:100%}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{background:#f0f0f0;font-weight:600;font-size:12px} td.l,th.l{text-align:left}
td{white-space:nowrap} td.w{white-space:normal;overflow-wrap:anywhere;text-align:left}
.since{color:#666;font-size:11px}
.wide{overflow-x:auto;max-width:100%}
.ok{color:#1e7e34;font-weight:600} .bad{color:#b00020;font-weight:600}
.banner{padding:.8em 1em;border-radius:6px;font-size:18px;margin:1em 0}
.banner.ok{background:#e6f4ea} .banner.bad{background:#fde7e9}
img{max-width:100%;border:1px solid #ddd;margin:.5em 0}
.note{color:#666;font-size:13px}
"""


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return "—"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return html.escape(str(value))


def _head(column: str, rows: list[Row]) -> str:
    """A column's heading, breakable after each underscore so long names wrap, not widen;
    aligned as its cells are."""
    name = "_<wbr>".join(html.escape(part) for part in TIME_COLUMNS.get(column, column).split("_"))
    text = isinstance(rows[0].get(column), str | list)
    return f'<th class="l">{name}</th>' if text else f"<th>{name}</th>"


def _td(row: Row, column: str, times: Times) -> str:
    """Numbers and times never break; text (names, reasons, lists) wraps to fit the page."""
    value = row.get(column)
    if column in TIME_COLUMNS and isinstance(value, int):
        return f"<td>{times.cell(value)}</td>"
    if isinstance(value, str | list):
        return f'<td class="w">{_cell(value)}</td>'
    return f"<td>{_cell(value)}</td>"


def _table(rows: list[Row], columns: list[str], times: Times, total: int | None = None) -> str:
    if not rows:
        return '<p class="note">none</p>'
    head = "".join(_head(c, rows) for c in columns)
    body = "".join("<tr>" + "".join(_td(r, c, times) for c in columns) + "</tr>" for r in rows)
    more = ""
    if total is not None and total > len(rows):
        more = (
            f'<p class="note">first {len(rows)} of {total} rows; all are in tables/ (Parquet)</p>'
        )
    return f'<div class="wide"><table><tr>{head}</tr>{body}</table></div>{more}'


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{alt}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def render_html(data: ReportData) -> str:
    times = Times.of(data)
    verdict = (
        '<div class="banner ok">All invariants held.</div>'
        if data.held
        else '<div class="banner bad">Broken: '
        + ", ".join(v.name for v in data.verdicts if not v.held)
        + "</div>"
    )
    inv_rows = "".join(
        f'<tr><td class="l">{v.name}</td><td class="{"ok" if v.held else "bad"}">'
        f"{'held' if v.held else 'BROKEN'}</td><td>{v.violations}</td>"
        f'<td class="l">{html.escape(v.description)}</td></tr>'
        for v in data.verdicts
    )
    broken = "".join(
        f"<h3>{v.name}: offending rows</h3>"
        + _table(
            v.rows, ["topic", "partition", "node", "term", "time_ms", "detail"], times, v.violations
        )
        for v in data.verdicts
        if not v.held
    )
    unreadable = ""
    if data.unreadable:
        sample = "".join(
            f"<li><code>{html.escape(s[:200])}</code></li>" for s in data.unreadable_sample
        )
        unreadable = f'<p class="bad">{data.unreadable} history lines were not records of a known kind:</p><ul>{sample}</ul>'
    c = data.charts
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>raftlog epoch audit</title><style>{_STYLE}</style></head><body>
<h1>raftlog epoch audit</h1>
<p class="note">{html.escape(data.source)} · nodes {", ".join(map(str, data.nodes))} ·
{data.events:,} history records · Spark {html.escape(data.master)} · {data.seconds:.1f} s</p>
<p class="note">{html.escape(times.note(data))}</p>
{verdict}
<h2>Invariants</h2>
<table><tr><th class="l">invariant</th><th>verdict</th><th>rows</th><th class="l">what it means</th></tr>{inv_rows}</table>
{broken}{unreadable}
<h2>Epoch timeline</h2>{_img(c["timeline"], "epoch timeline")}
<h2>Elections</h2>{_img(c["elections"], "elections over time")}
<h2>Truncations</h2>{_img(c["truncations"], "truncated bytes")}
<h2>Partitions</h2>
{_table(data.partitions, ["topic", "partition", "epochs", "latest_epoch", "log_end_offset", "elections", "winners", "max_leaderless_ms", "truncations", "truncated_records", "truncated_bytes", "truncations_losing_acks1"], times)}
<h2>Epochs</h2>
{_table(data.timeline[:300], ["topic", "partition", "epoch", "leader", "in_log", "start_offset", "end_offset", "records", "bytes", "start_ms", "duration_ms"], times, data.timeline_total)}
<h2>Elections, one row each</h2>
<p class="note">leaderless_ms: from the first node giving up on the old leader to the win;
since_leader_seen_ms: from the old leader's last recorded act as leader (includes the time to notice it was gone).</p>
{_table(data.elections, ["topic", "partition", "term", "leader", "time_ms", "log_end_offset", "previous_leader", "leaderless_ms", "since_leader_seen_ms"], times, data.elections_total)}
<h2>Truncations, one row each</h2>
<p class="note">lost_acks1: the cut held records an acks=1 producer had been told were written — lost data, which acks=1 allows;
cut_committed: the cut went below the node's own high watermark, into entries a replica's committed log holds at that offset with that epoch, or into records acknowledged to an acks=all producer — never allowed.</p>
{_table(data.truncations, ["topic", "partition", "node", "time_ms", "reason", "from_offset", "to_offset", "entry_terms", "records", "bytes", "lost_acks1", "cut_committed"], times, data.truncations_total)}
</body></html>"""


def write(out: Path, data: ReportData) -> None:
    data.charts = {
        "timeline": timeline_chart(data),
        "elections": elections_chart(data),
        "truncations": truncation_chart(data),
    }
    charts = out / "charts"
    charts.mkdir(parents=True, exist_ok=True)
    for name, png in data.charts.items():
        (charts / f"{name}.png").write_bytes(png)
    (out / "report.html").write_text(render_html(data), encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(summary(data), indent=2, default=str) + "\n")
