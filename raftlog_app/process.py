"""One node process: raftlog's Node, its Kafka listener and its admin listener, started and
stopped in the order that keeps clients' view clean."""

from __future__ import annotations

import asyncio
import logging
import signal

from consume_proxy.http import ProxyServer
from consume_proxy.service import ConsumeProxy
from kafka_api.server import KafkaServer
from raftlog.admin import AdminServer
from raftlog.broker_facade import BrokerFacade
from raftlog.config import NodeConfig
from raftlog.metrics import NodeMetrics
from raftlog.node import Node

log = logging.getLogger("raftlog.process")


class NodeProcess:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.node = Node(config)
        self.kafka: KafkaServer | None = None
        self.admin: AdminServer | None = None
        self.proxy: ProxyServer | None = None

    async def start(self) -> None:
        cfg = self.config
        await self.node.start()
        broker = BrokerFacade(self.node)
        self.kafka = KafkaServer(
            broker,
            *cfg.kafka_listen,
            max_request_bytes=int(cfg.broker_setting("socket.request.max.bytes")),
            max_idle_seconds=cfg.broker_setting("connections.max.idle.ms") / 1000,
        )
        await self.kafka.start()
        self.admin = AdminServer(
            self.node,
            broker.view,
            *cfg.admin_listen,
            token=cfg.admin_token,
            metrics=NodeMetrics(self.node, self.kafka.metrics),
        )
        await self.admin.start()
        if cfg.proxy_listen is not None:
            # a Kafka client of the cluster like any other, starting at this node
            self.proxy = ProxyServer(ConsumeProxy([cfg.advertised_kafka]), *cfg.proxy_listen)
            await self.proxy.start()
        log.info("node %d serving Kafka on %s:%d", cfg.node_id, *cfg.kafka_listen)

    async def stop(self) -> None:
        """Leadership goes first, while clients can still be told where it went; then the
        listeners, so no request reaches a replica being closed; then the node."""
        if self.proxy is not None:  # gives back what it fetched and nobody took
            await self.proxy.close()
        await self.node.hand_over_leadership()
        if self.kafka is not None:
            await self.kafka.close()
        if self.admin is not None:
            await self.admin.close()
        await self.node.stop()

    async def run_until_signalled(self) -> None:
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
