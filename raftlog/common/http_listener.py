"""A node's HTTP listeners (the admin port, the consume proxy), bounded as its Kafka port is.

aiohttp alone held every connection a client opened, for as long as it sent a byte now and
then (1,000 connections sending one header byte a second were all kept: a file each), and
answered an over-long URL or header with a 400 and an ERROR line with a traceback. Here:

- a connection has `header_timeout` seconds to send a whole request head, counted from the
  moment it connects and again from each answer (aiohttp's keep-alive timer, which partial
  data does not reset): a slow sender and an idle keep-alive connection are both closed;
- a connection past `max_connections_per_address` from one client address is closed at once;
  one past `max_connections` on the listener takes the place of the oldest connection that
  is waiting for a request head (closed), and is closed at once only when every connection
  has a request in progress; each is counted and reported in at most one log
  line per REPORT_INTERVAL_SECONDS (log_reports.py);
- a URL over MAX_URL_BYTES is a 414, a header line over MAX_FIELD_BYTES or more than
  MAX_HEADERS of them a 431, any other malformed head a 400: the connection is closed after
  the answer, with a rate-limited INFO line and no traceback (a client's bad input is not
  the node's error).

A TLS handshake is bounded by the same timeout; the caps count a TLS connection once its
handshake is over.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler, RequestPayloadError
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

from raftlog.common.log_reports import Reports

log = logging.getLogger(__name__)

# aiohttp raises the same error for a URL and a header line that is too long, with the limit
# it passed; the two limits differ so that the answer can tell which it was (414 or 431).
MAX_URL_BYTES = 8192
MAX_FIELD_BYTES = 8190  # a header's name and value (Apache's LimitRequestFieldSize)
MAX_HEADERS = 32  # so a head is at most about 256 KiB
REFUSED_BY_LISTENER, REFUSED_BY_ADDRESS = "listener", "address"
BAD_REQUEST_STATUSES = (400, 414, 431)


@dataclass(frozen=True)
class HttpLimits:
    """The [broker] http.* settings (raftlog/config/node_config.py)."""

    header_timeout: float = 30.0  # seconds: http.header.read.timeout.ms
    max_connections: int = 256  # http.max.connections
    max_connections_per_address: int = 64  # http.max.connections.per.ip


DEFAULT_LIMITS = HttpLimits()


class HttpStats:
    """What one listener counts, for the node's /metrics (raftlog/node/metrics.py)."""

    def __init__(self) -> None:
        self.open = 0
        self.accepted = 0
        self.refused = {REFUSED_BY_LISTENER: 0, REFUSED_BY_ADDRESS: 0}
        self.evicted = 0
        self.bad_requests = dict.fromkeys(BAD_REQUEST_STATUSES, 0)


