"""Who may open a share session on this node: a member the group's coordinator knows.

Membership lives at the group's coordinator (the `__consumer_offsets` leader), while share
sessions live on every partition leader a member fetches from, often another node. Kafka's
partition leaders take any member id and bind the session to the client's connection; here a
ShareFetch that opens a session (epoch 0) first asks the coordinator, over the mesh, whether
the member joined by ShareGroupHeartbeat. Without that, 2,000 made-up member ids filled a
node's session cache and locked every real consumer of every group out of it.

The coordinator also tells every node when a member leaves or its session expires, so its
share sessions go at once and what it held is handed back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from raftlog.common.clock import LOOP_CLOCK, Clock, Timer
from raftlog.common.errors import ErrorCode
from raftlog.groups.config import GroupConfig
from raftlog.share.membership import MAX_MEMBER_ID_BYTES

log = logging.getLogger(__name__)

ASK = "share-member?"  # [group, member]: is it a member of the group you coordinate?
ANSWER = "share-member"  # [group, member, error code]: NONE, UNKNOWN_MEMBER_ID or why not known
LEFT = "share-left"  # [group, member]: it left its group or was fenced
# How long an open waits for the coordinator's answer (a mesh round trip takes milliseconds).
ASK_TIMEOUT_S = 2.0
# Opens waiting for an answer at once, over all groups; more are told to come back.
MAX_ASKING = 1000
# A group id the coordinator would refuse, or a member id its heartbeat would, is nobody's:
# answered here, not asked.
MAX_GROUP_ID_BYTES = GroupConfig.max_group_id_bytes

# coordinator_of's answer when no group can have a member yet: `__consumer_offsets`, where
# every coordinator lives, does not exist.
NO_GROUPS = -1

Key = tuple[str, str]  # (group id, member id)


class ControlMesh(Protocol):
    """The part of raftlog.raft.mesh.Mesh used here: one-way control frames between nodes,
    in order on each node pair's one connection."""

    def on_control(self, kind: str, handler: Callable[[str, Any], None]) -> None: ...

    def send_control(self, peer_id: str, kind: str, payload: Any) -> None: ...

    def broadcast(self, kind: str, payload: Any) -> None: ...

    def connected(self, peer_id: str) -> bool: ...


class ShareMembers:
    def __init__(
        self,
        node_id: int,
        mesh: ControlMesh,
        coordinator_of: Callable[[str], int | None],
        known_here: Callable[[str, str], ErrorCode],
        on_left: Callable[[str, str], None],
        clock: Clock = LOOP_CLOCK,
    ) -> None:
        """coordinator_of(group) -> the node coordinating it, None if nobody is known to,
        NO_GROUPS if no group can have members yet; known_here(group, member) -> NONE or
        UNKNOWN_MEMBER_ID for a group this node coordinates, or why it cannot say
        (NOT_COORDINATOR, ...); on_left(group, member): the member is gone, drop its share
        sessions on this node."""
        self._node = node_id
        self._mesh = mesh
        self._coordinator_of = coordinator_of
        self._known_here = known_here
        self._on_left = on_left
        self._clock = clock
        self._asking: dict[Key, tuple[asyncio.Future[ErrorCode], Timer]] = {}
        mesh.on_control(ASK, self._asked)
        mesh.on_control(ANSWER, self._answered)
        mesh.on_control(LEFT, self._left_elsewhere)

    async def check(self, group_id: str, member_id: str) -> ErrorCode:
        """NONE if the member may open a share session: its coordinator knows it.
        UNKNOWN_MEMBER_ID if not; COORDINATOR_NOT_AVAILABLE if the coordinator cannot be
        asked now; SHARE_SESSION_LIMIT_REACHED if too many opens are waiting already."""
        if (
            not member_id
            or len(member_id.encode()) > MAX_MEMBER_ID_BYTES
            or len(group_id.encode()) > MAX_GROUP_ID_BYTES
        ):
            return ErrorCode.unknown_member_id
        coordinator = self._coordinator_of(group_id)
        if coordinator == NO_GROUPS:
            return ErrorCode.unknown_member_id
        if coordinator == self._node:
            return _as_answer(self._known_here(group_id, member_id))
        if coordinator is None or not self._mesh.connected(str(coordinator)):
            return ErrorCode.coordinator_not_available
        key = (group_id, member_id)
        asking = self._asking.get(key)
        if asking is None:
            if len(self._asking) >= MAX_ASKING:
                return ErrorCode.share_session_limit_reached
            future = asyncio.get_running_loop().create_future()
            timer = self._clock.call_later(ASK_TIMEOUT_S, self._settle, key, None)
            asking = self._asking[key] = (future, timer)
            self._mesh.send_control(str(coordinator), ASK, [group_id, member_id])
        return await asyncio.shield(asking[0])

    def left(self, group_id: str, member_id: str) -> None:
        """This node's coordinator removed the member: every node drops its sessions."""
        self._mesh.broadcast(LEFT, [group_id, member_id])
        self._on_left(group_id, member_id)

    # --- the mesh's side ---------------------------------------------------------------------

    def _asked(self, peer: str, payload: Any) -> None:
        key = _key(payload)
        if key is not None:
            code = self._known_here(*key)
            self._mesh.send_control(peer, ANSWER, [*key, int(code)])

    def _answered(self, _peer: str, payload: Any) -> None:
        key = _key(payload[:2]) if isinstance(payload, list) and len(payload) == 3 else None
        if key is not None and isinstance(payload[2], int):
            self._settle(key, _as_answer(_error_code(payload[2])))

    def _left_elsewhere(self, _peer: str, payload: Any) -> None:
        key = _key(payload)
        if key is not None:
            self._on_left(*key)

    def _settle(self, key: Key, code: ErrorCode | None) -> None:
        """Answers the open waiting on `key`: with the coordinator's word, or (None) after
        ASK_TIMEOUT_S without one."""
        asking = self._asking.pop(key, None)
        if asking is None:
            return  # answered already, or timed out
        future, timer = asking
        timer.cancel()
        if code is None:
            log.info("share group %s: its coordinator did not answer in time", key[0])
        if not future.done():
            future.set_result(ErrorCode.coordinator_not_available if code is None else code)

    def close(self) -> None:
        for key in list(self._asking):
            self._settle(key, ErrorCode.coordinator_not_available)


def _key(payload: Any) -> Key | None:
    """A peer's [group, member]; anything else is ignored (peers run the same code, but a
    frame of another version must not break the handler)."""
    if (
        isinstance(payload, list)
        and len(payload) == 2
        and isinstance(payload[0], str)
        and isinstance(payload[1], str)
    ):
        return (payload[0], payload[1])
    return None


def _error_code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.unknown_server_error


def _as_answer(code: ErrorCode) -> ErrorCode:
    """What the opening client is told: the member is known, unknown, or the coordinator is
    moving or loading (it can only retry later)."""
    if code in (ErrorCode.none, ErrorCode.unknown_member_id):
        return code
    return ErrorCode.coordinator_not_available
