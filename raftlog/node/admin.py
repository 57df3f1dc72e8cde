"""The admin HTTP listener: node status for `raftlog cluster`, tests and operators.

Reads are open (they are what `raftlog audit` and `raftlog epochs` collect, and Prometheus
scrapes at /metrics: raftlog/node/metrics.py). Anything that
changes the node needs `Authorization: Bearer <admin_token>` from the node's config; a node
without an admin_token refuses every change (a loop of unauthenticated transfers forced 54
leader changes in 20 s)."""

from __future__ import annotations

import asyncio
import hmac
import ssl
from typing import TYPE_CHECKING, Any

from aiohttp import web

from epoch.replica_state import ReplicaState, spans
from raftlog.common.http_listener import DEFAULT_LIMITS, HttpLimits, HttpListener, HttpStats
from raftlog.controller import ControllerUnavailable
from raftlog.controller.voters import VoterRefused
from raftlog.security import user_routes
from raftlog.security.users import UserAdmin

if TYPE_CHECKING:
    from raftlog.node.cluster_view import ClusterView
    from raftlog.node.metrics import NodeMetrics
    from raftlog.node.node import Node
    from raftlog.partition.partition import Partition


def _epoch_state(node_id: int, partition: Partition) -> dict:
    segments = [(s.term, s.base_offset, s.size) for s in partition.log.segments()]
    return ReplicaState(
        node=node_id,
        topic=partition.topic,
        partition=partition.index,
        term=partition.group.term,
        log_start_offset=partition.log_start_offset,
        log_end_offset=partition.log_end_offset,
        high_watermark=partition.high_watermark,
        epochs=spans(segments),
    ).to_dict()


