"""The compiled build's guard (issue 45; docs/architecture.md, "Compiled modules").

`make compiled` builds the modules of compiled_modules.txt into C extensions beside their
.py files with mypyc, and records each source's SHA-256 in compiled.sha256 at the root.
Python imports an extension before a .py of the same name, so an extension built from an
older source would silently run old code: importing raftlog or kafka_api refuses that
(`StaleBuild`, naming the module and `make compiled`). RAFTLOG_PURE=1 skips every extension
of ours and runs the .py files (how `make test` tests the pure fallback).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = "compiled.sha256"
PURE_ENV = "RAFTLOG_PURE"
PACKAGES = ("raftlog.", "kafka_api.")


class StaleBuild(ImportError):
    """A compiled module's source changed since it was built (or it was built by hand)."""


def _extensions(source: Path) -> list[Path]:
    stem = source.with_suffix("")
    return [
        p
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if (p := stem.with_name(stem.name + suffix)).exists()
    ]


def stale(root: Path) -> list[str]:
    """The compiled modules under `root` whose extension would run code other than their
    .py: source edited or removed since the build, or an extension no build recorded."""
    manifest = root / MANIFEST
    if not manifest.exists():
        # mypyc's shared library of a multi-module build sits at the root
        return sorted(p.name for p in root.glob("*__mypyc.*") if p.suffix in (".so", ".pyd"))
    found = []
    for line in manifest.read_text().splitlines():
        digest, _, name = line.partition("  ")
        source = root / name
        if not _extensions(source):
            continue
        if not source.exists() or hashlib.sha256(source.read_bytes()).hexdigest() != digest:
            found.append(name)
    return found


class _PureFinder:
    """Finds our modules' .py files before Python's path finder sees their extensions."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if path is None or not fullname.startswith(PACKAGES):
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for entry in path:
            source = Path(entry) / leaf
            if source.is_file():
                return importlib.util.spec_from_file_location(fullname, source)
        return None  # a package, or not ours: the usual finders


def install() -> None:
    """Run at the first import of raftlog (and kafka_api, which imports it first)."""
    if os.environ.get(PURE_ENV) == "1":
        if not any(isinstance(f, _PureFinder) for f in sys.meta_path):
            sys.meta_path.insert(0, _PureFinder())
        return
    if found := stale(ROOT):
        raise StaleBuild(
            f"raftlog: compiled module(s) older than their source: {', '.join(found)}; "
            f"run `make compiled` (or `make clean-compiled`, or set {PURE_ENV}=1, for pure Python)"
        )
    _load_shared(ROOT)


def _load_shared(root: Path) -> None:
    """mypyc puts what the compiled modules share in one library at the root (<hash>__mypyc),
    which each of them imports by that top-level name. An editable install puts only the
    packages on the import path, not the root: the library is loaded once by its path."""
    for lib in root.glob("*__mypyc.*"):
        name = lib.name.partition(".")[0]
        if lib.suffix not in (".so", ".pyd") or name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(name, lib)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
