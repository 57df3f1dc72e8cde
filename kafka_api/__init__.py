import raftlog  # noqa: F401  (its compiled build's guard runs before any module of ours loads)
