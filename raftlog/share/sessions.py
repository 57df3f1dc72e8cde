"""Share sessions (KIP-932): the partitions a share consumer fetches from this node, and the
epoch that orders its requests. One per (group, member) on each node, as in Kafka's
ShareSessionCache; a request out of step is refused so the client starts a new session
rather than acknowledging against a state it no longer sees. Only a member its group's
coordinator knows opens one (members.py). It ends with the member's final request (epoch -1)
or with the client connection that opened it, as in Kafka (a consumer killed with kill -9
sends no final request, and what it held would wait for its locks); a member that left its
group keeps its session only to acknowledge what it still holds (its close's last
acknowledgements may reach this node after the coordinator's word that it left), until that
final request, its connection's close or LEAVE_GRACE_SECONDS (manager.py)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from raftlog.common.errors import ErrorCode

INITIAL_EPOCH = 0  # opens a session (acknowledgements may not ride on it)
FINAL_EPOCH = -1  # closes one: its acquired records are released
MAX_EPOCH = 2**31 - 1
# group.share.max.share.sessions: Kafka's per-broker cap; each session is a few sets.
MAX_SESSIONS = 2000
# A full cache makes room by dropping its least recently used session once it has been idle
# this long (a live consumer fetches every fetch.wait.max.ms, 500 ms by default). Without
# it, 2,000 consumers that crashed without closing would lock every new one out.
IDLE_EVICT_SECONDS = 60.0
# How long the session of a member that left its group waits for the member's final
# acknowledgements (librdkafka's close sends them to every leader and its leave to the
# coordinator at once, so either may arrive first) before what it holds is released anyway.
LEAVE_GRACE_SECONDS = 5.0

Key = tuple[str, int]  # (topic name, partition)


def next_epoch(epoch: int) -> int:
    if epoch == FINAL_EPOCH:
        return FINAL_EPOCH
    return 1 if epoch == MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1  # what the member's next request must carry
    partitions: set[Key] = field(default_factory=set)
    used: float = 0.0  # when a request last named it (the cache's clock)
    left: bool = False  # its member left the group: it may only acknowledge, fetches nothing
    # The client connection that opened it (compared by identity): the session ends with it.
    connection: object | None = None


@dataclass(frozen=True, slots=True)
class SessionStep:
    """What one request may do: `error` refuses it whole (top level); `session` is the one it
    works in; `closing` means the session ended with this request (FINAL_EPOCH): apply its
    acknowledgements, release the member's records, fetch nothing."""

    error: ErrorCode = ErrorCode.none
    session: ShareSession | None = None
    closing: bool = False


