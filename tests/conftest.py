"""Shared pytest setup.

Markers: `e2e` = runs real raftlog node processes on loopback (select with `-m e2e`,
skip with `-m "not e2e"`).

Fixtures (the helpers live in tests/support/):
- `cluster_factory(nodes=3, name=...)` -> a started Cluster, stopped at the end of the test.
- `module_cluster` -> one started Cluster shared by a module's non-destructive tests.
- `artifacts_dir` -> where reports go ($RAFTLOG_TEST_ARTIFACTS or a pytest tmp dir).
- `report_rss(label, cluster)` -> records every node's VmRSS; printed in the terminal
  summary and written to $RAFTLOG_RSS_REPORT (default: <artifacts_dir>/rss.json).

When a test fails, the tail of every running node's log is attached to its report. When a
cluster stops, its nodes' logs are read: an ERROR or a traceback there fails the test that
stopped it (for a module's cluster, the module's last test, at teardown), listing them;
a test that provokes one on purpose names it with `cluster.expect_log_errors(pattern)`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.cluster import LIVE_CLUSTERS, Cluster  # noqa: E402
from support.node_logs import LOG_ERRORS  # noqa: E402

from raftlog_app.local_nodes import become_subreaper

RSS_RECORDS: list[dict] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: starts real raftlog node processes on loopback (needs the node)"
    )
    # Nodes started by `raftlog cluster up` outlive the CLI; as subreaper we can reap them.
    become_subreaper()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.failed:
        for cluster in list(LIVE_CLUSTERS):
            cluster.failed = True
            report.sections.append((f"raftlog node logs ({cluster.name})", cluster.log_tails()))
    if call.when == "teardown" and LOG_ERRORS:
        # clusters stopped in this test's setup, call or teardown whose nodes logged ERRORs
        found = "\n\n".join(LOG_ERRORS)
        LOG_ERRORS.clear()
        report.outcome = "failed"
        report.longrepr = found if report.longrepr is None else f"{report.longrepr}\n\n{found}"
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Backstop (e.g. after Ctrl-C): no node process outlives the test run.
    for cluster in list(LIVE_CLUSTERS):
        cluster.stop(graceful=False)
    if LOG_ERRORS:  # clusters no fixture stopped: no test to fail, the run fails
        print("\n\n".join(LOG_ERRORS), file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if RSS_RECORDS:
        terminalreporter.section("raftlog node memory (VmRSS)")
        for rec in RSS_RECORDS:
            nodes = ", ".join(
                f"node {n}: {kb / 1024:.1f} MiB" if kb is not None else f"node {n}: not running"
                for n, kb in sorted(rec["rss_kib"].items())
            )
            terminalreporter.write_line(f"{rec['label']}: {nodes}")
        terminalreporter.write_line(f"written to {rss_report_path(config)}")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def artifacts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = os.environ.get("RAFTLOG_TEST_ARTIFACTS")
    if env:
        path = Path(env)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("artifacts")


_ARTIFACTS: dict[str, Path] = {}


def rss_report_path(config: pytest.Config) -> Path:
    env = os.environ.get("RAFTLOG_RSS_REPORT")
    if env:
        return Path(env)
    return _ARTIFACTS.get("dir", Path(str(config.rootpath))) / "rss.json"


@pytest.fixture
def report_rss(artifacts_dir: Path, request: pytest.FixtureRequest):
    """report_rss(label, cluster) -> {node_id: KiB}; printed at the end of the run."""
    _ARTIFACTS["dir"] = artifacts_dir

    def record(label: str, cluster: Cluster) -> dict[int, int | None]:
        rss = cluster.rss()
        RSS_RECORDS.append({"label": label, "test": request.node.nodeid, "rss_kib": rss})
        path = rss_report_path(request.config)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                [
                    {**r, "rss_kib": {str(k): v for k, v in r["rss_kib"].items()}}
                    for r in RSS_RECORDS
                ],
                indent=2,
            )
            + "\n"
        )
        print(
            f"\n[rss] {label}: " + ", ".join(f"node {n}={kb} KiB" for n, kb in sorted(rss.items()))
        )
        return rss

    return record


def _finish(cluster: Cluster) -> None:
    cluster.stop()
    if not cluster.failed:
        cluster.wipe_data()


@pytest.fixture
def cluster_factory(tmp_path: Path):
    """cluster_factory(nodes=3, name="c", start=True) -> Cluster; all stopped after the test."""
    made: list[Cluster] = []

    def make(nodes: int = 3, name: str = "cluster", start: bool = True, **kw) -> Cluster:
        c = Cluster(tmp_path / f"{name}{len(made)}", nodes=nodes, name=name, **kw)
        made.append(c)
        return c.start() if start else c

    yield make
    for c in reversed(made):
        _finish(c)


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """A 3-node cluster shared by the tests of one module (for tests that don't break it)."""
    name = request.module.__name__.rsplit(".", 1)[-1]
    c = Cluster(tmp_path_factory.mktemp(name), nodes=3, name=name)
    try:
        c.start()
        yield c
    finally:
        _finish(c)
