"""Failed SASL authentications, logged without letting a password guesser flood the log."""

from __future__ import annotations

import logging
from collections.abc import Callable

from raftlog.security.sasl import SaslSession

log = logging.getLogger(__name__)

FAILURE_LOG_INTERVAL_SECONDS = 10.0


class FailureLog:
    """Failed authentications, logged with the peer's address: the first from a host at once,
    then at most one line per FAILURE_LOG_INTERVAL_SECONDS with the count since, so a password
    guesser cannot flood the log."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._hosts: dict[str, tuple[float, int]] = {}  # host -> (last logged, unlogged count)

    def record(self, host: str, peer: str, sasl: SaslSession) -> None:
        now = self._clock()
        logged, unlogged = self._hosts.get(host, (-FAILURE_LOG_INTERVAL_SECONDS, 0))
        unlogged += 1
        if now - logged < FAILURE_LOG_INTERVAL_SECONDS:
            self._hosts[host] = (logged, unlogged)
            return
        log.warning(
            "SASL %s authentication failed for user %r from %s (%d failure(s) from %s since "
            "the last report)",
            sasl.mechanism or "handshake",
            sasl.attempted_user,
            peer,
            unlogged,
            host,
        )
        self._hosts[host] = (now, 0)
        if len(self._hosts) > 10_000:  # a bound, not a history: forget the quietest half
            for stale in sorted(self._hosts, key=lambda h: self._hosts[h][0])[:5_000]:
                del self._hosts[stale]
