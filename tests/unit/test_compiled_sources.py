"""What the compiled modules' source must not do that Python allows: mypyc gives a local one
type per function, so `except A as exc:` and `except B as exc:` in one function make the
second a TypeError when B is raised. connection.py had it: every request over its entry
bound logged an ERROR and lost its INVALID_REQUEST answer, in the compiled build only."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPILED = (ROOT / "compiled_modules.txt").read_text().split()


def test_no_except_name_is_bound_to_two_types_in_one_function() -> None:
    reused = []
    for module in COMPILED:
        tree = ast.parse((ROOT / module).read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            types: dict[str, set[str]] = defaultdict(set)
            for node in ast.walk(function):
                if isinstance(node, ast.ExceptHandler) and node.name and node.type is not None:
                    types[node.name].add(ast.unparse(node.type))
            reused += [
                f"{module} {function.name}: {name} {sorted(t)}"
                for name, t in types.items()
                if len(t) > 1
            ]
    assert COMPILED and reused == []
