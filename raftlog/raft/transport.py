"""pysyncobj's Transport seam: one group's view of the shared mesh."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pysyncobj.node import Node
from pysyncobj.transport import Transport

from raftlog.raft.mesh import Mesh


class GroupTransport(Transport):
    """Handed to SyncObj as `transport=`; every group on a node shares the node's mesh."""

    def __init__(
        self,
        mesh: Mesh,
        group_id: str,
        self_node: Node,
        other_nodes: set[Node],
        on_message: Callable[[], None],
    ) -> None:
        super().__init__(None, self_node, other_nodes)
        self._mesh = mesh
        self._group_id = group_id
        self._nodes = {n.id: n for n in other_nodes}
        self._on_message = on_message
        self.side_messages: dict[str, Callable[[Node, dict], None]] = {}

    def attach(self) -> None:
        """Joins the mesh once SyncObj has installed its callbacks on this transport."""
        self._mesh.register(self._group_id, self)

    # --- pysyncobj Transport ------------------------------------------------------------------

    def send(self, node: Node, message: dict) -> bool:
        if message.get("entries") and self._mesh.congested(node.id):
            # Raft tolerates a lost append: the follower answers with the index it lacks and
            # the leader resends from there once the connection has drained.
            return False
        return self._mesh.send(node.id, self._group_id, message)

    def destroy(self) -> None:
        self._mesh.unregister(self._group_id)

    # --- mesh Endpoint --------------------------------------------------------------------------

    def peer_up(self, peer_id: str) -> None:
        node = self._nodes.get(peer_id)
        if node is not None:
            self._onNodeConnected(node)

    def peer_down(self, peer_id: str) -> None:
        node = self._nodes.get(peer_id)
        if node is not None:
            self._onNodeDisconnected(node)

    def deliver(self, peer_id: str, message: dict) -> None:
        node = self._nodes.get(peer_id)
        if node is None:
            return
        side = self.side_messages.get(message.get("type"))
        if side is not None:
            side(node, message)
        else:
            self._onMessageReceived(node, message)
        self._on_message()

    # --- for the snapshotter --------------------------------------------------------------------

    def congested(self, node_id: str) -> bool:
        return self._mesh.congested(node_id)

    def send_side_message(self, node_id: str, message: dict) -> None:
        self._mesh.send(node_id, self._group_id, message)

    def nodes(self) -> set[Any]:
        return set(self._nodes.values())
