"""An in-process network for Raft tests that need exact message orders under faults.

Messages cross it as they cross the mesh (msgpack, with the mesh's encoder for lazy journal
objects) and are delivered in order when the test says so; any direction of any link can
drop them, and a filter can drop chosen kinds. Time is a `Clock` the test advances (and
patches in for the controller's pysyncobj core, `monotonicTime`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import msgpack
from pysyncobj.node import Node
from pysyncobj.transport import Transport

from raftlog.raft.driver import decode
from raftlog.raft.durability import Durability
from raftlog.raft.keepalive import PING_INTERVAL, find, heard_at, hold_ago, judges, last_hold
from raftlog.raft.mesh_frames import encode_default

Filter = Callable[[str, str, dict], bool]  # (source, destination, message) -> drop it


def message_types(frame: dict) -> set[str]:
    """The Raft message types (raft/core/values.py's MsgType values) a NetMesh frame carries."""
    return {decode(item, 0, 0)[1].type.value for item in frame.get("core", ())}


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
        wire = msgpack.packb(message, default=encode_default, use_bin_type=True)
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


class TickedCluster:
    """In-process pysyncobj replicas on one Net: `replicas` maps ids to objects whose `obj`
    is the SyncObj. Time moves only when a test steps it."""

    clock: Clock
    net: Net
    replicas: dict[str, Any]

    def step(self, seconds: float = 0.05) -> None:
        """Advances time and lets every replica tick and every message arrive."""
        self.clock.now += seconds
        for _ in range(20):
            for replica in self.replicas.values():
                replica.obj.doTick(0.0)
            if not self.net.deliver():
                break

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds / 0.05)):
            self.step()


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
    """What a node's Raft driver and snapshot installs use of raftlog.raft.mesh.Mesh, on the
    Net: every peer is connected (faults are the Net's). keepalive() is the mesh's ping
    round: it pings every peer and tells the driver of a peer that fell silent, as the
    mesh's keepalive finds it (raft/keepalive.py); a node whose rounds stop for over two
    ping intervals is held, and its silences and `hold_ago` say so as the mesh's do. Raft state
    saves are written in the loop's thread (Durability(inline=True)) unless a test brings its
    own `durability`."""

    def __init__(self, net: Net, self_id: str, durability: Durability | None = None) -> None:
        self.durability = durability or Durability(inline=True)
        self.on_peer_change: list[Callable[[str, bool], None]] = []
        self.on_peer_silent: list[Callable[[str], None]] = []
        self._net = net
        self._self_id = self_id
        self._core: Callable[[str, list[Any]], None] | None = None
        self._controls: dict[str, Callable[[str, Any], None]] = {}
        self._silent: set[str] = set()
        self._peers = [p for p in net.ids if p != self_id]
        for peer in self._peers:
            net.heard[peer, self_id] = net.clock()
        net.attach(self_id, self._receive)
        self._last_round = net.clock()
        self._hold = (0.0, 0.0)

    def keepalive(self) -> None:
        now = self._net.clock()
        judge = judges(now, self._last_round, PING_INTERVAL)
        self._hold = last_hold(now, self._last_round, self._hold)
        self._last_round = now
        for peer in self._peers:
            found = find(now, self._net.heard[peer, self._self_id], peer in self._silent, judge)
            if found.newly_silent:
                for notify in self.on_peer_silent:
                    notify(peer)
            self._silent.discard(peer)
            if found.silent:
                self._silent.add(peer)
            self._net.send(self._self_id, peer, {"ping": True})

    def silences(self) -> dict[str, float]:
        now = self._net.clock()
        hold = last_hold(now, self._last_round, self._hold)
        return {p: now - heard_at(self._net.heard[p, self._self_id], hold) for p in self._peers}

    def heard_from(self, within: float) -> set[str]:
        return {p for p, silent in self.silences().items() if silent <= within}

    def loop_held(self, seconds: float) -> None:
        now = self._net.clock()
        self._hold = (now - seconds, now)

    def hold_ago(self) -> tuple[float, float]:
        now = self._net.clock()
        return hold_ago(now, last_hold(now, self._last_round, self._hold))

    def send_core(self, peer_id: str, items: list[Any]) -> bool:
        self._net.send(self._self_id, peer_id, {"core": items})
        return True

    def on_core(self, handler: Callable[[str, list[Any]], None]) -> None:
        self._core = handler

    def send_control(self, peer_id: str, kind: str, payload: Any) -> None:
        self._net.send(self._self_id, peer_id, {"control": kind, "payload": payload})

    def on_control(self, kind: str, handler: Callable[[str, Any], None]) -> None:
        self._controls[kind] = handler

    def _receive(self, source: str, frame: dict) -> None:
        if "core" in frame and self._core is not None:
            self._core(source, frame["core"])
        elif "control" in frame:
            handler = self._controls.get(frame["control"])
            if handler is not None:
                handler(source, frame["payload"])
