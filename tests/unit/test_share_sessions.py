"""Share session epochs (KIP-932, Kafka's ShareSessionCache rules): what librdkafka's share
consumer relies on to know its acknowledgements landed against the state it fetched from."""

from __future__ import annotations

from raftlog.common.errors import ErrorCode
from raftlog.share.sessions import (
    FINAL_EPOCH,
    IDLE_EVICT_SECONDS,
    MAX_EPOCH,
    ShareSession,
    ShareSessions,
    next_epoch,
)

E = ErrorCode
A, B = ("t", 0), ("t", 1)


def opened(sessions: ShareSessions, *keys: tuple[str, int]) -> None:
    step = sessions.for_fetch("g", "m", 0, keys, (), has_acks=False, acks_only=False)
    assert step.error is E.none and step.session is not None


def test_a_session_opens_at_zero_and_each_request_moves_its_epoch_on() -> None:
    sessions = ShareSessions()
    opened(sessions, A)
    step = sessions.for_fetch("g", "m", 1, [B], [A], has_acks=False, acks_only=False)
    assert step.error is E.none and step.session is not None
    assert step.session.partitions == {B} and step.session.epoch == 2
    assert sessions.for_acknowledge("g", "m", 2).error is E.none
    assert sessions.for_fetch("g", "m", 3, [], [], False, False).error is E.none


def test_an_epoch_out_of_step_or_without_a_session_is_refused() -> None:
    sessions = ShareSessions()
    assert sessions.for_fetch("g", "m", 1, [A], [], False, False).error is E.share_session_not_found
    assert sessions.for_acknowledge("g", "m", 1).error is E.share_session_not_found
    opened(sessions, A)
    assert sessions.for_fetch("g", "m", 2, [], [], False, False).error is (
        E.invalid_share_session_epoch
    )
    assert sessions.for_acknowledge("g", "m", 5).error is E.invalid_share_session_epoch
    # acknowledgements cannot open a session, nor go to one being opened
    assert sessions.for_fetch("g", "m", 0, [A], [], True, True).error is E.invalid_request
    assert sessions.for_acknowledge("g", "m", 0).error is E.invalid_share_session_epoch
    # the refused requests did not move the epoch
    assert sessions.for_fetch("g", "m", 1, [], [], False, False).error is E.none


def test_the_final_epoch_closes_the_session_and_may_only_acknowledge() -> None:
    sessions = ShareSessions()
    opened(sessions, A)
    step = sessions.for_fetch("g", "m", FINAL_EPOCH, [A], [], has_acks=False, acks_only=False)
    assert step.error is E.invalid_request and sessions.get("g", "m") is not None
    step = sessions.for_acknowledge("g", "m", FINAL_EPOCH)
    assert step.error is E.none and step.closing and sessions.get("g", "m") is None
    assert sessions.for_acknowledge("g", "m", FINAL_EPOCH).error is E.share_session_not_found


def test_sessions_are_per_member_and_bounded() -> None:
    sessions = ShareSessions(max_sessions=2)
    opened(sessions, A)
    assert sessions.for_fetch("g", "n", 0, [A], [], False, False).error is E.none
    assert sessions.for_fetch("g", "o", 0, [A], [], False, False).error is (
        E.share_session_limit_reached
    )
    opened(sessions, B)  # reopening an existing one is no new session
    session = sessions.get("g", "m")
    assert session is not None and session.partitions == {B}


def test_epochs_wrap_to_one_and_the_final_epoch_stays() -> None:
    assert next_epoch(MAX_EPOCH) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH
    assert next_epoch(7) == 8


def test_a_full_cache_makes_room_only_by_dropping_an_idle_session() -> None:
    """Consumers that crash never close their sessions: once the cache is full, the least
    recently used one goes if it has been idle long enough, and its member's records are
    handed back (on_evict); a busy cache still refuses newcomers."""
    now = [0.0]
    evicted: list[ShareSession] = []
    sessions = ShareSessions(max_sessions=2, clock=lambda: now[0], on_evict=evicted.append)
    for member in ("m", "n"):
        assert sessions.for_fetch("g", member, 0, [A], [], False, False).error is E.none
    now[0] += IDLE_EVICT_SECONDS - 1
    assert sessions.for_fetch("g", "n", 1, [], [], False, False).error is E.none  # n is busy
    assert sessions.for_fetch("g", "o", 0, [A], [], False, False).error is (
        E.share_session_limit_reached
    )
    now[0] += 1  # m has been idle for IDLE_EVICT_SECONDS now; n has not
    assert sessions.for_fetch("g", "o", 0, [A], [], False, False).error is E.none
    assert [s.member_id for s in evicted] == ["m"]
    assert sessions.get("g", "m") is None and sessions.get("g", "n") is not None


def test_a_left_members_session_only_acknowledges_until_it_ends() -> None:
    """Its coordinator said it left: the acknowledgements still on their way (an earlier
    commit_async, the close's final request) are taken, in step, and nothing else is."""
    evicted: list[ShareSession] = []
    sessions = ShareSessions(on_evict=evicted.append)
    opened(sessions, A)
    left = sessions.leave("g", "m")
    assert left is not None and left.left
    assert sessions.leave("g", "nobody") is None
    assert sessions.for_fetch("g", "m", 1, [], [], False, False).error is (
        E.share_session_not_found  # a fetch that acknowledges nothing: it fetches no more
    )
    assert sessions.for_fetch("g", "m", 2, [], [], True, True).error is (
        E.invalid_share_session_epoch
    )
    assert sessions.for_fetch("g", "m", 1, [], [], True, True).session is left
    assert sessions.for_acknowledge("g", "m", 2).session is left
    step = sessions.for_acknowledge("g", "m", FINAL_EPOCH)
    assert step.closing and step.session is left and sessions.get("g", "m") is None
    assert not sessions.end(left)  # the final request ended it already
    # left again, then ended by its grace (manager.py), or replaced when it rejoins
    opened(sessions, A)
    again = sessions.leave("g", "m")
    assert again is not None and sessions.end(again) and sessions.get("g", "m") is None
    opened(sessions, A)
    old = sessions.leave("g", "m")
    opened(sessions, B)  # it joined again: what it held before goes back
    assert evicted == [old] and old is not None and not sessions.end(old)
    opened(sessions, A)  # reopening a session that did not leave hands nothing back
    assert evicted == [old]


def test_a_session_ends_with_the_connection_that_opened_it() -> None:
    """Kafka's disconnect listener: a connection's close ends the sessions it opened, and
    only those; a member that opened its session again on another connection keeps it when
    the old one closes (KAFKA-19950), and a session closed by its final request is not
    ended twice."""
    sessions = ShareSessions()
    first, second = object(), object()
    sessions.for_fetch("g", "m", 0, [A], (), False, False, connection=first)
    sessions.for_fetch("g", "n", 0, [A], (), False, False, connection=first)
    sessions.for_fetch("g", "o", 0, [A], (), False, False, connection=second)
    assert sorted(s.member_id for s in sessions.disconnected(first)) == ["m", "n"]
    assert sessions.get("g", "m") is None and sessions.get("g", "n") is None
    assert sessions.get("g", "o") is not None and sessions.disconnected(first) == []

    sessions.for_fetch("g", "m", 0, [A], (), False, False, connection=first)
    reopened = sessions.for_fetch("g", "m", 0, [A], (), False, False, connection=second).session
    assert sessions.disconnected(first) == []
    assert sessions.get("g", "m") is reopened
    assert sessions.for_acknowledge("g", "o", FINAL_EPOCH).closing
    assert sessions.disconnected(second) == [reopened]
    assert len(sessions) == 0
