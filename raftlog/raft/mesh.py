"""One authenticated TCP connection per node pair, carrying every Raft group.

Redpanda multiplexes its Raft groups over one connection per peer the same way; pysyncobj's
own transport would open a port and a socket pair per group and pickle every message. Frames
are a plain msgpack stream (msgpack is self-delimiting). The node with the lower id dials.
Peers prove they hold the cluster secret with an HMAC challenge in both directions before
anything else is accepted: pysyncobj unpickles the commands a peer delivers, so only a peer
that knows the secret may deliver one. A connection's own life (handshake, framing,
coalesced writes) is mesh_connection.py's; the frames' encoding mesh_frames.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any, Protocol

from raftlog.raft.durability import Durability
from raftlog.raft.failure_log import FailureLog
from raftlog.raft.keepalive import (
    DEAD_AFTER,
    PING_INTERVAL,
    find,
    heard_at,
    hold_ago,
    judges,
    last_hold,
)
from raftlog.raft.mesh_connection import HANDSHAKE_TIMEOUT, Connection
from raftlog.raft.mesh_frames import CONTROL, PING, RAFT, Beat, Message

log = logging.getLogger(__name__)

RECONNECT_DELAY = 0.3
# Bytes queued towards a peer before appends wait. Each group also has its own window (see
# controller/transport.py); this bounds the sum, so that at the tens of MB/s a Python follower
# absorbs the queue stays a small fraction of an election timeout deep.
CONGESTED_BYTES = 8 * 1024 * 1024
# A rejected connection's address is logged at most this often (a port scanner's flood).
REJECT_LOG_INTERVAL = 60.0
# Accepted connections in their handshake at once; a new one past them takes the place of the
# oldest. A peer's handshake takes a round trip; a stranger's connection is closed after
# HANDSHAKE_TIMEOUT, but nothing bounded how many there were: one client opening 1,500 a
# second held 12,600 of a node's file descriptors through them.
MAX_HANDSHAKES = 64


class Endpoint(Protocol):
    """A Raft group's end of the mesh."""

    def peer_up(self, peer_id: str) -> None: ...

    def peer_down(self, peer_id: str) -> None: ...

    def deliver(self, peer_id: str, message: Message | Beat) -> None: ...

    def peer_silent(self, peer_id: str) -> None: ...


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
        self._handshakes: dict[Connection, None] = {}  # accepted, not yet in, oldest first
        self._server: asyncio.base_events.Server | None = None
        self._connections: dict[str, Connection] = {}
        self._endpoints: dict[str, Endpoint] = {}
        self._control_handlers: dict[str, Callable[[str, Any], None]] = {}
        self._core_handler: Callable[[str, list[Any]], None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._failures = FailureLog(log)
        self._dialing: set[str] = set()
        self._last_round = clock()  # the keepalive's last round
        # the loop's last hold a round found (keepalive.last_hold), or the driver (`loop_held`)
        self._hold = (0.0, 0.0)
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
            lambda: Connection(self, None),
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
        """Seconds since each connected peer last sent anything, what was read right after
        this node's own loop was held counted from the hold's start (keepalive.heard_at): the
        Raft driver's leases run from these."""
        now = self.clock()
        hold = last_hold(now, self._last_round, self._hold)
        return {p: now - heard_at(c.last_received, hold) for p, c in self._connections.items()}

    def loop_held(self, seconds: float) -> None:
        """The Raft driver's tick came `seconds` after the one before, a tick or more late:
        this node's loop was held (SIGSTOP, a long turn) from then till now, and what it reads
        right after counts as heard when the hold began (`silences`), as after a hold the
        keepalive finds. Its rounds find only holds over about half a second (a round late by
        half the silence, `judges`): read as heard when read, the pings that waited through a
        hold of 0.25 s renewed a cut-off leader's lease while its followers elected another
        (FORK 5; the Raft simulation's held detection schedules, seed 258)."""
        now = self.clock()
        self._hold = (now - seconds, now)

    def hold_ago(self) -> tuple[float, float]:
        """How long this node's loop was last held and how long ago that ended, in seconds
        (keepalive.hold_ago)."""
        now = self.clock()
        return hold_ago(now, last_hold(now, self._last_round, self._hold))

    def heard_from(self, within: float) -> set[str]:
        """Peers that sent something in the last `within` seconds (pings come every
        PING_INTERVAL, raft/keepalive.py): a link can be silent long before DEAD_AFTER drops it."""
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

    def _accepted(self, conn: Connection) -> None:
        handshakes = self._handshakes
        if len(handshakes) >= MAX_HANDSHAKES:
            oldest = next(iter(handshakes))
            del handshakes[oldest]
            oldest.reject(f"{MAX_HANDSHAKES} handshakes in progress: the oldest made room")
        handshakes[conn] = None

    def _established(self, conn: Connection) -> None:
        self._handshakes.pop(conn, None)
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

    def _dialer(self, conn: Connection, peer: str) -> int:
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

    def _lost(self, conn: Connection) -> None:
        self._handshakes.pop(conn, None)
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
        pending: Connection | None = None  # dialled, its handshake not over
        while not self._closing:
            if pending is not None and (pending.authenticated or pending.closing):
                pending = None
            if peer not in self._connections and pending is None:
                with contextlib.suppress(OSError, TimeoutError):
                    _, pending = await asyncio.wait_for(
                        self._loop.create_connection(
                            lambda: Connection(self, peer),
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
        self._last_round = self.clock()
        while True:
            await asyncio.sleep(PING_INTERVAL)
            now = self.clock()
            self._hold = last_hold(now, self._last_round, self._hold)
            self._keepalive_round(now, judges(now, self._last_round))  # a late one judges nobody
            self._last_round = now

    def _keepalive_round(self, now: float, judge: bool) -> None:
        """Pings every peer, tells the groups of one newly silent, and drops one silent for
        DEAD_AFTER: once, with one log line (a close could take minutes with the peer cut
        off, and each round logged it again, four lines a second). What a round finds is
        raft/keepalive.py's `find`, which the Raft simulation runs too."""
        for conn in list(self._connections.values()):
            if conn.dropped_silent:
                continue
            found = find(now, conn.last_received, conn.silent, judge)
            if found.newly_silent and conn.peer_id is not None:
                for endpoint in list(self._endpoints.values()):
                    endpoint.peer_silent(conn.peer_id)
                for callback in self.on_peer_silent:
                    callback(conn.peer_id)
            conn.silent = found.silent
            if found.dead:
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
