"""The controller's Raft group: a pysyncobj SyncObj on the node's mesh, ticked by the node's
ticker."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from pysyncobj import SyncObjConf
from pysyncobj.config import FAIL_REASON
from pysyncobj.node import Node

from raftlog.controller import compat
from raftlog.controller.journal import ControllerJournal
from raftlog.controller.syncobj_fork import SyncObj
from raftlog.controller.ticker import Ticker
from raftlog.controller.transport import GroupTransport
from raftlog.raft.mesh import Mesh
from raftlog.raft.timings import FIRST_ELECTION_ROUNDS, RaftTimings

compat.install()
log = logging.getLogger(__name__)

Callback = Callable[[Any, int], None]


class RaftGroup:
    def __init__(
        self,
        name: str,
        self_id: str,
        peer_ids: list[str],
        journal: ControllerJournal,
        mesh: Mesh,
        ticker: Ticker,
        timings: RaftTimings,
        *,
        snapshots: Any = None,
        dynamic_membership: bool = False,
        waits_for_opens: bool = True,
        voter: bool = True,
        factory: Callable[..., SyncObj] = SyncObj,
        on_change: Callable[[RaftGroup], None] | None = None,
    ) -> None:
        """peer_ids: the group's voters (this node among them if `voter`; else it observes:
        FORK.md 12)."""
        self.name = name
        self.self_id = self_id
        self.journal = journal
        self._ticker = ticker
        self._on_change = on_change
        self._seen: tuple[str | None, int, bool] = (None, 0, False)
        conf = SyncObjConf(
            autoTick=False,
            appendEntriesUseBatch=False,
            appendEntriesPeriod=timings.heartbeat,
            raftMinTimeout=timings.election_min,
            raftMaxTimeout=timings.election_max,
            leaderFallbackTimeout=timings.leader_fallback,
            appendEntriesBatchSizeBytes=timings.max_message_bytes,
            logCompactionMinEntries=timings.compaction_entries,
            logCompactionMinTime=timings.compaction_seconds * random.uniform(1.0, 1.5),
            journalFile=journal,
            fullDumpFile=snapshots,
            useFork=False,
            dynamicMembershipChange=dynamic_membership,
        )
        self_node = Node(self_id)
        others = {Node(p) for p in peer_ids if p != self_id}
        if others and mesh.durability is not None:
            journal.durable_through(mesh.durability)
        self.transport = GroupTransport(mesh, name, self_node, others, self.schedule)
        self.transport.state_seq = lambda: journal.state_seq
        self.obj = factory(self_node, others, conf=conf, transport=self.transport, voter=voter)
        self.transport.is_voter = lambda node: node in self.obj.otherNodes
        self.obj.quiesceAfter = timings.quiesce_after
        self.obj.peerContact = lambda node: mesh.last_heard(node.id)
        budget = ticker.elections
        take = budget.take if waits_for_opens else budget.take_unheld
        # A replica other than the first of a group that never had an election gives the
        # first one the next FIRST_ELECTION_ROUNDS election timeouts to win it (Redpanda's
        # voter priority, decaying the same way): three replicas of a new group standing at
        # once split the vote, and a thousand new groups took 24 s and six terms to lead.
        deferred = [0 if not others or peer_ids[0] == self_id else FIRST_ELECTION_ROUNDS]

        def allowed() -> bool:
            if deferred[0] and self.obj.raftCurrentTerm == 0 and not budget.held:
                deferred[0] -= 1
                return False
            return take()

        self.obj.electionAllowed = allowed
        compat.detach_poller(self.obj)
        if not voter:
            pass  # an observer never stands
        elif not others:
            compat.elect_now(self.obj)
        elif peer_ids[0] == self_id:
            # The first replica (Kafka's preferred leader; the controller spreads them over
            # the nodes) stands first after a start: a group that has just started has no
            # leader to wait for (PreVote and the others' leases keep it from disturbing one
            # that is alive), and with the others deferring to it (`allowed`), a thousand
            # new groups are not each contested by three candidates (fault suite, kill_all:
            # heal to first ack 2.0 -> 1.7 s median).
            compat.elect_after(
                self.obj, random.uniform(2 * timings.heartbeat, timings.election_min)
            )
        self.transport.match_index = lambda node: compat.match_index(self.obj, node)
        self.transport.skip_to_log_end = lambda node: compat.skip_to_log_end(self.obj, node)
        self.transport.heartbeat = timings.heartbeat
        self.transport.compaction_floor = self._compaction_floor
        self.transport.on_peer_change = self.wake
        self.transport.on_heartbeat = self.obj.onHeartbeat
        self.transport.on_appended = self.obj.onAppended
        self.transport.attach()
        ticker.add(self)

    # --- driving ---------------------------------------------------------------------------

    def tick(self) -> None:
        self.obj.doTick(0.0)
        if self.is_leader and not self.obj.otherNodes and compat.has_uncommitted(self.obj):
            # A group of one commits what it appended on its next tick, and no follower's
            # answer will come to trigger it: without this, every acks=all produce to a
            # single-replica partition waited for the 50 ms timer.
            self.schedule()
        seen = (self.leader_id, self.term, self.is_leader)
        if seen != self._seen:
            self._seen = seen
            if self._on_change is not None:
                self._on_change(self)
        self._ticker.set_due(self, self.obj.nextTimer())

    def schedule(self) -> None:
        self._ticker.schedule(self)

    def wake(self) -> None:
        """Ends the group's quiet: its timers run again from the next tick."""
        self.obj.unquiesce()
        self.schedule()

    def propose(self, command: bytes, callback: Callback | None) -> None:
        """Queues a command for the leader; the callback gets (result, FAIL_REASON) after the
        entry is committed and applied here, or a failure (a command wakes a quiet group)."""
        self.obj._applyCommand(command, callback)
        self.schedule()

    def transfer_leadership(self, callback: Callback | None = None) -> None:
        self.wake()
        self.obj.transferLeadership(callback=callback)

    def add_member(
        self, node_id: str, callback: Callback | None = None, at_most: int | None = None
    ) -> None:
        """Adds a node to this group (pysyncobj forwards it to the leader); with `at_most`,
        only if the leader's voters are fewer when it appends the change (FORK.md 13)."""
        self.wake()
        self.obj.addNodeToCluster(Node(node_id), callback=callback, atMost=at_most)

    def remove_member(self, node_id: str, callback: Callback | None = None) -> None:
        """Takes a voter out of this group (forwarded to the leader; a leader asked to remove
        itself refuses and hands over, FORK.md 12)."""
        self.wake()
        self.obj.removeNodeFromCluster(Node(node_id), callback=callback)

    def members(self) -> set[str]:
        """The voters, as this node's log has them."""
        voters: set[str] = self.obj.voterIds
        return voters

    def observers(self) -> set[str]:
        """The connected nodes that follow the log without voting."""
        return {n.id for n in self.obj.readonlyNodes}

    @property
    def is_voter(self) -> bool:
        voter: bool = self.obj.isVoter
        return voter

    def force_compaction(self) -> None:
        self.obj.forceLogCompaction()

    def close(self) -> None:
        self._ticker.remove(self)
        self.obj.destroy()

    # --- state -------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        leader: bool = self.obj._isLeader()
        return leader

    @property
    def leader_id(self) -> str | None:
        leader = self.obj._getLeader()
        return leader.id if leader is not None else None

    @property
    def quiet(self) -> bool:
        quiet: bool = self.obj.isQuiesced()
        return quiet

    @property
    def term(self) -> int:
        term: int = self.obj.raftCurrentTerm
        return term

    @property
    def commit_index(self) -> int:
        index: int = self.obj.raftCommitIndex
        return index

    def _compaction_floor(self) -> int:
        """The lowest index a connected follower still needs, if this node leads."""
        if not self.is_leader:
            return 2**63
        matches = self.match_indexes()
        connected = self.connected_peers()
        return min((matches.get(p, 0) for p in connected), default=2**63)

    def match_indexes(self) -> dict[str, int]:
        return compat.match_indexes(self.obj)

    def connected_peers(self) -> set[str]:
        return {n.id for n in self.transport.nodes() if self.obj.isNodeConnected(n)}


def failure_name(reason: int) -> str:
    reasons: dict[str, object] = vars(FAIL_REASON)
    for name, value in reasons.items():
        if value == reason and not name.startswith("_"):
            return name
    return str(reason)
