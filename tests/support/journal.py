"""A JournalListener that records what a partition would learn, for journal-level tests."""

from __future__ import annotations


class RecordingListener:
    def __init__(self) -> None:
        self.truncations: list[tuple[list[int], str]] = []
        self.commits: list[tuple[int, int]] = []
        self.installs: list[tuple[int, int, str]] = []  # (resume offset, end offset, source)

    def admit(self, batches, command):
        return batches

    def appended(self, entry, command):
        pass

    def compacting(self):
        pass

    def truncated(self, removed, result, reason):
        self.truncations.append(([e.idx for e in removed], reason))

    def committed(self, commit_index, high_watermark):
        self.commits.append((commit_index, high_watermark))

    def snapshot_state(self):
        return None

    def snapshot_installed(self, resume_offset, end_offset, source, state):
        self.installs.append((resume_offset, end_offset, source))
