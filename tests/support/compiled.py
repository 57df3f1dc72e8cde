"""Tests that only the pure-Python build can run (`make test` runs them in its pure run).

Such a test replaces a function or method of a compiled module (docs/architecture.md,
"Compiled modules"): compiled callers reach their callees directly, past the module's or
class's attribute, and compiled instances take no new attributes, so the replacement would
never run. Each names what it patches as its reason."""

from __future__ import annotations

from types import ModuleType

import pytest


def compiled(module: ModuleType) -> bool:
    return not (module.__file__ or "").endswith(".py")


def pure_only(module: ModuleType, reason: str) -> pytest.MarkDecorator:
    """Skips the test where `module` is compiled; `reason` says what it patches."""
    return pytest.mark.skipif(compiled(module), reason=f"pure Python only: {reason}")
