"""The controller quorum's bounded voter set (issue 44 item 3; raft/FORK.md 12,
controller/voters.py).

Five replicas of the forked pysyncobj core with the controller's journal exchange messages
through the in-process network of test_raft_core (drops any direction of any link; time is a
clock the test advances). Three are voters, two observe: they get and apply the log and
forward their commands, but never stand, vote or count. Voters change one at a time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pysyncobj import SyncObjConf
from pysyncobj.config import FAIL_REASON
from pysyncobj.node import Node
from support.journal import RecordingListener
from support.raftnet import Clock, Net, NetTransport, TickedCluster
from support.wire import make_batch

import raftlog.controller.syncobj_fork as core
from raftlog.cluster import controller_quorum
from raftlog.common.errors import ConfigError
from raftlog.config.node_config import NodeConfig
from raftlog.controller import Controller, compat, voters
from raftlog.controller.journal import ControllerJournal
from raftlog.controller.ticker import Ticker
from raftlog.raft.elections import ElectionBudget
from raftlog.raft.mesh import Mesh
from raftlog.raft.timings import RaftTimings
from raftlog.raft.window_entries import DATA_PREFIX

compat.install()
IDS = ("1", "2", "3", "4", "5")
VOTERS = ("1", "2", "3")


class GroupNetTransport(NetTransport):
    """The network's transport with the controller transport's rule: a connected peer that
    is not a voter is an observer (controller/transport.py)."""

    def __init__(self, net: Net, self_id: str) -> None:
        super().__init__(net, self_id)
        self.obj: Any = None

    def connect_all(self) -> None:
        for node in self._peers.values():
            if node in self.obj.otherNodes:
                self._onNodeConnected(node)
            else:
                self._onReadonlyNodeConnected(node)

    def addNode(self, node: Node) -> None:  # noqa: N802 - pysyncobj's name
        self._onNodeConnected(node)

    def dropNode(self, node: Node) -> None:  # noqa: N802
        pass


class Replica:
    def __init__(self, root: Path, node_id: str, net: Net, voters: tuple[str, ...]) -> None:
        self.id = node_id
        self.journal = ControllerJournal(root / node_id / "raft", None, RecordingListener())
        self.transport = GroupNetTransport(net, node_id)
        conf = SyncObjConf(
            autoTick=False,
            appendEntriesUseBatch=False,
            appendEntriesPeriod=0.1,
            raftMinTimeout=0.5,
            raftMaxTimeout=1.0,
            leaderFallbackTimeout=1.0,
            journalFile=self.journal,
            fullDumpFile=str(root / node_id / "dump"),
            logCompactionMinEntries=10**9,
            logCompactionMinTime=10**9,
            useFork=False,
            dynamicMembershipChange=True,
        )
        others = {Node(i) for i in voters if i != node_id}
        self.obj = core.SyncObj(
            Node(node_id), others, conf=conf, transport=self.transport, voter=node_id in voters
        )
        self.transport.obj = self.obj
        compat.detach_poller(self.obj)
        self.transport.connect_all()

    @property
    def is_leader(self) -> bool:
        return bool(self.obj._isLeader())

    def propose(self, value: bytes) -> list[tuple[Any, int]]:
        outcome: list[tuple[Any, int]] = []
        self.obj._applyCommand(
            DATA_PREFIX + make_batch([(None, value)]), lambda r, e: outcome.append((r, e))
        )
        return outcome

    def change(self, kind: str, node_id: str) -> list[tuple[Any, int]]:
        outcome: list[tuple[Any, int]] = []
        act = self.obj.addNodeToCluster if kind == "add" else self.obj.removeNodeFromCluster
        act(Node(node_id), callback=lambda r, e: outcome.append((r, e)))
        return outcome


class Cluster(TickedCluster):
    def __init__(self, root: Path, clock: Clock) -> None:
        self.root = root
        self.clock = clock
        self.net = Net(IDS, clock)
        self.replicas = {i: Replica(root, i, self.net, VOTERS) for i in IDS}

    def wait_leader(self, seconds: float = 10.0) -> Replica:
        for _ in range(round(seconds / 0.05)):
            self.step()
            leaders = [r for r in self.replicas.values() if r.is_leader]
            if leaders:
                return leaders[0]
        raise AssertionError(f"no leader within {seconds} s")

    def restart(self, node_id: str, voters: tuple[str, ...]) -> Replica:
        self.replicas[node_id].journal.close()
        replica = Replica(self.root, node_id, self.net, voters)
        self.replicas[node_id] = replica
        return replica

    def terms(self) -> dict[str, int]:
        return {i: r.obj.raftCurrentTerm for i, r in self.replicas.items()}


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    clock = Clock()
    monkeypatch.setattr(core, "monotonicTime", clock)
    return Cluster(tmp_path, clock)


def committed(outcome: list[tuple[Any, int]]) -> bool:
    return bool(outcome) and outcome[0][1] == FAIL_REASON.SUCCESS


def wait(cluster: Cluster, outcome: list[tuple[Any, int]], seconds: float = 5.0) -> None:
    for _ in range(round(seconds / 0.05)):
        if outcome:
            return
        cluster.step()


def voter_sets(cluster: Cluster) -> dict[str, set[str]]:
    return {i: set(r.obj.voterIds) for i, r in cluster.replicas.items()}


def test_observers_follow_the_log_forward_writes_and_never_stand(cluster: Cluster) -> None:
    leader = cluster.wait_leader()
    assert leader.id in VOTERS
    outcome = cluster.replicas["5"].propose(b"from an observer")
    wait(cluster, outcome)
    assert committed(outcome)
    cluster.run(0.5)
    last = leader.journal[-1][1]
    for replica in cluster.replicas.values():  # every replica has it, committed and applied
        assert replica.obj.raftCommitIndex == last
        assert replica.obj.raftLastApplied == last
    assert [r.obj.isVoter for r in cluster.replicas.values()] == [True] * 3 + [False] * 2
    # The voters cut off: the observers hear no leader for many election timeouts and ask
    # for no (pre-)vote, and no leader is made of them.
    asked: list[str] = []

    def record(source: str, dest: str, message: dict) -> bool:
        if message.get("type") in ("pre_vote", "request_vote"):
            asked.append(source)
        return False

    def cut_voters_off(source: str, dest: str, message: dict) -> bool:
        record(source, dest, message)
        return source in VOTERS or dest in VOTERS

    cluster.net.drop = cut_voters_off
    before = cluster.terms()
    cluster.run(10)
    assert "4" not in asked and "5" not in asked
    assert cluster.terms()["4"] == before["4"] and cluster.terms()["5"] == before["5"]
    assert not cluster.replicas["4"].is_leader and not cluster.replicas["5"].is_leader


def test_observers_count_in_no_majority_and_give_no_vote(cluster: Cluster) -> None:
    leader = cluster.wait_leader()
    others = [v for v in VOTERS if v != leader.id]
    # The leader with only the observers: nothing commits (two of five acknowledged)...
    for voter in others:
        cluster.net.isolate(voter)
    outcome = leader.propose(b"on a minority of voters")
    cluster.run(0.5)
    assert not committed(outcome)
    # ... and, once it stepped down, the two observers' votes do not make it leader again.
    cluster.run(10)
    assert not any(r.is_leader for r in cluster.replicas.values())


def test_an_observer_grants_no_vote_even_to_a_voter_that_asks(cluster: Cluster) -> None:
    """A voter whose configuration is stale may still name a node as a voter that is one no
    longer: that node's vote must not count anywhere."""
    cluster.wait_leader()
    cluster.run(1)
    observer = cluster.replicas["4"]
    term = observer.obj.raftCurrentTerm
    cluster.clock.now += 5  # its leader not heard for long: no lease holds a vote back
    for kind in ("pre_vote", "request_vote"):
        observer.transport._onMessageReceived(
            Node("1"),
            {"type": kind, "term": term + 5, "last_log_index": 10**6, "last_log_term": term + 4},
        )
    answers = [m for src, _, m in cluster.net.queue if src == "4"]
    assert not any(m["type"] in ("pre_vote_response", "response_vote") for m in answers)
    assert observer.obj.raftCurrentTerm == term


