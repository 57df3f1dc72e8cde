"""analytics/report.py: the audit page shows times as UTC and as seconds since the first
election (summary.json keeps the epoch milliseconds), and its widest tables fit the page."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from analytics import report

T0 = 1_795_689_285_091  # 2026-11-26T10:34:45.091Z, the example
TOPIC = "a-topic-name-of-some-length"


def data(first_ms: int = T0, rows: int = 30) -> report.ReportData:
    """A report as the job hands it over, its rows as wide as real ones get."""
    timeline = [
        {
            "topic": TOPIC, "partition": p, "epoch": e, "leader": e % 3 + 1, "in_log": True,
            "start_offset": 10**12 + e, "end_offset": 10**12 + e + 1, "records": 123_456_789,
            "bytes": 98_765_432_109, "start_ms": first_ms + 1000 * e + p,
            "duration_ms": 1_234_567,
        }
        for p in range(3) for e in range(rows // 3)
    ]  # fmt: skip
    elections = [
        {
            "topic": TOPIC, "partition": r["partition"], "term": r["epoch"], "leader": r["leader"],
            "time_ms": r["start_ms"], "log_end_offset": r["start_offset"], "previous_leader": 2,
            "leaderless_ms": 1_500, "since_leader_seen_ms": 2_250,
        }
        for r in timeline
    ]  # fmt: skip
    truncations = [
        {
            "topic": TOPIC, "partition": 0, "node": 3, "time_ms": first_ms + 61_000 + i,
            "reason": "follower-diverged-from-leader-epoch-end-offset", "from_offset": 10**12,
            "to_offset": 10**12 + 77_777, "entry_terms": list(range(40, 52)),
            "records": 123_456, "bytes": 9_876_543_210, "lost_acks1": True, "cut_committed": False,
        }
        for i in range(rows)
    ]  # fmt: skip
    partitions = [
        {
            "topic": TOPIC, "partition": p, "epochs": 1234, "latest_epoch": 1234,
            "log_end_offset": 10**12, "elections": 1234, "winners": [1, 2, 3],
            "max_leaderless_ms": 123_456, "truncations": 12_345, "truncated_records": 1_234_567,
            "truncated_bytes": 98_765_432_109, "truncations_losing_acks1": 12_345,
        }
        for p in range(3)
    ]  # fmt: skip
    broken = report.Verdict(
        "epochs_increase",
        "a node's epochs only go up",
        1,
        [
            {
                "topic": TOPIC, "partition": 1, "node": 2, "term": 7, "time_ms": first_ms + 5_250,
                "detail": "epoch 7 recorded after epoch 8 on node 2 (offset 1000000000042)",
            }
        ],
    )  # fmt: skip
    return report.ReportData(
        source="hand-made", master="local[2]", nodes=[1, 2, 3], events=1_000, unreadable=0,
        unreadable_sample=[], verdicts=[broken], partitions=partitions, timeline=timeline,
        timeline_total=len(timeline), elections=elections, elections_total=len(elections),
        election_bucket_s=10,
        election_buckets=[{"bucket_ms": T0 - T0 % 10_000, "leader": 1, "count": len(elections)}],
        truncations=truncations, truncations_total=len(truncations),
        charts=dict.fromkeys(("timeline", "elections", "truncations"), b""),  # write() draws
    )  # fmt: skip


def test_times_are_utc_and_seconds_since_the_first_election(tmp_path: Path) -> None:
    d = data()
    report.write(tmp_path, d)
    page = (tmp_path / "report.html").read_text()
    assert str(T0) not in page and str(T0 + 61_000) not in page  # no raw epoch milliseconds
    assert "all on 2026-11-26" in page and "(2026-11-26T10:34:45.091Z)" in page
    # the first election, a truncation a minute later, the offending row
    assert '<span title="2026-11-26T10:34:45.091Z">10:34:45.091Z</span>' in page
    assert '<span class="since">+0.000 s</span>' in page
    assert '<span title="2026-11-26T10:35:46.091Z">10:35:46.091Z</span>' in page
    assert '<span class="since">+61.000 s</span>' in page
    assert '<span class="since">+5.250 s</span>' in page
    # the machine-readable output keeps epoch milliseconds
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["invariants"]["epochs_increase"]["rows"][0]["time_ms"] == T0 + 5_250


def test_a_run_over_midnight_shows_each_time_with_its_date() -> None:
    midnight = 1_795_737_600_000  # 2026-11-27T00:00:00Z
    page = report.render_html(data(first_ms=midnight - 2_000))
    assert "all on" not in page
    assert '<span title="2026-11-26T23:59:58.000Z">2026-11-26T23:59:58.000Z</span>' in page
    assert '<span title="2026-11-27T00:00:59.000Z">2026-11-27T00:00:59.000Z</span>' in page


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Chromium (make test has it)")
def test_the_widest_tables_fit_a_1280_pixel_window(tmp_path: Path) -> None:
    """Rendered in headless Chromium at 1280 px: no table is wider than the page's body."""
    page = report.render_html(data()).replace(
        "</body>",
        "<script>document.body.dataset.overflow = [...document.querySelectorAll('table')]"
        ".map(t => t.scrollWidth - document.body.clientWidth).filter(d => d > 0).join(',')"
        " || 'none';</script></body>",
    )
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    dom = subprocess.run(
        [
            shutil.which("chromium") or "chromium", "--headless", "--no-sandbox",
            "--disable-gpu", "--window-size=1280,2000", "--dump-dom", path.resolve().as_uri(),
        ],
        check=True, capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    assert 'data-overflow="none"' in dom, dom[dom.find("data-overflow") :][:80]
