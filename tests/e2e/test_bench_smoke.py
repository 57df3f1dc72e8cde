"""`bench/run.py --quick` end to end on tiny sizes: it starts Tansu and a one-node raftlog,
measures, and writes its JSON and chart. No timing is asserted: this machine is shared."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def run_bench(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """On a timeout the bench gets SIGTERM first, so it stops the brokers it started."""
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "bench" / "run.py"), *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"bench did not finish in {timeout:.0f}s\n{err[-4000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_quick_bench_writes_figures_for_both_systems(tmp_path: Path) -> None:
    out = tmp_path / "results"
    done = run_bench(
        [
            "--quick",
            "--systems", "raftlog1,tansu",
            "--workloads", "produce,latency",
            "--produce-mb", "2",
            "--latency-records", "20",
            "--out", str(out),
            "--tmp", str(tmp_path),
        ],
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    doc = json.loads((out / "results.json").read_text())
    for key in ("produce_none.mb_s", "produce_lz4.records_s", "latency.p99_ms"):
        figures = doc["summary"][key]["systems"]
        assert isinstance(figures["tansu"], dict) and figures["tansu"]["median"] > 0, key
        assert isinstance(figures["raftlog1"], dict) and figures["raftlog1"]["median"] > 0, key
        assert doc["summary"][key]["ratios"]["raftlog1"]["n"] == 1
    assert doc["machine"]["commit"] and doc["machine"]["cpu_count"]
    assert [cost > 0 for cost in doc["machine"]["page_cache_ms_per_mb"]] == [True, True]
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "results.md").read_text()
    assert "| produce, no compression | MB/s |" in report
    assert "Writing a new file cost" in report  # the machine's page-cache cost, in the header
    assert "produce, lz4" in done.stdout
    assert not list(tmp_path.glob("bench-*")), "a broker's temp dir was left behind"
    assert not processes_naming(tmp_path), "a raftlog node outlived the bench"


def processes_naming(path: Path) -> list[int]:
    """Pids with a command-line argument under `path` (raftlog nodes name their config)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if entry.name.isdigit() and f"{path}/" in args:
            found.append(int(entry.name))
    return found