def test_a_voter_replaced_by_an_observer_one_change_at_a_time(cluster: Cluster) -> None:
    leader = cluster.wait_leader()
    leaving = next(v for v in VOTERS if v != leader.id)
    # A second change while the first is not committed is refused (upstream took both: two
    # changes in flight, and a majority of {1,2,3} and one of {1,2,3,4,5} need not meet).
    for voter in VOTERS:
        if voter != leader.id:
            cluster.net.isolate(voter)
    first = leader.change("add", "5")
    cluster.step()
    second = leader.change("add", "4")
    wait(cluster, second)
    assert second and second[0][1] == FAIL_REASON.REQUEST_DENIED and not first
    cluster.net.heal()
    wait(cluster, first)
    assert committed(first)
    remove = leader.change("rem", "5")
    wait(cluster, remove)
    assert committed(remove)
    add = cluster.replicas["5"].change("add", "4")  # asked on an observer: forwarded
    wait(cluster, add)
    assert committed(add)
    remove = cluster.replicas["4"].change("rem", leaving)
    wait(cluster, remove)
    assert committed(remove)
    cluster.run(0.5)
    expected = (set(VOTERS) - {leaving}) | {"4"}
    assert all(v == expected for v in voter_sets(cluster).values())
    assert not cluster.replicas[leaving].obj.isVoter and cluster.replicas["4"].obj.isVoter
    # The new set commits without the old voter and one of the others: {leader, 4} is a
    # majority of the new three, not of the old.
    stays = next(v for v in VOTERS if v not in (leader.id, leaving))
    cluster.net.isolate(leaving)
    cluster.net.isolate(stays)
    outcome = leader.propose(b"on the new majority")
    wait(cluster, outcome)
    assert committed(outcome)


