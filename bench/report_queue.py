"""The queue section of the results: the share-group and HTTP proxy figures of one system,
as a table over the runs and the notes that say how they were taken."""

from __future__ import annotations

from bench.queues import (
    HTTP_MAX_RECORDS,
    HTTP_QUEUE_RECORDS,
    HTTP_TIMEOUT_MS,
    QUEUE_FIGURES,
    QUEUE_PARTITIONS,
    QUEUE_RECORD_BYTES,
    QUEUE_STALL_S,
)
from bench.report import ratio_cell, stats_cell, stats_of

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
            figures[field] = stats_of([g for g in got if isinstance(g, float | int)]) or (
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
            ratio_cell(row["figures"][field])
            if field == VS_CONSUME
            else stats_cell(row["figures"][field])
            for field, _ in QUEUE_COLUMNS
        ]
        if row["failed_runs"] and isinstance(row["figures"]["records_s"], dict):
            cells[0] += f", {row['failed_runs']} failed"
        lines.append("| " + " | ".join([row["label"], *cells]) + " |")
    return "\n".join(lines)


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
