"""What the CLI's commands over the Kafka protocol share: one call on an admin client that
ends in a line on stderr when Kafka refuses it (acl, groups, transactions), and the tables
they print (share's too)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO, TypeVar

T = TypeVar("T")


def admin_call(make: Callable[[], Any], call: Callable[[Any], T], failed: str) -> T | None:
    """`call` on the admin client `make` returns, closed after it; None, having printed
    `raftlog: <failed>: <error>`, when making it or the call raises a KafkaError (the
    command then exits 1)."""
    from kafka.errors import KafkaError

    try:
        admin = make()
        try:
            return call(admin)
        finally:
            admin.close()
    except KafkaError as e:
        print(f"raftlog: {failed}: {e!r}", file=sys.stderr)
        return None


def table(rows: list[list[str]], out: TextIO) -> None:
    """Left-aligned columns, two spaces apart (the first row is the header)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(), file=out)
