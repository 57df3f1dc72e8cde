"""One peer connection of the mesh (raft/mesh.py): its handshake, framing, coalesced writes
and read budget, apart from the node's table of peers and groups that the Mesh keeps."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import socket
from collections.abc import Callable
from typing import Any, Protocol, cast

import msgpack

from raftlog.raft.mesh_frames import (
    AUTH,
    BEATS,
    CONTROL,
    CORE,
    HELLO,
    RAFT,
    WELCOME,
    Beat,
    Message,
    core_frame,
    encode_default,
)

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 5.0
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


class MeshSide(Protocol):
    """What a connection reads and calls of its node's mesh (raft/mesh.py's Mesh)."""

    node_id: str
    address: tuple[str, int]
    clock: Callable[[], float]
    _loop: asyncio.AbstractEventLoop
    _secret: bytes

    def _deliver(self, peer_id: str, group_id: str, message: Message | Beat) -> None: ...

    def _core(self, peer_id: str, items: list[Any]) -> None: ...

    def _control(self, peer_id: str, kind: str, payload: Any) -> None: ...

    def _accepted(self, conn: Connection) -> None: ...

    def _established(self, conn: Connection) -> None: ...

    def _log_rejected(self, remote: str, reason: str) -> None: ...

    def _lost(self, conn: Connection) -> None: ...


def _mac(secret: bytes, *parts: bytes | str) -> bytes:
    h = hmac.new(secret, digestmod=hashlib.sha256)
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.digest()


class Connection(asyncio.Protocol):
    def __init__(self, mesh: MeshSide, dial_peer: str | None) -> None:
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
        self._packer = msgpack.Packer(default=encode_default, use_bin_type=True)
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
        # Cancelled when the connection goes: it kept a closed one, and its reader's 40 KB
        # (msgpack's stack), for the whole HANDSHAKE_TIMEOUT; a stranger reconnecting as fast as
        # it could grew a node by 1.3 GB in 20 s.
        self._deadline: asyncio.TimerHandle | None = None

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
        self._deadline = self._mesh._loop.call_later(HANDSHAKE_TIMEOUT, self._handshake_deadline)
        if self._dial_peer is not None:
            self.write([HELLO, self._mesh.node_id, self._nonce, self._mesh.address])
        else:
            self._mesh._accepted(self)

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

    def reject(self, reason: str) -> None:
        """Closes a connection still in its handshake, saying why (rate-limited)."""
        self._reject(reason)

    def _reject(self, reason: str) -> None:
        """Closes the connection; one log line, and at most one per REJECT_LOG_INTERVAL for
        an address that has not authenticated (a scanner must not flood the log)."""
        if self.authenticated:
            log.warning("peer %s: %s; closing", self.peer_id, reason)
        else:
            self._mesh._log_rejected(self._remote, reason)
        self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
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
