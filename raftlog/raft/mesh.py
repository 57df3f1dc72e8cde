"""One authenticated TCP connection per node pair, carrying every Raft group.

Redpanda multiplexes its Raft groups over one connection per peer the same way; pysyncobj's
own transport would open a port and a socket pair per group and pickle every message. Frames
are a plain msgpack stream (msgpack is self-delimiting). The node with the lower id dials.
Peers prove they hold the cluster secret with an HMAC challenge in both directions before
anything else is accepted: pysyncobj unpickles the commands a peer delivers, so only a peer
that knows the secret may deliver one. Over 500 lines: the handshake, the framing, the
coalesced beats and the keepalive are one connection's life, each needing the others' state.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import os
import socket
import ssl
import struct
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

import msgpack

from raftlog.raft.durability import Durability
from raftlog.raft.failure_log import FailureLog

log = logging.getLogger(__name__)

RAFT, PING, CONTROL, HELLO, WELCOME, AUTH, BEATS, CORE = range(8)
HANDSHAKE_TIMEOUT = 5.0
PING_INTERVAL = 0.25  # a silent link shows within a second, idle or not
DEAD_AFTER = 6.0  # seconds without a byte from a connected peer
# A peer not heard from for this long wakes the quiet Raft groups it shares (FORK.md, 9): the
# groups' own timers take over from the node-level pings, as if they had never stopped.
SILENT_AFTER = 0.5
RECONNECT_DELAY = 0.3
# Bytes queued towards a peer before appends wait. Each group also has its own window (see
# controller/transport.py); this bounds the sum, so that at the tens of MB/s a Python follower
# absorbs the queue stays a small fraction of an election timeout deep.
CONGESTED_BYTES = 8 * 1024 * 1024
SOCKET_BUFFER = 512 * 1024
MAX_FRAME_BYTES = 256 * 1024 * 1024
# Frames handled in one event-loop turn; the rest of a read waits for the next turn. A read
# can hold a thousand groups' messages, and in an election storm handling them took seconds
# in one callback, long enough to time out the elections of every other group (issue 12).
FRAMES_PER_TURN = 64
# Beats (heartbeats and their answers, controller/transport.py) that count as one frame there.
BEATS_PER_FRAME = 32
# What a connection may send before it has proven it holds the cluster secret (the three
# handshake frames take a few hundred bytes).
PRE_AUTH_BYTES = 4096
# A rejected connection's address is logged at most this often (a port scanner's flood).
REJECT_LOG_INTERVAL = 60.0

# What a group sends a peer: a pysyncobj message (a dict), or a beat, the compact form of a
# heartbeat or of its answer (a list; controller/transport.py).
Message = dict[str, Any]
Beat = list[Any]


class Endpoint(Protocol):
    """A Raft group's end of the mesh."""

    def peer_up(self, peer_id: str) -> None: ...

    def peer_down(self, peer_id: str) -> None: ...

    def deliver(self, peer_id: str, message: Message | Beat) -> None: ...

    def peer_silent(self, peer_id: str) -> None: ...


def _encode_default(obj: Any) -> Any:
    """pysyncobj hands us lazy journal objects (see raft/journal.py); bytes go on the wire."""
    if hasattr(obj, "entries"):
        return obj.entries()
    if hasattr(obj, "__bytes__"):
        return bytes(obj)
    if isinstance(obj, set | frozenset):
        return list(obj)
    raise TypeError(f"cannot send {type(obj).__name__} to a peer")


# An entry's bytes larger than this leave from their own buffer, not copied into their frame.
INLINE_ENTRY_BYTES = 16 * 1024
_BIN16, _BIN32 = struct.Struct(">BH"), struct.Struct(">BI")  # msgpack's bin 16/32 headers


def core_frame(packer: msgpack.Packer, items: list[Any]) -> list[bytes]:
    """What `packer` makes of [CORE, items] (raft/driver.py's items), byte for byte, as
    buffers for one writev: an entry's bytes over INLINE_ENTRY_BYTES are one of them as they
    are. Packed whole, each would be copied twice more per follower (into msgpack's buffer,
    then out of it): a 1 MiB entry, four copies a follower with its read."""
    if not any(item[-1] for item in items):  # no entries: heartbeats, votes, answers
        return [packer.pack([CORE, items])]
    pack, header = packer.pack, packer.pack_array_header
    out: list[bytes] = []
    head = bytearray(header(2))
    head += pack(CORE)
    head += header(len(items))
    for item in items:
        flat = item[-1]
        # (the driver's items end in a list: anything else is packed whole, never walked)
        if type(flat) is not list or not any(
            type(v) is bytes and len(v) > INLINE_ENTRY_BYTES for v in flat
        ):
            head += pack(item)
            continue
        head += header(len(item))
        for field in item[:-1]:
            head += pack(field)
        head += header(len(flat))
        for value in flat:
            if type(value) is bytes and len(value) > INLINE_ENTRY_BYTES:
                size = len(value)
                head += _BIN16.pack(0xC5, size) if size < 0x10000 else _BIN32.pack(0xC6, size)
                out.append(bytes(head))
                out.append(value)
                head.clear()
            else:
                head += pack(value)
    if head:
        out.append(bytes(head))
    return out


