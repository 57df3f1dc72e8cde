"""Partition reassignments (KIP-455) as the controller records them and the Kafka APIs
answer them: the replicated commands on a real one-node controller machine
(raftlog/controller/moves.py), their state through a compaction and a restart, the
bootstrap voters a moving partition's new replica starts with, and the
AlterPartitionReassignments and ListPartitionReassignments handlers over that machine through
the real ClusterView and TopicAdmin, every error code read back as a client reads it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType
from support.answers import client_reads
from support.broker_stub import BrokerStub
from support.controller_machine import OneNodeController as Machine
from support.raftnet import Clock

import raftlog.controller.syncobj_fork as core
from kafka_api.codec import build
from kafka_api.context import RequestContext
from kafka_api.handlers import alter_partition_reassignments as alter
from kafka_api.handlers import list_partition_reassignments as listing
from raftlog.api.values import BrokerInfo, TopicInfo
from raftlog.broker.topic_admin import TopicAdmin
from raftlog.cluster.leadership import Leadership, LeadershipDirectory
from raftlog.common.errors import ErrorCode
from raftlog.common.limits import MAX_RECORDS_PER_USER_OP, ReplicaBudget
from raftlog.controller import moves
from raftlog.node.cluster_view import ClusterView
from raftlog.node.replicas import bootstrap_voters
from raftlog.security.acl_index import AclIndex
from raftlog.security.authorizer import Authorizer

E = ErrorCode
ADMIN, ALICE = "User:admin", "User:alice"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(core, "monotonicTime", clock)
    return clock


@pytest.fixture
def machine(tmp_path: Path, clock: Clock) -> Iterator[Machine]:
    machine = Machine(tmp_path, clock)
    for node_id in (1, 2, 3, 4, 5):
        machine.run("register_node", node_id, "h", 9000 + node_id, None, ["h", 1])
    topic_id = "00000000-0000-0000-0000-000000000001"
    machine.run("create_topic", "t", topic_id, [[1, 2, 3] for _ in range(3)], {}, False)
    machine.applied = 0
    yield machine
    machine.close()


# --- the controller's commands -------------------------------------------------------------


def test_a_move_records_the_full_set_and_finishes_at_its_target(machine: Machine) -> None:
    """Partition 0 moves from 1, 2, 3 to 2, 3, 4: its replicas are the target followed by
    the original ones left out; adding 4, removing 1. Only the leader's finish with that
    exact target ends it; one with another target is STALE and changes nothing."""
    assert machine.run("alter_reassignments", "t", [(0, [2, 3, 4])]) == [None]
    topic = machine.topic("t")
    assert topic["partitions"][0] == [2, 3, 4, 1]
    assert topic["moves"] == {0: {"target": [2, 3, 4], "original": [1, 2, 3]}}
    assert moves.adding_replicas(topic, 0) == (4,)
    assert moves.removing_replicas(topic, 0) == (1,)
    assert bootstrap_voters(topic, 0) == (1, 2, 3)  # 4 opens as a non-voter
    assert bootstrap_voters(topic, 1) == (1, 2, 3)
    assert machine.applied == 1

    assert machine.run("finish_reassignment", "t", 0, [2, 4, 3]) == moves.STALE
    assert topic["partitions"][0] == [2, 3, 4, 1] and 0 in topic["moves"]
    assert machine.run("finish_reassignment", "t", 0, [2, 3, 4]) is None
    assert topic["partitions"][0] == [2, 3, 4] and topic["moves"] == {}
    assert bootstrap_voters(topic, 0) == (2, 3, 4)
    assert machine.applied == 2
    assert machine.run("finish_reassignment", "t", 0, [2, 3, 4]) == moves.STALE  # again
    assert machine.run("finish_reassignment", "t", 7, [2, 3, 4]) == moves.UNKNOWN
    assert machine.run("finish_reassignment", "gone", 0, [2, 3, 4]) == moves.UNKNOWN
    assert machine.applied == 2


def test_a_cancellation_returns_to_the_original_replicas(machine: Machine) -> None:
    """A move replaced by another keeps the first one's original: cancelling returns to it.
    While replaced, every replica that holds a copy stays in the set (5, which the first move
    was adding, may already vote in the group) and is among the removing ones. A finish of a
    cancelled or replaced move is STALE."""
    machine.run("alter_reassignments", "t", [(1, [1, 2, 5])])
    assert machine.run("alter_reassignments", "t", [(1, [4, 2, 1])]) == [None]
    topic = machine.topic("t")
    assert topic["partitions"][1] == [4, 2, 1, 5, 3]
    assert topic["moves"][1] == {"target": [4, 2, 1], "original": [1, 2, 3]}
    assert moves.adding_replicas(topic, 1) == (4,)
    assert moves.removing_replicas(topic, 1) == (5, 3)
    assert bootstrap_voters(topic, 1) == (1, 2, 3)
    assert machine.run("finish_reassignment", "t", 1, [1, 2, 5]) == moves.STALE

    # The cancellation is a move back: every copy stays until the leader's group is back on
    # the original and it finishes (its voters may already have been 4, 2, 1).
    assert machine.run("alter_reassignments", "t", [(1, None)]) == [None]
    assert topic["partitions"][1] == [1, 2, 3, 4, 5]
    assert topic["moves"][1] == {"target": [1, 2, 3], "original": [1, 2, 3]}
    assert moves.removing_replicas(topic, 1) == (4, 5)
    assert machine.run("finish_reassignment", "t", 1, [4, 2, 1]) == moves.STALE
    assert machine.run("finish_reassignment", "t", 1, [1, 2, 3]) is None
    assert topic["partitions"][1] == [1, 2, 3] and topic["moves"] == {}
    assert machine.run("alter_reassignments", "t", [(1, None)]) == [moves.NO_MOVE]


def test_a_target_of_the_same_replicas_needs_no_move(machine: Machine) -> None:
    """The current replicas with no move: nothing happens (no pass over the replicas). A
    reordering is the partition's replicas at once, as Kafka completes it. A target with the
    original's replicas while a move has added a copy is a move back, as a cancellation is."""
    assert machine.run("alter_reassignments", "t", [(0, [1, 2, 3])]) == [None]
    assert machine.applied == 0 and "moves" not in machine.topic("t")
    assert machine.run("alter_reassignments", "t", [(0, [3, 1, 2])]) == [None]
    assert machine.topic("t")["partitions"][0] == [3, 1, 2] and machine.applied == 1
    machine.run("alter_reassignments", "t", [(0, [3, 1, 4])])
    assert machine.run("alter_reassignments", "t", [(0, [1, 2, 3])]) == [None]
    assert machine.topic("t")["partitions"][0] == [1, 2, 3, 4]
    assert machine.topic("t")["moves"][0] == {"target": [1, 2, 3], "original": [3, 1, 2]}


