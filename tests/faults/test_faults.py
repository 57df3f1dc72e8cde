"""The network fault suite, short: one round of every fault kind (a dozen cycles, about a
minute on two cores), then the checker, without the epoch audit (tests/e2e/test_audit.py runs
it on a real cluster's history). Zero anomalies expected. `make faults` runs as many cycles as
asked, and the audit.

It runs `python -m tests.faults.run` as a child process (its own signal handling and
cleanup, exactly what `make faults` runs) and reads the summary it writes. Skipped only
where the suite cannot work: not root, or no network namespaces / iptables / tc.
`RAFTLOG_FAULTS_SEED` fixes the fault order and durations (the seed is printed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .faults import kinds
from .netns import netem_available, unavailable_reason

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 600.0


def test_every_fault_kind_leaves_no_anomaly(artifacts_dir: Path) -> None:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    all_kinds = kinds(netem_available())
    cycles = len(all_kinds)
    seed = os.environ.get("RAFTLOG_FAULTS_SEED") or str(int.from_bytes(os.urandom(4), "big"))
    out = artifacts_dir / f"faults-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    out.mkdir(parents=True)
    argv = [
        sys.executable,
        *("-m", "tests.faults.run", "--cycles", str(cycles), "--seed", seed),
        *("--out", str(out), "--fault-seconds", "2,3", "--recovery-timeout", "45"),
        *("--flush-timeout", "90"),
        # The epoch audit of a real cluster's history is tests/e2e/test_audit.py's (and every
        # `make faults` run's); here it added about a minute of Spark to the suite's 35.
        "--no-audit",
    ]
    console = out / "console.log"
    with open(console, "wb") as log:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # the runner cleans up on SIGTERM
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            pytest.fail(f"the fault run did not finish in {TIMEOUT:.0f}s:\n{console.read_text()}")
    print(console.read_text())
    summary_path = out / "summary.json"
    assert summary_path.exists(), f"no summary (exit {code}):\n{console.read_text()[-4000:]}"
    summary = json.loads(summary_path.read_text())
    print((out / "summary.md").read_text())
    assert summary["run"]["cycles_done"] == cycles, "the cluster stopped recovering"
    assert set(summary["per_kind"]) == set(all_kinds)
    anomalies = summary["anomalies"]
    examples = "\n".join(f"  {a['kind']}: {a['message']}" for a in anomalies["list"][:15])
    assert summary["passed"] and code == 0, (
        f"anomalies {anomalies['counts']} (seed {seed}, run directory {out}):\n{examples}"
    )
