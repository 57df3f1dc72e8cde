"""pysyncobj's Transport seam: one group's view of the shared mesh."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from pysyncobj.node import Node
from pysyncobj.transport import Transport

from raftlog.raft.mesh import Mesh
from raftlog.raft.mesh_frames import Beat, Message

# Entry bytes a leader may have sent to one follower beyond what it acknowledged: enough to
# keep a follower busy for a round trip, small enough that groups sharing a connection
# do not wait long behind each other.
WINDOW_BYTES = 2 * 1024 * 1024

# An append_entries with these keys and no entries is a plain heartbeat (FORK.md, 11).
_HEARTBEAT_KEYS = frozenset(
    ("type", "term", "commit_index", "entries", "prevLogIdx", "prevLogTerm")
)


def as_beat(message: Message) -> Beat | None:
    """The compact form of the two messages every awake group sends each interval: a plain
    heartbeat [term, commit, prevLogIdx, prevLogTerm], or a follower's success answer
    [next index]. The mesh carries a turn's beats to a peer in one frame (Redpanda's
    heartbeat_manager), and the receiver takes them without pysyncobj's message handler
    and, unless they change something, without a tick."""
    kind = message.get("type")
    if kind == "append_entries":
        if (
            "prevLogIdx" in message
            and not message.get("entries")
            and message.keys() <= _HEARTBEAT_KEYS
        ):
            return [
                message["term"],
                message["commit_index"],
                message["prevLogIdx"],
                message["prevLogTerm"],
            ]
    elif kind == "next_node_idx" and message["success"] and not message["reset"]:
        return [message["next_node_idx"]]
    return None


def from_beat(beat: Beat) -> Message:
    """The message a beat stands for, for pysyncobj's handler."""
    if len(beat) == 1:
        return {"type": "next_node_idx", "next_node_idx": beat[0], "reset": False, "success": True}
    term, commit, prev_idx, prev_term = beat
    return {
        "type": "append_entries",
        "term": term,
        "commit_index": commit,
        "entries": [],
        "prevLogIdx": prev_idx,
        "prevLogTerm": prev_term,
    }


class InFlight:
    """Bytes of entries sent to one follower that it has not acknowledged. pysyncobj pushes
    entries with no limit; without one, one busy group fills the connection every group
    shares and starves the others' heartbeats."""

    def __init__(self) -> None:
        self._sent: deque[tuple[int, int]] = deque()  # (last index of a send, bytes sent so far)
        self._acked = 0  # bytes sent so far when the follower last acknowledged

    def admit(self, acked_index: int, first_index: int, size: int) -> bool:
        while self._sent and self._sent[0][0] <= acked_index:
            self._acked = self._sent.popleft()[1]
        # The leader went back (a follower's answer rewound it, or a connection dropped):
        # what was recorded from first_index on is being sent again, not still in flight.
        while self._sent and self._sent[-1][0] >= first_index:
            self._sent.pop()
        in_flight = self._sent[-1][1] - self._acked if self._sent else 0
        return in_flight == 0 or in_flight + size <= WINDOW_BYTES

    def sent(self, last_index: int, size: int) -> None:
        total = self._sent[-1][1] if self._sent else self._acked
        self._sent.append((last_index, total + size))