def test_a_target_of_the_whole_set_during_a_move_is_a_move_too(machine: Machine) -> None:
    """Mid-move the group's configuration may be anything between the original and the first
    target: a target naming every replica holding a copy is a move the leader finishes (its
    voters become exactly those), not replicas set at once that its group would not count."""
    machine.run("alter_reassignments", "t", [(0, [2, 3, 4])])
    assert machine.topic("t")["partitions"][0] == [2, 3, 4, 1]
    assert machine.run("alter_reassignments", "t", [(0, [1, 2, 3, 4])]) == [None]
    assert machine.topic("t")["moves"][0] == {"target": [1, 2, 3, 4], "original": [1, 2, 3]}
    assert machine.run("finish_reassignment", "t", 0, [1, 2, 3, 4]) is None
    assert machine.topic("t")["partitions"][0] == [1, 2, 3, 4]


def test_bad_entries_are_refused_each_alone(machine: Machine) -> None:
    """Each entry is judged where the command applies, whatever the proposing node sent: an
    unknown topic or partition, an empty list, a broker twice or one never registered, and
    entries of the wrong shape are refused, the others in the same command applied."""
    outcomes = machine.run(
        "update_topics_reassign",
        [
            [
                "t",
                [
                    [5, [1, 2, 4]],
                    [-1, [1, 2, 4]],
                    [True, [1, 2, 4]],
                    [0, []],
                    [0, [1, 1, 4]],
                    [0, [1, 2, 9]],
                    [0, ["1", 2, 4]],
                    [0, list(range(6))],
                    [0, "1,2,4"],
                    "junk",
                    [2, [1, 2, 4]],
                ],
            ],
            ["gone", [[0, [1, 2, 4]]]],
            [7, [[0, [1, 2, 4]]]],
        ],
    )
    unknown, invalid = moves.UNKNOWN, moves.INVALID
    assert outcomes[0][:3] == [unknown] * 3
    assert outcomes[0][3] == invalid + (
        "The manual partition assignment includes an empty replica list."
    )
    assert outcomes[0][4] == invalid + (
        "The manual partition assignment includes the broker 1 more than once."
    )
    assert outcomes[0][5] == invalid + (
        "The manual partition assignment includes broker 9, but no such broker is registered."
    )
    assert all(o is not None and o.startswith(invalid) for o in outcomes[0][6:9])
    assert outcomes[0][9:] == [unknown, None]
    assert outcomes[1:] == [[unknown], [unknown]]
    topic = machine.topic("t")
    assert topic["partitions"] == [[1, 2, 3], [1, 2, 3], [1, 2, 4, 3]]
    assert list(topic["moves"]) == [2]
    assert machine.run("update_topics_reassign", "junk") == []
    assert machine.run("update_topics_reassign_done", "t", "0", [1]) == moves.UNKNOWN
    too_many = [["t", [[0, [1, 2, 4]]] * (MAX_RECORDS_PER_USER_OP + 1)]]
    refused = machine.run("update_topics_reassign", too_many)
    assert len(refused[0]) == MAX_RECORDS_PER_USER_OP + 1
    assert all(o.startswith(invalid) for o in refused[0])
    assert topic["partitions"][0] == [1, 2, 3]


