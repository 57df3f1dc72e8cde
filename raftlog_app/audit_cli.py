"""`raftlog audit`: collect every node's history, run the epoch audit on Spark, write the report.

Exit status: 0 every invariant held; 1 an invariant broke; 2 nothing could be audited (no
history found, a node unreachable, no Java for Spark)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

STAGES = 8  # collect + the job's seven


def add_parser(sub: argparse._SubParsersAction, default_data: Path) -> None:
    audit = sub.add_parser(
        "audit",
        help="the epoch audit: leader epochs, elections, truncations and invariants (PySpark)",
    )
    source = audit.add_mutually_exclusive_group()
    source.add_argument(
        "--data",
        type=Path,
        help=f"a local cluster's directory, read directly (default: {default_data})",
    )
    source.add_argument(
        "--admin",
        action="append",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="fetch from each node's admin listener instead (a compose or remote cluster)",
    )
    source.add_argument(
        "--collected", type=Path, help="audit a directory an earlier run collected into"
    )
    audit.add_argument(
        "--out", type=Path, help="output directory (default: audit/<UTC date and time>)"
    )
    audit.add_argument(
        "--master",
        default="local[*]",
        help="Spark master: local[*] (default) or spark://HOST:PORT for a Spark cluster",
    )
    audit.set_defaults(run=run, default_data=default_data)


def _fail(message: str) -> int:
    print(f"raftlog audit: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    try:
        from analytics import collect, job
    except ModuleNotFoundError as e:
        return _fail(f"{e.name} is missing: install the audit extra (pip install 'raftlog[audit]')")

    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        return _fail(
            "Spark needs Java 17 or newer: install a JRE (Debian: openjdk-17-jre-headless)"
        )
    out: Path = args.out or Path("audit") / datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    progress = job.Progress(STAGES)
    if args.collected:
        collected, source = args.collected, f"collected history in {args.collected}"
        if not (collected / "nodes").is_dir():
            return _fail(f"{collected}: no nodes/ directory (is it an audit's collected/?)")
        progress("using history collected earlier")
    else:
        collected = out / "collected"
        try:
            if args.admin:
                admins = [a.strip() for arg in args.admin for a in arg.split(",") if a.strip()]
                nodes = collect.collect_admin(admins, collected)
                source = "admin endpoints " + ", ".join(admins)
            else:
                data = args.data or args.default_data
                nodes = collect.collect_local(data, collected)
                source = f"data directory {data.resolve()}"
        except collect.CollectError as e:
            return _fail(str(e))
        progress(
            f"collected history of nodes {', '.join(map(str, sorted(nodes)))} into {collected}"
        )
    spark = job.session(args.master)
    try:
        status = job.run(spark, collected, out, source, progress)
    finally:
        spark.stop()
    print(f"report: {out / 'report.html'}")
    print(f"summary: {out / 'summary.json'}")
    if status:
        print("raftlog audit: an invariant is broken (see the report)", file=sys.stderr)
    return status
