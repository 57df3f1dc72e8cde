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
  node that was down when an ACL was added learns it;
- a raw CreateAcls over the per-request bound (10,000) is answered POLICY_VIOLATION and stores
  nothing, and one with a 1 MiB resource name, principal or host gets INVALID_REQUEST for it;
  the node answers on;
- 30,000 ACLs made by confluent-kafka's AdminClient in three requests are described whole by
  it and by every node, a DeleteAcls matching all of them deletes none (Kafka's bound), and
  three that match 10,000 each delete them.

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
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
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
DESCRIBE_ACLS, CREATE_ACLS = 29, 30
POLICY_VIOLATION, INVALID_REQUEST = 44, 42
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


def create_raw(addr: tuple[str, int], creations: list[tuple[Any, ...]]) -> list[tuple[int, Any]]:
    """One raw CreateAcls v3 of these bindings: each creation's (error code, message)."""
    fields = ("resource_type", "resource_name", "resource_pattern_type", "principal", "host")
    entries = [
        {**dict(zip(fields, c[:5], strict=True)), "operation": c[5], "permission_type": c[6]}
        for c in creations
    ]
    with W.KafkaWire(addr) as conn:
        response = conn.call(CREATE_ACLS, 3, {"creations": entries}, timeout=120)
    return [(W.code(r.error_code), r.error_message) for r in response.results]


def test_hostile_creations_are_refused_and_store_nothing(cluster: Cluster) -> None:
    """10,001 creations: refused whole before anything is proposed. A 1 MiB resource name,
    principal or host: INVALID_REQUEST for that creation; the valid one beside them is made.
    A later change reaching every node shows nothing else was stored, and the node answers."""
    addr = cluster.node(cluster.node_ids[0]).kafka_addr
    flood = [(TOPIC, f"flood-{i}", LITERAL, ANON, "*", READ, ALLOW) for i in range(10_001)]
    results = create_raw(addr, flood)
    assert len(results) == 10_001 and {c for c, _ in results} == {POLICY_VIOLATION}
    assert "at most 10000" in results[0][1], results[0]

    huge = "x" * (1 << 20)
    valid = (TOPIC, "acl-bounded", LITERAL, ANON, "*", READ, ALLOW)
    results = create_raw(
        addr,
        [
            (TOPIC, huge, LITERAL, ANON, "*", READ, ALLOW),
            (GROUP, "g", LITERAL, "User:" + huge, "*", READ, ALLOW),
            (GROUP, "g", LITERAL, ANON, huge, READ, ALLOW),
            valid,
        ],
    )
    assert [c for c, _ in results] == [INVALID_REQUEST] * 3 + [0], results
    assert [message.split(" of ")[0] for _, message in results[:3]] == [
        "TOPIC resource name",
        "Principal",
        "Host",
    ]
    wait_described(cluster, {valid})  # on every node: nothing else was stored
    assert cluster.live_nodes() == cluster.node_ids
    acl(cluster, "remove", "--topic", "acl-bounded")
    wait_described(cluster, set())


def test_many_acls_are_made_in_bounded_requests_and_described_whole(cluster: Cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    chunks, per_request = 3, 10_000
    wanted = set()
    for chunk in range(chunks):
        bindings = [
            AclBinding(
                ResourceType.TOPIC,
                f"bulk-{chunk}-{i}",
                ResourcePatternType.LITERAL,
                f"User:bulk-{chunk}",
                "*",
                AclOperation.READ,
                AclPermissionType.ALLOW,
            )
            for i in range(per_request)
        ]
        for future in admin.create_acls(bindings, request_timeout=120).values():
            future.result()
        wanted |= {
            (TOPIC, f"bulk-{chunk}-{i}", LITERAL, f"User:bulk-{chunk}", "*", READ, ALLOW)
            for i in range(per_request)
        }
    everything = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    described = admin.describe_acls(everything, request_timeout=120).result()
    assert len(described) == chunks * per_request
    assert {(b.name, b.principal) for b in described} == {(w[1], w[3]) for w in wanted}
    wait_described(cluster, wanted, timeout=120)

    with pytest.raises(KafkaException) as refused:
        admin.delete_acls([everything], request_timeout=120)[everything].result()
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "Cannot remove more than 10000 acls" in refused.value.args[0].str()
    assert len(described_by(cluster.node(cluster.node_ids[-1]).kafka_addr)) == len(wanted)

    for chunk in range(chunks):
        of_chunk = AclBindingFilter(
            ResourceType.TOPIC,
            None,
            ResourcePatternType.ANY,
            f"User:bulk-{chunk}",
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        deleted = admin.delete_acls([of_chunk], request_timeout=120)[of_chunk].result()
        assert len(deleted) == per_request
    wait_described(cluster, set())


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