def test_a_bounded_add_is_judged_on_the_leaders_log_as_it_appends(cluster: Cluster) -> None:
    """FORK.md 13: an add with a bound goes in only while the leader's voters, when it
    appends the change, are fewer than the bound; whoever asked and whatever it saw."""
    leader = cluster.wait_leader()

    def add(replica: Replica, node_id: str, at_most: int) -> list[tuple[Any, int]]:
        outcome: list[tuple[Any, int]] = []

        def answered(result: Any, reason: int) -> None:
            outcome.append((result, reason))

        replica.obj.addNodeToCluster(Node(node_id), callback=answered, atMost=at_most)
        wait(cluster, outcome)
        return outcome

    assert add(leader, "4", 3) == [(None, FAIL_REASON.REQUEST_DENIED)]
    assert committed(add(cluster.replicas["5"], "4", 5))  # forwarded by an observer
    assert add(cluster.replicas["5"], "5", 4) == [(None, FAIL_REASON.REQUEST_DENIED)]
    cluster.run(0.5)
    assert all(v == {"1", "2", "3", "4"} for v in voter_sets(cluster).values())


def test_a_leader_asked_to_remove_itself_hands_over_first(cluster: Cluster) -> None:
    leader = cluster.wait_leader()
    cluster.run(1)  # every voter caught up, so the transfer has a target
    refused = leader.change("rem", leader.id)
    wait(cluster, refused)
    assert refused[0][1] == FAIL_REASON.REQUEST_DENIED
    new = cluster.wait_leader()
    cluster.run(2)
    new = next(r for r in cluster.replicas.values() if r.is_leader)
    assert new.id != leader.id
    removed = new.change("rem", leader.id)
    wait(cluster, removed)
    assert committed(removed)
    cluster.run(0.5)
    assert leader.id not in leader.obj.voterIds and not leader.obj.isVoter


def test_a_cut_membership_entry_takes_its_configuration_back(cluster: Cluster) -> None:
    leader = cluster.wait_leader()
    cluster.run(1)
    for voter in VOTERS:
        if voter != leader.id:
            cluster.net.isolate(voter, incoming=False)
            cluster.net.isolate(voter, outgoing=False)
    cluster.net.blocked |= {(leader.id, "4"), ("4", leader.id)}
    add = leader.change("add", "4")
    cluster.step()
    assert "4" in leader.obj.voterIds  # in force from its append
    # The leader is cut off with its uncommitted change; the others elect without it.
    cluster.net.heal()
    cluster.net.isolate(leader.id)
    for _ in range(200):
        cluster.step()
        if any(r.is_leader for r in cluster.replicas.values() if r.id != leader.id):
            break
    successor = next(r for r in cluster.replicas.values() if r.is_leader and r is not leader)
    done = successor.propose(b"the new leader's")
    wait(cluster, done)
    assert committed(done)
    cluster.net.heal()
    cluster.run(2)
    assert not committed(add)
    assert set(leader.obj.voterIds) == set(VOTERS)  # the entry was cut, and its change with it


