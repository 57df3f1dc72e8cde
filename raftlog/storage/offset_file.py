"""One offset in a small file of its own (a version line, then the offset), as Kafka keeps
its checkpoints: the cleaner's first dirty offset, and the log start DeleteRecords set. A
write replaces the file atomically and fsyncs it, so a crash leaves the old one or the new."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from raftlog.storage.segment import fsync_dir

log = logging.getLogger(__name__)

_VERSION = "0"


def read_offset(path: Path, if_unreadable: str) -> int | None:
    """None when the file is missing, or (with a warning saying `if_unreadable`: what the
    caller does instead) unreadable."""
    try:
        lines = path.read_text().split()
    except FileNotFoundError:
        return None
    if len(lines) == 2 and lines[0] == _VERSION and lines[1].isdigit():
        return int(lines[1])
    log.warning("%s: unreadable, %s", path, if_unreadable)
    return None


def write_offset(path: Path, offset: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as file:
        file.write(f"{_VERSION}\n{offset}\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
