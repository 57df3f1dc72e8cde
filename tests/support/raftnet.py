"""An in-process network for Raft tests that need exact message orders under faults.

Messages cross it as they cross the mesh (msgpack, with the mesh's encoder for lazy journal
objects) and are delivered in order when the test says so; any direction of any link can
drop them, and a filter can drop chosen kinds. Time is a `Clock` the test advances and
patches in for the Raft core's `monotonicTime`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import msgpack
from pysyncobj.node import Node
from pysyncobj.transport import Transport

from raftlog.raft.mesh import SILENT_AFTER, _encode_default
from raftlog.raft.transport import from_beat

Filter = Callable[[str, str, dict], bool]  # (source, destination, message) -> drop it


def message_type(frame: dict) -> str | None:
    """The Raft message type a NetMesh frame carries (a beat is named by what it stands for)."""
    message = frame.get("message")
    if isinstance(message, list):
        message = from_beat(message)
    return message.get("type") if message is not None else None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Net:
    def __init__(self, ids: tuple[str, ...], clock: Clock | None = None) -> None:
        self.ids = ids
        self.clock = clock or Clock()
        self.heard: dict[tuple[str, str], float] = {}  # (source, dest) -> last arrival
        self.queue: deque[tuple[str, str, dict]] = deque()
        self.blocked: set[tuple[str, str]] = set()
        self.drop: Filter | None = None
        self._receivers: dict[str, Callable[[str, dict], None]] = {}

    def attach(self, node_id: str, receive: Callable[[str, dict], None]) -> None:
        self._receivers[node_id] = receive

    def send(self, source: str, dest: str, message: Any) -> None:
        wire = msgpack.packb(message, default=_encode_default, use_bin_type=True)
        self.queue.append((source, dest, msgpack.unpackb(wire, raw=False, strict_map_key=False)))

    def isolate(self, node: str, outgoing: bool = True, incoming: bool = True) -> None:
        for other in self.ids:
            if other != node:
                if outgoing:
                    self.blocked.add((node, other))
                if incoming:
                    self.blocked.add((other, node))

    def heal(self) -> None:
        self.blocked.clear()
        self.drop = None

    def deliver(self) -> int:
        """Delivers what is queued (and what that sends in turn); returns how many arrived."""
        delivered = 0
        while self.queue:
            source, dest, message = self.queue.popleft()
            if (source, dest) in self.blocked:
                continue
            if self.drop is not None and self.drop(source, dest, message):
                continue
            self.heard[source, dest] = self.clock()
            self._receivers[dest](source, message)
            delivered += 1
        return delivered


class NetTransport(Transport):
    """pysyncobj's Transport seam on the Net, for tests of the bare Raft core."""

    def __init__(self, net: Net, self_id: str) -> None:
        self._net = net
        self._self_id = self_id
        self._peers = {i: Node(i) for i in net.ids if i != self_id}
        super().__init__(None, Node(self_id), set(self._peers.values()))
        net.attach(self_id, self.receive)

    def connect_all(self) -> None:
        for node in self._peers.values():
            self._onNodeConnected(node)

    def send(self, node: Node, message: dict) -> bool:
        self._net.send(self._self_id, node.id, message)
        return True

    def receive(self, source: str, message: dict) -> None:
        self._onMessageReceived(self._peers[source], message)


class NetMesh:
    """The part of raftlog.raft.mesh.Mesh a Raft group uses, on the Net: every peer is
    connected (faults are the Net's), nothing is ever congested. keepalive() is the mesh's
    ping round: it pings every peer and tells the groups of a peer that fell silent. Raft
    state is saved as each group saves it (no batches)."""

    durability = None

    def __init__(self, net: Net, self_id: str) -> None:
        self._net = net
        self._self_id = self_id
        self._endpoints: dict[str, Any] = {}
        self._silent: set[str] = set()
        self._peers = [p for p in net.ids if p != self_id]
        for peer in self._peers:
            net.heard[peer, self_id] = net.clock()
        net.attach(self_id, self._receive)

    def keepalive(self) -> None:
        now = self._net.clock()
        for peer in self._peers:
            silent = now - self._net.heard[peer, self._self_id] > SILENT_AFTER
            if silent and peer not in self._silent:
                for endpoint in list(self._endpoints.values()):
                    endpoint.peer_silent(peer)
            self._silent.discard(peer)
            if silent:
                self._silent.add(peer)
            self._net.send(self._self_id, peer, {"ping": True})

    def last_heard(self, peer_id: str) -> float | None:
        return self._net.heard[peer_id, self._self_id]

    def register(self, group_id: str, endpoint: Any) -> None:
        self._endpoints[group_id] = endpoint
        for peer in self._net.ids:
            if peer != self._self_id:
                endpoint.peer_up(peer)

    def unregister(self, group_id: str) -> None:
        self._endpoints.pop(group_id, None)

    def send(self, peer_id: str, group_id: str, message: Any) -> bool:
        self._net.send(self._self_id, peer_id, {"group": group_id, "message": message})
        return True

    def connected(self, peer_id: str) -> bool:
        return True

    def congested(self, peer_id: str) -> bool:
        return False

    def queued(self, peer_id: str) -> int:
        return 0

    def _receive(self, source: str, frame: dict) -> None:
        if "ping" in frame:
            return
        endpoint = self._endpoints.get(frame["group"])
        if endpoint is not None:
            endpoint.deliver(source, frame["message"])
