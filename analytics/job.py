"""The epoch audit as a Spark job: collected history in, report and tables out.

Exit status: 0 when every invariant held, 1 when one broke (so it can guard a CI job)."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from analytics import invariants, report, tables
from analytics.invariants import VIOLATION_COLUMNS, Derived
from analytics.tables import TP

ROWS_PER_INVARIANT = 50
CHARTED_PARTITIONS = 40
TABLE_ROWS = 300


class Progress:
    """One line per stage on stderr, with the time the previous stages took."""

    def __init__(self, stages: int) -> None:
        self.stages, self.done, self.started = stages, 0, time.monotonic()

    def __call__(self, what: str) -> None:
        self.done += 1
        elapsed = time.monotonic() - self.started
        print(
            f"audit [{self.done}/{self.stages}] {what} ({elapsed:.1f} s)",
            file=sys.stderr,
            flush=True,
        )


LOG_CONFIG = Path(__file__).with_name("log4j2.properties")


def local_threads(master: str) -> int | None:
    """The worker threads of a local master (local, local[N], local[*], local[N,F]), else None."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master)
    if m is None:
        return None
    return (os.cpu_count() or 1) if m[1] == "*" else int(m[1] or 1)


def session(master: str, conf: dict[str, str] | None = None) -> SparkSession:
    """`conf`: settings over the job's own (the unit tests' one long-lived session)."""
    threads = local_threads(master)
    java = f"-Dlog4j2.configurationFile={LOG_CONFIG}"
    if threads is not None:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only, and no warning
        # The driver runs the tasks too, and its work is compiling and deserializing many
        # small stages: the JIT's first tier alone took 40 % less CPU than both tiers on a
        # 2,000-record history, 24 % on 42,000 and 20 % on 200,000 (the C2 compiler's own
        # work never paid for itself in runs this short).
        java += " -XX:TieredStopAtLevel=1"
    # The job runs a few dozen queries with a few hundred small stages. In local mode each
    # task's cost is mostly deserializing its stage (the plan and generated code), not its
    # rows, so a shuffle makes one partition per worker thread (8 took twice the CPU on a
    # small history), and adaptive execution, which runs every query stage as a job of its
    # own to re-plan between them, is off: one process has no skew or stragglers to adapt
    # to. The UI is off but each query still renders its plan for the listener: the simple
    # form is the cheap one.
    builder = (
        SparkSession.builder.master(master)
        .appName("raftlog epoch audit")
        .config("spark.driver.extraJavaOptions", java)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.ui.explainMode", "simple")
        .config("spark.sql.shuffle.partitions", str(threads or 8))
        .config("spark.sql.adaptive.enabled", "false" if threads else "true")
        .config("spark.sql.session.timeZone", "UTC")
        # each journal is read whole by one task, so line order survives (see tables.load)
        .config("spark.sql.files.maxPartitionBytes", str(1 << 40))
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _dicts(df: DataFrame) -> list[dict]:
    return [r.asDict(recursive=True) for r in df.collect()]


def _bucket_seconds(span_ms: int) -> int:
    """About sixty bars across the recorded history."""
    for seconds in (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 21600, 86400):
        if span_ms / 1000 / seconds <= 60:
            return seconds
    return 86400 * 7


def run(spark: SparkSession, collected: Path, out: Path, source: str, progress: Progress) -> int:
    started = time.monotonic()
    inputs = tables.load(spark, collected)
    inputs.events.cache()
    inputs.spans.cache()
    events = inputs.events.count()
    unreadable = inputs.unreadable.count()
    nodes = sorted(
        r.node
        for r in inputs.replicas.select("node")
        .union(inputs.events.select("node"))
        .distinct()
        .collect()
    )
    progress(f"read {events:,} history records from {len(nodes)} nodes")

    elected = tables.elections(inputs).cache()
    summary = tables.election_summary(inputs, elected)
    progress(f"elections: {elected.count():,}")

    timeline = tables.epoch_timeline(inputs, elected).cache()
    progress(f"epoch timeline: {timeline.count():,} epochs")

    cut = tables.truncations(inputs, elected).cache()
    progress(f"truncations: {cut.count():,}")

    agreement = tables.replica_agreement(inputs)
    derived = Derived(truncations=cut, agreement=agreement)
    violations = None
    for check in invariants.INVARIANTS.values():
        rows = check(inputs, derived).select(*VIOLATION_COLUMNS)
        violations = rows if violations is None else violations.unionByName(rows)
    assert violations is not None
    violations = violations.cache()
    counts: dict[str, int] = dict(violations.groupBy("invariant").count().collect())
    ranked = Window.partitionBy("invariant").orderBy("topic", "partition", "time_ms", "node")
    first_rows: dict[str, list[dict]] = {}
    for r in _dicts(
        violations.withColumn("n", F.row_number().over(ranked))
        .filter(F.col("n") <= ROWS_PER_INVARIANT)
        .drop("n")
        .orderBy("invariant", "topic", "partition", "time_ms", "node")
    ):
        first_rows.setdefault(r["invariant"], []).append(r)
    verdicts = [
        report.Verdict(
            name, invariants.describe(name), counts.get(name, 0), first_rows.get(name, [])
        )
        for name in invariants.INVARIANTS
    ]
    broken = [v.name for v in verdicts if not v.held]
    progress("invariants: " + ("all held" if not broken else "BROKEN " + ", ".join(broken)))

    partitions = tables.partition_summary(timeline, summary, cut)
    frames = {
        "events": inputs.events,
        "epoch_timeline": timeline,
        "elections": elected,
        "election_summary": summary,
        "truncations": cut,
        "replica_disagreements": agreement,
        "violations": violations,
        "partition_summary": partitions,
    }
    for name, frame in frames.items():
        frame.write.mode("overwrite").parquet(str(out / "tables" / name))
    progress(f"tables written to {out / 'tables'}")

    charted = partitions.select(*TP).limit(CHARTED_PARTITIONS)
    span = inputs.events.agg(F.min("time_ms"), F.max("time_ms")).first()
    bucket = _bucket_seconds((span[1] - span[0]) if span and span[0] is not None else 0)
    data = report.ReportData(
        source=source,
        master=spark.sparkContext.master or "?",  # a running context always has one
        nodes=nodes,
        events=events,
        unreadable=unreadable,
        unreadable_sample=[r.value for r in inputs.unreadable.limit(5).collect()],
        verdicts=verdicts,
        partitions=_dicts(partitions.limit(TABLE_ROWS * 3)),
        timeline=_dicts(timeline.join(charted, TP).orderBy(*TP, "epoch").limit(TABLE_ROWS * 10)),
        timeline_total=timeline.count(),
        elections=_dicts(elected.orderBy("time_ms").limit(TABLE_ROWS)),
        elections_total=elected.count(),
        election_bucket_s=bucket,
        election_buckets=_dicts(
            elected.groupBy(tables.time_bucket("time_ms", bucket), "leader")
            .count()
            .orderBy("bucket_ms")
        ),
        truncations=_dicts(cut.drop("seq").orderBy("time_ms").limit(TABLE_ROWS)),
        truncations_total=cut.count(),
    )
    data.seconds = time.monotonic() - started
    report.write(out, data)
    progress(f"report: {out / 'report.html'}")
    return 0 if data.held else 1
