"""Partition replicas that move (issue 44, KIP-455) on four real nodes, driven by kafka-python's
admin client (confluent-kafka's AdminClient has no reassignment call): a partition led on
nodes 1-3 moves to 2-4 while a producer writes to it, its leader is killed with kill -9 in
the middle of another move, and a third move is cancelled. Every acknowledged record is read
back once, in order, from the new replicas; the nodes left out drop their copies. Then the
operator's commands: node 4 is drained (`raftlog cluster decommission`), given its share back
(`raftlog cluster rebalance`), and replaced after its disk is lost."""

from __future__ import annotations

import shutil
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from support import groups as G
from support import wire as W
from support.cluster import Cluster, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with G.running_cluster(tmp_path_factory.mktemp("moves"), nodes=4, name="moves") as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster: Cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=60000)
    yield client
    client.close()


def _replicas(cluster: Cluster, topic: str) -> tuple[tuple[int, ...], int]:
    """(replicas, leader) of partition 0 as node 1's Metadata says."""
    with W.KafkaWire(cluster.node(1).kafka) as w:
        response = G.call(
            w,
            W.METADATA,
            {
                "topics": [{"name": topic, "topic_id": W._ZERO_UUID}],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
            timeout=30,
        )
    p = response.topics[0].partitions[0]
    return tuple(int(r) for r in p.replica_nodes), int(p.leader_id)


def _holds(cluster: Cluster, node: int, topic: str) -> bool:
    """Whether the node keeps a copy of partition 0 on its disk."""
    return (cluster.node(node).data_dir / "data" / f"{topic}-0").exists()


def _until(what: str, check, seconds: float = 90.0):
    return wait_for(check, seconds, what=what)


class Writer:
    """An idempotent producer writing numbered records until stopped; what it was told was
    acknowledged is what must be read back."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer(
            {"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked.append(msg.value())
        else:
            self.failed.append(str(err))

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            self._producer.produce(self._topic, f"{n:08d}".encode(), on_delivery=self._delivered)
            n += 1
            self._producer.poll(0.002)
        self._producer.flush(60)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)


def _read_all(cluster: Cluster, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"read-{topic}-{time.monotonic()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for m in consumer.consume(1000, 1.0):
                if m.error() is None:
                    got.append(m.value())
    finally:
        consumer.close()
    return got


def _no_move(admin: KafkaAdminClient, topic: str):
    return lambda: not admin.list_partition_reassignments([TopicPartition(topic, 0)])


def test_a_partition_moves_to_other_nodes_under_writes_and_a_killed_leader(
    cluster: Cluster, admin: KafkaAdminClient
) -> None:
    topic = "moving"
    admin.create_topics([NewTopic(topic, num_partitions=-1, replica_assignments={0: [1, 2, 3]})])
    _until("the topic led", lambda: _replicas(cluster, topic)[1] in (1, 2, 3))
    writer = Writer(cluster, topic)
    try:
        _until("records acknowledged", lambda: len(writer.acked) > 500)
        tp = TopicPartition(topic, 0)
        assert admin.alter_partition_reassignments({tp: [2, 3, 4]}) == {tp: None}
        listed = admin.list_partition_reassignments([tp])
        if listed:  # it may already be done
            assert listed[tp]["adding_replicas"] == [4]
            assert listed[tp]["removing_replicas"] == [1]
        _until("the move to 2, 3, 4 done", _no_move(admin, topic))
        assert _replicas(cluster, topic)[0] == (2, 3, 4)
        _until("node 1 dropped its copy", lambda: not _holds(cluster, 1, topic))
        # The next move loses its leader halfway: a new one picks it up.
        assert admin.alter_partition_reassignments({tp: [1, 2, 3]}) == {tp: None}
        _until("node 1 a learner again", lambda: _holds(cluster, 1, topic))
        leader = _until("a leader", lambda: max(_replicas(cluster, topic)[1], 0))
        cluster.kill(leader)
        cluster.restart(leader)
        _until("the move to 1, 2, 3 done", _no_move(admin, topic), 120)
        assert _replicas(cluster, topic)[0] == (1, 2, 3)
        count = len(writer.acked)
        _until("writes go on after the moves", lambda: len(writer.acked) > count + 200)
    finally:
        writer.stop()
    acked = writer.acked
    got = _read_all(cluster, topic, len(acked))
    assert len(got) == len(set(got)), "a record was read twice"
    assert set(acked) <= set(got), f"{len(set(acked) - set(got))} acknowledged records lost"
    assert got == sorted(got), "records out of order"
    _no_errors(cluster)


def _no_errors(cluster: Cluster) -> None:
    for n in cluster.node_ids:
        if not cluster.node(n).log.exists():
            continue  # a node whose disk the test threw away
        text = cluster.node(n).log.read_text(errors="replace")
        assert " ERROR " not in text and "Traceback" not in text, f"node {n} logged an error"


def test_a_cancelled_move_returns_to_the_original_replicas(
    cluster: Cluster, admin: KafkaAdminClient
) -> None:
    topic = "unmoved"
    admin.create_topics([NewTopic(topic, num_partitions=-1, replica_assignments={0: [1, 2, 3]})])
    _until("the topic led", lambda: _replicas(cluster, topic)[1] in (1, 2, 3))
    tp = TopicPartition(topic, 0)
    cluster.pause(4)  # SIGSTOP: the move cannot finish, node 4 never catches up
    try:
        assert admin.alter_partition_reassignments({tp: [4, 2, 3]}) == {tp: None}
        listed = admin.list_partition_reassignments([tp])
        assert listed[tp]["adding_replicas"] == [4] and listed[tp]["removing_replicas"] == [1]
        assert set(_replicas(cluster, topic)[0]) == {1, 2, 3, 4}
        assert admin.alter_partition_reassignments({tp: None}) == {tp: None}
        _until("the move back done", _no_move(admin, topic))  # the leader finishes it
        assert _replicas(cluster, topic)[0] == (1, 2, 3)
    finally:
        cluster.resume(4)
    _until("node 4 holds no copy", lambda: not _holds(cluster, 4, topic))
    _no_errors(cluster)


def test_a_decommissioned_node_hands_every_replica_to_the_others(
    cluster: Cluster, admin: KafkaAdminClient
) -> None:
    """`raftlog cluster decommission 4` moves every replica node 4 holds (this topic's, and
    __consumer_offsets' from the reads above) to the other nodes, printing its progress; no
    partition lists node 4 after it, node 4 holds no copy, and every record is still there."""
    topic = "drained"
    admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=3)])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for n in range(400):
        producer.produce(topic, f"{n:08d}".encode(), partition=n % 4)
    assert producer.flush(60) == 0
    held = lambda: {  # noqa: E731
        (t["name"], p["partition_index"])
        for t in admin.describe_topics()
        for p in t["partitions"]
        if 4 in p["replica_nodes"]
    }
    assert held(), "node 4 should hold some replicas to start with"
    out = cluster.cli(
        "cluster", "decommission", "4", "--bootstrap", cluster.bootstrap, timeout=240
    ).stdout
    assert "moved off node 4" in out and "node 4 holds no replica now" in out, out
    assert not held()
    for p in range(4):
        _until(f"node 4 dropped {topic}-{p}", lambda p=p: not _exists(cluster, 4, topic, p))
    got = _read_all(cluster, topic, 400)
    assert sorted(got) == [f"{n:08d}".encode() for n in range(400)]
    _no_errors(cluster)


def _exists(cluster: Cluster, node: int, topic: str, partition: int) -> bool:
    return (cluster.node(node).data_dir / "data" / f"{topic}-{partition}").exists()


def test_a_rebalance_gives_an_empty_node_its_share(
    cluster: Cluster, admin: KafkaAdminClient
) -> None:
    """After the decommission above node 4 holds nothing; `raftlog cluster rebalance` moves
    replicas to it until no two nodes hold more than one replica apart, and every record of
    the drained topic is still there."""
    out = cluster.cli("cluster", "rebalance", "--bootstrap", cluster.bootstrap, timeout=300)
    assert "replicas per node now" in out.stdout, out.stdout
    held: dict[int, int] = {n: 0 for n in cluster.node_ids}
    for t in admin.describe_topics():
        for p in t["partitions"]:
            for r in p["replica_nodes"]:
                held[r] += 1
    assert max(held.values()) - min(held.values()) <= 1, held
    assert sorted(_read_all(cluster, "drained", 400)) == [f"{n:08d}".encode() for n in range(400)]
    _no_errors(cluster)


def test_a_node_gone_for_good_is_replaced_from_the_leaders(
    cluster: Cluster, admin: KafkaAdminClient
) -> None:
    """Node 4, holding its share after the rebalance, is killed and its disk thrown away;
    `raftlog cluster decommission 4` says so and makes its replicas again on the live nodes
    from the leaders: every partition has its three replicas, none on node 4, and every
    record of the drained topic is there."""
    cluster.kill(4)
    shutil.rmtree(cluster.node(4).data_dir)
    out = cluster.cli(
        "cluster", "decommission", "4", "--bootstrap", cluster.bootstrap, timeout=300
    ).stdout
    assert "node 4 is not live" in out and "node 4 holds no replica now" in out, out
    for t in admin.describe_topics():
        for p in t["partitions"]:
            assert 4 not in p["replica_nodes"] and len(p["replica_nodes"]) == 3, (t["name"], p)
    assert sorted(_read_all(cluster, "drained", 400)) == [f"{n:08d}".encode() for n in range(400)]
    _no_errors(cluster)