class GroupTransport(Transport):  # type: ignore[misc]  # pysyncobj ships no types
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
        self._windows = {n.id: InFlight() for n in other_nodes}
        self._last_sent = {n.id: 0.0 for n in other_nodes}
        self.heartbeat = 0.1
        self.match_index: Callable[[Node], int] = lambda node: 0
        self.skip_to_log_end: Callable[[Node], None] = lambda node: None
        self.compaction_floor: Callable[[], int] = lambda: 2**63
        # A peer came, went or fell silent: a quiet group wakes (FORK.md, 9).
        self.on_peer_change: Callable[[], None] = lambda: None
        self.side_messages: dict[str, Callable[[Node, Message], None]] = {}
        # The save of this group's term and vote its messages must follow (durability.py):
        # they are held here until it is on disk, in order. Other groups' frames and the
        # mesh's pings are not held behind it.
        self.state_seq: Callable[[], int] = lambda: 0
        self._held: list[tuple[int, str, Message | Beat]] = []
        # The fork's handlers of the two beats (FORK.md, 11): None means "use the full
        # handler", else whether the group has work for a tick.
        self.on_heartbeat: Callable[..., bool | None] = lambda node, *beat: None
        self.on_appended: Callable[[Node, int], bool | None] = lambda node, next_idx: None
        # Whether a peer is a voter of the group; any other connected node of the mesh is an
        # observer, which gets the log and never votes (FORK.md, 12).
        self.is_voter: Callable[[Node], bool] = lambda node: True

    def attach(self) -> None:
        """Joins the mesh once SyncObj has installed its callbacks on this transport."""
        self._mesh.register(self._group_id, self)

    # --- pysyncobj Transport ------------------------------------------------------------------

    def send(self, node: Node, message: Message) -> bool:
        entries = message.get("entries")
        now = time.monotonic()
        if entries:
            window = self._windows[node.id]
            size = sum(len(e[0]) for e in entries)
            if self._mesh.congested(node.id) or not window.admit(
                self.match_index(node), entries[0][1], size
            ):
                # Too much is in flight to this follower. Dropping the append is safe: the
                # follower's next answer moves the leader's nextIndex back to what it has.
                # pysyncobj would otherwise go on walking its whole backlog, one dropped
                # append at a time, so it is told everything was sent. The follower's
                # election timer still needs feeding: now and then the append goes out
                # without its entries, as a heartbeat.
                self.skip_to_log_end(node)
                if now - self._last_sent[node.id] < self.heartbeat / 2:
                    return False
                message = {k: v for k, v in message.items() if k != "entries"}
            else:
                window.sent(entries[-1][1], size)
        self._last_sent[node.id] = now
        beat = as_beat(message)
        return self._send(node.id, message if beat is None else beat)

    def _send(self, node_id: str, message: Message | Beat) -> bool:
        durability = self._mesh.durability
        need = self.state_seq()
        if durability is None or (need <= durability.durable and not self._held):
            return self._mesh.send(node_id, self._group_id, message)
        if not self._mesh.connected(node_id):
            return False
        if not self._held:
            durability.wait(need, self._release)
        self._held.append((need, node_id, message))
        return True

    def _release(self) -> None:
        """Sends the held messages whose save is durable; waits again for the rest."""
        durability = self._mesh.durability
        held, self._held = self._held, []
        for i, (need, node_id, message) in enumerate(held):
            if need > durability.durable:
                self._held = held[i:]
                durability.wait(need, self._release)
                return
            self._mesh.send(node_id, self._group_id, message)

    def destroy(self) -> None:
        self._mesh.unregister(self._group_id)

    def addNode(self, node: Node) -> None:  # noqa: N802 - pysyncobj's name
        """pysyncobj adds a voter (an observer promoted, or a node that joined)."""
        self._known(node.id)
        if self._mesh.connected(node.id):
            self._onNodeConnected(node)

    def dropNode(self, node: Node) -> None:  # noqa: N802
        """pysyncobj removes a voter: still a peer, it observes while connected."""

    def _known(self, peer_id: str) -> Node:
        node = self._nodes.get(peer_id)
        if node is None:
            node = self._nodes[peer_id] = Node(peer_id)
            self._windows[peer_id] = InFlight()
            self._last_sent[peer_id] = 0.0
        return node

    # --- mesh Endpoint --------------------------------------------------------------------------

    def peer_up(self, peer_id: str) -> None:
        """Every node the mesh connects (authenticated by the cluster secret) is a voter or
        an observer of the group."""
        node = self._known(peer_id)
        if self.is_voter(node):
            self._onNodeConnected(node)
        else:
            self._onReadonlyNodeConnected(node)
        self.on_peer_change()

    def peer_down(self, peer_id: str) -> None:
        node = self._nodes.get(peer_id)
        if node is not None:
            if self.is_voter(node):
                self._onNodeDisconnected(node)
            else:
                self._onReadonlyNodeDisconnected(node)
            self.on_peer_change()

    def peer_silent(self, peer_id: str) -> None:
        if peer_id in self._nodes:
            self.on_peer_change()

    def deliver(self, peer_id: str, message: Message | Beat) -> None:
        node = self._nodes.get(peer_id)
        if node is None:
            return
        if isinstance(message, list):
            if len(message) == 1:
                work = self.on_appended(node, message[0])
            else:
                work = self.on_heartbeat(node, *message)
            if work is None:
                self._onMessageReceived(node, from_beat(message))
            if work is not False:
                self._on_message()
            return
        side = self.side_messages.get(message.get("type", ""))
        if side is not None:
            side(node, message)
        else:
            self._onMessageReceived(node, message)
        self._on_message()

    # --- for the snapshotter --------------------------------------------------------------------

    def queued(self, node_id: str) -> int:
        return self._mesh.queued(node_id)

    def send_side_message(self, node_id: str, message: Message) -> None:
        self._send(node_id, message)

    def nodes(self) -> set[Any]:
        return set(self._nodes.values())
