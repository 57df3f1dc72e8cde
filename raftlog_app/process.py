"""One node process: raftlog's Node, its Kafka listener and its admin listener, started and
stopped in the order that keeps clients' view clean."""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
import sys

from consume_proxy.http import ProxyServer
from consume_proxy.service import ConsumeProxy
from kafka_api.connection_caps import ConnectionCaps
from kafka_api.request_memory import RequestMemory
from kafka_api.server import KafkaServer
from raftlog.broker.facade import BrokerFacade
from raftlog.common import limits
from raftlog.common.http_listener import HttpStats
from raftlog.config.node_config import NodeConfig
from raftlog.node.admin import AdminServer
from raftlog.node.listener_metrics import KafkaMetrics
from raftlog.node.metrics import NodeMetrics
from raftlog.node.node import Node
from raftlog.security.listeners import Listener

log = logging.getLogger("raftlog.process")

SWITCH_INTERVAL_S = 0.0005


class NodeProcess:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        # One budget for the node: its listeners' requests and the batches its partitions open.
        self.memory = RequestMemory(int(config.broker_setting("queued.max.request.bytes")))
        self.node = Node(config, memory=self.memory)
        self.kafka: list[KafkaServer] = []
        self.admin: AdminServer | None = None
        self.proxy: ProxyServer | None = None

    async def start(self) -> None:
        cfg = self.config
        await self.node.start()
        kafka_metrics = KafkaMetrics()  # every listener's, served by the node's /metrics
        http_limits = cfg.http_limits()
        caps = ConnectionCaps(  # every listener's connections together, as Kafka counts them
            limits.connection_cap(
                int(cfg.broker_setting("max.connections")),
                self.node.open_files,
                self.node.budget.replicas,
                2 * http_limits.max_connections,  # the admin port and the consume proxy
            ),
            int(cfg.broker_setting("max.connections.per.ip")),
            kafka_metrics,
        )
        log.info("node %d: at most %d Kafka connections", cfg.node_id, caps.max_connections)
        for listener in cfg.listeners:
            server = KafkaServer(
                BrokerFacade(self.node, listener.name),
                listener.host,
                listener.port,
                max_request_bytes=int(cfg.broker_setting("socket.request.max.bytes")),
                max_idle_seconds=cfg.broker_setting("connections.max.idle.ms") / 1000,
                memory=self.memory,
                sasl_max_receive_bytes=int(cfg.broker_setting("sasl.server.max.receive.size")),
                tls=_listener_tls(cfg, listener),
                sasl_mechanisms=cfg.sasl_mechanisms if listener.sasl else None,
                metrics=kafka_metrics,
                caps=caps,
            )
            await server.start()
            self.kafka.append(server)
            log.info(
                "node %d serving Kafka on %s:%d (%s, %s)",
                cfg.node_id,
                listener.host,
                listener.port,
                listener.name,
                listener.protocol,
            )
        admin_tls = cfg.tls.server_context() if cfg.admin_tls and cfg.tls is not None else None
        admin_http, proxy_http = HttpStats(), HttpStats()  # served by the node's /metrics
        self.admin = AdminServer(
            self.node,
            BrokerFacade(self.node).view,
            *cfg.admin_listen,
            token=cfg.admin_token,
            tls=admin_tls,
            metrics=NodeMetrics(
                self.node, kafka_metrics, http={"admin": admin_http, "consume_proxy": proxy_http}
            ),
            limits=http_limits,
            stats=admin_http,
        )
        await self.admin.start()
        plaintext = [x for x in cfg.listeners if x.protocol == "PLAINTEXT"]
        if cfg.proxy_listen is not None and plaintext:
            # a Kafka client of the cluster like any other, starting at this node
            address = (plaintext[0].advertised_host, plaintext[0].advertised_port)
            self.proxy = ProxyServer(
                ConsumeProxy([address]), *cfg.proxy_listen, limits=http_limits, stats=proxy_http
            )
            await self.proxy.start()
        elif cfg.proxy_listen is not None:
            log.warning("consume proxy off: it needs a PLAINTEXT listener to reach the cluster")

    async def stop(self) -> None:
        """Leadership goes first, while clients can still be told where it went; then the
        listeners, so no request reaches a replica being closed; then the node."""
        if self.proxy is not None:  # gives back what it fetched and nobody took
            await self.proxy.close()
        await self.node.hand_over_leadership()
        for server in self.kafka:
            await server.close()
        if self.admin is not None:
            await self.admin.close()
        await self.node.stop()

    async def run_until_signalled(self) -> None:
        # A thread doing CPU work (a large request decoded, a listing built, a scrape
        # formatted) keeps the interpreter for the whole switch interval each time the loop
        # lets go of it for a system call, and a loop turn makes hundreds: at Python's 5 ms,
        # a million-entry decode held socket round trips on the loop up to 780 ms; at 0.5 ms,
        # 17 ms (the loop stays the one thread that wants it most of the time, so this costs
        # nothing then).
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await self.start()
        await stop.wait()
        log.info("stopping: handing over leadership")
        await self.stop()


async def serve_proxy(bootstrap: list[tuple[str, int]], listen: tuple[str, int]) -> None:
    """`raftlog proxy`: the consume proxy alone, until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = ProxyServer(ConsumeProxy(bootstrap), *listen)
    await server.start()
    log.info("consume proxy serving HTTP on %s:%d", *listen)
    await stop.wait()
    await server.close()


def _listener_tls(cfg: NodeConfig, listener: Listener) -> ssl.SSLContext | None:
    """ssl.client.auth applies to SSL listeners; a SASL_SSL client proves itself with SASL,
    as in Kafka (whose listener-prefixed override raftlog does not have)."""
    if not listener.tls or cfg.tls is None:
        return None
    return cfg.tls.server_context(None if listener.protocol == "SSL" else "none")
