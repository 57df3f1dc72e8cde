"""The admin HTTP listener: node status for `raftlog cluster`, tests and operators."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from raftlog.node import Node


class AdminServer:
    def __init__(self, node: Node, host: str, port: int) -> None:
        self._node = node
        self._host, self._port = host, port
        app = web.Application()
        app.router.add_get("/v1/status", self._status)
        app.router.add_get("/v1/partitions/{topic}/{partition}/epochs", self._epochs)
        self._runner = web.AppRunner(app, access_log=None)

    async def start(self) -> None:
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port, reuse_address=True).start()

    async def close(self) -> None:
        await self._runner.cleanup()

    async def _status(self, request: web.Request) -> web.Response:
        node = self._node
        leader = node.controller_id()
        partitions = []
        for (topic, index), p in sorted(node.partitions.items()):
            group_leader = p.group.leader_id
            partitions.append(
                {
                    "topic": topic,
                    "partition": index,
                    "leader": int(group_leader) if group_leader is not None else None,
                    "term": p.group.term,
                    "is_leader": p.is_leader,
                    "high_watermark": p.high_watermark,
                    "log_end_offset": p.log_end_offset,
                    "log_start_offset": p.log_start_offset,
                    "replicas": list(p.replicas),
                }
            )
        return web.json_response(
            {
                "node_id": node.node_id,
                "cluster_id": node.cluster_id or None,
                "controller_leader": leader if leader >= 0 else None,
                "registered_nodes": sorted(node.registered_nodes()),
                "live_nodes": [b.node_id for b in node.live_brokers()],
                "partitions": partitions,
            }
        )

    async def _epochs(self, request: web.Request) -> web.Response:
        try:
            key = (request.match_info["topic"], int(request.match_info["partition"]))
        except ValueError:
            raise web.HTTPBadRequest(text="partition must be a number\n") from None
        partition = self._node.partitions.get(key)
        if partition is None:
            raise web.HTTPNotFound(text=f"node {self._node.node_id} hosts no replica of {key}\n")
        return web.json_response(
            {
                "topic": key[0],
                "partition": key[1],
                "term": partition.group.term,
                "log_end_offset": partition.log_end_offset,
                "epochs": [[e, s] for e, s in partition.epochs.entries()],
            }
        )
