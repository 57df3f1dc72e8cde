"""A quiet partition's leader held (SIGSTOP) for longer than its lease, while its followers'
nodes stay up and keep pinging it, and woken by a produce the moment it runs again (SIGCONT):
it leads on and takes the write. Its followers' pings that waited in its sockets through the
stall are read before its lease is judged (driver.wake_to_lead dates the lease from the
mesh's silences, which are stale until they are). And an awake leader held under an election
timeout leads on too. A needless leader change here is an availability blip,
NOT_LEADER_OR_FOLLOWER to every producer of the node's partitions.
"""

from __future__ import annotations

import time

import pytest
from support import wire as W
from support.cluster import Cluster, wait_for

from raftlog.common.errors import ErrorCode

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TOPIC = "stalled"
# Past the leader's lease (0.45 s) and the minimum election timeout (0.5 s); well short of
# the earliest election its followers may hold without it: their keepalive finds it silent
# after 0.5 s, and they stand a whole timeout after that less two rounds (0.95 s in all).
STALL = 0.6
ROUNDS = 5
# An awake leader's stall: over its lease's first heartbeat round after the stall, under what
# the keepalive's late rounds find (0.5 s) and under the followers' election timeout.
AWAKE_STALL = 0.35


def _quiet(cluster: Cluster) -> bool:
    replicas = cluster.partition_status(TOPIC, 0)
    return len(replicas) == 3 and all(p.get("quiet") for p in replicas.values())


def _produce_frame(wire: W.KafkaWire, value: bytes) -> tuple[int, bytes, type]:
    """A Produce (acks=all) encoded before the stall: sent, it reaches the node at once."""
    version = wire.version(W.PRODUCE)
    payload = W.build(
        W.request_schema(W.PRODUCE, version),
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": 30_000,
            "topic_data": [
                {
                    "name": TOPIC,
                    "partition_data": [{"index": 0, "records": W.make_batch([(None, value)])}],
                }
            ],
        },
    )
    cid = wire.next_correlation_id()
    return cid, W.encode_request(payload, cid), W.response_schema(W.PRODUCE, version)


def test_a_quiet_leader_held_past_its_lease_and_woken_by_a_write_leads_on(
    cluster_factory,
) -> None:
    cluster = cluster_factory(name="stalled")
    cluster.create_topic(TOPIC, partitions=1, replication_factor=3)
    W.topic_metadata(cluster.bootstrap, TOPIC)
    leader, term = cluster.leader(TOPIC, 0)
    with W.KafkaWire(cluster.node(leader).kafka) as wire:
        assert wire.produce(TOPIC, 0, W.make_batch()).error == ErrorCode.none
        for i in range(ROUNDS):
            wait_for(lambda: _quiet(cluster), 30, what="every replica of the partition quiet")
            cid, frame, response = _produce_frame(wire, b"after stall %d" % i)
            cluster.pause(leader)
            time.sleep(STALL)
            if i % 2:  # the write waits in the socket with the pings, or follows them
                wire.send_bytes(frame)
                cluster.resume(leader)
            else:
                cluster.resume(leader)
                wire.send_bytes(frame)
            got, body = W.decode_response(wire.recv_frame(), response)
            assert got == cid
            (topic,) = body.responses
            (answer,) = topic.partition_responses
            assert W.code(answer.error_code) == ErrorCode.none, f"round {i}"
            assert cluster.current_leader(TOPIC, 0) == (leader, term), f"round {i}"
    time.sleep(1.5)  # a step-down at the next tick, or a follower's election, would show
    assert cluster.current_leader(TOPIC, 0) == (leader, term)
    assert all(p["term"] == term for p in cluster.partition_status(TOPIC, 0).values())


def test_an_awake_leader_held_under_an_election_timeout_leads_on(cluster_factory) -> None:
    """A leader a write just woke is held (SIGSTOP) 0.35 s: its followers' answers and pings
    wait through the stall and count as heard when it began (Raft.age_answers, the driver's
    late tick: Mesh.loop_held), as do the answers to its first heartbeat after it. Its grace
    counts from when its followers last answered, which they did just before: it hears them
    answer its next heartbeat in time, and leads on. Counted from its lease's last renewal,
    up to a lease old, the grace was a tick or two once the stall fell late in that cycle."""
    cluster = cluster_factory(name="stalled-awake")
    cluster.create_topic(TOPIC, partitions=1, replication_factor=3)
    W.topic_metadata(cluster.bootstrap, TOPIC)
    leader, term = cluster.leader(TOPIC, 0)
    with W.KafkaWire(cluster.node(leader).kafka) as wire:
        for i in range(2 * ROUNDS):
            # writes keep it awake; the stall falls at another point of its lease's cycle
            written = time.monotonic() + 0.5 + 0.047 * i
            while time.monotonic() < written:
                assert wire.produce(TOPIC, 0, W.make_batch()).error == ErrorCode.none, i
                time.sleep(0.02)
            cluster.pause(leader)
            time.sleep(AWAKE_STALL)
            cluster.resume(leader)
            time.sleep(0.3)  # its grace, and the heartbeats after it
            assert cluster.current_leader(TOPIC, 0) == (leader, term), f"round {i}"
        assert wire.produce(TOPIC, 0, W.make_batch()).error == ErrorCode.none
    assert all(p["term"] == term for p in cluster.partition_status(TOPIC, 0).values())
