"""What a handler knows about the request it answers, besides the decoded body."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from raftlog.api.broker import Broker
from raftlog.security.principal import ANONYMOUS
from raftlog.security.sasl import SaslSession

log = logging.getLogger(__name__)


class ConnectionScope:
    """What a request leaves on its client connection: work to do when that connection
    closes (Kafka's ConnectionDisconnectListener: a share session ends with the connection
    that opened it). Its identity names the connection."""

    __slots__ = ("_on_close", "closed")

    def __init__(self) -> None:
        self._on_close: dict[str, Callable[[], None]] = {}
        self.closed = False

    def on_close(self, name: str, callback: Callable[[], None]) -> None:
        """Runs `callback` once when the connection closes (at once if it has); one callback
        per `name`, the first registered."""
        if self.closed:
            callback()
        else:
            self._on_close.setdefault(name, callback)

    def close(self) -> None:
        self.closed = True
        callbacks, self._on_close = self._on_close, {}
        for name, callback in callbacks.items():
            try:
                callback()
            except Exception:  # a bug of that callback's: the others still run
                log.exception("%s: the connection's close failed", name)


@dataclass(frozen=True, slots=True, init=False)
class RequestContext:
    """Handlers shape their answer by api_version and authorize by principal and client_host
    (Kafka's ACL host); client_id is for logging only. One per request: frozen, with an
    __init__ of its own (docs/architecture.md, "Compiled modules")."""

    broker: Broker
    api_version: int
    client_id: str | None
    client_host: str
    principal: str  # "User:<name>", as Kafka's ACLs name it
    sasl: SaslSession | None  # the connection's SASL exchange, on SASL listeners
    connection: ConnectionScope | None  # None: a request on no connection (tests)

    def __init__(
        self,
        broker: Broker,
        api_version: int,
        client_id: str | None,
        client_host: str,
        principal: str = ANONYMOUS,
        sasl: SaslSession | None = None,
        connection: ConnectionScope | None = None,
    ) -> None:
        object.__setattr__(self, "broker", broker)
        object.__setattr__(self, "api_version", api_version)
        object.__setattr__(self, "client_id", client_id)
        object.__setattr__(self, "client_host", client_host)
        object.__setattr__(self, "principal", principal)
        object.__setattr__(self, "sasl", sasl)
        object.__setattr__(self, "connection", connection)