class ShareSessions:
    def __init__(
        self,
        max_sessions: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
        on_evict: Callable[[ShareSession], None] = lambda _session: None,
    ) -> None:
        """on_evict(session): a session ended without its final request (dropped idle to
        make room, or left and replaced by a new one its rejoined member opened); what its
        member holds should go back to the group."""
        self._max = max_sessions
        self._clock = clock
        self._on_evict = on_evict
        self._sessions: OrderedDict[tuple[str, str], ShareSession] = OrderedDict()
        # connection -> the sessions it opened that are still live
        self._opened_on: dict[object, set[tuple[str, str]]] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def leave(self, group_id: str, member_id: str) -> ShareSession | None:
        """The member left its group: its session, if it has one here, takes only
        acknowledgements from now on, until its final request or `end`."""
        session = self._sessions.get((group_id, member_id))
        if session is not None:
            session.left = True
        return session

    def end(self, session: ShareSession) -> bool:
        """Ends `session` if it is still the member's (not closed, evicted or reopened
        since); its next request gets SHARE_SESSION_NOT_FOUND."""
        key = (session.group_id, session.member_id)
        if self._sessions.get(key) is not session:
            return False
        self._remove(key)
        return True

    def disconnected(self, connection: object) -> list[ShareSession]:
        """The client connection closed: the sessions it opened end (Kafka's
        ShareSessionCache disconnect listener). A session the member opened again on another
        connection is not one of them. Returns the ended sessions: what their members hold
        should go back to the group."""
        ended = []
        for key in self._opened_on.pop(connection, ()):
            session = self._sessions.get(key)
            if session is not None and session.connection is connection:
                del self._sessions[key]
                ended.append(session)
        return ended

    def for_fetch(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        added: Iterable[Key],
        forgotten: Iterable[Key],
        has_acks: bool,
        acks_only: bool,
        connection: object | None = None,
    ) -> SessionStep:
        """ShareFetch's rules (Kafka's SharePartitionManager.newContext): epoch 0 opens a new
        session with the request's partitions, tied to `connection` (see `disconnected`);
        -1 closes one and may only acknowledge; any other epoch must be the session's, which
        then moves on. A member that left takes no more records: its session answers only a
        request carrying acknowledgements."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            if has_acks:
                return SessionStep(ErrorCode.invalid_request)
            if key not in self._sessions and not self._room():
                return SessionStep(ErrorCode.share_session_limit_reached)
            previous = self._remove(key)
            opened = self._sessions[key] = ShareSession(
                group_id, member_id, 1, set(added), connection=connection
            )
            if connection is not None:
                self._opened_on.setdefault(connection, set()).add(key)
            self._touch(key, opened)
            if previous is not None and previous.left:
                self._on_evict(previous)  # it rejoined: what it held before goes back
            return SessionStep(session=opened)
        session = self._sessions.get(key)
        if epoch == FINAL_EPOCH:
            if not acks_only:
                return SessionStep(ErrorCode.invalid_request)
            if session is None:
                return SessionStep(ErrorCode.share_session_not_found)
            self._remove(key)
            return SessionStep(session=session, closing=True)
        if session is None or (session.left and not has_acks):
            return SessionStep(ErrorCode.share_session_not_found)
        if epoch != session.epoch:
            return SessionStep(ErrorCode.invalid_share_session_epoch)
        session.partitions.update(added)
        session.partitions.difference_update(forgotten)
        session.epoch = next_epoch(epoch)
        self._touch(key, session)
        return SessionStep(session=session)

    def for_acknowledge(self, group_id: str, member_id: str, epoch: int) -> SessionStep:
        """ShareAcknowledge's rules: never on a session being opened; -1 acknowledges and
        closes (librdkafka's way to leave); otherwise the session's epoch, which moves on.
        The same for a member that left: what it acknowledges is not lost to the leave."""
        if epoch == INITIAL_EPOCH:
            return SessionStep(ErrorCode.invalid_share_session_epoch)
        key = (group_id, member_id)
        session = self._sessions.get(key)
        if session is None:
            return SessionStep(ErrorCode.share_session_not_found)
        if epoch == FINAL_EPOCH:
            self._remove(key)
            return SessionStep(session=session, closing=True)
        if epoch != session.epoch:
            return SessionStep(ErrorCode.invalid_share_session_epoch)
        session.epoch = next_epoch(epoch)
        self._touch(key, session)
        return SessionStep(session=session)

    def _remove(self, key: tuple[str, str]) -> ShareSession | None:
        """Drops the member's session, and its connection's word for it."""
        session = self._sessions.pop(key, None)
        if session is not None and session.connection is not None:
            opened = self._opened_on.get(session.connection)
            if opened is not None:
                opened.discard(key)
                if not opened:
                    del self._opened_on[session.connection]
        return session

    def _touch(self, key: tuple[str, str], session: ShareSession) -> None:
        session.used = self._clock()
        self._sessions.move_to_end(key)

    def _room(self) -> bool:
        """Whether a new session fits, after dropping the least recently used one if it has
        been idle for IDLE_EVICT_SECONDS."""
        if len(self._sessions) < self._max:
            return True
        key, oldest = next(iter(self._sessions.items()))
        if self._clock() - oldest.used < IDLE_EVICT_SECONDS:
            return False
        self._remove(key)
        self._on_evict(oldest)
        return True
