"""The forked pysyncobj core that runs the controller group (controller/syncobj_fork.py,
raftlog/raft/FORK.md), driven step by step.

Three SyncObj replicas with the controller's journal exchange messages through an in-process
network that can drop any direction of any link; time is a clock the test advances. Each
test is a fault the network suite found or could find (when the fork still ran partitions
too), reduced to its message order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pysyncobj import SyncObjConf
from pysyncobj.config import FAIL_REASON
from pysyncobj.node import Node
from support.controller_machine import start_controller, tick
from support.journal import RecordingListener
from support.raftnet import Clock, Net, NetTransport, TickedCluster
from support.wire import make_batch

import raftlog.controller as controller_module
import raftlog.controller.syncobj_fork as core
from raftlog.api.values import AclChange
from raftlog.common.errors import ErrorCode
from raftlog.controller import compat
from raftlog.controller.journal import ControllerJournal
from raftlog.raft.window_entries import DATA_PREFIX
from raftlog.security import acl_index
from raftlog.security.acl import AclOperation, ResourceType
from raftlog.security.authorizer import Authorizer

compat.install()
IDS = ("1", "2", "3")
ELECTION_MIN, ELECTION_MAX = 0.5, 1.0


class Replica:
    def __init__(self, root: Path, node_id: str, net: Net) -> None:
        self.id = node_id
        self.journal = ControllerJournal(root / node_id / "raft", None, RecordingListener())
        self.transport = NetTransport(net, node_id)
        conf = SyncObjConf(
            autoTick=False,
            appendEntriesUseBatch=False,
            appendEntriesPeriod=0.1,
            raftMinTimeout=ELECTION_MIN,
            raftMaxTimeout=ELECTION_MAX,
            leaderFallbackTimeout=ELECTION_MAX,
            journalFile=self.journal,
            useFork=False,
        )
        others = {Node(i) for i in IDS if i != node_id}
        self.obj = core.SyncObj(Node(node_id), others, conf=conf, transport=self.transport)
        compat.detach_poller(self.obj)
        self.transport.connect_all()

    @property
    def is_leader(self) -> bool:
        return self.obj._isLeader()

    @property
    def term(self) -> int:
        return self.obj.raftCurrentTerm

    def propose(self, value: bytes) -> list[tuple[Any, int]]:
        """Proposes one record; the returned list receives pysyncobj's (result, reason)."""
        outcome: list[tuple[Any, int]] = []
        self.obj._applyCommand(
            DATA_PREFIX + make_batch([(None, value)]), lambda r, e: outcome.append((r, e))
        )
        return outcome

    def entries(self) -> list[tuple[int, int]]:
        return [(e[1], e[2]) for e in self.journal[:]]


class Cluster(TickedCluster):
    def __init__(self, root: Path, clock: Clock) -> None:
        self.clock = clock
        self.net = Net(IDS)
        self.replicas = {i: Replica(root, i, self.net) for i in IDS}

    def leaders(self) -> list[Replica]:
        return [r for r in self.replicas.values() if r.is_leader]

    def wait_leader(self, seconds: float = 10.0, among: tuple[str, ...] = IDS) -> Replica:
        for _ in range(round(seconds / 0.05)):
            self.step()
            leaders = [r for r in self.leaders() if r.id in among]
            if leaders:
                return leaders[0]
        raise AssertionError(f"no leader among {among} within {seconds} s")

    def terms(self) -> dict[str, int]:
        return {i: r.term for i, r in self.replicas.items()}


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    clock = Clock()
    monkeypatch.setattr(core, "monotonicTime", clock)
    return Cluster(tmp_path, clock)


def committed(outcome: list[tuple[Any, int]]) -> bool:
    return bool(outcome) and outcome[0][1] == FAIL_REASON.SUCCESS


def test_a_deposed_leader_never_acknowledges_its_divergent_tail(cluster: Cluster) -> None:
    old = cluster.wait_leader()
    first = old.propose(b"committed")
    cluster.run(0.5)
    assert committed(first)
    # The leader's packets to its peers are dropped; it appends what never commits.
    cluster.net.isolate(old.id, incoming=False)
    lost = [old.propose(b"lost-%d" % i) for i in range(3)]
    cluster.run(0.2)
    others = tuple(i for i in IDS if i != old.id)
    new = cluster.wait_leader(among=others)
    kept = new.propose(b"kept")
    cluster.run(0.5)
    assert committed(kept)
    assert all(not committed(o) for o in lost)
    cluster.net.heal()
    cluster.run(3.0)
    # Every waiter of the old term heard "not committed", none heard success, and the old
    # leader's log now equals the new leader's.
    assert all(o and o[0][1] != FAIL_REASON.SUCCESS for o in lost)
    assert old.entries() == new.entries()


