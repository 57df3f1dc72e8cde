"""The compiled build's guard (raftlog/compiled.py): an extension whose source changed since
`make compiled` refuses to import, and RAFTLOG_PURE=1 runs the .py files beside the build."""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from raftlog import compiled

EXT = importlib.machinery.EXTENSION_SUFFIXES[0]


def _tree(root: Path) -> Path:
    """A copy of raftlog's package entry and guard, one module "compiled" (its extension an
    empty file: loading it would fail, so a test that passes never loaded it)."""
    package = root / "raftlog"
    package.mkdir()
    for name in ("__init__.py", "compiled.py"):
        shutil.copy(Path(compiled.__file__).with_name(name), package / name)
    source = package / "hot.py"
    source.write_text("WHO = 'pure'\n")
    (package / f"hot{EXT}").write_bytes(b"")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    (root / compiled.MANIFEST).write_text(f"{digest}  raftlog/hot.py\n")
    return source


def test_a_recorded_build_is_not_stale(tmp_path: Path) -> None:
    _tree(tmp_path)
    assert compiled.stale(tmp_path) == []


def test_an_edited_or_removed_source_is_stale(tmp_path: Path) -> None:
    source = _tree(tmp_path)
    source.write_text("WHO = 'edited'\n")
    assert compiled.stale(tmp_path) == ["raftlog/hot.py"]
    source.unlink()
    assert compiled.stale(tmp_path) == ["raftlog/hot.py"]


def test_no_extension_runs_the_source(tmp_path: Path) -> None:
    source = _tree(tmp_path)
    source.with_name(f"hot{EXT}").unlink()
    source.write_text("WHO = 'edited'\n")
    assert compiled.stale(tmp_path) == []


def test_a_build_without_manifest_is_stale(tmp_path: Path) -> None:
    """mypyc run by hand: its shared library at the root, no record of what it built."""
    _tree(tmp_path)
    (tmp_path / compiled.MANIFEST).unlink()
    assert compiled.stale(tmp_path) == []
    (tmp_path / f"0123abcd__mypyc{EXT}").write_bytes(b"")
    assert compiled.stale(tmp_path) == [f"0123abcd__mypyc{EXT}"]


def _run(root: Path, code: str, pure: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
    env["PYTHONPATH"] = str(root)
    if pure:
        env[compiled.PURE_ENV] = "1"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )


def test_importing_raftlog_refuses_a_stale_extension(tmp_path: Path) -> None:
    source = _tree(tmp_path)
    source.write_text("WHO = 'edited'\n")
    done = _run(tmp_path, "import raftlog.hot", pure=False)
    assert done.returncode != 0
    assert "StaleBuild" in done.stderr and "make compiled" in done.stderr


def test_pure_runs_the_source_beside_the_extension(tmp_path: Path) -> None:
    source = _tree(tmp_path)
    source.write_text("WHO = 'edited'\n")
    done = _run(tmp_path, "import raftlog.hot as h; print(h.WHO, h.__file__)", pure=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["edited", str(source)]


def test_this_tree_runs_the_build_it_says(tmp_path: Path) -> None:
    """With `make compiled`'s build here: the hot modules load compiled, and as .py files
    under RAFTLOG_PURE=1 (how `make test` runs the pure fallback's tests). Started as a node
    is (`python -m raftlog_app` in its data directory): outside the tree, with only the
    install's import path, which for an editable install holds the packages but not the
    root, where mypyc's shared library lies (every import failed before it was loaded)."""
    manifest = compiled.ROOT / compiled.MANIFEST
    if not manifest.exists() or not manifest.read_text():
        pytest.skip("no compiled build here (make compiled)")
    env = {k: v for k, v in os.environ.items() if k not in (compiled.PURE_ENV, "PYTHONPATH")}
    code = "import raftlog.raft.core.raft as m, kafka_api.codec as c; print(m.__file__, c.__file__)"

    def files(pure: bool) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=env | ({compiled.PURE_ENV: "1"} if pure else {}),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert all(f.endswith(EXT) for f in files(pure=False))
    assert [Path(f).name for f in files(pure=True)] == ["raft.py", "codec.py"]
