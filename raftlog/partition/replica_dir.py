"""A replica's directory on this node, and its end.

Dropping a replica records `replica_dropped` in the node's history (the audit starts a new
incarnation of the replica after it) and then removes its files. A crash between the two
left the files: reopened later with the same topic id, the old log came back without a
`replica_created` record, and the audit followed it as the dropped incarnation. So the
directory is marked dropped, durably, before the record is written; a marked directory is
never reopened, and the next start removes it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from raftlog.storage.segment import fsync_dir

TOPIC_ID = "topic_id"
DROPPED = "dropped"


def reusable(directory: Path, topic_id: str) -> bool:
    """Whether an existing directory holds a live replica of this topic (not one of a
    deleted topic of the same name, nor one dropped here)."""
    id_file = directory / TOPIC_ID
    return (
        id_file.exists() and id_file.read_text() == topic_id and not (directory / DROPPED).exists()
    )


def mark_dropped(directory: Path) -> None:
    """Durable before the history says the replica was dropped."""
    if directory.exists():
        (directory / DROPPED).touch()
        fsync_dir(directory)


def remove(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def sweep_dropped(root: Path) -> list[str]:
    """Removes the directories under `root` a crash left marked dropped; their names."""
    swept = []
    for directory in sorted(root.iterdir()):
        if directory.is_dir() and (directory / DROPPED).exists():
            remove(directory)
            swept.append(directory.name)
    return swept