def test_an_append_that_confirms_nothing_commits_nothing(cluster: Cluster) -> None:
    """The upstream rule took min(leaderCommit, own last index) from any append, including a
    snapshot message whose data was not ready (`serialized: None`): a follower holding a
    deposed leader's tail committed it, and the old leader's waiters heard success."""
    old = cluster.wait_leader()
    cluster.run(0.3)
    cluster.net.isolate(old.id)
    tail = old.propose(b"divergent")
    cluster.run(0.1)
    others = tuple(i for i in IDS if i != old.id)
    new = cluster.wait_leader(among=others)
    for i in range(5):
        new.propose(b"new-%d" % i)
    cluster.run(0.5)
    assert new.obj.raftCommitIndex > len(old.entries())  # covers the old leader's tail
    message = {
        "type": "append_entries",
        "term": new.term,
        "commit_index": new.obj.raftCommitIndex,
        "serialized": None,
    }
    commit_before = old.obj.raftCommitIndex
    old.transport.receive(new.id, message)
    old.obj.doTick(0.0)
    assert old.obj.raftCommitIndex == commit_before
    assert not committed(tail)


def test_an_isolated_node_keeps_its_term_and_does_not_depose_the_leader(
    cluster: Cluster,
) -> None:
    leader = cluster.wait_leader()
    cluster.run(1.0)
    follower = next(r for r in cluster.replicas.values() if r is not leader)
    terms = cluster.terms()
    cluster.net.isolate(follower.id)
    cluster.run(20.0)  # twenty election timeouts and more
    assert follower.term == terms[follower.id]
    cluster.net.heal()
    cluster.run(3.0)
    assert leader.is_leader and cluster.terms() == terms


def test_one_way_loss_from_a_follower_does_not_move_the_term(cluster: Cluster) -> None:
    """A follower that hears the leader but cannot answer it keeps following: the leader
    still has a majority, and the follower's pre-votes would be refused anyway."""
    leader = cluster.wait_leader()
    cluster.run(1.0)
    follower = next(r for r in cluster.replicas.values() if r is not leader)
    terms = cluster.terms()
    cluster.net.isolate(follower.id, incoming=False)
    cluster.run(10.0)
    assert leader.is_leader and cluster.terms() == terms


def test_an_isolated_leader_steps_down_and_answers_its_waiters(cluster: Cluster) -> None:
    leader = cluster.wait_leader()
    cluster.run(0.5)
    cluster.net.isolate(leader.id)
    waiting = leader.propose(b"never")
    cluster.run(ELECTION_MAX + 0.2)  # CheckQuorum: one election timeout without a majority
    assert not leader.is_leader
    assert waiting == [(None, FAIL_REASON.NOT_LEADER)]
    others = tuple(i for i in IDS if i != leader.id)
    new = cluster.wait_leader(among=others)
    cluster.net.heal()
    cluster.run(2.0)
    assert new.is_leader and max(cluster.terms().values()) == new.term
    assert leader.entries() == new.entries()


def test_a_node_back_with_a_higher_term_rejoins(cluster: Cluster) -> None:
    """A replica whose term is ahead (a restart after elections it alone saw) ignores the
    leader's lower-term appends; it says so, the leader steps down, and one election later
    all three agree again instead of the replica being locked out."""
    leader = cluster.wait_leader()
    cluster.run(0.5)
    follower = next(r for r in cluster.replicas.values() if r is not leader)
    follower.obj._SyncObj__setCurrentTerm(leader.term + 5, None)
    cluster.run(5.0)
    new = cluster.wait_leader()
    value = new.propose(b"after")
    cluster.run(1.0)
    assert committed(value)
    assert len({r.term for r in cluster.replicas.values()}) == 1
    assert new.term <= leader.term + 7  # a handful, not a run-away


def test_leadership_transfer_still_wins_against_the_lease(cluster: Cluster) -> None:
    leader = cluster.wait_leader()
    cluster.run(0.5)
    leader.obj.transferLeadership()
    cluster.run(1.5)
    leaders = cluster.leaders()
    assert len(leaders) == 1 and leaders[0] is not leader