def test_moves_survive_a_compaction_and_a_restart(tmp_path: Path, clock: Clock) -> None:
    """The moves are controller state: in the dump, and replayed from the journal after it
    (a restarted or new controller leader picks them up). A topic recorded before moves
    existed, with no "moves" key, moves like any other."""
    machine = Machine(tmp_path, clock)
    machine.run("register_node", 1, "h", 1, None, ["h", 1])
    machine.run("register_node", 2, "h", 2, None, ["h", 2])
    machine.state.topics["old"] = {"id": "x", "partitions": [[1]], "configs": {}, "internal": False}
    machine.run("alter_reassignments", "old", [(0, [2])])
    for _ in range(12):
        machine.run("allocate_producer_ids", 1)
    assert (tmp_path / "dump").is_file()
    machine.run("create_topic", "t", "y", [[1], [2]], {}, False)
    machine.run("alter_reassignments", "t", [(1, [1])])
    machine.journal.close()

    again = Machine(tmp_path, clock)
    for _ in range(5):
        clock.now += 0.05
        again.state.doTick(0.0)
    assert again.topic("old")["partitions"] == [[2, 1]]
    assert again.topic("old")["moves"] == {0: {"target": [2], "original": [1]}}
    assert again.topic("t")["moves"] == {1: {"target": [1], "original": [2]}}
    assert again.run("finish_reassignment", "old", 0, [2]) is None
    assert again.topic("old")["partitions"] == [[2]]
    again.journal.close()


# --- the handlers, over the machine ----------------------------------------------------------


