"""Who leads each partition, in which term: every node's answer to Metadata.

A replica knows its own group's leader and term. A node that hosts no replica of a partition
learns it from the leaders, which announce their groups over the mesh. The term recorded is
always the term the leader itself was elected in (the epoch it fences clients against), and it
never goes down: a candidate's higher term is not an epoch until someone wins it, or clients
would send the leader an epoch it has never heard of and loop on UNKNOWN_LEADER_EPOCH.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from raftlog.raft.mesh import Mesh

GOSSIP = "leaders"
# A majority silent this long (four pings) and the node counts itself cut off.
CUT_OFF_AFTER = 1.0


@dataclass(frozen=True, slots=True)
class Leadership:
    leader: int
    term: int
    isr: tuple[int, ...]


class LeadershipDirectory:
    def __init__(self, node_id: int, mesh: Mesh) -> None:
        self._node_id = node_id
        self._mesh = mesh
        self._known: dict[str, Leadership] = {}
        self._led: dict[str, Leadership] = {}
        mesh.on_control(GOSSIP, self._gossip_received)
        mesh.on_peer_change.append(self._peer_changed)

    def observe(self, group: str, leader: int | None, term: int, isr: tuple[int, ...]) -> None:
        """A local replica's view: called whenever its leader or term changes."""
        if leader is None:
            self._led.pop(group, None)
            return
        info = Leadership(leader, term, isr)
        self._remember(group, info)
        if leader == self._node_id:
            # Only a change is told at once; announce() repeats everything every ten seconds.
            # Told again each second per partition, a node leading a thousand sent two
            # thousand frames a second while idle.
            if self._led.get(group) != info:
                self._led[group] = info
                self._mesh.broadcast(GOSSIP, {group: [leader, term, list(isr)]})
        else:
            self._led.pop(group, None)

    def forget(self, group: str) -> None:
        self._known.pop(group, None)
        self._led.pop(group, None)

    def not_hosted(self, group: str) -> None:
        """This node's replica of the group is gone but the group lives on elsewhere (moved
        off this node): it leads the group no more; another node's leadership stays known."""
        self._led.pop(group, None)
        known = self._known.get(group)
        if known is not None and known.leader == self._node_id:
            del self._known[group]

    def lookup(self, group: str) -> Leadership | None:
        return self._known.get(group)

    def alive(self, node_id: int) -> bool:
        return node_id == self._node_id or self._mesh.connected(str(node_id))

    def in_majority(self, members: Iterable[int]) -> bool:
        """Whether this node hears from a majority of `members` (itself included) within
        CUT_OFF_AFTER: one that does not can neither lead nor know who leads."""
        voters = set(members) | {self._node_id}
        heard = {int(p) for p in self._mesh.heard_from(CUT_OFF_AFTER)} & voters
        return len(heard) + 1 > len(voters) // 2

    def announce(self) -> None:
        """Periodic re-announcement, so a node that (re)connected learns every leader."""
        if self._led:
            self._mesh.broadcast(
                GOSSIP, {g: [i.leader, i.term, list(i.isr)] for g, i in self._led.items()}
            )

    def _remember(self, group: str, info: Leadership) -> None:
        known = self._known.get(group)
        if known is None or info.term >= known.term:
            self._known[group] = info

    def _gossip_received(self, peer: str, payload: dict) -> None:
        for group, (leader, term, isr) in payload.items():
            self._remember(group, Leadership(leader, term, tuple(isr)))

    def _peer_changed(self, peer: str, up: bool) -> None:
        if up and self._led:
            self._mesh.send_control(
                peer, GOSSIP, {g: [i.leader, i.term, list(i.isr)] for g, i in self._led.items()}
            )
