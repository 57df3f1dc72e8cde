"""The controller: cluster metadata replicated by a Raft group of a few voters (3 by default,
controller/voters.py) that every other node follows as an observer.

Like Redpanda's raft0, it holds what every node must agree on: which nodes exist and where
their Kafka listeners are, which topics exist, their ids, replica assignments and configs, the
configs of groups, and the ACLs.
Decisions that depend on the current state (does the topic already exist?) are taken when a
command is applied, so two nodes proposing at once cannot both win.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pysyncobj.config import FAIL_REASON

from raftlog.api.values import AclChange
from raftlog.common.errors import ErrorCode
from raftlog.common.limits import MAX_CONFIGURED_GROUPS, MAX_RECORDS_PER_USER_OP
from raftlog.controller import compat, moves, voters
from raftlog.controller.group import RaftGroup, failure_name
from raftlog.controller.journal import ControllerJournal
from raftlog.controller.syncobj_fork import SyncObj, replicated
from raftlog.controller.ticker import Ticker
from raftlog.raft.mesh import Mesh
from raftlog.raft.timings import RaftTimings
from raftlog.security.acl import AclBindingFilter, AclRefused
from raftlog.security.acl_index import AclIndex, Acls
from raftlog.security.scram import MAX_USERS
from raftlog.storage.log import TruncateResult

log = logging.getLogger(__name__)

GROUP_NAME = "__controller"
ADMIT_RETRY = 1.0  # seconds between a joining node's admission checks (Controller.admit)
EXISTS = "exists"
UNKNOWN = "unknown"


class ControllerUnavailable(Exception):
    """No controller leader could commit the command in time."""


class ControllerMachine(SyncObj):
    """pysyncobj state machine. Every attribute set after SyncObj.__init__ is state: it is
    what pysyncobj pickles into its dump at compaction."""

    def __init__(
        self, self_node: Any, other_nodes: Any, *, on_apply: Callable[[], None], **kwargs: Any
    ) -> None:
        self._on_apply = on_apply
        # Not state either: how many applied commands changed `topics`, in place or by adding
        # or removing one (ClusterView keeps each topic's TopicInfo until this moves; a
        # snapshot's topics are new dicts, which it tells by their identity).
        self.topics_version = 0
        # Not state (set before SyncObj.__init__): the ACLs by resource, kept with `acls`.
        self._acl_index = AclIndex(lambda: self.acls)
        super().__init__(self_node, other_nodes, **kwargs)
        self.cluster_id = ""
        self.next_producer_id = 0
        self.nodes: dict[int, dict[str, Any]] = {}
        self.topics: dict[str, dict[str, Any]] = {}
        # Each group's explicit configs (raftlog.config.group_config). A dump written before group
        # configs existed lacks the key; loading it leaves this empty.
        self.group_configs: dict[str, dict[str, str]] = {}
        # Share group -> how often it was deleted (DeleteGroups): partition states written
        # under an older count belong to a deleted group and are dropped (raftlog/share).
        self.share_incarnations: dict[str, int] = {}
        # User -> mechanism -> ScramCredential.to_record() (raftlog/security/scram.py): salted
        # keys only, never a password. A user's mapping is replaced on change, never changed.
        self.scram_users: dict[str, dict[str, list]] = {}

        # The ACL bindings (raftlog.security.acl.AclBinding as plain tuples), in creation order,
        # changed in place through _acl_index. A dump from before ACLs lacks the key: none.
        self.acls: Acls = {}

    def _topics_changed(self) -> None:
        """Every command that changes `topics` ends here: the views see topics_version move,
        and the node reconciles its replicas."""
        self.topics_version += 1
        self._on_apply()

    @replicated
    def init_cluster(self, cluster_id: str) -> str:
        if not self.cluster_id:
            self.cluster_id = cluster_id
        self._on_apply()
        return self.cluster_id

    @replicated
    def allocate_producer_ids(self, count: int) -> int:
        """A block of producer ids no other node will hand out (Kafka's KIP-730)."""
        first = self.next_producer_id
        self.next_producer_id += count
        return first

    @replicated
    def register_node(
        self,
        node_id: int,
        host: str,
        port: int,
        rack: str | None,
        raft: list,
        endpoints: dict[str, list] | None = None,
    ) -> None:
        """host and port: the node's first listener; endpoints: every listener's advertised
        address by listener name (a node registered before listeners existed has none)."""
        self.nodes[node_id] = {
            "host": host,
            "port": port,
            "rack": rack,
            "raft": raft,
            "endpoints": dict(endpoints or {}),
        }
        self._on_apply()

    @replicated
    def create_topic(
        self,
        name: str,
        topic_id: str,
        assignments: list[list[int]],
        configs: dict[str, str],
        internal: bool,
    ) -> str | None:
        if name in self.topics:
            return EXISTS
        self.topics[name] = {
            "id": topic_id,
            "partitions": assignments,
            "configs": dict(configs),
            "internal": internal,
        }
        self._topics_changed()
        return None

    @replicated
    def delete_topic(self, name: str) -> str | None:
        if self.topics.pop(name, None) is None:
            return UNKNOWN
        self._topics_changed()
        return None

    @replicated
    def add_partitions(self, name: str, count: int, new_assignments: list[list[int]]) -> str | None:
        topic = self.topics.get(name)
        if topic is None:
            return UNKNOWN
        if len(topic["partitions"]) + len(new_assignments) != count:
            return "stale"  # someone else changed the partition count first
        topic["partitions"] = topic["partitions"] + new_assignments
        self._topics_changed()
        return None

    @replicated
    def set_topic_configs(self, name: str, configs: dict[str, str]) -> str | None:
        topic = self.topics.get(name)
        if topic is None:
            return UNKNOWN
        topic["configs"] = dict(configs)
        self._topics_changed()
        return None

    # pysyncobj numbers replicated methods in name order and journals a command by its number,
    # so a new one must sort after every older one: a journal written before it was added
    # would otherwise replay as the wrong commands (tests/unit/test_group_config.py pins it).
    @replicated
    def store_group_configs(self, group_id: str, configs: dict[str, str]) -> str | None:
        """Replaces a group's explicit configs; none left removes the group's entry. The group
        need not exist: as in Kafka, its configs are kept apart from it. A new group past the
        cluster's cap stores nothing; the answer says why (None when stored)."""
        refusal = group_configs_refusal(self.group_configs, group_id, configs)
        if refusal is not None:
            return refusal
        if configs:
            self.group_configs[group_id] = dict(configs)
        else:
            self.group_configs.pop(group_id, None)
        self._on_apply()
        return None

    @replicated
    def store_share_group_deletion(self, group_id: str) -> int:
        """A share group was deleted: its incarnation moves on (a name sorting after every
        older command, as above)."""
        incarnation = self.share_incarnations.get(group_id, 0) + 1
        self.share_incarnations[group_id] = incarnation
        self._on_apply()
        return incarnation

    @replicated
    def store_user_scram_credentials(
        self, deletions: list[list[str]], upsertions: list[list]
    ) -> dict[str, tuple[ErrorCode, str]]:
        """Deletions ([user, mechanism]) and upsertions ([user, credential record]) checked by
        the handler. Returns the users refused (user -> error, message), none of whose changes
        apply, as in Kafka: a user whose deletion finds nothing (RESOURCE_NOT_FOUND), and
        every user of a command that would take the cluster past scram.MAX_USERS
        (POLICY_VIOLATION), which then applies nothing. Judged here, on every node alike, so
        two concurrent requests cannot both squeeze in. A command costs what it changes: each
        user's mapping is replaced, never changed in place, so a shallow copy of scram_users
        can be read in a thread (raftlog/security/users.py)."""
        refused = {
            name: (
                ErrorCode.resource_not_found,
                f"Attempt to delete a user credential that does not exist: {mechanism}",
            )
            for name, mechanism in deletions
            if mechanism not in self.scram_users.get(name, {})
        }
        changed: dict[str, dict[str, list]] = {}
        for name, mechanism in deletions:
            if name not in refused:
                changed.setdefault(name, dict(self.scram_users.get(name, {}))).pop(mechanism, None)
        for name, record in upsertions:
            if name not in refused:
                credentials = changed.setdefault(name, dict(self.scram_users.get(name, {})))
                credentials[record[0]] = list(record)
        added = sum(bool(creds) - (name in self.scram_users) for name, creds in changed.items())
        if added > 0 and len(self.scram_users) + added > MAX_USERS:
            full = (
                ErrorCode.policy_violation,
                f"The cluster holds at most {MAX_USERS} SCRAM users: it has "
                f"{len(self.scram_users)} and this request adds {added}",
            )
            return {**refused, **dict.fromkeys(changed, full)}
        for name, credentials in changed.items():
            if credentials:
                self.scram_users[name] = credentials
            else:
                del self.scram_users[name]
        return refused

    # (ACL changes leave replicas alone: no _on_apply, no reconcile pass.)
    @replicated
    def update_acls_create(self, bindings: list[tuple[Any, ...]]) -> AclChange:
        """Adds ACL bindings (CreateAcls; raftlog.security.acl_index.AclIndex.create): all, or none
        if the cluster would hold more than its bound."""
        try:
            self._acl_index.create(bindings)
        except AclRefused as refused:
            return AclChange(refused.error, refused.message)
        return AclChange()

    @replicated
    def update_acls_delete(self, filters: list[tuple[Any, ...]]) -> AclChange:
        """Deletes the bindings the filters match (DeleteAcls; AclIndex.delete), each filter's
        matches in the result; none if they match more than the bound."""
        try:
            matched = self._acl_index.delete(AclBindingFilter(*f) for f in filters)
        except AclRefused as refused:
            return AclChange(refused.error, refused.message)
        return AclChange(deleted=tuple(tuple(found) for found in matched))

    # (A name sorting after every older command, as above.)
    @replicated
    def update_topics_create(self, topics: list[list[Any]]) -> list[str | None]:
        """Creates many topics in one command ([name, topic id, assignments, configs,
        internal] each, as create_topic takes them): one Raft entry and one pass over the
        replicas on every node, instead of one of each per topic (a request of thousands of
        topics took one commit and one reconcile each). Each topic alone is created or not
        (EXISTS); the result is each one's outcome, in order."""
        outcomes: list[str | None] = []
        for name, topic_id, assignments, configs, internal in topics:
            if name in self.topics:
                outcomes.append(EXISTS)
                continue
            self.topics[name] = {
                "id": topic_id,
                "partitions": assignments,
                "configs": dict(configs),
                "internal": internal,
            }
            outcomes.append(None)
        if any(outcome is None for outcome in outcomes):
            self._topics_changed()
        return outcomes

    # Partition reassignments (raftlog/controller/moves.py). Their public names are
    # alter_reassignments and finish_reassignment below: replicated under these, which sort
    # after every older command's, so a journal written before them keeps its numbers.
    @replicated
    def update_topics_reassign(self, topics: list[list[Any]]) -> list[list[str | None]]:
        """Starts, replaces or cancels moves ([topic name, [[index, target or None], ...]]
        each): one Raft entry and one pass over the replicas for a whole request. Each entry
        is judged alone (moves.change); the result is each one's refusal or None, in order.
        At most MAX_RECORDS_PER_USER_OP entries in all, or every one is refused."""
        if not isinstance(topics, list) or not all(
            isinstance(t, list | tuple) and len(t) == 2 and isinstance(t[1], list | tuple)
            for t in topics
        ):
            return []
        if sum(len(changes) for _, changes in topics) > MAX_RECORDS_PER_USER_OP:
            return [[moves.INVALID + "Too many partitions."] * len(c) for _, c in topics]
        outcomes: list[list[str | None]] = []
        changed = False
        for name, changes in topics:
            topic = self.topics.get(name) if isinstance(name, str) else None
            answers: list[str | None] = []
            for entry in changes:
                if topic is None or not isinstance(entry, list | tuple) or len(entry) != 2:
                    answers.append(moves.UNKNOWN)
                    continue
                refusal, moved = moves.change(topic, entry[0], entry[1], self.nodes)
                answers.append(refusal)
                changed |= moved
            outcomes.append(answers)
        if changed:
            self._topics_changed()
        return outcomes

    @replicated
    def update_topics_reassign_done(self, name: str, index: int, target: list[int]) -> str | None:
        """See finish_reassignment."""
        topic = self.topics.get(name) if isinstance(name, str) else None
        if topic is None:
            return moves.UNKNOWN
        outcome = moves.finish(topic, index, target)
        if outcome is None:
            self._topics_changed()
        return outcome

    def alter_reassignments(
        self, name: str, changes: list[tuple[int, list[int] | None]], **kwargs: Any
    ) -> None:
        """AlterPartitionReassignments of one topic's partitions, as update_topics_reassign
        (the callback, if any, gets this topic's list of outcomes)."""
        callback = kwargs.pop("callback", None)
        if callback is not None:
            kwargs["callback"] = lambda result, reason: callback(
                result[0] if reason == FAIL_REASON.SUCCESS and result else result, reason
            )
        self.update_topics_reassign([[name, [list(c) for c in changes]]], **kwargs)

    def finish_reassignment(self, name: str, index: int, target: list[int], **kwargs: Any) -> None:
        """Called by the partition's leader once its group's Raft configuration is `target`:
        if a move to exactly that target is in progress, the partition's replicas become the
        target and the move is over (None); otherwise nothing changes and the outcome is
        moves.STALE (moves.UNKNOWN: no such topic or partition)."""
        self.update_topics_reassign_done(name, index, list(target), **kwargs)

    def acl_index(self) -> AclIndex:
        """The ACLs by resource, for this node's authorizer (rebuilt if a snapshot replaced
        them)."""
        return self._acl_index.synced()


def group_configs_refusal(
    stored: dict[str, dict[str, str]], group_id: str, configs: dict[str, str]
) -> str | None:
    """Why `configs` may not be stored for `group_id`: a group not configured yet, when
    MAX_CONFIGURED_GROUPS are. Changing or clearing a configured group is always allowed."""
    if not configs or group_id in stored or len(stored) < MAX_CONFIGURED_GROUPS:
        return None
    return (
        f"Too many groups with configs: the cluster holds the configs of at most "
        f"{MAX_CONFIGURED_GROUPS} groups"
    )


class _NoLog:
    """The controller journal keeps commands inline; it has no segment log and no listener
    duties beyond what pysyncobj does itself."""

    def admit(self, batches: memoryview, command: object) -> memoryview:
        return batches

    def appended(self, entry: object, command: object) -> None:
        pass

    def compacting(self) -> None:
        pass

    def truncated(self, removed: list, result: TruncateResult | None, reason: str) -> None:
        pass

    def committed(self, commit_index: int, high_watermark: int) -> None:
        pass


class Controller:
    def __init__(
        self,
        node_id: int,
        node_ids: list[int],
        directory: Path,
        mesh: Mesh,
        ticker: Ticker,
        timings: RaftTimings,
        on_change: Callable[[], None],
        quorum_size: int = 3,
    ) -> None:
        """node_ids: the config's nodes; the voters are drawn from them
        (voters.initial_voters) until the log changes them."""
        directory.mkdir(parents=True, exist_ok=True)
        self._on_change = on_change
        self.quorum_size = quorum_size
        initial = voters.initial_voters(directory, node_ids, quorum_size)
        journal = ControllerJournal(directory / "raft", None, _NoLog())
        self.group = RaftGroup(
            GROUP_NAME,
            str(node_id),
            [str(n) for n in initial],
            journal,
            mesh,
            ticker,
            timings,
            snapshots=str(directory / "dump"),
            dynamic_membership=True,
            waits_for_opens=False,
            voter=node_id in initial,
            factory=functools.partial(ControllerMachine, on_apply=self._applied),
            on_change=lambda _group: on_change(),
        )
        self.state: ControllerMachine = self.group.obj

    def _applied(self) -> None:
        self._on_change()

    @property
    def leader_id(self) -> int:
        leader = self.group.leader_id
        return int(leader) if leader is not None else -1

    async def call(self, method: str, *args: Any, timeout: float = 10.0) -> Any:
        """Proposes a replicated call (from any node: pysyncobj forwards it to the leader) and
        returns its result once applied here."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        def done(result: Any, reason: int) -> None:
            if not future.done():
                loop.call_soon(_settle, future, result, reason)

        getattr(self.state, method)(*args, callback=done)
        self.group.schedule()
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise ControllerUnavailable(
                f"{method}: no controller commit within {timeout}s"
            ) from None

    async def add_member(self, node_id: int, timeout: float = 10.0) -> None:
        """Makes a node that joined a voting member of the controller group if the voters
        are fewer than quorum_size; the leader judges that on its own log as it appends the
        change, so no older view of the set decides (FORK.md 13)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        def done(result: Any, reason: int) -> None:
            if not future.done():
                loop.call_soon(_settle, future, result, reason)

        self.group.add_member(str(node_id), done, at_most=self.quorum_size)
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise ControllerUnavailable(
                f"adding node {node_id}: no commit within {timeout}s"
            ) from None

    async def admit(self, node_id: int, timeout: float = 300.0) -> None:
        """A node that joined becomes a voter while the voters are fewer than quorum_size;
        otherwise it observes (controller/voters.py). Every node that saw it join asks, and
        asks again (the leader refuses while a change is uncommitted, a new leader before
        its first entry commits) until its own log has the node a voter or the set full,
        committed: whichever node leads by then decides, once (add_member)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            if voters.admits(node_id, self.voters(), self.quorum_size):
                try:
                    await self.add_member(node_id)
                    continue
                except ControllerUnavailable:
                    pass  # refused or not committed in time; judged again
            elif not compat.has_uncommitted(self.state):
                return
            await asyncio.sleep(ADMIT_RETRY)
        log.warning("node %d could not be added to the controller's voters", node_id)

    def voters(self) -> set[int]:
        """The controller quorum's voters, as this node's log has them."""
        return {int(v) for v in self.group.members()}

    def racks(self) -> dict[int, str | None]:
        """Each registered node's broker.rack."""
        return {n: info.get("rack") for n, info in self.state.nodes.items()}

    async def spread_voters(self, live: set[int], timeout: float = 30.0) -> list[int] | None:
        """On the leader: one swap that puts the voters on one more rack (voters.spread_plan),
        if one is due; the voters after it, or None."""
        if not self.group.is_leader:
            return None
        plan = voters.spread_plan(
            self.voters(), self.racks(), live, self.quorum_size, int(self.group.self_id)
        )
        for kind, target in plan:
            await self.change_voters(kind, target, timeout)
        return sorted(self.voters()) if plan else None

    async def change_voters(self, kind: str, node_id: int, timeout: float = 30.0) -> None:
        """Adds ("add") or removes ("remove") one voter and returns once the change is
        committed and applied here. The leader takes one change at a time, and none before
        its term's first entry committed; a leader asked to remove itself hands over first:
        each is refused meanwhile, and asked again until `timeout`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            present = node_id in self.voters()
            if present == (kind == "add") and not compat.has_uncommitted(self.state):
                return
            future: asyncio.Future = loop.create_future()

            def done(result: Any, reason: int, future: asyncio.Future = future) -> None:
                if not future.done():
                    loop.call_soon(_settle, future, result, reason)

            if present != (kind == "add"):
                change = self.group.add_member if kind == "add" else self.group.remove_member
                change(str(node_id), done)
            else:
                future.set_result(None)  # made; wait for it to commit here
            left = deadline - loop.time()
            if left <= 0:
                raise ControllerUnavailable(f"{kind} voter {node_id}: not done within {timeout}s")
            try:
                await asyncio.wait_for(future, left)
            except ControllerUnavailable:
                pass  # refused for now (see above); asked again
            except TimeoutError:
                raise ControllerUnavailable(
                    f"{kind} voter {node_id}: not done within {timeout}s"
                ) from None
            await asyncio.sleep(0.2)

    async def retire_voter(self, node_id: int, live: set[int], timeout: float = 60.0) -> list[str]:
        """Takes a node out of the controller's voters (voters.retire_plan: an observer of
        `live` takes its place first); returns what was done, one line each."""
        done = []
        racks = self.racks()
        plan = voters.retire_plan(node_id, self.voters(), live, self.quorum_size, racks)
        for kind, target in plan:
            await self.change_voters(kind, target, timeout)
            done.append(
                f"node {target} is a controller voter now"
                if kind == "add"
                else f"node {node_id} is no longer a controller voter"
            )
        return done

    def close(self) -> None:
        self.group.close()


def _settle(future: asyncio.Future, result: Any, reason: int) -> None:
    if future.done():
        return
    if reason == FAIL_REASON.SUCCESS:
        future.set_result(result)
    else:
        future.set_exception(ControllerUnavailable(failure_name(reason)))