class AdminServer:
    def __init__(
        self,
        node: Node,
        view: ClusterView,
        host: str,
        port: int,
        token: str | None = None,
        tls: ssl.SSLContext | None = None,
        metrics: NodeMetrics | None = None,
        limits: HttpLimits = DEFAULT_LIMITS,
        stats: HttpStats | None = None,
    ) -> None:
        """`limits`: the node's http.* settings; `stats`: what the listener counts, for
        /metrics."""
        self._node = node
        self._view = view
        self._token = token
        self._metrics = metrics
        app = web.Application(
            middlewares=[self._authorize], client_max_size=user_routes.MAX_BODY_BYTES
        )
        user_routes.add_routes(app, UserAdmin(node), self._check_token)
        if metrics is not None:
            app.router.add_get("/metrics", self._scrape)
        app.router.add_get("/v1/status", self._status)
        app.router.add_get("/v1/partitions/{topic}/{partition}/epochs", self._epochs)
        app.router.add_post(
            "/v1/partitions/{topic}/{partition}/transfer-leadership", self._transfer
        )
        app.router.add_get("/v1/history", self._history)
        app.router.add_post("/v1/controller/voters/{node}/retire", self._retire_voter)
        app.router.add_get("/v1/epochs", self._all_epochs)
        app.router.add_get("/v1/share-groups/{group}", self._share_group)
        app.router.add_get("/v1/reassignments", self._reassignments)
        self._listener = HttpListener("admin", app, host, port, limits, tls=tls, stats=stats)

    @web.middleware
    async def _authorize(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            self._check_token(request)
        return await handler(request)

    def _check_token(self, request: web.Request) -> None:
        if self._token is None:
            raise web.HTTPForbidden(
                text="this node has no admin_token in its config: admin changes are disabled\n"
            )
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.encode(), self._token.encode()
        ):
            raise web.HTTPUnauthorized(
                text="admin changes need Authorization: Bearer <admin_token>\n",
                headers={"WWW-Authenticate": "Bearer"},
            )

    async def start(self) -> None:
        await self._listener.start()

    async def close(self) -> None:
        await self._listener.close()

    async def _status(self, request: web.Request) -> web.Response:
        node, view = self._node, self._view
        leader = view.controller_id()
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
                    "quiet": p.group.quiet,  # its Raft group idle: no timers, no heartbeats
                    "high_watermark": p.high_watermark,
                    "log_end_offset": p.log_end_offset,
                    "log_start_offset": p.log_start_offset,
                    "replicas": list(p.replicas),
                }
            )
        return web.json_response(
            {
                "node_id": node.node_id,
                "cluster_id": view.cluster_id or None,
                "controller_leader": leader if leader >= 0 else None,
                "registered_nodes": sorted(view.registered_nodes()),
                "live_nodes": [b.node_id for b in view.live_brokers()],
                "controller_voters": sorted(node.controller.voters()),
                "controller_voter": node.controller.group.is_voter,
                "partitions": partitions,
            }
        )

    async def _reassignments(self, request: web.Request) -> web.Response:
        """The moves this node leads and the bytes each replica they add still lacks (Kafka's
        ListPartitionReassignments has no field for it; `raftlog topic describe` and the
        decommission and rebalance progress read it here)."""
        moves = [
            {
                "topic": topic,
                "partition": index,
                "bytes_remaining": sum(lacking.values()),
                "adding": {str(replica): size for replica, size in sorted(lacking.items())},
            }
            for (topic, index), lacking in sorted(self._node.mover.to_copy().items())
        ]
        return web.json_response({"node_id": self._node.node_id, "moves": moves})

    async def _scrape(self, request: web.Request) -> web.Response:
        """Prometheus' scrape: its text format, or OpenMetrics when the Accept header asks."""
        assert self._metrics is not None  # the route exists only with metrics
        body, content_type = await self._metrics.exposition(request.headers.get("Accept", ""))
        return web.Response(body=body, headers={"Content-Type": content_type})

    def _partition(self, request: web.Request) -> Partition:
        try:
            key = (request.match_info["topic"], int(request.match_info["partition"]))
        except ValueError:
            raise web.HTTPBadRequest(text="partition must be a number\n") from None
        partition = self._node.partitions.get(key)
        if partition is None:
            raise web.HTTPNotFound(text=f"node {self._node.node_id} hosts no replica of {key}\n")
        return partition

    async def _epochs(self, request: web.Request) -> web.Response:
        return web.json_response(_epoch_state(self._node.node_id, self._partition(request)))

    async def _all_epochs(self, request: web.Request) -> web.Response:
        """Every local replica's epoch cache, for the epoch audit's replica agreement."""
        return web.json_response(
            {
                "node_id": self._node.node_id,
                "partitions": [
                    _epoch_state(self._node.node_id, p)
                    for _, p in sorted(self._node.partitions.items())
                ],
            }
        )

    async def _share_group(self, request: web.Request) -> web.Response:
        """A share group's state of each partition this node leads (`raftlog share
        describe` asks every node): start offset, records in flight by state, lag."""
        group_id = request.match_info["group"]
        partitions = []
        for key, p in sorted(self._node.partitions.items()):
            if not p.is_leader:
                continue
            view = self._node.share.view(group_id, key, p)
            if view is None:
                continue
            done = view.counts.get("ACKNOWLEDGED", 0) + view.counts.get("ARCHIVED", 0)
            partitions.append(
                {
                    "topic": key[0],
                    "partition": key[1],
                    "start_offset": view.start_offset,
                    "end_offset": view.end_offset,
                    "high_watermark": p.high_watermark,
                    "in_flight": view.counts,
                    # records not yet done: below the high watermark, past SPSO, not settled
                    "lag": max(0, p.high_watermark - view.start_offset - done),
                    "live": view.live,
                }
            )
        return web.json_response({"node_id": self._node.node_id, "partitions": partitions})

    async def _retire_voter(self, request: web.Request) -> web.Response:
        """Takes a node out of the controller's voters, a live observer taking its place
        first (`raftlog cluster decommission`; controller/voters.py)."""
        try:
            node_id = int(request.match_info["node"])
        except ValueError:
            raise web.HTTPBadRequest(text="node must be a number\n") from None
        try:
            done = await self._node.retire_controller_voter(node_id)
        except VoterRefused as refused:
            raise web.HTTPConflict(text=f"{refused}\n") from None
        except ControllerUnavailable as e:
            raise web.HTTPServiceUnavailable(text=f"{e}\n") from None
        return web.json_response({"done": done, "voters": sorted(self._node.controller.voters())})

    async def _history(self, request: web.Request) -> web.StreamResponse:
        """This node's history journal (JSON lines, schema in epoch/README.md)."""
        return web.FileResponse(
            self._node.history.path, headers={"Content-Type": "application/x-ndjson"}
        )

    async def _transfer(self, request: web.Request) -> web.Response:
        """Hands this partition's leadership to its most caught-up follower (an operator's
        move before maintenance, and how tests force a clean leader change)."""
        partition = self._partition(request)
        if not partition.is_leader:
            raise web.HTTPConflict(text=f"node {self._node.node_id} is not the leader\n")
        term = partition.group.term
        if not partition.group.transfer_leadership():
            raise web.HTTPConflict(text="transfer refused: no follower is caught up\n")
        for _ in range(50):
            await asyncio.sleep(0.1)
            if partition.group.term > term and partition.group.leader_id is not None:
                break
        leader = partition.group.leader_id
        return web.json_response(
            _epoch_state(self._node.node_id, partition)
            | {"leader": int(leader) if leader is not None else None}
        )
