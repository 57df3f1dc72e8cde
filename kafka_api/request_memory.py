"""What every Kafka listener of a node may hold of request bytes, together (Kafka's
queued.max.request.bytes idea): complete requests not yet answered, and the read buffers that
frames still arriving have grown. One budget per node, shared by its listeners, so a second
listener is not a second budget.

Two rules keep it from being a lever for strangers:
- a half-read frame may grow its buffer only while the budget has room; when it has none and
  answered requests will not give it back (they hold under half of it), the frame's connection
  is closed rather than left waiting on memory nobody will free;
- connections that have not authenticated yet (SASL listeners) may hold at most a quarter of
  it between them: past that, the one that asks for more is closed.
"""

from __future__ import annotations

from collections.abc import Callable

from raftlog.common.memory_budget import MAX_QUEUED_BYTES, MemoryBudget


class Refused(Exception):
    """The budget cannot give a connection the buffer it asked for: close it."""


class RequestMemory(MemoryBudget):
    def __init__(self, limit: int = MAX_QUEUED_BYTES) -> None:
        super().__init__(limit)
        self.queued = 0  # bytes of complete requests not yet finished and answered
        self.buffered = 0  # read-buffer bytes grown for frames (beyond each base buffer)
        self.unauthenticated = 0  # the part of `buffered` held by unauthenticated connections
        # Called when `queued` crosses the limit either way: every connection re-checks.
        self._watchers: list[Callable[[], None]] = []

    def in_use(self) -> int:
        return self.queued + self.buffered + self.opened

    @property
    def full(self) -> bool:
        """No connection reads a new request while answered-to-be requests hold the budget."""
        return self.queued >= self.limit

    def watch(self, on_change: Callable[[], None]) -> None:
        self._watchers.append(on_change)

    def hold(self, delta: int) -> None:
        """Complete request bytes taken (positive) or given back (negative)."""
        was_full = self.full
        self.queued += delta
        if was_full != self.full:
            for notify in list(self._watchers):
                notify()
        if delta < 0:
            self._wake()

    def grow(self, delta: int, *, authenticated: bool) -> bool:
        """Room for a read buffer to grow by `delta` (granted while the budget is not used up,
        so one grant may overshoot it, as Kafka's memory pool lets one request do, and a frame
        larger than the budget still arrives on an idle node): True if granted, False if the
        connection should wait for answered requests (or batches being opened) to give memory
        back; raises Refused if waiting would not help (half-read frames hold the budget) or
        unauthenticated connections hold their share."""
        if not authenticated and self.unauthenticated >= self.limit // 4:
            raise Refused(
                f"unauthenticated connections hold {self.unauthenticated} bytes of read buffers "
                f"(at most a quarter of the node's {self.limit})"
            )
        if self.in_use() >= self.limit:
            if self.queued + self.opened < self.limit // 2:
                raise Refused(
                    f"the node's request memory ({self.limit} bytes) is held by half-read "
                    f"frames ({self.buffered} bytes)"
                )
            return False
        self.buffered += delta
        if not authenticated:
            self.unauthenticated += delta
        return True

    def shrink(self, delta: int, *, authenticated: bool) -> None:
        """A read buffer given back (`delta` bytes of growth)."""
        self.buffered -= delta
        if not authenticated:
            self.unauthenticated -= delta
        if delta > 0:
            self._wake()
