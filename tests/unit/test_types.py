"""The type check (mypy, configured in pyproject.toml's [tool.mypy]) is part of the tests: CI
runs only `make test`, and `make lint` runs the same check. Strict on kafka_api, epoch and the
storage and Raft seams; the Broker and ApiHandler Protocols are checked against the node, the
handler modules and the unit tests' fakes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None,
    reason="mypy is not installed (it comes with the `test` extra: pip install -e '.[test]')",
)
def test_mypy_finds_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"mypy exited {done.returncode}:\n{done.stdout}{done.stderr}"
