"""JoinGroups never followed up. A v4+ JoinGroup without a member id is answered
MEMBER_ID_REQUIRED, and the group waits for that member to come back with its id before a
rebalance completes. It waited the member's session timeout (up to
group.max.session.timeout.ms, 30 min): one client's 100,000 such joins, answered in 16 s,
were each kept 30 min (750 B each: a node grew 73 MB every 16 s of it), and a group they
named could not complete a rebalance for as long. A real member comes back within a round
trip, so one that has not is now forgotten after PENDING_MEMBER_MAX_MS (10 s).
"""

from __future__ import annotations

import time

import pytest
from support import groups as G
from support import wire as W
from support.cluster import rss_kb

from kafka_api.codec import request_schema
from raftlog.groups.rebalance import PENDING_MEMBER_MAX_MS

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

JOIN_GROUP = 11
FLOOD = 50_000
HALF_AN_HOUR_MS = 1_800_000


def test_joins_never_followed_up_are_forgotten_within_seconds(module_cluster) -> None:
    """Two floods, PENDING_MEMBER_MAX_MS apart: the second takes the memory the first left,
    where it grew the coordinator as much again when every member was kept 30 min."""
    cluster = module_cluster
    group = "pending-flood"
    coordinator = G.coordinator_address(cluster.bootstrap, group)
    pid = cluster.node(coordinator.node_id).pid
    join = W.build(
        request_schema(JOIN_GROUP, 7),
        {
            "group_id": group,
            "session_timeout": HALF_AN_HOUR_MS,
            "rebalance_timeout": HALF_AN_HOUR_MS,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"x" * 100}],
        },
    )

    def flood() -> None:
        with W.KafkaWire(coordinator.address, timeout=60) as w:
            for start in range(0, FLOOD, 500):
                frames = (W.encode_request(join, i) for i in range(start, start + 500))
                w.send_bytes(b"".join(frames))
                for _ in range(500):
                    w.recv_frame(timeout=60)

    before = rss_kb(pid) or 0
    flood()
    first = rss_kb(pid) or 0
    time.sleep(PENDING_MEMBER_MAX_MS / 1000 + 1)
    flood()
    second = rss_kb(pid) or 0
    grown = [(first - before) // 1024, (second - first) // 1024]
    print(f"\ncoordinator RSS grown by {grown} MB by two floods of {FLOOD} joins")
    assert grown[0] > 10, grown  # (the flood costs what it did)
    assert grown[1] < grown[0] / 2, f"the first flood's members were kept: {grown} MB"
    # A real member still joins the group (its first generation: the flood is not in it).
    with W.KafkaWire(coordinator.address, timeout=120) as w:
        joined = G.join_group(w, group, [("range", b"")], timeout=60)
    assert joined.error == G.NONE, joined
    assert list(joined.members) == [joined.member_id]
    found = cluster.logged_errors()
    assert not found, found
