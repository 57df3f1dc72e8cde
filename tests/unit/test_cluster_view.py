"""ClusterView keeps each topic's TopicInfo from one request to the next: every change the
controller applies to a topic (its configs, its partition count, a move, its deletion and a
new topic of the same name) and a snapshot that replaces the topics must be seen by the next
produce or Metadata, and who leads a partition is read afresh at every read. Over a real
one-node controller machine and the real LeadershipDirectory."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.controller_machine import OneNodeController as Machine
from support.raftnet import Clock

import raftlog.controller.syncobj_fork as core
from raftlog.api.values import TopicInfo
from raftlog.cluster.leadership import LeadershipDirectory
from raftlog.node.cluster_view import ClusterView

FIRST_ID = "00000000-0000-0000-0000-000000000001"
SECOND_ID = "00000000-0000-0000-0000-000000000002"


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Machine]:
    clock = Clock()
    monkeypatch.setattr(core, "monotonicTime", clock)
    machine = Machine(tmp_path, clock)
    for node_id in (1, 2, 3):
        machine.run("register_node", node_id, "h", 9000 + node_id, None, ["h", 1])
    machine.run("create_topic", "t", FIRST_ID, [[1, 2], [2, 3]], {"retention.ms": "1"}, False)
    yield machine
    machine.close()


def view_of(machine: Machine) -> tuple[ClusterView, LeadershipDirectory]:
    mesh = SimpleNamespace(on_control=lambda *a: None, on_peer_change=[])
    leadership = LeadershipDirectory(1, mesh)  # type: ignore[arg-type]
    leadership.alive = lambda node_id: True  # type: ignore[method-assign]
    node = SimpleNamespace(
        node_id=1,
        controller=machine,
        leadership=leadership,
        partitions={},
        config=SimpleNamespace(listeners=[SimpleNamespace(name="PLAINTEXT")]),
    )
    return ClusterView(node), leadership  # type: ignore[arg-type]


def topic(view: ClusterView, name: str = "t") -> TopicInfo:
    info = view.topic(name)
    assert info is not None
    return info


def test_a_topic_is_kept_between_requests(machine: Machine) -> None:
    """What the others test is worth testing: unchanged, the same TopicInfo is served."""
    view, _ = view_of(machine)
    assert topic(view) is topic(view)
    assert view.topics()["t"] is topic(view)
    assert view.topic_by_id(uuid.UUID(FIRST_ID)) is topic(view)


def test_a_config_change_is_seen(machine: Machine) -> None:
    view, _ = view_of(machine)
    assert topic(view).configs == {"retention.ms": "1"}
    machine.run("set_topic_configs", "t", {"retention.ms": "2", "cleanup.policy": "compact"})
    assert topic(view).configs == {"retention.ms": "2", "cleanup.policy": "compact"}
    assert view.topics()["t"].configs["retention.ms"] == "2"


def test_added_partitions_are_seen(machine: Machine) -> None:
    view, _ = view_of(machine)
    assert len(topic(view).partitions) == 2
    machine.run("add_partitions", "t", 3, [[3, 1]])
    assert len(topic(view).partitions) == 3
    assert topic(view).partitions[2].replicas == (3, 1)
    assert [p.index for p in view.topics()["t"].partitions] == [0, 1, 2]


def test_a_reassignment_and_its_finish_are_seen(machine: Machine) -> None:
    view, _ = view_of(machine)
    assert topic(view).partitions[0].replicas == (1, 2)
    machine.run("alter_reassignments", "t", [(0, [2, 3])])
    moving = topic(view).partitions[0]
    assert (moving.replicas, moving.adding, moving.removing) == ((2, 3, 1), (3,), (1,))
    assert view.reassigning() == {"t": [0]}
    machine.run("finish_reassignment", "t", 0, [2, 3])
    done = topic(view).partitions[0]
    assert (done.replicas, done.adding, done.removing) == ((2, 3), (), ())


def test_a_deleted_topic_is_gone_and_a_new_one_of_its_name_is_new(machine: Machine) -> None:
    view, _ = view_of(machine)
    assert topic(view).topic_id == uuid.UUID(FIRST_ID)
    machine.run("delete_topic", "t")
    assert view.topic("t") is None
    assert "t" not in view.topics()
    assert view.topic_by_id(uuid.UUID(FIRST_ID)) is None
    machine.run("create_topic", "t", SECOND_ID, [[3]], {}, True)
    again = topic(view)
    assert (again.topic_id, len(again.partitions), again.configs, again.internal) == (
        uuid.UUID(SECOND_ID),
        1,
        {},
        True,
    )
    assert view.topic_by_id(uuid.UUID(SECOND_ID)) is again


def test_topics_replaced_by_a_snapshot_are_seen(machine: Machine) -> None:
    """A snapshot install sets the machine's state from the dump (no command applied, no
    topics_version moved): its topics are new dicts."""
    view, _ = view_of(machine)
    assert topic(view).configs == {"retention.ms": "1"}
    installed = copy.deepcopy(machine.state.topics)
    installed["t"]["configs"] = {"retention.ms": "3"}
    machine.state.topics = installed
    assert topic(view).configs == {"retention.ms": "3"}


def test_who_leads_is_read_afresh_from_a_kept_topic(machine: Machine) -> None:
    """A TopicInfo kept, or held by a request across an await, is no snapshot of who leads:
    each read of a partition asks the leadership directory."""
    view, leadership = view_of(machine)
    kept = topic(view)
    assert kept.partitions[0].leader == -1
    leadership.observe(f"{FIRST_ID}/0", 2, 4, (1, 2))
    assert topic(view) is kept
    assert (kept.partitions[0].leader, kept.partitions[0].leader_epoch) == (2, 4)
    assert [p.leader for p in kept.partitions] == [2, -1]
    assert [p.leader for p in kept.partitions[-1:]] == [-1]
    leadership.alive = lambda node_id: node_id != 2  # type: ignore[method-assign]
    assert kept.partitions[0].leader == -1 and kept.partitions[0].offline == (2,)
