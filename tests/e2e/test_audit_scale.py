"""The epoch audit on a generated history, in local mode, through the real commands
(`python -m analytics.generate`, `raftlog audit --collected`). The time it took is written to
the test artifacts (audit-scale.json); speed is not asserted here.

A long run, so only `make audit-scale` runs it (a million events, about three minutes, as
$RAFTLOG_AUDIT_EVENTS says); the unit suite audits generated histories too."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from support.cluster import raftlog_argv

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        "RAFTLOG_AUDIT_EVENTS" not in os.environ, reason="a long run: make audit-scale"
    ),
]

EVENTS = int(os.environ.get("RAFTLOG_AUDIT_EVENTS", "200000"))


def test_a_generated_history_audits_in_local_mode(tmp_path, artifacts_dir):
    collected = tmp_path / "collected"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "analytics.generate",
            "--events",
            str(EVENTS),
            "--out",
            str(collected),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    counts = re.match(
        r"([\d,]+) events, ([\d,]+) elections, ([\d,]+) truncations \(([\d,]+) losing", made.stdout
    )
    assert counts, made.stdout
    events, elections, truncations, lost = (int(g.replace(",", "")) for g in counts.groups())
    assert events >= EVENTS

    out = tmp_path / "out"
    started = time.monotonic()
    run = subprocess.run(
        [*raftlog_argv(), "audit", "--collected", str(collected), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=800,
    )
    seconds = time.monotonic() - started
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["events"] == events and summary["all_invariants_held"]
    parts = summary["partitions"]
    assert sum(p["elections"] for p in parts) == elections
    assert sum(p["truncations"] for p in parts) == truncations
    assert sum(p["truncations_losing_acks1"] for p in parts) == lost
    (artifacts_dir / "audit-scale.json").write_text(
        json.dumps(
            {"events": events, "seconds": round(seconds, 1), "job_seconds": summary["seconds"]}
        )
    )
    print(f"\naudit of {events:,} generated events: {seconds:.1f} s (job {summary['seconds']} s)")