def test_a_restart_takes_the_voters_from_the_log_and_the_dump(cluster: Cluster) -> None:
    leader = cluster.wait_leader()
    leaving = next(v for v in VOTERS if v != leader.id)
    for kind, node in (("add", "4"), ("rem", leaving)):
        outcome = leader.change(kind, node)
        wait(cluster, outcome)
        assert committed(outcome)
    cluster.run(0.5)
    expected = (set(VOTERS) - {leaving}) | {"4"}
    # From the journal alone: the replica is started as the config would have it, and the log
    # says otherwise before any entry is applied.
    replica = cluster.restart(leaving, VOTERS)
    assert replica.obj.isVoter
    replica.obj.doTick(0.0)
    assert not replica.obj.isVoter and set(replica.obj.voterIds) == expected
    # From a dump: it names the voters, this node only if it is one.
    observer = cluster.replicas["4"]
    observer.obj.forceLogCompaction()
    for _ in range(40):
        cluster.step()
        if (cluster.root / "4" / "dump").exists():
            break
    assert (cluster.root / "4" / "dump").exists()
    restarted = cluster.restart("4", VOTERS)
    cluster.step()
    assert restarted.obj.isVoter and set(restarted.obj.voterIds) == expected
    cluster.run(2)
    new_leader = next(r for r in cluster.replicas.values() if r.is_leader)
    outcome = new_leader.propose(b"after the restarts")
    wait(cluster, outcome)
    assert committed(outcome)


# --- controller/voters.py ------------------------------------------------------------------------


def test_a_new_directory_takes_the_lowest_ids_and_keeps_them(tmp_path: Path) -> None:
    assert voters.initial_voters(tmp_path / "a", [5, 1, 4, 2, 3], 3) == [1, 2, 3]
    # A restart keeps the recorded set, whatever the config lists by then.
    assert voters.initial_voters(tmp_path / "a", [1, 2, 3, 4, 5, 6], 5) == [1, 2, 3]
    assert voters.initial_voters(tmp_path / "b", [1, 2], 3) == [1, 2]
    assert voters.initial_voters(tmp_path / "c", [7], 3) == [7]


def test_a_directory_of_the_release_before_keeps_every_node_a_voter(tmp_path: Path) -> None:
    (tmp_path / "raft").mkdir()
    (tmp_path / "raft" / "window").write_bytes(b"x")
    assert voters.initial_voters(tmp_path, [1, 2, 3, 4, 5], 3) == [1, 2, 3, 4, 5]
    assert json.loads((tmp_path / voters.RECORD).read_text())["all_nodes"] is True


def test_joining_nodes_vote_only_while_the_set_is_below_its_size() -> None:
    assert voters.admits(2, {1}, 3)
    assert not voters.admits(4, {1, 2, 3}, 3)
    assert voters.admits(4, {1, 2, 3}, 5)
    assert not voters.admits(3, {1, 2, 3}, 5)


def test_a_retiring_voter_is_replaced_first_and_never_below_the_size() -> None:
    assert voters.retire_plan(2, {1, 2, 3}, {1, 2, 3, 5, 4}, 3) == [("add", 4), ("remove", 2)]
    assert voters.retire_plan(4, {1, 2, 3}, {1, 2, 3, 4}, 3) == []  # an observer
    # A dead voter (not live) is replaced the same way.
    assert voters.retire_plan(3, {1, 2, 3}, {1, 2, 4}, 3) == [("add", 4), ("remove", 3)]
    # Above its size (every node a voter, an older release's cluster): only removed.
    assert voters.retire_plan(5, {1, 2, 3, 4, 5}, {1, 2, 3, 4, 5, 6}, 3) == [("remove", 5)]
    with pytest.raises(voters.VoterRefused, match="add a node first"):
        voters.retire_plan(3, {1, 2, 3}, {1, 2, 3}, 3)


def test_a_retiring_voters_place_goes_to_a_rack_without_a_voter() -> None:
    racks = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"}
    assert voters.retire_plan(3, {1, 2, 3}, set(racks), 3, racks) == [("add", 6), ("remove", 3)]
    assert voters.retire_plan(1, {1, 2, 3}, {1, 2, 3, 5}, 3, racks) == [("add", 5), ("remove", 1)]


