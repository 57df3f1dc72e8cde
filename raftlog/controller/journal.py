"""pysyncobj's Journal seam for the controller group: the window of a SegmentJournal with no
segment log (every command inline), under the names pysyncobj calls."""

from __future__ import annotations

from pysyncobj.journal import Journal

from raftlog.raft.journal import SegmentJournal


class ControllerJournal(SegmentJournal, Journal):  # type: ignore[misc]  # pysyncobj: no types
    def clear(self) -> None:
        """pysyncobj clears the log to re-add its commands from its own dump."""
        self._entries = []
        self._rewrite_window()

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # noqa: N802, N803 - pysyncobj's
        """A Raft truncation: the fork (FORK.md 2) cuts only entries that conflict."""
        self._cut_from(entryFrom, "raft")

    def deleteEntriesTo(self, entryTo: int) -> None:  # noqa: N802, N803
        self._drop_first(entryTo)

    def _destroy(self) -> None:
        self.close()

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:  # noqa: N802, N803
        self.set_commit_index(raftCommitIndex)

    def getRaftCommitIndex(self) -> int:  # noqa: N802
        return self.commit_index

    def setCurrentTerm(self, term: int, votedForNodeId: str | None) -> None:  # noqa: N802, N803
        self.set_term(term, votedForNodeId)

    def getCurrentTerm(self) -> int:  # noqa: N802
        return self.term

    def getVotedForNodeId(self) -> str | None:  # noqa: N802
        return self.voted_for
