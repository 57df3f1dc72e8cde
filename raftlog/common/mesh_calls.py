"""Requests with answers between nodes over the mesh's control frames: `call` sends
`<kind>?` with a call id and waits for `<kind>!` carrying it back. The transaction
coordinator writes its markers on partitions other nodes lead, and those leaders ask it
whether a transactional batch's partition is in its producer's transaction.

Bounded both ways: calls waiting for an answer, and calls being served, at most
MAX_WAITING and MAX_SERVING each; past them a call is answered None at once, as is one whose
peer is not connected or does not answer within its timeout. Callers treat None as "the
other node cannot say now" and retry or answer a retriable error.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from raftlog.common.clock import LOOP_CLOCK, Clock, Timer

log = logging.getLogger(__name__)

MAX_WAITING = 10_000
MAX_SERVING = 10_000

Handler = Callable[[str, list[Any]], Awaitable[Any]]


class ControlMesh(Protocol):
    def on_control(self, kind: str, handler: Callable[[str, Any], None]) -> None: ...

    def send_control(self, peer_id: str, kind: str, payload: Any) -> None: ...

    def connected(self, peer_id: str) -> bool: ...


class MeshCalls:
    def __init__(self, mesh: ControlMesh, clock: Clock = LOOP_CLOCK) -> None:
        self._mesh = mesh
        self._clock = clock
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[asyncio.Future[Any], Timer]] = {}
        self._serving: set[asyncio.Task[None]] = set()

    def serve(self, kind: str, handler: Handler) -> None:
        """`handler(peer, args)` answers `kind` calls; what it returns goes back (msgpack)."""
        self._mesh.on_control(
            kind + "?", lambda peer, payload: self._asked(kind, handler, peer, payload)
        )
        self._mesh.on_control(kind + "!", self._answered)

    async def call(self, peer: str, kind: str, args: list[Any], timeout: float) -> Any:
        """The peer's answer, or None (not connected, too many calls, no answer in time)."""
        if not self._mesh.connected(peer) or len(self._waiting) >= MAX_WAITING:
            return None
        call_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        timer = self._clock.call_later(timeout, self._settle, call_id, None)
        self._waiting[call_id] = (future, timer)
        self._mesh.send_control(peer, kind + "?", [call_id, args])
        try:
            return await future
        finally:
            self._settle(call_id, None)

    def _asked(self, kind: str, handler: Handler, peer: str, payload: Any) -> None:
        if not (isinstance(payload, list) and len(payload) == 2 and isinstance(payload[0], int)):
            return
        call_id, args = payload
        if not isinstance(args, list) or len(self._serving) >= MAX_SERVING:
            self._mesh.send_control(peer, kind + "!", [call_id, None])
            return
        task = asyncio.get_running_loop().create_task(
            self._serve(kind, handler, peer, call_id, args)
        )
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def _serve(
        self, kind: str, handler: Handler, peer: str, call_id: int, args: list[Any]
    ) -> None:
        try:
            answer = await handler(peer, args)
        except Exception:  # a malformed call from a peer must not stop anything
            log.exception("mesh call %s from node %s failed", kind, peer)
            answer = None
        self._mesh.send_control(peer, kind + "!", [call_id, answer])

    def _answered(self, _peer: str, payload: Any) -> None:
        if isinstance(payload, list) and len(payload) == 2 and isinstance(payload[0], int):
            self._settle(payload[0], payload[1])

    def _settle(self, call_id: int, answer: Any) -> None:
        waiting = self._waiting.pop(call_id, None)
        if waiting is None:
            return
        future, timer = waiting
        timer.cancel()
        if not future.done():
            future.set_result(answer)

    def close(self) -> None:
        for task in list(self._serving):
            task.cancel()
        for call_id in list(self._waiting):
            self._settle(call_id, None)
