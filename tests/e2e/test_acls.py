"""Authorization end to end: three nodes with Kafka's ACL authorizer and
allow.everyone.if.no.acl.found, ACLs managed with `raftlog acl`, obeyed by real clients.

- a DENY of WRITE on a topic for User:ANONYMOUS (the principal of a plaintext client) fails
  confluent-kafka's produce with TOPIC_AUTHORIZATION_FAILED, and removing it lets the same
  produce through;
- a DENY of READ on a group fails a confluent-kafka consumer's JoinGroup with
  GROUP_AUTHORIZATION_FAILED, and removing it lets the consumer join and read;
- a topic the principal may not DESCRIBE is missing from the metadata listing of
  confluent-kafka's AdminClient and of kcat, and comes back when the ACL goes;
- `raftlog acl list` shows what `add` made and `remove` took away, and every node describes the
  same ACLs (they are controller state);
- ACLs survive a full restart of the cluster and a kill -9 of the controller's leader, and a
  node that was down when an ACL was added learns it.

Each ACL that denies is paired with an ALLOW of ALL for User:* on the same resource, so the
client gets past Metadata and FindCoordinator and the API under test is the one refusing; on
its own, a DENY also takes away the "no ACL" default for every other operation.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient
from support import groups as G
from support import wire as W
from support.authz import join_outcome, produce_error, wait_produce
from support.cluster import Cluster, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
BROKER = {
    "authorizer.class.name": AUTHORIZER,
    "allow.everyone.if.no.acl.found": True,
    **G.FAST_GROUPS,
}
ANON = "User:ANONYMOUS"
DESCRIBE_ACLS = 29
# Kafka's codes: resource type, pattern type, operation, permission
TOPIC, GROUP, LITERAL = 2, 3, 3
ALL, READ, WRITE, DESCRIBE = 2, 3, 4, 8
DENY, ALLOW = 2, 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with G.running_cluster(tmp_path_factory.mktemp("acls"), name="acls", broker=BROKER) as c:
        yield c


def acl(cluster: Cluster, action: str, *options: str) -> str:
    """`raftlog acl ACTION ...` against the cluster; its output."""
    proc = cluster.cli("acl", action, "--bootstrap", cluster.bootstrap, *options, timeout=120)
    return proc.stdout


def address(cluster: Cluster, node_id: int) -> str:
    host, port = cluster.node(node_id).kafka_addr
    return f"{host}:{port}"


def described_by(addr: tuple[str, int]) -> set[tuple[Any, ...]]:
    """Every ACL one node describes (DescribeAcls with the ANY filter, on that node)."""
    with W.KafkaWire(addr) as conn:
        response = conn.call(
            DESCRIBE_ACLS,
            3,
            {
                "resource_type_filter": 1,
                "resource_name_filter": None,
                "pattern_type_filter": 1,
                "principal_filter": None,
                "host_filter": None,
                "operation": 1,
                "permission_type": 1,
            },
        )
    assert W.code(response.error_code) == 0, response.error_message
    return {
        (
            r.resource_type,
            r.resource_name,
            r.pattern_type,
            a.principal,
            a.host,
            a.operation,
            a.permission_type,
        )
        for r in response.resources
        for a in r.acls
    }


def wait_described(cluster: Cluster, wanted: set[tuple[Any, ...]], nodes=None, timeout=60.0):
    """Until every (live) node describes exactly these ACLs."""
    ids = list(nodes) if nodes is not None else cluster.live_nodes()
    wait_for(
        lambda: all(described_by(cluster.node(i).kafka_addr) == wanted for i in ids),
        timeout,
        what=f"nodes {ids} to describe {sorted(wanted)}",
    )


def plain(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap}


def listed_by_admin(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


def listed_by_kcat(bootstrap: str) -> set[str]:
    done = subprocess.run(
        ["kcat", "-b", bootstrap, "-L", "-J", "-m", "30"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {t["topic"] for t in json.loads(done.stdout)["topics"]}


def test_a_deny_on_write_fails_the_produce_until_it_is_removed(cluster: Cluster) -> None:
    topic = "acl-write"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    assert produce_error(plain(cluster.bootstrap), topic) is None
    out = acl(cluster, "add", "--topic", topic, "--allow-principal", "User:*")
    assert out == f"added ALLOW User:* ALL on TOPIC {topic} (LITERAL) from *\n", out
    acl(cluster, "add", "--topic", topic, "--deny-principal", ANON, "--operation", "Write")
    wait_produce(plain(cluster.bootstrap), topic, KafkaError.TOPIC_AUTHORIZATION_FAILED)

    listing = acl(cluster, "list", "--topic", topic)
    rows = [line.split() for line in listing.splitlines()[1:]]
    assert sorted(rows) == [
        ["User:*", "*", "ALL", "ALLOW", "TOPIC", topic, "LITERAL"],
        [ANON, "*", "WRITE", "DENY", "TOPIC", topic, "LITERAL"],
    ], listing

    removed = acl(
        cluster, "remove", "--topic", topic, "--deny-principal", ANON, "--operation", "Write"
    )
    assert removed.startswith(f"removed DENY {ANON} WRITE on TOPIC {topic}"), removed
    wait_produce(plain(cluster.bootstrap), topic, None)
    acl(cluster, "remove", "--topic", topic)  # every ACL of the topic
    assert acl(cluster, "list", "--topic", topic).splitlines()[1:] == []
    wait_described(cluster, set())


def test_a_deny_on_read_fails_the_group_join_until_it_is_removed(cluster: Cluster) -> None:
    topic, group = "acl-read", "acl-group"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    acl(cluster, "add", "--group", group, "--allow-principal", "User:*")
    acl(cluster, "add", "--group", group, "--deny-principal", ANON, "--operation", "Read")
    wanted = {
        (GROUP, group, LITERAL, "User:*", "*", ALL, ALLOW),
        (GROUP, group, LITERAL, ANON, "*", READ, DENY),
    }
    wait_described(cluster, wanted)
    assert (
        join_outcome(plain(cluster.bootstrap), group, topic)
        == KafkaError.GROUP_AUTHORIZATION_FAILED
    )
    acl(cluster, "remove", "--group", group, "--deny-principal", ANON, "--operation", "Read")
    wait_described(cluster, {(GROUP, group, LITERAL, "User:*", "*", ALL, ALLOW)})
    assert join_outcome(plain(cluster.bootstrap), group, topic) == "assigned"
    acl(cluster, "remove", "--group", group)
    wait_described(cluster, set())


def test_a_topic_that_may_not_be_described_is_not_listed(cluster: Cluster) -> None:
    hidden, shown = "acl-hidden", "acl-shown"
    for name in (hidden, shown):
        cluster.create_topic(name, partitions=1, replication_factor=3)
    assert {hidden, shown} <= listed_by_admin(cluster.bootstrap)
    acl(cluster, "add", "--topic", hidden, "--deny-principal", ANON, "--operation", "Describe")
    wait_for(
        lambda: hidden not in listed_by_admin(cluster.bootstrap),
        60,
        what=f"{hidden} to leave the listing",
    )
    for node_id in cluster.node_ids:  # every node hides it: the ACL is everywhere
        listed = listed_by_admin(address(cluster, node_id))
        assert hidden not in listed and shown in listed, (node_id, listed)
    if shutil.which("kcat"):
        listed = listed_by_kcat(cluster.bootstrap)
        assert hidden not in listed and shown in listed, listed
    acl(cluster, "remove", "--topic", hidden)
    wait_for(
        lambda: hidden in listed_by_admin(cluster.bootstrap), 60, what=f"{hidden} to come back"
    )


def test_acls_survive_a_full_restart_and_a_controller_failover(cluster: Cluster) -> None:
    """Last in this module: it restarts the shared cluster."""
    topic = "acl-kept"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    acl(cluster, "add", "--topic", topic, "--allow-principal", "User:*")
    acl(cluster, "add", "--topic", topic, "--deny-principal", ANON, "--operation", "Write")
    kept = {
        (TOPIC, topic, LITERAL, "User:*", "*", ALL, ALLOW),
        (TOPIC, topic, LITERAL, ANON, "*", WRITE, DENY),
    }
    wait_described(cluster, kept)
    wait_produce(plain(cluster.bootstrap), topic, KafkaError.TOPIC_AUTHORIZATION_FAILED)

    cluster.down()
    assert not cluster.live_nodes()
    for node_id in cluster.node_ids:
        cluster.restart(node_id, wait=False)
    cluster.wait_all_ready(timeout=120)
    wait_described(cluster, kept)
    wait_produce(plain(cluster.bootstrap), topic, KafkaError.TOPIC_AUTHORIZATION_FAILED)

    wait_for(lambda: cluster.controller_leader() is not None, 60, what="a controller leader")
    leader = cluster.controller_leader()
    assert leader is not None
    cluster.kill(leader)
    others = [i for i in cluster.node_ids if i != leader]

    def new_leader() -> bool:
        statuses = [cluster.try_status(i) for i in others]
        leaders = {s.get("controller_leader") for s in statuses if s is not None}
        return len(leaders) == 1 and leaders.pop() in others

    wait_for(new_leader, 60, what="a new controller leader")
    wait_described(cluster, kept, nodes=others)
    # the controller still takes changes, and the node that was down learns them
    group = f"acl-after-{uuid.uuid4().hex[:6]}"
    acl(cluster, "add", "--group", group, "--deny-principal", ANON, "--operation", "Read")
    after = kept | {(GROUP, group, LITERAL, ANON, "*", READ, DENY)}
    wait_described(cluster, after, nodes=others)
    cluster.restart(leader)
    cluster.wait_all_ready(timeout=120)
    wait_described(cluster, after, nodes=cluster.node_ids)
    wait_produce(plain(address(cluster, leader)), topic, KafkaError.TOPIC_AUTHORIZATION_FAILED)