class HttpListener:
    """One aiohttp application on one address, within HttpLimits."""

    def __init__(
        self,
        name: str,
        app: web.Application,
        host: str,
        port: int,
        limits: HttpLimits,
        *,
        tls: ssl.SSLContext | None = None,
        stats: HttpStats | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`name` is what the log lines call it ("admin", "consume proxy")."""
        self.name = name
        self.limits = limits
        self.stats = stats or HttpStats()
        self._host, self._port, self._tls = host, port, tls
        self._runner = web.AppRunner(app, access_log=None)
        self._reports = Reports(log, clock)
        self._connections: dict[_Handler, str] = {}  # the admitted, oldest first: their address
        self._by_address: dict[str, int] = {}
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        await self._runner.setup()
        self._loop = asyncio.get_running_loop()
        self._server = await self._loop.create_server(
            self._protocol,
            self._host,
            self._port,
            ssl=self._tls,
            ssl_handshake_timeout=self.limits.header_timeout if self._tls else None,
            reuse_address=True,
        )

    @property
    def port(self) -> int:
        """The bound port, so tests can listen on port 0."""
        assert self._server is not None and self._server.sockets, "not started"
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()  # no new connections; aiohttp's shutdown ends the open ones
        await self._runner.cleanup()

    def _protocol(self) -> _Handler:
        manager = self._runner.server
        assert manager is not None and self._loop is not None  # made by start()
        options: dict[str, Any] = {
            "loop": self._loop,
            "keepalive_timeout": self.limits.header_timeout,
            "max_line_size": MAX_URL_BYTES,
            "max_field_size": MAX_FIELD_BYTES,
            "max_headers": MAX_HEADERS,
            "access_log": None,
        }
        return _Handler(manager, self, **options)

    def admit(self, handler: _Handler, address: str) -> bool:
        """Counts a new connection in, or refuses it (and reports why). At the listener's
        cap, the oldest connection waiting for a request head is closed to make room (in the
        spirit of Jetty's low-resources mode): connections that trickle heads from many
        addresses would otherwise keep everyone else, /metrics' scraper too, out. Only a
        listener whose every connection has a request in progress refuses."""
        from_address = self._by_address.get(address, 0)
        if from_address >= self.limits.max_connections_per_address:
            self._refuse(REFUSED_BY_ADDRESS, address, "http.max.connections.per.ip", from_address)
            return False
        if self.stats.open >= self.limits.max_connections:
            waiting = next((c for c in self._connections if c.waiting_for_head()), None)
            if waiting is None:
                self._refuse(REFUSED_BY_LISTENER, address, "http.max.connections", self.stats.open)
                return False
            self._evict(waiting)
        self._connections[handler] = address
        self._by_address[address] = from_address + 1
        self.stats.open += 1
        self.stats.accepted += 1
        return True

    def release(self, handler: _Handler) -> None:
        """Counts a connection out, once (an evicted one is counted out when evicted)."""
        address = self._connections.pop(handler, None)
        if address is None:
            return
        left = self._by_address.pop(address) - 1
        if left:
            self._by_address[address] = left
        self.stats.open -= 1

    def _evict(self, handler: _Handler) -> None:
        self.stats.evicted += 1
        self._reports.report(
            "evicted",
            logging.WARNING,
            "%s HTTP listener: %d connections open (http.max.connections): closed the oldest "
            "waiting for a request head, from %s, to let a new one in",
            self.name,
            self.stats.open,
            self._connections[handler],
        )
        self.release(handler)
        handler.force_close()

    def _refuse(self, reason: str, address: str, setting: str, count: int) -> None:
        self.stats.refused[reason] += 1
        where = "open" if reason == REFUSED_BY_LISTENER else "open from that address"
        self._reports.report(
            f"refused {reason}",
            logging.WARNING,
            "%s HTTP listener: closed a new connection from %s at once: %d connections %s (%s)",
            self.name,
            address,
            count,
            where,
            setting,
        )

    def bad_request(self, status: int, address: str | None, why: str) -> None:
        self.stats.bad_requests[status] += 1
        self._reports.report(
            f"bad request {status}",
            logging.INFO,
            "%s HTTP listener: %d to %s: %s",
            self.name,
            status,
            address,
            why[:200],
        )


class _Handler(RequestHandler):
    """aiohttp's connection handler, admitted by its listener's caps, answering a malformed
    request head with its own status and no traceback."""

    def __init__(self, manager: web.Server, listener: HttpListener, **options: Any) -> None:
        super().__init__(manager, **options)
        self._listener = listener
        self._admitted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if not self._listener.admit(self, address):
            # aiohttp never sees it: no task, no timer, no buffer (uvloop's transports have
            # Transport's methods without subclassing it)
            cast(asyncio.Transport, transport).abort()
            return
        self._admitted = True
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._admitted:
            return  # refused in connection_made
        self._admitted = False
        self._listener.release(self)
        super().connection_lost(exc)

    def waiting_for_head(self) -> bool:
        """No request in progress: between requests, or in a head not yet whole (the test
        aiohttp's keep-alive timer makes before it closes a connection)."""
        waiter = self._waiter
        return waiter is not None and not waiter.done()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> StreamResponse:
        if isinstance(exc, HttpProcessingError):  # the request head
            status, why = _refusal(exc)
        elif isinstance(exc, RequestPayloadError):  # the body: its framing or encoding
            cause = exc.__cause__
            text = cause.message if isinstance(cause, HttpProcessingError) else str(exc)
            status, why = 400, "the body cannot be read: " + _one_line(text)
        elif isinstance(exc, ConnectionError) and self.transport is None:
            # the client left while its body was read: nobody to answer, nothing wrong here
            status, why = 400, "the client closed the connection"
        else:
            return super().handle_error(request, status, exc, message)  # a bug of ours: ERROR
        if self.transport is not None:
            self._listener.bad_request(status, request.remote, why)
        response = web.Response(status=status, text=why + "\n")
        response.force_close()
        return response

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """aiohttp reads on past an answer to drain a body the handler left unread; a body
        that cannot be decoded raises there too, and was answered already."""
        if isinstance(kw.get("exc_info"), RequestPayloadError):
            return
        super().log_exception(*args, **kw)


def _refusal(exc: HttpProcessingError) -> tuple[int, str]:
    """The status and words for a request head aiohttp could not parse."""
    if isinstance(exc, LineTooLong):
        if exc.args[1:2] == (MAX_URL_BYTES,):
            return 414, f"the URL is longer than {MAX_URL_BYTES} bytes"
        return 431, f"a header line is longer than {MAX_FIELD_BYTES} bytes"
    if "Too many headers" in exc.message:
        return 431, f"more than {MAX_HEADERS} header lines"
    return 400, "malformed request: " + _one_line(exc.message)


def _one_line(text: str) -> str:
    """A log line is one line (aiohttp's messages have several)."""
    return " ".join(text.split())
