"""What no test may let a raftlog process log: an ERROR or CRITICAL event, or a traceback.

Project rule: a node that logs an ERROR or a traceback under faults has a bug, even when no
data was lost. Every test cluster's logs are read when it stops (`Cluster.stop()`; the
processes a test starts itself, such as the host supervisor, the netns nodes and the
standalone proxy, through `check_files`) and what they hold goes to LOG_ERRORS, which
conftest turns into a failure of the test; the fuzz test also asserts none mid-run. A test
that provokes an ERROR on purpose names it on that cluster alone
(`Cluster.expect_log_errors`); there is no global allowlist.

The formats read: raftlog_app/logs.py's text (`time LEVEL [node N] logger: message`, a
traceback kept on its event's line) and JSON (`"level": "ERROR"`), the host supervisor's
text (`[host NAME]`), and a console's bare output (a crash's traceback, an exception
ignored in a destructor, a fatal interpreter error), which spans several lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

# What stopped clusters' processes logged that they must not; conftest fails the test whose
# setup, call or teardown reported it, and empties this.
LOG_ERRORS: list[str] = []

_TEXT_LEVEL = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (ERROR|CRITICAL) \[")
_JSON_LEVEL = re.compile(r'^\{.*"level": "(ERROR|CRITICAL)"')
_TRACEBACK = "Traceback (most recent call last):"
# What Python prints to stderr by itself: a bare traceback's first line, and the two
# messages that come without one.
_BARE = (_TRACEBACK, "Exception ignored in", "Fatal Python error")
_SHOWN = 2000  # characters of one event shown in a failure
_BARE_LINES = 12  # lines of a bare traceback kept (its last: the exception)


def bad_events(text: str, expected: Iterable[re.Pattern[str]] = ()) -> list[str]:
    """Each ERROR/CRITICAL event and traceback in a log's `text`, unless one of `expected`
    matches it (re.search). A bare traceback is one event: its lines joined by newlines."""
    allowed = list(expected)
    found: list[str] = []
    bare: list[str] | None = None
    for line in text.splitlines():
        if bare is not None:
            if line.startswith((" ", "\t")) or line.startswith(_BARE):  # frames, chained
                bare.append(line)
                continue
            bare.append(line)  # the exception's own line ends it
            found.append("\n".join(bare[:2] + bare[2:][-_BARE_LINES:]))
            bare = None
            continue
        if line.startswith(_BARE):
            bare = [line]
        elif _TEXT_LEVEL.match(line) or _JSON_LEVEL.match(line) or _TRACEBACK in line:
            found.append(line)
    if bare is not None:  # cut off at the end
        found.append("\n".join(bare[-_BARE_LINES:]))
    return [e[:_SHOWN] for e in found if not any(p.search(e) for p in allowed)]


def file_bad_events(
    path: Path, expected: Iterable[re.Pattern[str]] = (), offset: int = 0
) -> tuple[list[str], int]:
    """bad_events of `path` from byte `offset` on, and the offset its end is at (a missing
    file has none)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    return bad_events(data.decode(errors="replace"), expected), offset + len(data)


def check_files(
    owner: str,
    paths: Iterable[Path],
    expected: Iterable[re.Pattern[str]] = (),
    offsets: dict[Path, int] | None = None,
) -> None:
    """Reads `paths` (each from its offset in `offsets`, which is moved to its end) and
    reports what they hold that they must not in LOG_ERRORS, for conftest to fail the test."""
    allowed = list(expected)
    read = {} if offsets is None else offsets
    found = {}
    for path in paths:
        events, read[path] = file_bad_events(path, allowed, read.get(path, 0))
        if events:
            found[path] = events
    if found:
        LOG_ERRORS.append(describe(owner, found))


def describe(owner: str, found: dict[Path, list[str]]) -> str:
    """A failure's text: every bad event, under the file that holds it."""
    parts = [
        f"{owner}: raftlog processes logged ERRORs or tracebacks (a bug even when no data was "
        "lost; a test that provokes one on purpose names it with expect_log_errors)"
    ]
    for path, events in found.items():
        parts.append(f"----- {path} ({len(events)}) -----")
        parts.extend(events[:20])
        if len(events) > 20:
            parts.append(f"... and {len(events) - 20} more")
    return "\n".join(parts)
