"""A dropped replica's directory, on real files: marked before the history record, never
reopened as the dropped incarnation, removed at the next start if a crash left it."""

from __future__ import annotations

from pathlib import Path

from raftlog.partition import replica_dir


def _replica(root: Path, name: str, topic_id: str) -> Path:
    directory = root / name
    directory.mkdir()
    (directory / replica_dir.TOPIC_ID).write_text(topic_id)
    (directory / "00000000000000000000-1.log").write_bytes(b"records")
    return directory


def test_a_live_replica_of_the_same_topic_is_reopened(tmp_path: Path) -> None:
    directory = _replica(tmp_path, "t-0", "id-1")
    assert replica_dir.reusable(directory, "id-1")


def test_a_replica_of_a_deleted_topic_of_the_same_name_is_not(tmp_path: Path) -> None:
    directory = _replica(tmp_path, "t-0", "id-1")
    assert not replica_dir.reusable(directory, "id-2")
    (directory / replica_dir.TOPIC_ID).unlink()
    assert not replica_dir.reusable(directory, "id-1")


def test_a_crash_between_the_drop_record_and_the_removal_leaves_nothing_to_reopen(
    tmp_path: Path,
) -> None:
    dropped = _replica(tmp_path, "t-0", "id-1")
    live = _replica(tmp_path, "t-1", "id-1")
    replica_dir.mark_dropped(dropped)
    # the crash: the history has the drop, the files are still there
    assert dropped.exists()
    assert not replica_dir.reusable(dropped, "id-1")
    assert replica_dir.sweep_dropped(tmp_path) == ["t-0"]
    assert not dropped.exists()
    assert replica_dir.reusable(live, "id-1")


def test_marking_a_directory_already_gone_is_nothing(tmp_path: Path) -> None:
    replica_dir.mark_dropped(tmp_path / "t-0")
    assert replica_dir.sweep_dropped(tmp_path) == []
