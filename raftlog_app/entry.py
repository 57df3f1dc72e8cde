"""The `raftlog` command's first module, so that what it sets holds before anything else is
imported."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    # kio (the protocol's schema library) imports Hypothesis's strategies whenever Hypothesis
    # is installed, as it is beside the tests: a node or the CLI never uses them, and they
    # cost 0.3-0.7 s of every start and leave a `.hypothesis/` directory where it ran.
    # None in sys.modules is the documented way to make an import raise ImportError.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    from raftlog_app.cli import main as cli_main

    return cli_main(argv)
