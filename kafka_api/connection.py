"""One Kafka client connection: framing, per-connection ordering, limits.

A connection the node's caps admit (connection_caps.py) is a BufferedProtocol: the socket is
read straight into a buffer we own and reuse, made when the connection is (after its TLS
handshake). It grows only as a frame's bytes arrive (doubling, never past the frame's size),
so a size prefix alone reserves nothing, and only while the node's request memory has room
(request_memory.py: what it grew counts there until it is dropped); it is kept up to
MAX_READ_BUFFER_BYTES, else dropped back to READ_BUFFER_BYTES after a larger frame. Before
SASL authentication no frame may be larger than sasl.server.max.receive.size (Kafka's 512 KiB).
Frames are decoded in place from read-only views (kio copies what it keeps); one over
DECODE_OFF_LOOP_BYTES is copied and decoded in a thread. Requests start in arrival order (a
task each, run FIFO by the loop, so Produce proposals keep the connection's order) and may
then run concurrently; answers are written in request order, large record sets in slices, a
handler's own answer with every later one ready too in one writelines (one system call).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, cast

from kafka_api import codec, entry_bounds
from kafka_api.auth_failures import FailureLog
from kafka_api.bounds import TooManyEntries
from kafka_api.context import ConnectionScope, RequestContext
from kafka_api.errors import CloseConnection
from kafka_api.handlers import (
    HANDLERS,
    REFUSAL_UNREAD,
    api_versions,
    expects_response,
    sasl_authenticate,
    sasl_handshake,
)
from kafka_api.request_memory import Refused, RequestMemory
from raftlog.api.broker import Broker
from raftlog.common.heap import collection_paused
from raftlog.node.listener_metrics import ApiStats, KafkaMetrics
from raftlog.security.principal import ANONYMOUS
from raftlog.security.sasl import SaslSession, Stage
from raftlog.security.tls import certificate_principal

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
# Each connection's base buffer: small, since a thousand idle clients hold a thousand of them.
READ_BUFFER_BYTES = 16 * 1024
MAX_READ_BUFFER_BYTES = 4 * 1024 * 1024
WRITE_SLICE_BYTES = 256 * 1024
# Buffers handed to one writelines at most (uvloop sends them with one writev).
WRITE_SLICE_PARTS = 256
# Stop reading from a client whose unfinished requests hold this much (or are this many)...
MAX_PENDING_REQUESTS = 512
MAX_PENDING_BYTES = 64 * 1024 * 1024
# Frames larger than this are decoded in a thread (their handlers still start in order).
DECODE_OFF_LOOP_BYTES = 1024 * 1024
# Kafka's sasl.server.max.receive.size: the largest frame before SASL authentication.
SASL_MAX_RECEIVE_BYTES = 512 * 1024
# What a SASL listener serves before authentication, as Kafka's SaslServerAuthenticator.
BEFORE_AUTHENTICATION = frozenset(
    {api_versions.API_KEY, sasl_handshake.API_KEY, sasl_authenticate.API_KEY}
)


class Listener(Protocol):
    """What a connection reads of the listener that accepted it (server.py's KafkaServer)."""

    broker: Broker
    clock: Callable[[], float]
    memory: RequestMemory
    metrics: KafkaMetrics
    max_request_bytes: int
    sasl_mechanisms: tuple[str, ...] | None
    sasl_max_receive_bytes: int
    auth_failures: FailureLog

    def admit(self, conn: Connection, host: str) -> bool: ...  # connection_caps.py
    def active(self, conn: Connection) -> float: ...  # the client sent something: now
    def release(self, conn: Connection) -> None: ...


class Connection(asyncio.BufferedProtocol):
    def __init__(self, server: Listener) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._peer = "?"
        self._host = ""
        self._start = 0  # first unconsumed byte in the read buffer
        self._end = 0  # end of received data in the read buffer
        self._use_buffer(bytearray())  # made at connection_made: a TLS handshake holds none
        # Bytes the buffer grew beyond READ_BUFFER_BYTES, counted in the node's request memory
        # (as an unauthenticated connection's, or not).
        self._grown = 0
        self._grown_unauthenticated = False
        self._waiting_memory = False
        self._decoding = False  # a large frame is being decoded in a thread
        # Requests to answer, in order; one leaves when its answer is written.
        self._pending: collections.deque[_Request] = collections.deque()
        self._tasks: set[_Request] = set()  # every running handler
        self._held_bytes = 0  # frame bytes of requests not yet finished and answered
        # Response bytes not yet handed to the transport, held back while it is paused.
        self._unsent: collections.deque[bytes | bytearray | memoryview] = collections.deque()
        self._closing = False
        self._reading_paused = False
        self._writing_paused = False
        self._last_active = server.clock()
        self._lost = False
        self._scope = ConnectionScope()  # what its requests left for its close (share sessions)
        self._principal = ANONYMOUS
        self._sasl: SaslSession | None = None
        if server.sasl_mechanisms is not None:
            self._sasl = SaslSession(server.sasl_mechanisms, server.broker.users.credential)

    # asyncio.BufferedProtocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport has Transport's methods without subclassing it
        self._transport = cast(asyncio.Transport, transport)
        # Kept: get_running_loop() is a getpid() system call on Python 3.11, once a request.
        self._loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self._host = str(peer[0])
            self._peer = f"{peer[0]}:{peer[1]}"
        if not self._server.admit(self, self._host):
            self.close()  # nothing made for it: no buffer, no task
            return
        tls = transport.get_extra_info("ssl_object")
        if tls is not None and self._sasl is None:
            # SSL listener: a verified client certificate names the principal (Kafka's
            # default); without one (ssl.client.auth none/requested) it is ANONYMOUS.
            self._principal = certificate_principal(tls.getpeercert(binary_form=True)) or ANONYMOUS
        self._use_buffer(bytearray(READ_BUFFER_BYTES))
        self.update_reading()  # a node at its request budget reads no new client either

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._held(-self._held_bytes)
        self._server.memory.stop_waiting(self)
        self._give_back_growth()
        self._lost = True
        self._unsent.clear()
        for request in self._tasks:
            if request.task is not None:
                request.task.cancel()
        # A handler applies its acknowledgements before its first wait, and each frame read
        # before the close had its handler's first step queued before this callback (the loop
        # runs them in order): what the client acknowledged is applied before its share
        # sessions end here and the rest of what they hold goes back.
        self._scope.close()
        self._server.release(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._end == len(self._view):
            self._make_room()  # (_process did, unless the transport reads on regardless)
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes
        self._last_active = self._server.active(self)
        self._process()

    def idle_for(self, now: float) -> float:
        """Seconds since the client last sent a byte or got an answer; 0 while a request of
        it is in progress."""
        return 0.0 if self._tasks or self._pending else now - self._last_active

    def eof_received(self) -> bool:
        return False  # close; responses still pending are of no use to a client that left

    def pause_writing(self) -> None:
        self._writing_paused = True
        self.update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._send_unsent()
        self.update_reading()

    # framing

    def _use_buffer(self, buffer: bytearray) -> None:
        """Frames are decoded in place from read-only views of this buffer; kio copies what it
        decodes, so the buffer is reused as soon as a frame's handler has been started."""
        self._view = memoryview(buffer)
        self._frames = self._view.toreadonly()

    def _compact(self) -> None:
        """Moves the unconsumed tail of the read buffer to its front."""
        length = self._end - self._start
        self._view[:length] = self._view[self._start : self._end]
        self._start, self._end = 0, length

    def _make_room(self) -> None:
        """A full buffer is compacted, and if it holds one unfinished frame (_process checked
        its size), doubled up to the frame's size while the node's request memory has room;
        without room the connection stops reading until memory is given back, or is closed
        when waiting would not get it any (kafka_api/request_memory.py)."""
        if self._closing or self._end < len(self._view):
            return
        self._compact()
        if self._end < len(self._view):
            return
        (size,) = _SIZE.unpack_from(self._view, 0)
        doubled = 2 * len(self._view)
        # (complete frames may be waiting here while reading is paused: no cap then)
        length = doubled if 4 + size <= self._end else min(doubled, 4 + size)
        authenticated = self._authenticated()
        if self._grown and self._grown_unauthenticated == authenticated:
            self._give_back_growth()  # (it authenticated meanwhile: counted anew below)
        memory = self._server.memory
        try:
            granted = memory.grow(
                length - READ_BUFFER_BYTES - self._grown, authenticated=authenticated
            )
        except Refused as exc:
            self.drop(str(exc))
            return
        if not granted:
            self._waiting_memory = True
            memory.wait(self, self._memory_given_back)
            self.update_reading()
            return
        self._grown = length - READ_BUFFER_BYTES
        self._grown_unauthenticated = not authenticated
        buffer = bytearray(length)
        buffer[: self._end] = self._view[: self._end]
        self._use_buffer(buffer)

    def _memory_given_back(self) -> None:
        self._waiting_memory = False
        self.update_reading()

    def _give_back_growth(self) -> None:
        if self._grown:
            self._server.memory.shrink(self._grown, authenticated=not self._grown_unauthenticated)
            self._grown = 0

    def _authenticated(self) -> bool:
        return self._sasl is None or self._sasl.stage is Stage.DONE

    def _process(self) -> None:
        """Handles every complete frame in the read buffer, unless paused or closing."""
        while not self._reading_paused and not self._closing and not self._decoding:
            available = self._end - self._start
            if available < 4:
                break
            (size,) = _SIZE.unpack_from(self._view, self._start)
            if size < 0 or size > self._server.max_request_bytes:
                self.drop(f"frame size {size} outside 0..{self._server.max_request_bytes}")
                return
            if size > self._server.sasl_max_receive_bytes and not self._authenticated():
                self.drop(
                    f"frame size {size} before SASL authentication is larger than "
                    f"sasl.server.max.receive.size ({self._server.sasl_max_receive_bytes})"
                )
                return
            if available - 4 >= size:
                begin = self._start + 4
                self._start = begin + size
                self._handle_frame(self._frames[begin : self._start])
                continue
            break
        if self._start == self._end:
            self._start = self._end = 0
            memory = self._server.memory
            if len(self._view) > MAX_READ_BUFFER_BYTES or (
                self._grown and memory.buffered > memory.limit // 2
            ):
                self._use_buffer(bytearray(READ_BUFFER_BYTES))
                self._give_back_growth()
        elif not self._reading_paused:
            self._make_room()

    def _handle_frame(self, frame: memoryview) -> None:
        """Decodes one request and starts its handler; the frame's memory is reused after."""
        sasl = self._sasl
        if sasl is not None and sasl.raw and sasl.stage is Stage.AUTHENTICATE:
            self._start_task(self._raw_sasl(sasl, bytes(frame)), len(frame))
            return
        try:
            header = codec.decode_header(frame)
        except codec.MalformedRequest as exc:
            self.drop(str(exc))
            return
        handler = HANDLERS.get(header.api_key)
        if handler is None:
            self.drop(f"unknown api key {header.api_key}")
            return
        unauthenticated = sasl is not None and sasl.stage is not Stage.DONE
        if unauthenticated and header.api_key not in BEFORE_AUTHENTICATION:
            self.drop(f"api {header.api_key} before SASL authentication")
            return
        if not handler.MIN_VERSION <= header.api_version <= handler.MAX_VERSION:
            if header.api_key != api_versions.API_KEY:
                self.drop(
                    f"unsupported version {header.api_version} of api {header.api_key} "
                    f"(serving {handler.MIN_VERSION}..{handler.MAX_VERSION})"
                )
                return
            self._start_task(
                self._answer(header.correlation_id, api_versions.unsupported_version_response()),
                len(frame),
            )
            return
        unread = REFUSAL_UNREAD.get(header.api_key)
        if unread is not None:
            count = codec.leading_count(header, frame)
            refusal = None if count is None else unread(self._context(header), count)
            if refusal is not None:
                stats = self._server.metrics.api(header.api_key)
                self._start_task(self._run(refusal, header.correlation_id, stats), len(frame))
                return
        if len(frame) > DECODE_OFF_LOOP_BYTES:
            self._decoding = True  # later frames wait: handlers start in arrival order
            self._start_task(self._decode_off_loop(header, bytes(frame)), len(frame))
            return
        try:
            request = codec.decode_request(header, frame)
        except codec.MalformedRequest as exc:
            self.drop(str(exc))
            return
        except TooManyEntries as too_many:  # one name per type: mypyc types `exc` once
            try:
                refusal = self._oversized(header, too_many)
            except CloseConnection as closing:
                self.drop(str(closing))
                return
            self._start_task(refusal, len(frame))
            return
        work = self._handle(header, request)
        if expects_response(header.api_key, request):
            self._start_task(work, len(frame))
        else:
            self._start_task(work, 0, answered=False)

    def _handle(self, header: codec.RequestHeader, request: Any, off_loop: bool = False) -> Any:
        ctx = self._context(header)
        handler = HANDLERS[header.api_key]
        stats = self._server.metrics.api(header.api_key)
        return self._run(
            handler.handle(ctx, request), header.correlation_id, stats, off_loop=off_loop
        )

    def _context(self, header: codec.RequestHeader) -> RequestContext:
        sasl = self._sasl
        if sasl is not None and sasl.principal is not None:
            self._principal = sasl.principal
        return RequestContext(
            self._server.broker,
            header.api_version,
            header.client_id,
            self._host,
            self._principal,
            sasl,
            self._scope,
        )

    async def _decode_off_loop(
        self, header: codec.RequestHeader, frame: bytes
    ) -> list[bytes | bytearray] | None:
        """A large request decoded in a thread, its answer encoded in one, and its objects
        freed in one: checking its lengths, kio's decode and freeing cost one step per field,
        and a 22 MB CreateAcls held the loop for seconds. The frames after it start once it is
        decoded, before its handler's first step."""
        try:
            decoded = [await asyncio.to_thread(_decode_paused, header, frame)]
        except codec.MalformedRequest as exc:
            raise CloseConnection(str(exc)) from None
        except TooManyEntries as too_many:  # a name of its own, as in _handle_frame
            refusal = self._oversized(header, too_many)  # raises CloseConnection if none
            self._decoding = False
            self._process()
            return await refusal
        finally:
            self._decoding = False
        self._process()
        answer = await self._handle(header, decoded[0], off_loop=True)
        answered = expects_response(header.api_key, decoded[0])
        await asyncio.to_thread(decoded.clear)  # the last reference, dropped there
        return answer if answered else None

    def _oversized(
        self, header: codec.RequestHeader, exc: TooManyEntries
    ) -> Coroutine[Any, Any, list[bytes | bytearray] | None]:
        """The answer to a request over its API's entry bound, undecoded: INVALID_REQUEST where
        its response has a top-level error code; CloseConnection otherwise (entry_bounds.py)."""
        what = f"api {header.api_key} v{header.api_version}: {exc}"
        response_type = codec.response_schema(header.api_key, header.api_version)
        response = entry_bounds.refusal(response_type, str(exc))
        if response is None:
            raise CloseConnection(what)
        log.info("refused a request from %s undecoded: %s", self._peer, what)
        stats = self._server.metrics.api(header.api_key)
        return self._run(_given(response), header.correlation_id, stats)

    # request lifecycle

    async def _run(
        self, handling: Any, correlation_id: int, stats: ApiStats, *, off_loop: bool = False
    ) -> list[bytes | bytearray] | None:
        """`off_loop`: the answer to a large request may be as large, so it is encoded (and
        its error code found) in a thread."""
        started = time.perf_counter()
        try:
            response = await handling
            if off_loop and response is not None and not isinstance(response, codec.Encoded):
                response = await codec.encode_off_loop(lambda: response)
            encoded = None if response is None else codec.encode_response(correlation_id, response)
        except Exception:
            stats.failed(time.perf_counter() - started)
            raise
        stats.answered(time.perf_counter() - started, response)
        return encoded

    async def _raw_sasl(self, sasl: SaslSession, token: bytes) -> list[bytes | bytearray] | None:
        """A SASL token after SaslHandshake v0: answered as a bare size-prefixed token; a
        failure gets no answer, only the close (Kafka's v0 has no error to send)."""
        step = await sasl.authenticate(token)
        if step.error is not None:
            await asyncio.sleep(sasl_authenticate.FAILED_AUTHENTICATION_DELAY_S)
            return None
        return [_SIZE.pack(len(step.challenge)) + step.challenge]

    async def _answer(self, correlation_id: int, response: Any) -> list[bytes | bytearray]:
        return codec.encode_response(correlation_id, response)

    def _start_task(self, work: Any, size: int, *, answered: bool = True) -> None:
        request = _Request(size, answered)
        loop = self._loop or asyncio.get_running_loop()
        request.task = loop.create_task(self._serve(work, request))
        self._tasks.add(request)
        self._held(size)
        if answered:
            self._pending.append(request)
        self.update_reading()

    async def _serve(self, work: Any, request: _Request) -> None:
        """Runs one request's handler; its answer is written from this last step (a done
        callback would cost each request one more loop turn). Every outcome is read here,
        whatever state the connection is in: a handler that ends after the connection began
        closing (ten pipelined acks=0 produces to a follower, each refused with
        CloseConnection) is dropped, not left for asyncio to log as "Task exception was
        never retrieved"; the first one's close logged the one line. A cancelled handler
        (the connection is gone) ends here too."""
        try:
            request.parts = await work
        except CloseConnection as exc:
            if not self._closing:
                self.drop(str(exc))
            return
        except Exception:
            # A handler's own failure is a bug, whether or not the connection is closing.
            log.error("handler failed for client %s; closing it", self._peer, exc_info=True)
            self._close_transport()
            return
        finally:
            self._tasks.discard(request)
            if not request.answered:
                self._release(request.size)
        request.done = True
        if not self._closing and request.answered:
            self._flush()

    def _release(self, size: int) -> None:
        self._held(-size)
        self.update_reading()

    def _held(self, delta: int) -> None:
        """Request bytes this connection holds, counted here and in the node's total."""
        if self._lost:
            return
        self._held_bytes += delta
        self._server.memory.hold(delta)

    def _flush(self) -> None:
        """Sends finished responses while the oldest pending request is finished (one that
        failed never is: _serve closed the connection)."""
        while self._pending and self._pending[0].done and not self._closing:
            request = self._pending.popleft()
            self._held(-request.size)
            if request.parts is not None:
                self._unsent.extend(request.parts)
            self._last_active = self._server.clock()
            if self._sasl is not None and self._sasl.stage is Stage.FAILED:
                self._refuse(self._sasl)
                return
        self._send_unsent()
        self.update_reading()

    def _refuse(self, sasl: SaslSession) -> None:
        """Failed SASL: the client gets its answer (Kafka's error), then the connection
        closes; nothing after it is read."""
        self._server.auth_failures.record(self._host, self._peer, sasl)
        self._server.metrics.authentication_failed()
        self._closing = True
        self._pending.clear()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            for part in self._unsent:
                transport.write(part)
            transport.close()  # after what was written
        self._unsent.clear()

    def _send_unsent(self) -> None:
        """Hands response bytes to the transport in slices of up to WRITE_SLICE_BYTES while it
        is not paused, so a large record set goes mostly straight to the socket instead of
        into the transport's buffer; each slice is one writelines, whatever answers and parts
        it holds (uvloop sends it with one writev)."""
        transport = self._transport
        unsent = self._unsent
        while unsent and not self._writing_paused:
            if transport is None or transport.is_closing():
                unsent.clear()
                return
            if len(unsent) == 1 and len(unsent[0]) <= WRITE_SLICE_BYTES:
                transport.write(unsent.popleft())  # the common case: one small answer
                return
            parts: list[bytes | bytearray | memoryview] = []
            room = WRITE_SLICE_BYTES
            while unsent and room > 0 and len(parts) < WRITE_SLICE_PARTS:
                part = unsent.popleft()
                if len(part) > room:
                    view = memoryview(part)
                    unsent.appendleft(view[room:])
                    part = view[:room]
                parts.append(part)
                room -= len(part)
            transport.writelines(parts)

    # flow control and closing

    def update_reading(self) -> None:
        """Reads only while the client's unfinished requests and unsent responses are bounded."""
        if self._closing or self._transport is None:
            return
        pause = (
            self._writing_paused
            or len(self._tasks) >= MAX_PENDING_REQUESTS
            or len(self._pending) >= MAX_PENDING_REQUESTS
            or self._held_bytes >= MAX_PENDING_BYTES
            or self._waiting_memory
            or self._server.memory.full
        )
        if pause and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()
        elif not pause and self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()
            self._process()

    def drop(self, reason: str) -> None:
        log.warning("closing Kafka connection from %s: %s", self._peer, reason)
        self._close_transport()

    def _close_transport(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.close()

    def close(self) -> list[asyncio.Task[Any]]:
        """Drops the connection at server shutdown, unsent responses and all (a client that is
        not reading must not hold shutdown up); returns the cancelled handler tasks."""
        tasks = [request.task for request in self._tasks if request.task is not None]
        self._closing = True
        if self._transport is not None:
            self._transport.abort()
        for task in tasks:
            task.cancel()
        return tasks


class _Request:
    """One request's handler on a connection: its frame's size (held until answered), and
    its answer once done (None: it has none, acks=0)."""

    __slots__ = ("answered", "done", "parts", "size", "task")

    def __init__(self, size: int, answered: bool) -> None:
        self.size = size
        self.answered = answered  # expects an answer (in the connection's pending order)
        self.done = False
        self.parts: list[bytes | bytearray] | None = None
        self.task: asyncio.Task[None] | None = None


async def _given(response: Any) -> Any:
    return response


def _decode_paused(header: codec.RequestHeader, frame: bytes) -> Any:
    with collection_paused():
        return codec.decode_request(header, frame)
