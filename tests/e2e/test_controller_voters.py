"""The controller quorum's bounded voters (issue 44 item 3) on five real nodes: nodes 1-3 vote,
4 and 5 observe. An observer serves metadata and creates a topic through the controller; the
controller leader is killed and the controller still commits; the dead voter is replaced by
`raftlog cluster decommission` (observer 4 made a voter, the dead node removed), then the live
controller leader is decommissioned too (it hands its leadership over, observer 5 takes its
place); every node agrees on the voter set after each, and the cluster still creates topics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kafka.admin import KafkaAdminClient
from support import groups as G
from support import wire as W
from support.cluster import Cluster, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

KILLED: dict[str, int] = {}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with G.running_cluster(tmp_path_factory.mktemp("voters"), nodes=5, name="voters") as c:
        yield c


def _until(what: str, check: Callable[[], Any], seconds: float = 60.0) -> Any:
    return wait_for(check, seconds, what=what)


def _voter_sets(cluster: Cluster) -> dict[int, tuple[list[int], bool]]:
    """Each live node's (controller voters, whether it is one)."""
    return {
        n: (st["controller_voters"], st["controller_voter"])
        for n, st in cluster.statuses().items()
        if cluster.is_alive(n)
    }


def _agree(cluster: Cluster, voters: list[int]) -> bool:
    sets = _voter_sets(cluster)
    return bool(sets) and all(v == (voters, n in voters) for n, v in sets.items())


def _create_through(cluster: Cluster, node: int, topic: str) -> None:
    """CreateTopics sent to `node` only; its Metadata then names the topic with a leader on
    every partition (the controller's commit applied there)."""
    with W.KafkaWire(cluster.node(node).kafka, timeout=60) as w:
        error, message = G.create_topic(w, topic, 3, 3)
        assert error == G.NONE, (node, error, message)

        def led() -> bool:
            _, topics = G.metadata(w, [topic], allow_auto_topic_creation=False)
            meta = topics.get(topic)
            return meta is not None and all(p.leader >= 0 for p in meta.partitions.values())

        _until(f"{topic} led, as node {node} says", led)


def _no_errors(cluster: Cluster) -> None:
    for n in cluster.node_ids:
        text = cluster.node(n).log.read_text(errors="replace")
        assert " ERROR " not in text and "Traceback" not in text, f"node {n} logged an error"


def test_three_nodes_vote_and_the_others_observe(cluster: Cluster) -> None:
    """A new five-node cluster's voters are nodes 1-3 (controller.quorum.size 3), on every
    node's word, in `raftlog cluster status` and in DescribeQuorum, whose observers are 4, 5."""
    _until("every node names voters 1-3", lambda: _agree(cluster, [1, 2, 3]))
    lines = cluster.cli("cluster", "status", "--data", str(cluster.data_root)).stdout.splitlines()
    for n in cluster.node_ids:
        (line,) = [x for x in lines if x.startswith(f"node {n} ")]
        assert ("controller voter" if n <= 3 else "controller observer") in line, line
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:

        def described() -> Any:
            (partition,) = admin.describe_metadata_quorum()["topics"][0]["partitions"]
            return partition if len(partition["observers"]) == 2 else None

        partition = _until("DescribeQuorum names both observers", described)
    finally:
        admin.close()
    assert sorted(v["replica_id"] for v in partition["current_voters"]) == [1, 2, 3]
    assert sorted(o["replica_id"] for o in partition["observers"]) == [4, 5]


def test_an_observer_serves_metadata_and_creates_topics(cluster: Cluster) -> None:
    _create_through(cluster, 5, "made-by-an-observer")
    with W.KafkaWire(cluster.node(4).kafka) as w:
        _, topics = G.metadata(w, ["made-by-an-observer"], allow_auto_topic_creation=False)
    assert topics["made-by-an-observer"].error == G.NONE


def test_the_controller_works_with_its_leader_killed(cluster: Cluster) -> None:
    leader = _until("a controller leader", cluster.controller_leader)
    assert leader in (1, 2, 3)
    cluster.kill(leader)
    KILLED["voter"] = leader
    others = {1, 2, 3} - {leader}
    _until("another voter leads the controller", lambda: cluster.controller_leader() in others)
    _create_through(cluster, 4, "after-a-voter-died")


def test_a_dead_voter_is_replaced_by_an_observer(cluster: Cluster) -> None:
    """`raftlog cluster decommission` of the killed voter remakes its replicas on the live
    nodes and replaces it in the controller quorum: observer 4 is added, then it is removed."""
    dead = KILLED["voter"]
    out = cluster.cli(
        "cluster", "decommission", str(dead), "--data", str(cluster.data_root), timeout=240
    ).stdout
    assert "node 4 is a controller voter now" in out, out
    assert f"node {dead} is no longer a controller voter" in out, out
    voters = sorted({1, 2, 3, 4} - {dead})
    _until(f"every live node names voters {voters}", lambda: _agree(cluster, voters))
    _create_through(cluster, 5, "after-the-replacement")


def test_a_live_controller_leader_is_decommissioned(cluster: Cluster) -> None:
    """The controller's leader, decommissioned, hands its leadership over before it is
    removed; observer 5 takes its place, and the three voters left commit without it."""
    leader = _until("a controller leader", cluster.controller_leader)
    out = cluster.cli(
        "cluster", "decommission", str(leader), "--data", str(cluster.data_root), timeout=240
    ).stdout
    assert "node 5 is a controller voter now" in out, out
    assert f"node {leader} is no longer a controller voter" in out, out
    voters = sorted({1, 2, 3, 4, 5} - {KILLED["voter"], leader})
    _until(f"every live node names voters {voters}", lambda: _agree(cluster, voters))
    assert cluster.controller_leader() != leader
    cluster.kill(leader)
    _create_through(cluster, 5, "after-the-leader-left")
    _no_errors(cluster)