def test_resent_entries_and_heartbeats_cut_nothing(cluster: Cluster) -> None:
    """A follower's answers are lost, so the leader re-sends what it already holds; upstream
    deleted and re-added it on every append (and logged CRITICAL for each)."""
    leader = cluster.wait_leader()
    cluster.run(0.5)
    follower = next(r for r in cluster.replicas.values() if r is not leader)
    cluster.net.blocked.add((follower.id, leader.id))
    for i in range(3):
        leader.propose(b"v%d" % i)
    cluster.run(0.3)
    leader.obj._SyncObj__raftNextIndex[Node(follower.id)] = leader.obj.raftCommitIndex - 2
    cluster.net.heal()
    cluster.run(1.0)
    assert follower.journal._listener.truncations == []
    assert follower.entries() == leader.entries()


def test_a_node_a_term_behind_learns_it_from_refused_pre_votes(cluster: Cluster) -> None:
    """N voted for M in a term whose leader never showed (M's appends were all lost); the
    old leader L, a term behind N but with the longer log, asked for pre-votes of a term N
    already had and was refused forever, while N's own campaigns lost to L's longer log."""
    old = cluster.wait_leader()
    cluster.run(0.5)
    m, n = (i for i in IDS if i != old.id)
    cluster.net.isolate(old.id)
    old.propose(b"only on the old leader")
    cluster.net.drop = lambda src, _dst, msg: (
        (src, msg["type"])
        in {
            (m, "append_entries"),
            (n, "pre_vote"),
            (n, "request_vote"),
        }
    )
    cluster.wait_leader(among=(m,))
    cluster.run(ELECTION_MAX + 0.5)
    assert not old.is_leader  # so no append of its old term tells it N's term
    cluster.net.heal()
    cluster.net.isolate(m)
    new = cluster.wait_leader(among=(old.id, n))
    assert new is old


def test_a_returning_leader_with_a_divergent_tail_catches_up_under_load(
    cluster: Cluster,
) -> None:
    """The fault suite's kill_one: the killed leader came back holding a tail the new leader
    never had, while producers kept writing. Each append in flight was refused, the later
    ones (beyond the returning log) with "start after my last entry", and those stale
    answers moved the leader's next index back up past the conflict each time: the follower
    never caught up, and when another node died the partition could not commit."""
    old = cluster.wait_leader()
    first = old.propose(b"committed")
    cluster.run(0.5)
    assert committed(first)
    cluster.net.isolate(old.id)
    for i in range(10):
        old.propose(b"lost-%d" % i)
        cluster.step()
    tail = {idx for idx, _term in old.entries() if idx > old.obj.raftCommitIndex}
    assert len(tail) == 10
    others = tuple(i for i in IDS if i != old.id)
    new = cluster.wait_leader(among=others)
    for i in range(20):
        new.propose(b"kept-%d" % i)
        cluster.step()
    cluster.net.heal()
    for i in range(40):  # two seconds of steady writes, several appends in flight at once
        for j in range(3):
            new.propose(b"more-%d-%d" % (i, j))
            new.obj.doTick(0.0)  # each command goes out at once (appendEntriesUseBatch off)
        cluster.step()
    assert not old.is_leader
    assert old.entries() == new.entries()
    # What was cut is exactly the tail the new leader never had.
    cut = [idx for removed, _reason in old.journal._listener.truncations for idx in removed]
    assert sorted(cut) == sorted(tail)


def test_a_state_machine_with_the_groups_settings_still_snapshots_and_restores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's state survives log compaction and a restart. RaftGroup sets the fork's
    settings on the instance (a lambda among them); they are not state and must not stop the
    dump, or the controller's log grows without end and every tick retries the pickle."""
    clock = Clock()
    monkeypatch.setattr(core, "monotonicTime", clock)

    machine, journal = start_controller(tmp_path)
    for step in range(65):
        if step < 60:
            machine.allocate_producer_ids(1000)
        clock.now += 0.05
        machine.doTick(0.0)
    assert machine.next_producer_id == 60_000
    assert (tmp_path / "dump").is_file()
    assert len(journal) < 30  # compacted: the dump holds what the log no longer does
    journal.close()

    restarted, _ = start_controller(tmp_path)
    for _ in range(5):
        clock.now += 0.05
        restarted.doTick(0.0)
    assert restarted.next_producer_id == 60_000


# The controller's replicated commands in the order pysyncobj numbers them (by name). A journal
# names each command by its number, so this list may only grow at its end: a command added in
# the middle renumbers the ones after it, and a journal written before replays them as others.
CONTROLLER_COMMANDS = [
    "add_partitions",
    "allocate_producer_ids",
    "create_topic",
    "delete_topic",
    "init_cluster",
    "register_node",
    "set_topic_configs",
    "store_group_configs",
    "store_share_group_deletion",
    "store_user_scram_credentials",
    "update_acls_create",
    "update_acls_delete",
    "update_topics_create",
    "update_topics_reassign_done",
    "update_topics_reassign",
]


