"""asyncio helpers for tests that drive real sockets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(predicate: Callable[[], object], what: str) -> None:
    """Waits (up to 5 s) for `predicate` to hold; what it waited for is named on failure."""
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")