def test_voters_are_spread_over_racks_one_swap_at_a_time() -> None:
    """Three hosts of four brokers (the host is each broker's rack): a new cluster's voters
    1-3 are all on host a; two swaps put one on each host, never removing the leader."""
    racks = {n: "abc"[(n - 1) // 4] for n in range(1, 13)}
    live = set(racks)
    first = voters.spread_plan({1, 2, 3}, racks, live, 3, leader=3)
    assert first == [("add", 5), ("remove", 2)]
    second = voters.spread_plan({1, 3, 5}, racks, live, 3, leader=3)
    assert second == [("add", 9), ("remove", 1)]
    assert voters.spread_plan({3, 5, 9}, racks, live, 3, leader=3) == []  # one per rack
    # Nothing while a voter is not live, the set is not at its size, a rack is unknown, or
    # no observer is on a rack without a voter.
    assert voters.spread_plan({1, 2, 3}, racks, live - {2}, 3, leader=1) == []
    assert voters.spread_plan({1, 2, 3, 4}, racks, live, 3, leader=1) == []
    assert voters.spread_plan({1, 2, 3}, {**racks, 7: None}, live, 3, leader=1) == []
    assert voters.spread_plan({1, 2, 3}, racks, {1, 2, 3, 4}, 3, leader=1) == []
    assert voters.spread_plan({1, 2, 3}, dict.fromkeys(live, None), live, 3, leader=1) == []


@pytest.mark.parametrize("size", [1, 3, 5])
def test_the_quorum_size_setting(tmp_path: Path, size: int) -> None:
    raw = {
        "node_id": 1,
        "data_dir": "d",
        "kafka_listen": "127.0.0.1:9092",
        "raft_listen": "127.0.0.1:10092",
        "cluster_secret": "s",
        "broker": {"controller.quorum.size": size},
    }
    assert NodeConfig.from_dict(raw, tmp_path).broker_setting("controller.quorum.size") == size
    for bad in (0, 2, 4, 7):
        raw["broker"] = {"controller.quorum.size": bad}
        with pytest.raises(ConfigError, match="expected 1, 3 or 5"):
            NodeConfig.from_dict(raw, tmp_path)


def test_a_leaders_quorum_answer_with_and_without_observers() -> None:
    """The mesh call's answer names the observers (fifth element); a leader of the release
    before answers without them."""
    assert controller_quorum._parsed([1, 3, 40, [[1, 41], [2, 40]]]) == (
        controller_quorum.QuorumState(1, 3, 40, ((1, 41), (2, 40)), ())
    )
    state = controller_quorum._parsed([1, 3, 40, [[1, 41]], [[4, 39], [5, -1]]])
    assert state is not None and state.observers == ((4, 39), (5, -1))
    assert controller_quorum._parsed([1, 3, 40, [[1, 41]], [[4]]]) is None
    assert controller_quorum._parsed([1, 3, 40, [[1, 41]], [], []]) is None


# --- the controller on real meshes ---------------------------------------------------------------


async def _until(what: str, check: Callable[[], Any], seconds: float = 20.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        found = check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {seconds}s: {what}")


C = TypeVar("C", bound=Controller)


@asynccontextmanager
async def _on_meshes(
    tmp_path: Path, make: Callable[..., C], node_ids: list[int]
) -> AsyncIterator[dict[int, C]]:
    """Four Controllers (`make`: the class) on real meshes over loopback, as four nodes run
    them, with `node_ids` as the config's nodes (the first voters are drawn from them, at
    most 3); each node dials the ones before it."""
    ids = [1, 2, 3, 4]
    meshes: dict[int, Mesh] = {}
    controllers: dict[int, C] = {}
    for n in ids:
        meshes[n] = Mesh(str(n), ("127.0.0.1", 0), {}, b"secret")
        ticker = Ticker(ElectionBudget(100.0, 25, time.monotonic))
        ticker.start()
        controllers[n] = make(
            n, node_ids, tmp_path / str(n), meshes[n], ticker, RaftTimings(), lambda: None, 3
        )
    try:
        for n in ids:
            await meshes[n].start()
            for m in ids[: n - 1]:
                port = meshes[m]._server.sockets[0].getsockname()[1]
                meshes[n].add_peer(str(m), ("127.0.0.1", port))
        yield controllers
    finally:
        for c in controllers.values():
            c.close()
        for mesh in meshes.values():
            await mesh.close()


async def test_controllers_on_a_loopback_mesh_replace_their_leader_by_an_observer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Four Controllers (ControllerMachine, RaftGroup, the mesh's GroupTransport, the ticker)
    on real meshes over loopback, as four nodes run them: voters 1-3, node 4 observes, gets
    the log and forwards a command; the controller's leader is retired (observer 4 added, it
    removed after handing over), and it then forwards its own commands as an observer."""
    async with _on_meshes(tmp_path, Controller, [1, 2, 3, 4]) as controllers:
        leader = await _until(
            "a leader", lambda: next((n for n, c in controllers.items() if c.group.is_leader), 0)
        )
        assert leader in (1, 2, 3)
        assert [c.group.is_voter for c in controllers.values()] == [True, True, True, False]
        assert all(c.voters() == {1, 2, 3} for c in controllers.values())
        assert await controllers[4].call("init_cluster", "the-id") == "the-id"
        await _until(
            "every node applied it",
            lambda: all(c.state.cluster_id == "the-id" for c in controllers.values()),
        )
        done = await controllers[4].retire_voter(leader, {1, 2, 3, 4}, timeout=20)
        assert done == [
            "node 4 is a controller voter now",
            f"node {leader} is no longer a controller voter",
        ]
        expected = {1, 2, 3, 4} - {leader}
        await _until(
            "every node has the new voters",
            lambda: all(c.voters() == expected for c in controllers.values()),
        )
        assert not controllers[leader].group.is_voter and controllers[4].group.is_voter
        assert not controllers[leader].group.is_leader
        first = await controllers[leader].call("allocate_producer_ids", 10)
        assert await controllers[leader].call("allocate_producer_ids", 10) == first + 10
        # Racks registered: two voters share rack a; the new leader swaps the old one in (its
        # rack c has no voter) for a voter of rack a other than itself.
        shared, alone = sorted(expected)[:2], sorted(expected)[2]
        racks = {shared[0]: "a", shared[1]: "a", alone: "b", leader: "c"}
        for n, rack in racks.items():
            await controllers[n].call("register_node", n, "127.0.0.1", 9000 + n, rack, [])
        now = await _until(
            "a new leader",
            lambda: next((n for n, c in controllers.items() if c.group.is_leader), 0),
        )
        await _until("the racks applied there", lambda: controllers[now].racks() == racks)
        after = await controllers[now].spread_voters({1, 2, 3, 4})
        assert after is not None and leader in after and now in after
        assert sorted(racks[v] for v in after) == ["a", "b", "c"]
        assert await controllers[now].spread_voters({1, 2, 3, 4}) is None  # spread already
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


class HeldController(Controller):
    """A Controller whose next membership proposal waits for the test: a node that judged a
    join on its view and whose proposal reaches the leader later, the window of a check and
    the act that follows it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.held = asyncio.Event()
        self.release: asyncio.Event | None = None

    async def add_member(self, node_id: int, *args: Any, **kwargs: Any) -> None:
        if self.release is not None:
            self.held.set()
            await self.release.wait()
            self.release = None
        await super().add_member(node_id, *args, **kwargs)


async def test_two_joins_at_once_admit_one_voter_when_one_place_is_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Voters 1 and 2 (controller.quorum.size 3), nodes 3 and 4 joining, on real meshes over
    loopback. The follower judges node 4's join on its view ({1, 2}: room for one) and its
    proposal is held; meanwhile the leader admits node 3 and commits it. The held proposal
    then reaches the leader, which decides on its log as it appends: the set is full and node
    4 observes. (Before, the leader appended what the follower had judged: four voters.)"""
    async with _on_meshes(tmp_path, HeldController, [1, 2]) as controllers:
        leader = await _until(
            "a leader", lambda: next((n for n, c in controllers.items() if c.group.is_leader), 0)
        )
        follower = 3 - leader
        assert all(c.voters() == {1, 2} for c in controllers.values())
        controllers[follower].release = release = asyncio.Event()
        judged = asyncio.create_task(controllers[follower].admit(4))
        await asyncio.wait_for(controllers[follower].held.wait(), 10)
        await controllers[leader].admit(3)
        await _until(
            "every node has voters 1-3",
            lambda: all(c.voters() == {1, 2, 3} for c in controllers.values()),
        )
        release.set()
        await asyncio.wait_for(judged, 30)  # refused, then node 4 found in no place left
        assert controllers[leader].voters() == controllers[follower].voters() == {1, 2, 3}
        await _until(
            "every node still has voters 1-3",
            lambda: all(c.voters() == {1, 2, 3} for c in controllers.values()),
        )
        assert not controllers[4].group.is_voter
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