def test_controller_commands_keep_their_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core, "monotonicTime", Clock())
    machine, journal = start_controller(tmp_path)
    numbers = machine._methodToID
    assert sorted(numbers, key=numbers.__getitem__) == [f"{c}_v0" for c in CONTROLLER_COMMANDS]
    journal.close()


def test_group_configs_survive_compaction_and_a_dump_without_them_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group configs are controller state like topics: in the dump, restored from it. A dump
    written before they existed has no group_configs; it loads as none."""
    clock = Clock()
    monkeypatch.setattr(core, "monotonicTime", clock)
    machine, journal = start_controller(tmp_path / "now")
    machine.store_group_configs("g", {"share.auto.offset.reset": "earliest"})
    machine.store_group_configs("gone", {"share.delivery.count.limit": "3"})
    machine.store_group_configs("gone", {})
    for _ in range(15):
        machine.allocate_producer_ids(1)
    tick(machine, clock, 20)
    assert machine.group_configs == {"g": {"share.auto.offset.reset": "earliest"}}
    assert (tmp_path / "now" / "dump").is_file() and len(journal) < 15
    journal.close()
    restarted, journal = start_controller(tmp_path / "now")
    tick(restarted, clock, 5)
    assert restarted.group_configs == {"g": {"share.auto.offset.reset": "earliest"}}
    journal.close()

    old, journal = start_controller(tmp_path / "old")
    del old.group_configs  # the state of a controller from before group configs
    for _ in range(15):
        old.allocate_producer_ids(1)
    tick(old, clock, 20)
    assert (tmp_path / "old" / "dump").is_file()
    journal.close()
    upgraded, journal = start_controller(tmp_path / "old")
    tick(upgraded, clock, 5)
    assert upgraded.next_producer_id == 15 and upgraded.group_configs == {}
    upgraded.store_group_configs("g", {"share.delivery.count.limit": "3"})
    tick(upgraded, clock, 2)
    assert upgraded.group_configs == {"g": {"share.delivery.count.limit": "3"}}
    journal.close()


def test_the_cap_on_configured_groups_is_judged_where_the_command_applies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command that would configure one group more than the cap stores nothing and answers
    why, on every node alike (it is judged on the replicated state, not by the proposer);
    changing or clearing a configured group always applies, and clearing makes room."""
    clock = Clock()
    monkeypatch.setattr(core, "monotonicTime", clock)
    monkeypatch.setattr(controller_module, "MAX_CONFIGURED_GROUPS", 2)
    machine, journal = start_controller(tmp_path)
    answers: list[object] = []

    def store(group: str, configs: dict[str, str]) -> None:
        machine.store_group_configs(
            group, configs, callback=lambda result, _e: answers.append(result)
        )
        tick(machine, clock, 3)

    store("a", {"share.delivery.count.limit": "3"})
    store("b", {"share.delivery.count.limit": "4"})
    store("c", {"share.delivery.count.limit": "5"})
    store("a", {"share.delivery.count.limit": "6"})
    assert answers == [
        None,
        None,
        "Too many groups with configs: the cluster holds the configs of at most 2 groups",
        None,
    ]
    assert machine.group_configs == {
        "a": {"share.delivery.count.limit": "6"},
        "b": {"share.delivery.count.limit": "4"},
    }
    store("b", {})
    store("c", {"share.delivery.count.limit": "5"})
    assert answers[-2:] == [None, None]
    assert set(machine.group_configs) == {"a", "c"}
    journal.close()


