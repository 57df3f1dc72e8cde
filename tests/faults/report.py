"""summary.json and summary.md of a fault run: per fault kind how long the cluster took to
take writes again and how much the terms grew, and every anomaly the checker found, each
attributed to the cycle it happened in (by the time of the ack or send it concerns)."""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from typing import Any

from .checker import Anomaly, summarize

Cycle = dict[str, Any]

METRICS = [
    ("heal_to_ack_s", "heal→ack"),
    ("loss_to_ack_s", "leader loss→ack"),
    ("leaderless_s", "leaderless"),
    ("ack_gap_s", "ack gap"),
    ("term_growth", "term growth"),
]


def attribute(anomalies: list[Anomaly], cycles: list[Cycle]) -> dict[int, list[Anomaly]]:
    """{cycle number: anomalies whose time falls in [its start, the next cycle's start)};
    key -1: before the first fault or without a time."""
    starts = [c["start"] for c in cycles]
    out: dict[int, list[Anomaly]] = defaultdict(list)
    for a in anomalies:
        if a.at is None or not starts:
            out[-1].append(a)
            continue
        i = bisect.bisect_right(starts, a.at) - 1
        out[cycles[i]["cycle"] if i >= 0 else -1].append(a)
    return out


def _stats(values: list[float]) -> dict[str, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "max": None}
    return {"median": round(statistics.median(vals), 2), "max": round(max(vals), 2)}


def per_kind(cycles: list[Cycle], by_cycle: dict[int, list[Anomaly]]) -> dict[str, Any]:
    groups: dict[str, list[Cycle]] = defaultdict(list)
    for c in cycles:
        groups[c["kind"]].append(c)
    out = {}
    for kind, cs in sorted(groups.items()):
        found = [a for c in cs for a in by_cycle.get(c["cycle"], [])]
        out[kind] = {
            "cycles": len(cs),
            "not_recovered": sum(not c["recovered"] for c in cs),
            **{key: _stats([c.get(key) for c in cs]) for key, _ in METRICS},
            "anomalies": summarize(found),
        }
    return out


def _fmt(s: dict[str, float | None], unit: str = "s") -> str:
    if s["median"] is None:
        return "–"
    if unit:
        return f"{s['median']:.1f} / {s['max']:.1f}"
    return f"{s['median']:g} / {s['max']:g}"