class Cluster(BrokerStub):
    """The Broker the handlers see: the real ClusterView and TopicAdmin over the machine;
    nodes 1-4 are live (5 is registered, down)."""

    def __init__(self, machine: Machine, budget: int = 10**6) -> None:
        self.authorizer = Authorizer((ADMIN,), False, AclIndex(lambda: {}).synced)
        mesh = SimpleNamespace(on_control=lambda *a: None, on_peer_change=[])
        self.leadership = LeadershipDirectory(1, mesh)  # type: ignore[arg-type]
        node = SimpleNamespace(
            node_id=1,
            controller=machine,
            leadership=self.leadership,
            partitions={},
            config=SimpleNamespace(listeners=[SimpleNamespace(name="PLAINTEXT")]),
            budget=ReplicaBudget(budget, 0),
        )
        self.view = ClusterView(node)  # type: ignore[arg-type]
        self.admin = TopicAdmin(node, self.view)  # type: ignore[arg-type]
        self.leadership.alive = lambda node_id: node_id != 5  # type: ignore[method-assign]

    def live_brokers(self) -> list[BrokerInfo]:
        return self.view.live_brokers()

    def topic(self, name: str) -> TopicInfo | None:
        return self.view.topic(name)

    async def alter_partition_reassignments(
        self, topics: list[tuple[str, list[tuple[int, tuple[int, ...] | None]]]], timeout_ms: int
    ) -> list[list[tuple[ErrorCode, str | None]]]:
        return await self.admin.alter_reassignments(topics, timeout_ms)

    def reassigning(self) -> dict[str, list[int]]:
        return self.view.reassigning()


def _alter(
    cluster: Cluster,
    named: list[tuple[str, list[tuple[int, list[int] | None]]]],
    version: int = 1,
    principal: str = ADMIN,
    allow_rf_change: bool = True,
) -> dict[tuple[str, int], tuple[int, str | None]]:
    m = load_payload_module(alter.API_KEY, version, EntityType.request)
    request = build(
        m.AlterPartitionReassignmentsRequest,
        timeout=timedelta(seconds=5),
        allow_replication_factor_change=allow_rf_change,
        topics=tuple(
            m.ReassignableTopic(
                name=name,
                partitions=tuple(
                    m.ReassignablePartition(
                        partition_index=i, replicas=None if r is None else tuple(r)
                    )
                    for i, r in partitions
                ),
            )
            for name, partitions in named
        ),
    )
    ctx = RequestContext(cluster, version, "c", "10.0.0.1", principal=principal)
    response = client_reads(asyncio.run(alter.handle(ctx, request)), alter.API_KEY, version)
    if principal != ADMIN:
        assert response.error_code == E.cluster_authorization_failed
    return {
        (t.name, p.partition_index): (p.error_code, p.error_message)
        for t in response.responses
        for p in t.partitions
    }


def _list(
    cluster: Cluster, named: list[tuple[str, list[int]]] | None, principal: str = ADMIN
) -> Any:
    m = load_payload_module(listing.API_KEY, 0, EntityType.request)
    request = build(
        m.ListPartitionReassignmentsRequest,
        timeout=timedelta(seconds=5),
        topics=None
        if named is None
        else tuple(
            m.ListPartitionReassignmentsTopics(name=n, partition_indexes=tuple(i)) for n, i in named
        ),
    )
    ctx = RequestContext(cluster, 0, "c", "10.0.0.1", principal=principal)
    return client_reads(asyncio.run(listing.handle(ctx, request)), listing.API_KEY, 0)


