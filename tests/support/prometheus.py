"""A real Prometheus server (Debian's `prometheus` package) scraping a test cluster's nodes:
started with a temporary config and storage on a free loopback port, asked over its HTTP
API, killed at the end."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from support.cluster import LOOPBACK, tail, wait_for


def binary(name: str = "prometheus") -> str:
    """The path of a Prometheus tool; fails the test when the package is missing."""
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (make test installs it: apt-get install prometheus)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


class Prometheus:
    def __init__(self, workdir: Path, targets: Sequence[str], interval: str) -> None:
        self.workdir = workdir
        self.targets = list(targets)
        self.interval = interval
        self.port = _free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.log = workdir / "prometheus.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def config(self) -> str:
        """One job scraping every target's /metrics each interval."""
        targets = ", ".join(f'"{t}"' for t in self.targets)
        return (
            "global:\n"
            f"  scrape_interval: {self.interval}\n"
            f"  evaluation_interval: {self.interval}\n"
            "scrape_configs:\n"
            "  - job_name: raftlog\n"
            "    metrics_path: /metrics\n"
            f"    static_configs:\n      - targets: [{targets}]\n"
        )

    def start(self, timeout: float = 60.0) -> Prometheus:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(self.config())
        with open(self.log, "ab") as log:
            self._proc = subprocess.Popen(
                [
                    binary(),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address={LOOPBACK}:{self.port}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        wait_for(self._ready, timeout, what=f"Prometheus ready on {self.url}\n{tail(self.log)}")
        return self

    def _ready(self) -> bool:
        if self._proc is not None and self._proc.poll() is not None:
            raise RuntimeError(f"Prometheus exited {self._proc.returncode}:\n{tail(self.log)}")
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:  # noqa: S310
            return r.status == 200

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=20)
        self._proc = None

    def _api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - loopback only
            answer = json.load(r)
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expr: str, at: float | None = None) -> list[tuple[dict[str, str], float]]:
        """An instant query's vector: (labels, value) per series."""
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        data = self._api("query", **params)
        assert data["resultType"] == "vector", data
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def value(self, expr: str, at: float | None = None) -> float | None:
        """The single value of an instant query; None while it has no series."""
        result = self.query(expr, at)
        assert len(result) <= 1, result
        return result[0][1] if result else None

    def targets_up(self) -> int:
        return sum(
            1
            for t in self._api("targets")["activeTargets"]
            if t["health"] == "up" and t["scrapeUrl"].endswith("/metrics")
        )

    def wait_up(self, timeout: float = 60.0) -> None:
        """Every target scraped successfully at least once."""
        wait_for(
            lambda: self.targets_up() == len(self.targets),
            timeout,
            what=f"Prometheus scraping all of {self.targets}\n{tail(self.log)}",
        )


@contextlib.contextmanager
def running(workdir: Path, targets: Sequence[str], interval: str = "1s") -> Iterator[Prometheus]:
    server = Prometheus(workdir, targets, interval)
    try:
        yield server.start()
    finally:
        server.stop()