def kind_table(kinds: dict[str, Any]) -> list[str]:
    head = ["fault", "cycles", *(f"{label} med/max" for _, label in METRICS)]
    lines = [
        "| " + " | ".join([*head, "not recovered", "anomalies"]) + " |",
        "|" + "---|" * (len(head) + 2),
    ]
    for kind, k in kinds.items():
        cells = [kind, str(k["cycles"])]
        cells += [_fmt(k[key], "" if key == "term_growth" else "s") for key, _ in METRICS]
        cells.append(str(k["not_recovered"]))
        cells.append(", ".join(f"{n} {c}" for n, c in k["anomalies"].items()) or "0")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(summary: dict[str, Any], anomalies: list[Anomaly], examples: int = 5) -> str:
    run = summary["run"]
    lines = [
        f"# raftlog network fault run: {'PASS' if summary['passed'] else 'FAIL'}",
        "",
        f"- run directory: `{run['out']}`",
        f"- {run['cycles_done']} of {run['cycles']} cycles, seed {run['seed']}, "
        f"{run['duration_s']:.0f} s, subnet {run['subnet']}, netem: {run['netem']}",
        f"- topic {run['topic']}: {run['partitions']} partitions, RF 3; "
        f"producers at {run['rate']:g} records/s each",
    ]
    if summary.get("rechecked"):
        lines.append(f"- checked again (`--recheck`) at {summary['rechecked']}")
    for name, p in summary["producers"].items():
        if p.get("transactional"):
            lines.append(
                f"- producer {name} (transactional, its own topic): {p['sent']} records in "
                f"{p['transactions']} transactions: {p['committed']} committed, "
                f"{p['aborted']} aborted, {p['unknown']} with the outcome left open; "
                f"{p['records_read']} records read back read_committed, client errors "
                f"{p['client_errors']}, fatal restarts {p['fatal_restarts']}"
            )
            continue
        lines.append(
            f"- producer {name} (idempotence {p['idempotent']}): {p['sent']} sent, "
            f"{p['acked']} acked ({p['acked_without_offset']} without an offset"
            + (
                f", {p['implicitly_acked']} of them acknowledged implicitly by librdkafka"
                if p.get("implicitly_acked")
                else ""
            )
            + "), "
            f"{p['failed']} failed, max ack latency "
            f"{p['max_ack_latency_s']:.1f} s, client errors {p['client_errors']}"
            + (
                f", producer-epoch bumps {sum(p['epoch_bumps'].values())} "
                f"({'; '.join(f'{n}x {r}' for r, n in p['epoch_bumps'].items()) or 'none'})"
                if "epoch_bumps" in p
                else ""
            )
        )
    if summary.get("moves"):
        lines.append(f"- {moves_line(summary['moves'])} (topic faults-moves, RF 2)")
    lines += ["", "## Per fault kind", "", *kind_table(summary["per_kind"]), ""]
    lines += ["## Anomalies", ""]
    counts = summary["anomalies"]["counts"]
    if not counts:
        lines.append("none")
    for kind, n in counts.items():
        lines.append(f"### {kind}: {n}")
        lines.append("")
        for a in [a for a in anomalies if a.kind == kind][:examples]:
            lines.append(f"- {a.message}")
        lines.append("")
    audit = summary["audit"]
    lines += ["", "## Epoch audit", "", f"exit code {audit.get('exit_code')}"]
    for name, v in (audit.get("failing") or {}).items():
        lines.append(f"- {name}: {v.get('violations')} violations, e.g.")
        for row in (v.get("rows") or [])[:3]:
            where = f"{row.get('topic')}-{row.get('partition')} node {row.get('node')}"
            lines.append(f"  - {where} term {row.get('term')}: {row.get('detail')}")
    lines += ["", "## Cycles", "", cycle_header(), "|---|---|---|---|---|---|---|---|"]
    lines += [cycle_row(c) for c in summary["cycles"]]
    return "\n".join(lines) + "\n"


def moves_line(m: dict[str, Any]) -> str:
    """The reassignment workload's figures in one line."""
    t = m["finish_s"]
    return (
        f"moves: {m['started']} started, {m['finished']} finished "
        f"(start to finish p50 {_s(t['p50'])}, p95 {_s(t['p95'])}, max {_s(t['max'])}), "
        f"{m['cancelled']} cancelled, {m['adopted']} found running after a lost answer, "
        f"{m['gone_elsewhere']} ended elsewhere than their target, {m['refused']} refused, "
        f"{m['call_errors']} admin calls failed, "
        f"{len(m['stuck'] or {}) if m['drained'] else 'unknown'} still running at the end"
    )


def cycle_header() -> str:
    return "| cycle | fault | target | leaderless | ack gap | heal→ack | terms | anomalies |"


def _s(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}s"


def terms_text(c: Cycle) -> str:
    before, after = c["terms_before"], c["terms_after"]
    return " ".join(f"{before.get(p, '?')}>{after.get(p, '?')}" for p in sorted(before))


def cycle_row(c: Cycle) -> str:
    return (
        f"| {c['cycle']} | {c['kind']} | {c['description']} | {_s(c['leaderless_s'])} | "
        f"{_s(c['ack_gap_s'])} | {_s(c['heal_to_ack_s'])}"
        f"{'' if c['recovered'] else ' (not recovered)'} | {terms_text(c)} | "
        f"{c.get('anomalies', 0)} |"
    )


def progress_line(c: Cycle, total: int) -> str:
    return (
        f"cycle {c['cycle']:>3}/{total} {c['kind']:<19} {c['description']:<44} "
        f"leaderless {_s(c['leaderless_s']):>6}  ack gap {_s(c['ack_gap_s']):>6}  "
        f"heal->ack {_s(c['heal_to_ack_s']):>6}{'' if c['recovered'] else ' NOT RECOVERED'}  "
        f"terms {terms_text(c)}"
    )