def test_acls_survive_compaction_and_a_dump_without_them_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ACL bindings are controller state: in the dump, restored from it, changed in place.
    DeleteAcls is judged when applied: each filter reports what it matched before the command,
    a binding two filters match in both. An authorizer made before the dump loads (as at
    start, or when a far follower installs a snapshot) sees the loaded ACLs. A dump from
    before ACLs loads as none."""
    clock = Clock()
    monkeypatch.setattr(core, "monotonicTime", clock)
    machine, journal = start_controller(tmp_path / "now")
    read = (2, "t", 3, "User:a", "*", 3, 3)
    write = (2, "t", 3, "User:a", "*", 4, 2)
    group = (3, "g", 4, "User:*", "*", 3, 3)
    mapping = machine.acls
    results: list[object] = []

    def remember(result: object, error: object) -> None:
        results.append(result)

    for change in (
        lambda: machine.update_acls_create([read, write, group], callback=remember),
        lambda: machine.update_acls_create([read], callback=remember),  # there already
        lambda: machine.update_acls_delete(
            [(2, "t", 1, None, None, 1, 1), (1, None, 1, None, None, 4, 1)], callback=remember
        ),
    ):
        change()
        tick(machine, clock, 3)
    assert results == [AclChange(), AclChange(), AclChange(deleted=((read, write), (write,)))]
    assert machine.acls is mapping and list(machine.acls) == [group]
    for _ in range(15):
        machine.allocate_producer_ids(1)
    tick(machine, clock, 20)
    assert (tmp_path / "now" / "dump").is_file() and len(journal) < 15
    journal.close()

    restarted, journal = start_controller(tmp_path / "now")
    authorizer = Authorizer((), False, restarted.acl_index)
    assert not authorizer.authorize("User:b", "h", AclOperation.READ, ResourceType.GROUP, "g1")
    tick(restarted, clock, 5)  # loads the dump: another mapping
    assert list(restarted.acls) == [group]
    assert authorizer.authorize("User:b", "h", AclOperation.READ, ResourceType.GROUP, "g1")
    journal.close()

    old, journal = start_controller(tmp_path / "old")
    del old.acls  # the state of a controller from before ACLs
    for _ in range(15):
        old.allocate_producer_ids(1)
    tick(old, clock, 20)
    journal.close()
    upgraded, journal = start_controller(tmp_path / "old")
    tick(upgraded, clock, 5)
    assert upgraded.next_producer_id == 15 and upgraded.acls == {}
    upgraded.update_acls_create([read])
    tick(upgraded, clock, 2)
    assert list(upgraded.acls) == [read] and upgraded.acl_index().bindings() == [read]
    journal.close()


def test_acl_commands_over_their_bounds_apply_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cluster's bound on ACLs and the bound on what one DeleteAcls removes are checked
    where the controller applies the command (so two concurrent requests cannot both pass):
    a command over one changes nothing and answers one error for all its entries."""
    clock = Clock()
    monkeypatch.setattr(core, "monotonicTime", clock)
    monkeypatch.setattr(acl_index, "MAX_ACLS", 3)
    monkeypatch.setattr(acl_index, "MAX_PER_REQUEST", 2)
    machine, journal = start_controller(tmp_path)
    a, b, c, d = ((2, name, 3, "User:a", "*", 3, 3) for name in "abcd")
    results: list[AclChange] = []

    def run(method: str, *args: object) -> AclChange:
        getattr(machine, method)(*args, callback=lambda result, error: results.append(result))
        tick(machine, clock, 3)
        return results[-1]

    assert run("update_acls_create", [a, b]) == AclChange()
    over = run("update_acls_create", [c, d, a])
    assert over.error is ErrorCode.policy_violation
    assert over.message == (
        "Excessively large number of ACLs: the cluster holds 2 and may hold at most 3; "
        "these 2 new ones would exceed it"
    )
    assert list(machine.acls) == [a, b]
    assert run("update_acls_create", [a, c]) == AclChange()  # a is there: one new
    every = (1, None, 1, None, None, 1, 1)
    refused = run("update_acls_delete", [every])
    assert (refused.error, refused.message) == (
        ErrorCode.invalid_request,
        "Cannot remove more than 2 acls in a single delete operation.",
    )
    assert list(machine.acls) == [a, b, c] and len(machine.acl_index().bindings()) == 3
    b_only = (2, "b", 3, None, None, 1, 1)
    assert run("update_acls_delete", [b_only, b_only]).deleted == ((b,), (b,))
    assert list(machine.acls) == [a, c]
    journal.close()


def test_a_leadership_transfer_is_not_lost_to_the_leader_going_quiet(cluster: Cluster) -> None:
    """The transfer's TimeoutNow was followed by the leader's quiesce heartbeat when the
    group's idle time ran out just then: the target went quiet before it stood, and the
    admin API's transfer-leadership answered with the old leader (CI, about half the runs)."""
    for replica in cluster.replicas.values():
        replica.obj.quiesceAfter = 0.2
    leader = cluster.wait_leader()
    while leader.obj._SyncObj__idleSince is None:
        cluster.step()
    assert not leader.obj.isQuiesced()
    cluster.clock.now += 0.2  # the leader's idle time is up at its next tick
    leader.obj.transferLeadership()
    cluster.run(1.5)
    leaders = cluster.leaders()
    assert len(leaders) == 1 and leaders[0] is not leader
