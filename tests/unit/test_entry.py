"""The `raftlog` command's entry (raftlog_app/entry.py): a node started beside the tests must
not load Hypothesis, which kio imports whenever it is installed (0.3-0.7 s of every node
start in the suite, and a `.hypothesis/` directory in every data directory)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_the_command_runs_without_loading_hypothesis(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "raftlog_app", "serve", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "--config" in run.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines()}
    assert "kio.static._phantom" in imported  # the module that would import it did load
    assert "hypothesis" not in imported
    assert not (tmp_path / ".hypothesis").exists()
