"""A partition leader's share-state updates on their way into its Raft log: one entry in
flight at a time, and every update that arrives meanwhile goes into the next one, so a
stream of small acknowledgements costs a few entries, not one each (an entry costs about
1.8 ms of cluster CPU whatever it carries; docs/share_groups.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from raftlog.common.errors import ErrorCode
from raftlog.raft.replica import Outcome
from raftlog.share.store import ShareUpdate, encode

Propose = Callable[[bytes, Callable[[Outcome], None]], None]


class ShareWriter:
    def __init__(self, propose: Propose, is_leader: Callable[[], bool]) -> None:
        self._propose = propose
        self._is_leader = is_leader
        self._updates: list[ShareUpdate] = []
        self._waiters: list[asyncio.Future[ErrorCode]] = []
        self._in_flight = False
        self._scheduled = False

    def write(self, update: ShareUpdate) -> asyncio.Future[ErrorCode]:
        """Resolves to NONE once the update is committed, or NOT_LEADER_OR_FOLLOWER if this
        node lost the leadership first (the update may then be lost: it was never answered)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ErrorCode] = loop.create_future()
        self._updates.append(update)
        self._waiters.append(future)
        if not self._in_flight and not self._scheduled:
            self._scheduled = True  # what the rest of this loop turn writes goes along
            loop.call_soon(self._flush)
        return future

    def fail_all(self) -> None:
        """Leadership is gone: updates not yet proposed are not written."""
        self._updates = []
        waiters, self._waiters = self._waiters, []
        _settle(waiters, ErrorCode.not_leader_or_follower)

    def _flush(self) -> None:
        self._scheduled = False
        if self._in_flight or not self._updates:
            return
        if not self._is_leader():
            self.fail_all()
            return
        updates, waiters = self._updates, self._waiters
        self._updates, self._waiters = [], []
        self._in_flight = True

        def settled(outcome: Outcome) -> None:
            self._in_flight = False
            ok = outcome == Outcome.COMMITTED
            _settle(waiters, ErrorCode.none if ok else ErrorCode.not_leader_or_follower)
            self._flush()

        self._propose(encode(updates), settled)


def _settle(waiters: list[asyncio.Future[ErrorCode]], code: ErrorCode) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(code)