def _listed(response: Any) -> dict[tuple[str, int], tuple[tuple[int, ...], ...]]:
    assert response.error_code == E.none
    return {
        (t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
        for t in response.topics
        for p in t.partitions
    }


def _codes(answers: dict[tuple[str, int], tuple[int, str | None]]) -> dict[tuple[str, int], int]:
    return {key: code for key, (code, _) in answers.items()}


def test_alter_starts_moves_and_list_shows_them(machine: Machine) -> None:
    """A move and a replication factor change start; Metadata's view (ClusterView) shows the
    full sets; List shows each moving partition's replicas, adding and removing ones, for
    every topic (null) and for those named, leaving out what does not move or exist. A
    cancellation is a move back to the original; a finish ends a move."""
    cluster = Cluster(machine)
    answers = _alter(cluster, [("t", [(0, [2, 3, 4]), (1, [1, 2, 3, 4]), (2, [1, 2, 3])])])
    assert _codes(answers) == {("t", 0): E.none, ("t", 1): E.none, ("t", 2): E.none}
    info = cluster.topic("t")
    assert info is not None
    assert [p.replicas for p in info.partitions] == [(2, 3, 4, 1), (1, 2, 3, 4), (1, 2, 3)]
    assert [(p.adding, p.removing) for p in info.partitions] == [
        ((4,), (1,)),
        ((4,), ()),
        ((), ()),
    ]
    everything = {
        ("t", 0): ((2, 3, 4, 1), (4,), (1,)),
        ("t", 1): ((1, 2, 3, 4), (4,), ()),
    }
    assert _listed(_list(cluster, None)) == everything
    assert _listed(_list(cluster, [("t", [1, 2, 9]), ("gone", [0])])) == {
        ("t", 1): everything[("t", 1)]
    }

    assert _codes(_alter(cluster, [("t", [(0, None)])])) == {("t", 0): E.none}
    assert _listed(_list(cluster, None))[("t", 0)] == ((1, 2, 3, 4), (), (4,))  # a move back
    assert machine.run("finish_reassignment", "t", 0, [1, 2, 3]) is None
    assert machine.run("finish_reassignment", "t", 1, [1, 2, 3, 4]) is None
    assert _listed(_list(cluster, None)) == {}
    assert [p.replicas for p in cluster.topic("t").partitions] == [  # type: ignore[union-attr]
        (1, 2, 3),
        (1, 2, 3, 4),
        (1, 2, 3),
    ]


def test_alter_answers_every_error_code(machine: Machine) -> None:
    """Kafka's codes for each refusal, before anything reaches the controller: no such topic
    or partition, no move to cancel, an empty list, a broker twice, a broker that is not
    live, a partition named twice; and (v1) a replication factor change when the request
    does not allow one, judged against a moving partition's target. No command is proposed
    for them."""
    cluster = Cluster(machine)
    _alter(cluster, [("t", [(2, [1, 2, 4])])])
    machine.applied = 0
    answers = _alter(
        cluster,
        [
            ("t", [(0, None), (0, None), (1, [2, 2, 3]), (2, [1, 2, 5])]),
            ("t", [(7, [1, 2, 3]), (-1, [1, 2, 3])]),
            ("gone", [(0, [1, 2, 3])]),
        ],
    )
    assert _codes(answers) == {
        ("t", 0): E.invalid_request,
        ("t", 1): E.invalid_replica_assignment,
        ("t", 2): E.invalid_replica_assignment,
        ("t", 7): E.unknown_topic_or_partition,
        ("t", -1): E.unknown_topic_or_partition,
        ("gone", 0): E.unknown_topic_or_partition,
    }
    one_each = _alter(cluster, [("t", [(0, None), (1, []), (2, [1, 2, 5])])])
    assert one_each == {
        ("t", 0): (E.no_reassignment_in_progress, "No partition reassignment is in progress."),
        ("t", 1): (
            E.invalid_replica_assignment,
            "The manual partition assignment includes an empty replica list.",
        ),
        ("t", 2): (E.invalid_replica_assignment, "No such broker is registered and live: [5]."),
    }
    assert _codes(_alter(cluster, [("t", [(1, [2, 2, 3])])])) == {
        ("t", 1): E.invalid_replica_assignment
    }
    fixed = _alter(cluster, [("t", [(0, [1, 2]), (2, [1, 2, 3, 4])])], allow_rf_change=False)
    assert fixed == {
        ("t", 0): (
            E.invalid_replica_assignment,
            "The replication factor would change from 3 to 2, and "
            "allowReplicationFactorChange is false.",
        ),
        ("t", 2): (
            E.invalid_replica_assignment,
            "The replication factor would change from 3 to 4, and "
            "allowReplicationFactorChange is false.",
        ),
    }
    assert machine.applied == 0
    assert _codes(_alter(cluster, [("t", [(0, [1, 2])])], version=0)) == {("t", 0): E.none}
    assert _codes(_alter(cluster, [("t", [(2, [4, 2, 1])])], allow_rf_change=False)) == {
        ("t", 2): E.none
    }


def test_alter_and_list_need_their_cluster_permissions(machine: Machine) -> None:
    """ALTER on the cluster for AlterPartitionReassignments (else every partition and the
    request CLUSTER_AUTHORIZATION_FAILED, nothing moved), DESCRIBE for the list."""
    cluster = Cluster(machine)
    answers = _alter(cluster, [("t", [(0, [2, 3, 4]), (1, None)])], principal=ALICE)
    assert _codes(answers) == {
        ("t", 0): E.cluster_authorization_failed,
        ("t", 1): E.cluster_authorization_failed,
    }
    assert machine.applied == 0 and "moves" not in machine.topic("t")
    _alter(cluster, [("t", [(0, [2, 3, 4])])])
    refused = _list(cluster, None, principal=ALICE)
    assert refused.error_code == E.cluster_authorization_failed and refused.topics == ()


def test_a_controller_without_a_commit_is_request_timed_out(machine: Machine) -> None:
    """The entries that reach the controller are REQUEST_TIMED_OUT when no commit comes in
    time; those refused before keep their own codes."""
    cluster = Cluster(machine)
    machine.unavailable = True
    answers = _alter(cluster, [("t", [(0, [2, 3, 4]), (1, None)]), ("t", [(2, [1, 2, 4])])])
    assert _codes(answers) == {
        ("t", 0): E.request_timed_out,
        ("t", 1): E.no_reassignment_in_progress,
        ("t", 2): E.request_timed_out,
    }


def test_a_node_moved_off_a_partition_keeps_knowing_its_leader(machine: Machine) -> None:
    """LeadershipDirectory.not_hosted (a replica dropped by a move): this node leads the group
    no more, another node's leadership stays known for Metadata."""
    cluster = Cluster(machine)
    directory = cluster.leadership
    directory._known["g"] = Leadership(2, 5, (2, 3))
    directory._known["mine"] = Leadership(1, 5, (1, 2))
    directory._led["mine"] = Leadership(1, 5, (1, 2))
    directory.not_hosted("g")
    directory.not_hosted("mine")
    assert directory.lookup("g") == Leadership(2, 5, (2, 3))
    assert directory.lookup("mine") is None and "mine" not in directory._led


def test_a_move_past_a_nodes_replica_budget_is_refused(machine: Machine) -> None:
    """A node takes no more replicas by moves than its budget holds, as by creations: the
    request's earlier moves counted, the one past it INVALID_REPLICA_ASSIGNMENT and not
    proposed. (Only what a move adds counts: nodes 1-3 hold 3 each, past a budget of 2.)"""
    cluster = Cluster(machine, budget=2)
    answers = _alter(cluster, [("t", [(0, [1, 2, 4]), (1, [1, 4, 3]), (2, [4, 2, 3])])])
    assert answers == {
        ("t", 0): (E.none, None),
        ("t", 1): (E.none, None),
        ("t", 2): (
            E.invalid_replica_assignment,
            "node 4 would hold 3 partition replicas; it has room for 2 partition replicas "
            "(max.partition.replicas.per.node)",
        ),
    }
    assert sorted(machine.topic("t")["moves"]) == [0, 1]
    assert _codes(_alter(cluster, [("t", [(2, [3, 2, 1])])])) == {("t", 2): E.none}
