"""The asyncio Kafka listener: one per listener of a node, accepting connections
(connection.py: framing, per-connection ordering, limits), closing idle ones, and waking
those that wait for the node's request memory."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable

from kafka_api.auth_failures import FailureLog
from kafka_api.connection import SASL_MAX_RECEIVE_BYTES, Connection
from kafka_api.connection_caps import ConnectionCaps
from kafka_api.request_memory import RequestMemory
from raftlog.api.broker import Broker
from raftlog.node.listener_metrics import KafkaMetrics

# ...and give up on cancelled handlers that do not finish within this at server close.
CLOSE_GRACE_SECONDS = 5.0
# A TLS client that has not finished its handshake by then is dropped.
TLS_HANDSHAKE_SECONDS = 10.0


class KafkaServer:
    """One Kafka listener for one node, serving the APIs registered in kafka_api.handlers."""

    def __init__(
        self,
        broker: Broker,
        host: str,
        port: int,
        *,
        max_request_bytes: int = 100 * 1024 * 1024,
        max_idle_seconds: float = 600.0,
        memory: RequestMemory | None = None,
        clock: Callable[[], float] = time.monotonic,
        tls: ssl.SSLContext | None = None,
        sasl_mechanisms: tuple[str, ...] | None = None,
        sasl_max_receive_bytes: int = SASL_MAX_RECEIVE_BYTES,
        metrics: KafkaMetrics | None = None,
        caps: ConnectionCaps | None = None,
    ) -> None:
        """`tls`: serve TLS (SSL, SASL_SSL listeners); `sasl_mechanisms`: require SASL
        authentication with one of them (SASL_PLAINTEXT, SASL_SSL); `memory`: the node's
        request memory, shared by its listeners (a budget of this listener's own if None);
        `caps`: the node's connection caps, likewise."""
        self.broker = broker
        self.host = host
        self.tls = tls
        self.sasl_mechanisms = sasl_mechanisms
        self.sasl_max_receive_bytes = sasl_max_receive_bytes
        self.auth_failures = FailureLog(clock)
        self.max_request_bytes = max_request_bytes
        self.max_idle_seconds = max_idle_seconds
        self.memory = memory or RequestMemory()
        self.memory.watch(self._memory_changed)
        self.clock = clock
        self.metrics = metrics or KafkaMetrics()  # served by the node's /metrics
        self.caps = caps or ConnectionCaps(metrics=self.metrics)
        self._requested_port = port
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self),
            self.host,
            self._requested_port,
            ssl=self.tls,
            ssl_handshake_timeout=TLS_HANDSHAKE_SECONDS if self.tls is not None else None,
        )
        self._schedule_sweep()

    def sweep_idle(self) -> None:
        """Closes connections with nothing in progress that sent nothing for
        max_idle_seconds (Kafka's connections.max.idle.ms): a client that connects and goes
        quiet, or stops half-way through a frame, does not hold its socket and buffer."""
        now = self.clock()
        for conn in list(self._connections):
            idle = conn.idle_for(now)
            if idle > self.max_idle_seconds:
                conn.drop(f"idle for {idle:.0f}s (connections.max.idle.ms)")

    def _memory_changed(self) -> None:
        for conn in list(self._connections):
            conn.update_reading()

    def _schedule_sweep(self) -> None:
        def sweep() -> None:
            self.sweep_idle()
            self._schedule_sweep()

        interval = min(self.max_idle_seconds / 4, 30.0)
        self._sweeper = asyncio.get_running_loop().call_later(interval, sweep)

    def admit(self, conn: Connection, host: str) -> bool:
        """A new connection, counted in by the node's caps; False: it is to be closed."""
        if not self.caps.admit(conn, host):
            return False
        self._connections.add(conn)
        self.metrics.connections_opened += 1
        return True

    def active(self, conn: Connection) -> float:
        """The client sent something: its place in the caps' eviction line, and the time."""
        self.caps.active(conn)
        return self.clock()

    def release(self, conn: Connection) -> None:
        """A connection closed (once counted in; one refused never was)."""
        if conn in self._connections:
            self._connections.discard(conn)
            self.caps.release(conn)
            self.metrics.connections_closed += 1

    @property
    def port(self) -> int:
        """The bound port, so tests can listen on port 0."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("server is not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        tasks = [task for conn in list(self._connections) for task in conn.close()]
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_GRACE_SECONDS)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