def _mac(secret: bytes, *parts: bytes | str) -> bytes:
    h = hmac.new(secret, digestmod=hashlib.sha256)
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.digest()


class _Connection(asyncio.Protocol):
    def __init__(self, mesh: Mesh, dial_peer: str | None) -> None:
        self._mesh = mesh
        self._dial_peer = dial_peer
        self.dials = dial_peer is not None
        self._unpacker = msgpack.Unpacker(
            raw=False, strict_map_key=False, max_buffer_size=PRE_AUTH_BYTES
        )
        self._pre_auth_bytes = 0
        self._paused = False  # frames are waiting for the next loop turn
        self._remote = "?"
        self.dropped_silent = False  # dropped by the keepalive: its loss was logged then
        self._packer = msgpack.Packer(default=_encode_default, use_bin_type=True)
        self.transport: asyncio.Transport | None = None
        self.peer_id: str | None = None
        self.peer_address: tuple[str, int] | None = None
        self.authenticated = False
        self.last_received = mesh.clock()
        self.silent = False  # past SILENT_AFTER at the last keepalive round
        self._nonce = os.urandom(16)
        self._peer_nonce = b""
        # Frames packed, or a list of beats that becomes one frame when flushed.
        self._pending: list[bytes | list[Beat]] = []
        self._pending_bytes = 0
        self._beats: list[Beat] | None = None  # the last of _pending, while beats are added to it
        self._flushing: asyncio.Handle | None = None  # the _flush queued for the turn's end

    # --- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream connection's transport (create_server, create_connection).
        self.transport = cast(asyncio.Transport, transport)
        remote = transport.get_extra_info("peername")
        if isinstance(remote, tuple):
            self._remote = f"{remote[0]}:{remote[1]}"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Small kernel buffers: every group shares this connection, and bytes queued here
            # delay every other group's heartbeats (see CONGESTED_BYTES).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._mesh._loop.call_later(HANDSHAKE_TIMEOUT, self._handshake_deadline)
        if self._dial_peer is not None:
            self.write([HELLO, self._mesh.node_id, self._nonce, self._mesh.address])

    def data_received(self, data: bytes) -> None:
        self.last_received = self._mesh.clock()
        try:
            if self.authenticated:
                self._unpacker.feed(data)
                self._frames()
                return
            view = memoryview(data)
            while view and not self.authenticated:
                if self.transport is None or self.transport.is_closing():
                    return  # closed in the handshake (the duplicate of a kept connection)
                room = PRE_AUTH_BYTES - self._pre_auth_bytes
                if room <= 0:
                    raise ValueError(f"more than {PRE_AUTH_BYTES} bytes before authentication")
                chunk, view = view[:room], view[room:]
                self._pre_auth_bytes += len(chunk)
                self._unpacker.feed(chunk)
                self._frames()
            if view and self.authenticated:
                self._unpacker.feed(view)
                self._frames()
        except Exception as exc:
            self._reject(f"bad frame: {exc!r}")

    def _frames(self) -> None:
        handled = 0
        for frame in self._unpacker:
            if self.transport is None or self.transport.is_closing():
                return
            was_authenticated = self.authenticated
            self._frame(frame)
            handled += 1 if frame[0] not in (BEATS, CORE) else 1 + len(frame[1]) // BEATS_PER_FRAME
            if was_authenticated and handled >= FRAMES_PER_TURN:
                if not self._paused:
                    self._paused = True
                    self.transport.pause_reading()
                    self._mesh._loop.call_soon(self._more_frames)
                return
            if self.authenticated and not was_authenticated:
                # Authenticated: frames may now be as large as Raft needs; what followed
                # the handshake in this read moves to the new reader.
                rest = self._unpacker.read_bytes(PRE_AUTH_BYTES)
                self._unpacker = msgpack.Unpacker(
                    raw=False, strict_map_key=False, max_buffer_size=MAX_FRAME_BYTES
                )
                self._unpacker.feed(rest)
                self._frames()
                return

    def _more_frames(self) -> None:
        # Frames still waiting to be handled are the peer's: it counts as heard until they
        # are (reading is paused meanwhile, so data_received does not say so).
        self.last_received = self._mesh.clock()
        self._paused = False
        try:
            self._frames()
        except Exception as exc:
            self._reject(f"bad frame: {exc!r}")
            return
        if not self._paused and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def _reject(self, reason: str) -> None:
        """Closes the connection; one log line, and at most one per REJECT_LOG_INTERVAL for
        an address that has not authenticated (a scanner must not flood the log)."""
        if self.authenticated:
            log.warning("peer %s: %s; closing", self.peer_id, reason)
        else:
            self._mesh._log_rejected(self._remote, reason)
        self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._mesh._lost(self)

    # --- frames ----------------------------------------------------------------------------

    def _frame(self, frame: list[Any]) -> None:
        kind = frame[0]
        if self.authenticated:
            peer_id = self.peer_id
            assert peer_id is not None  # set by the handshake, before it authenticates
            if kind == RAFT:
                self._mesh._deliver(peer_id, frame[1], frame[2])
            elif kind == BEATS:
                for beat in frame[1]:
                    self._mesh._deliver(peer_id, beat[0], beat[1:])
            elif kind == CORE:
                self._mesh._core(peer_id, frame[1])
            elif kind == CONTROL:
                self._mesh._control(peer_id, frame[1], frame[2])
            return
        secret, me = self._mesh._secret, self._mesh.node_id
        if kind == HELLO and self._dial_peer is None:
            _, peer, nonce, address = frame
            if peer == me or not str(peer).isdigit():
                raise ValueError(f"bad node id {peer!r}")
            # A node not yet known may be joining: it is let in if it proves it holds the
            # cluster secret, like any other.
            self.peer_id, self._peer_nonce, self.peer_address = peer, nonce, tuple(address)
            self.write([WELCOME, me, self._nonce, _mac(secret, "W", nonce, self._nonce, peer, me)])
        elif kind == WELCOME and self._dial_peer is not None:
            _, peer, nonce, mac = frame
            expected = _mac(secret, "W", self._nonce, nonce, me, peer)
            if peer != self._dial_peer or not hmac.compare_digest(mac, expected):
                raise ValueError(f"node {peer!r} failed authentication")
            self.peer_id = peer
            self.write([AUTH, _mac(secret, "A", nonce, self._nonce, me, peer)])
            self._mesh._established(self)
        elif kind == AUTH and self._dial_peer is None and self.peer_id is not None:
            expected = _mac(secret, "A", self._nonce, self._peer_nonce, self.peer_id, me)
            if not hmac.compare_digest(frame[1], expected):
                raise ValueError(f"node {self.peer_id!r} failed authentication")
            self._mesh._established(self)
        else:
            raise ValueError(f"unexpected frame {kind} before authentication")

    def _handshake_deadline(self) -> None:
        if not self.authenticated and self.transport and not self.transport.is_closing():
            self._reject(f"no handshake within {HANDSHAKE_TIMEOUT}s")

    def write(self, obj: Any, *, now: bool = False) -> None:
        """Frames written in one event-loop turn leave in one send: a tick of a hundred groups
        is a hundred heartbeats, and a syscall each cost more than the groups themselves.
        `now`: this frame ends the turn's writes (the Raft driver's, once per turn), so it
        leaves at once with those before it, a loop turn earlier than the queued flush."""
        if self.transport is None or self.transport.is_closing():
            return
        frame = self._packer.pack(obj)
        if now:
            self._pending.append(frame)
            self._flush()
            return
        if not self._pending:
            self._flushing = self._mesh._loop.call_soon(self._flush)
        self._pending.append(frame)
        self._pending_bytes += len(frame)
        self._beats = None

    def write_core(self, items: list[Any]) -> None:
        """The Raft driver's frame of the turn (core_frame), sent at once with those before it,
        as write(now=True) sends one."""
        if self.transport is None or self.transport.is_closing():
            return
        self._pending += core_frame(self._packer, items)
        self._flush()

    def write_beat(self, beat: Beat) -> None:
        """A turn's beats to this peer leave as one frame, in order with the other frames."""
        if self.transport is None or self.transport.is_closing():
            return
        if self._beats is None:
            if not self._pending:
                self._flushing = self._mesh._loop.call_soon(self._flush)
            self._beats = []
            self._pending.append(self._beats)
        self._beats.append(beat)
        self._pending_bytes += 24

    def _flush(self) -> None:
        if self._flushing is not None:
            self._flushing.cancel()  # (this is it, or it is not needed any more)
            self._flushing = None
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        self._beats = None
        if pending and self.transport is not None and not self.transport.is_closing():
            pack = self._packer.pack
            frames = [p if isinstance(p, bytes) else pack([BEATS, p]) for p in pending]
            self.transport.writelines(frames)  # (uvloop: one writev of them, none copied)

    def buffered(self) -> int:
        if self.transport is None:
            return 0
        return self.transport.get_write_buffer_size() + self._pending_bytes

    @property
    def closing(self) -> bool:
        """The transport is closing or closed (an established connection always has one)."""
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Drops the connection now, with what it had not sent: a peer silent for DEAD_AFTER
        reads nothing, and a close waited (for minutes, with the peer cut off) to send it."""
        if self.transport is not None:
            self.transport.abort()


class Mesh:
    """This node's connections to every peer and the groups that talk over them."""

    def __init__(
        self,
        node_id: str,
        listen: tuple[str, int],
        peers: dict[str, tuple[str, int]],
        secret: bytes,
        advertise: tuple[str, int] | None = None,
        tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`tls`: (server, client) contexts for mutual TLS under the HMAC handshake, which
        still proves cluster membership; both sides show certificates of the truststore's CA.
        `clock`: when peers were heard, and how long they were away (a test injects one)."""
        self.node_id = node_id
        self.clock = clock
        self._tls = tls
        self.peers = {p: addr for p, addr in peers.items() if p != node_id}
        self._listen = listen
        self._secret = secret
        self._loop = asyncio.get_event_loop()
        self._rejected_logged: dict[str, float] = {}  # host -> when it was last logged
        self._server: asyncio.base_events.Server | None = None
        self._connections: dict[str, _Connection] = {}
        self._endpoints: dict[str, Endpoint] = {}
        self._control_handlers: dict[str, Callable[[str, Any], None]] = {}
        self._core_handler: Callable[[str, list[Any]], None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._failures = FailureLog(log)
        self._dialing: set[str] = set()
        self._peer_lost: dict[str, asyncio.Event] = {}  # set when the peer's connection goes
        # Peers dropped for silence: (when last heard, messages to them dropped since). Their
        # loss is logged once, and their return once, with the count.
        self._away: dict[str, tuple[float, int]] = {}
        self.address = advertise or listen
        self.on_new_peer: list[Callable[[str, tuple[str, int]], None]] = []
        self.on_peer_change: list[Callable[[str, bool], None]] = []
        self.on_peer_silent: list[Callable[[str], None]] = []  # connected, heard nothing lately
        # Raft state saves of this node's groups; each group's frames wait for its own
        # (GroupTransport).
        self.durability = Durability()

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._server = await self._loop.create_server(
            lambda: _Connection(self, None),
            *self._listen,
            reuse_address=True,
            ssl=self._tls[0] if self._tls is not None else None,
        )
        for peer in list(self.peers):
            self._dial(peer)
        self._tasks.append(asyncio.create_task(self._keepalive(), name="mesh keepalive"))

    def add_peer(self, peer_id: str, address: tuple[str, int]) -> None:
        """A node the cluster learned of (it joined): dial it from now on."""
        if peer_id != self.node_id and peer_id not in self.peers:
            self.peers[peer_id] = address
            self._dial(peer_id)

    def _dial(self, peer: str) -> None:
        """Every node dials every peer it knows (a joining node knows only the older ones);
        when both connections come up, the one the lower id dialled is kept."""
        if peer not in self._dialing:
            self._dialing.add(peer)
            self._tasks.append(
                asyncio.create_task(self._dial_forever(peer), name=f"mesh dial {peer}")
            )

    async def close(self) -> None:
        self._closing = True
        self.durability.close()
        for task in self._tasks:
            task.cancel()
        for conn in list(self._connections.values()):
            conn.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # --- groups ----------------------------------------------------------------------------

    def register(self, group_id: str, endpoint: Endpoint) -> None:
        self._endpoints[group_id] = endpoint
        for peer in self._connections:
            endpoint.peer_up(peer)

    def unregister(self, group_id: str) -> None:
        self._endpoints.pop(group_id, None)

    def send(self, peer_id: str, group_id: str, message: Any) -> bool:
        """A message (a dict) or a beat (a list; controller/transport.py) of the group to a peer."""
        conn = self._connections.get(peer_id)
        if conn is None:
            self._dropped(peer_id, 1)
            return False
        if isinstance(message, list):
            conn.write_beat([group_id, *message])
        else:
            conn.write([RAFT, group_id, message])
        return True

    def send_core(self, peer_id: str, items: list[Any]) -> bool:
        """One frame of the Raft driver's messages to a peer: every group's of a loop turn,
        sent at once (the driver's turn is the end of its loop turn's Raft work)."""
        conn = self._connections.get(peer_id)
        if conn is None:
            self._dropped(peer_id, len(items))
            return False
        conn.write_core(items)
        return True

    def on_core(self, handler: Callable[[str, list[Any]], None]) -> None:
        """Where the Raft driver's frames go (raft/driver.py)."""
        self._core_handler = handler

    def connected(self, peer_id: str) -> bool:
        return peer_id in self._connections

    def connected_peers(self) -> set[str]:
        return set(self._connections)

    def last_heard(self, peer_id: str) -> float | None:
        """When the connected peer last sent anything (on the mesh's clock, time.monotonic
        unless a test injected one), None if not connected."""
        conn = self._connections.get(peer_id)
        return conn.last_received if conn is not None else None

    def silences(self) -> dict[str, float]:
        """Seconds since each connected peer last sent anything."""
        now = self.clock()
        return {p: now - conn.last_received for p, conn in self._connections.items()}

    def heard_from(self, within: float) -> set[str]:
        """Peers that sent something in the last `within` seconds (pings come every
        PING_INTERVAL): a link can be silent long before DEAD_AFTER drops it."""
        since = self.clock() - within
        return {p for p, conn in self._connections.items() if conn.last_received >= since}

    def congested(self, peer_id: str) -> bool:
        return self.queued(peer_id) > CONGESTED_BYTES

    def queued(self, peer_id: str) -> int:
        """Bytes waiting to go to the peer; a disconnected peer counts as full."""
        conn = self._connections.get(peer_id)
        return conn.buffered() if conn is not None else 2**62

    # --- control messages (gossip) ----------------------------------------------------------

    def on_control(self, kind: str, handler: Callable[[str, Any], None]) -> None:
        self._control_handlers[kind] = handler

    def broadcast(self, kind: str, payload: Any) -> None:
        for conn in self._connections.values():
            conn.write([CONTROL, kind, payload])

    def send_control(self, peer_id: str, kind: str, payload: Any) -> None:
        conn = self._connections.get(peer_id)
        if conn is not None:
            conn.write([CONTROL, kind, payload])

    # --- internals ---------------------------------------------------------------------------

    def _deliver(self, peer_id: str, group_id: str, message: Message | Beat) -> None:
        endpoint = self._endpoints.get(group_id)
        if endpoint is None:
            return
        try:
            endpoint.deliver(peer_id, message)
        except Exception:
            # One group's failure must not take the connection down for every other group.
            self._failures.exception(
                group_id, "group %s: message from %s failed", group_id, peer_id
            )

    def _core(self, peer_id: str, items: list[Any]) -> None:
        if self._core_handler is not None:
            self._core_handler(peer_id, items)

    def _control(self, peer_id: str, kind: str, payload: Any) -> None:
        handler = self._control_handlers.get(kind)
        if handler is not None:
            handler(peer_id, payload)

    def _established(self, conn: _Connection) -> None:
        peer = conn.peer_id
        assert peer is not None  # the handshake named the peer before proving it
        old = self._connections.get(peer)
        if old is not None and old is not conn and not old.closing:
            # Both sides dialled at once: keep the connection the lower node id dialled.
            if self._dialer(old, peer) < self._dialer(conn, peer):
                conn.close()
                return
            old.close()
        conn.authenticated = True
        self._connections[peer] = conn
        if peer not in self.peers and conn.peer_address is not None:
            self.peers[peer] = conn.peer_address
            self._dial(peer)
            for callback in self.on_new_peer:
                callback(peer, conn.peer_address)
        if old is None or old.closing:
            self._notify(peer, True)
        away = self._away.pop(peer, None)
        if away is None:
            log.info("peer %s connected", peer)
        else:
            heard, dropped = away
            log.info(
                "peer %s back after %.1fs (%d messages dropped)",
                peer,
                self.clock() - heard,
                dropped,
            )

    def _dialer(self, conn: _Connection, peer: str) -> int:
        """Node id of the side that dialled `conn`, a connection to `peer`."""
        return int(self.node_id if conn.dials else peer)

    def _log_rejected(self, remote: str, reason: str) -> None:
        host = remote.rsplit(":", 1)[0]
        now = self.clock()
        if now - self._rejected_logged.get(host, -REJECT_LOG_INTERVAL) >= REJECT_LOG_INTERVAL:
            if len(self._rejected_logged) > 1024:
                self._rejected_logged.clear()
            self._rejected_logged[host] = now
            log.warning("rejected Raft connection from %s: %s", remote, reason)

    def _lost(self, conn: _Connection) -> None:
        if conn.peer_id is not None and self._connections.get(conn.peer_id) is conn:
            del self._connections[conn.peer_id]
            lost = self._peer_lost.get(conn.peer_id)
            if lost is not None:
                lost.set()
            if not conn.dropped_silent:
                log.info("peer %s disconnected", conn.peer_id)
            self._notify(conn.peer_id, False)

    def _notify(self, peer_id: str, up: bool) -> None:
        for endpoint in list(self._endpoints.values()):
            if up:
                endpoint.peer_up(peer_id)
            else:
                endpoint.peer_down(peer_id)
        for callback in self.on_peer_change:
            callback(peer_id, up)

    async def _dial_forever(self, peer: str) -> None:
        """One dialled connection at a time: a paused peer's kernel still accepts, so a new
        dial each round piled up a connection per RECONNECT_DELAY until its handshake deadline,
        all of which completed (and replaced each other) the moment the peer woke."""
        host, port = self.peers[peer]
        pending: _Connection | None = None  # dialled, its handshake not over
        while not self._closing:
            if pending is not None and (pending.authenticated or pending.closing):
                pending = None
            if peer not in self._connections and pending is None:
                with contextlib.suppress(OSError, TimeoutError):
                    _, pending = await asyncio.wait_for(
                        self._loop.create_connection(
                            lambda: _Connection(self, peer),
                            host,
                            port,
                            ssl=self._tls[1] if self._tls is not None else None,
                        ),
                        HANDSHAKE_TIMEOUT,
                    )
            elif peer in self._connections and pending is None:
                # Connected: nothing to dial until that connection is lost (polled, each
                # peer's dialler woke an idle node's loop 3 times a second).
                lost = self._peer_lost.setdefault(peer, asyncio.Event())
                lost.clear()
                await lost.wait()
                continue
            await asyncio.sleep(RECONNECT_DELAY)

    async def _keepalive(self) -> None:
        last_round = self.clock()
        while True:
            await asyncio.sleep(PING_INTERVAL)
            now = self.clock()
            # A round that comes late found this node's own loop busy: what its peers sent
            # meanwhile may still be unread, so no peer is judged silent by it. Judged
            # anyway, a node back from a long turn woke every quiet group it holds, and that
            # work made its next turns long too (issue 12, spread produce).
            self._keepalive_round(now, now - last_round < PING_INTERVAL + SILENT_AFTER / 2)
            last_round = now

    def _keepalive_round(self, now: float, judge: bool) -> None:
        """Pings every peer, tells the groups of one newly silent, and drops one silent for
        DEAD_AFTER: once, with one log line (a close could take minutes with the peer cut
        off, and each round logged it again, four lines a second). A round that is not to
        judge (it came late: this node's own loop was held) drops nobody either: a node back
        from a pause of over 6 s dropped every peer at once, their frames still unread."""
        for conn in list(self._connections.values()):
            if conn.dropped_silent:
                continue
            silent = judge and now - conn.last_received > SILENT_AFTER
            if silent and not conn.silent and conn.peer_id is not None:
                for endpoint in list(self._endpoints.values()):
                    endpoint.peer_silent(conn.peer_id)
                for callback in self.on_peer_silent:
                    callback(conn.peer_id)
            conn.silent = silent
            if judge and now - conn.last_received > DEAD_AFTER:
                log.warning("peer %s silent for %.1fs; dropping", conn.peer_id, DEAD_AFTER)
                conn.dropped_silent = True
                if conn.peer_id is not None:
                    self._away[conn.peer_id] = (conn.last_received, 0)
                conn.abort()
            else:
                conn.write([PING])

    def _dropped(self, peer_id: str, messages: int) -> None:
        """Messages to a peer that is away, counted for the line that logs its return."""
        away = self._away.get(peer_id)
        if away is not None:
            self._away[peer_id] = (away[0], away[1] + messages)
