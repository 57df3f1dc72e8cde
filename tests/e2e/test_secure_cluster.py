"""`raftlog cluster up --secure` end to end, and the transaction attacks of issue 42 against
the authorizer it turns on. One three-node cluster, started by the flag with a SASL_PLAINTEXT
listener (the tools') and a PLAINTEXT one, where clients are User:ANONYMOUS:

- with no ACL an anonymous client gets nothing (its produce is refused, its Metadata lists
  no topic) and a client that does not log in on the SASL listener is cut off, while the
  CLI's own commands (topic create, acl add/list, user create, transactions list) work as
  the super user the flag made, with no option;
- a raw-wire client allowed to write the topic (the attacker) writes no WriteTxnMarkers
  (CLUSTER_AUTHORIZATION_FAILED) and produces nothing into the transaction of a SASL user's
  confluent-kafka transactional producer (the victim), naming its transactional id with the
  next sequence (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): the victim's next record is written
  and a read_committed consumer reads exactly what the victim sent. Granted WRITE on the
  victim's id, the same forged batch is written into its transaction: the ACL is what stops
  it. Even the super user's abort of the live transaction is refused (its coordinator runs
  it, kafka_api/handlers/write_txn_markers.py).
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

import kafka.errors as KE
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.admin._transactions import AbortTransactionSpec
from kafka.structs import TopicPartition as KafkaTopicPartition
from support import wire as W
from support.authz import produce_error
from support.cluster import Cluster, raftlog_argv, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TOPIC = "guarded"
VICTIM_ID = "victim"
ANON = "User:ANONYMOUS"
WRITE_TXN_MARKERS = 27
NONE, CLUSTER_AUTHORIZATION_FAILED, TXN_ID_AUTHORIZATION_FAILED = 0, 31, 53
TOPIC_AUTHORIZATION_FAILED = 29


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    c = Cluster(
        tmp_path_factory.mktemp("secure"),
        name="secure",
        listeners=("SASL_PLAINTEXT", "PLAINTEXT"),
        up_flags=("--secure",),
    )
    try:
        yield c.start()
    finally:
        c.stop()


def tool(c: Cluster, *args: str, check: bool = True, stdin: str | None = None) -> Any:
    """`raftlog ARGS --data <the cluster>`: the CLI as an operator runs it, no credentials
    given."""
    return subprocess.run(
        [*raftlog_argv(), *args, "--data", str(c.data_root)],
        input=stdin or "",
        capture_output=True,
        text=True,
        timeout=120,
        env=c.env,
        check=check,
    )


def plaintext(c: Cluster) -> str:
    return ",".join(c.node(n).listeners["PLAINTEXT"] for n in c.node_ids)


def plaintext_addr(c: Cluster, node_id: int) -> tuple[str, int]:
    return W.parse_address(c.node(node_id).listeners["PLAINTEXT"])


def admin_password(c: Cluster) -> str:
    props = dict(
        line.split("=", 1)
        for line in (c.data_root / "admin.properties").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    return props["sasl.password"]


def sasl(c: Cluster, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": c.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
    }


def kafka_python_admin(c: Cluster) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=c.bootstrap.split(","),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="admin",
        sasl_plain_password=admin_password(c),
        request_timeout_ms=30_000,
    )


def read_committed(c: Cluster, partition: int, settle_s: float = 4.0) -> list[bytes]:
    consumer = Consumer(
        {
            **sasl(c, "admin", admin_password(c)),
            "group.id": f"reader-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, partition, 0)])
    values: list[bytes] = []
    quiet_since, deadline = time.monotonic(), time.monotonic() + 60
    try:
        while time.monotonic() - quiet_since < settle_s and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                values.append(message.value())
                quiet_since = time.monotonic()
    finally:
        consumer.close()
    return values


def test_the_flag_starts_an_authorizer_and_the_tools_work(cluster: Cluster) -> None:
    assert "super user admin" in cluster.up_output
    props = cluster.data_root / "admin.properties"
    assert props.stat().st_mode & 0o077 == 0  # the password is the user's alone
    for node_id in cluster.node_ids:
        log = cluster.node(node_id).log.read_text()
        assert "no authorizer" not in log  # the warning of a cluster without one

    assert "created" in tool(cluster, "topic", "create", TOPIC, "--partitions", "2",
                             "--replication-factor", "3").stdout  # fmt: skip
    assert TOPIC in tool(cluster, "topic", "list").stdout.split()

    anonymous = {"bootstrap.servers": plaintext(cluster)}
    assert produce_error(anonymous, TOPIC) == TOPIC_AUTHORIZATION_FAILED
    with W.KafkaWire(plaintext_addr(cluster, 1)) as conn:
        assert TOPIC not in {t.name for t in conn.metadata().topics}  # DESCRIBE denied
    # no SASL login on the SASL listener: a Metadata closes the connection
    sasl_port = W.parse_address(cluster.bootstrap.split(",")[0])
    with W.KafkaWire(sasl_port) as conn, pytest.raises(W.ConnectionClosed):
        conn.metadata()

    tool(cluster, "user", "create", "alice", "--password-stdin", stdin="alice-pw\n")
    for operation in ("Write", "Describe"):
        tool(cluster, "acl", "add", "--allow-principal", "User:alice", "--operation", operation,
             "--topic", TOPIC, "--transactional-id", VICTIM_ID)  # fmt: skip
    listed = tool(cluster, "acl", "list", "--principal", "User:alice").stdout
    assert "WRITE" in listed and "TRANSACTIONAL_ID" in listed
    assert tool(cluster, "transactions", "list").stdout.startswith("TRANSACTIONAL-ID")


def forged_marker(c: Cluster, producer_id: int, epoch: int) -> int:
    leader, _ = c.leader(TOPIC, 0)
    with W.KafkaWire(plaintext_addr(c, leader)) as conn:
        response = conn.call(
            WRITE_TXN_MARKERS,
            1,
            {
                "markers": [
                    {
                        "producer_id": producer_id,
                        "producer_epoch": epoch,
                        "transaction_result": False,
                        "topics": [{"name": TOPIC, "partition_indexes": [0]}],
                        "coordinator_epoch": 0,
                    }
                ]
            },
        )
    return W.code(response.markers[0].topics[0].partitions[0].error_code)


def forged_produce(c: Cluster, producer_id: int, epoch: int, sequence: int) -> int:
    """A transactional batch naming the victim's transactional id, producer and next
    sequence, from the anonymous attacker."""
    leader, _ = c.leader(TOPIC, 0)
    batch = W.make_batch([(None, b"forged")], producer=(producer_id, epoch, sequence),
                         transactional=True)  # fmt: skip
    with W.KafkaWire(plaintext_addr(c, leader)) as conn:
        response = conn.call(
            W.PRODUCE,
            conn.version(W.PRODUCE),
            {
                "transactional_id": VICTIM_ID,
                "acks": -1,
                "timeout": 30_000,
                "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}],
            },
        )
    return W.code(response.responses[0].partition_responses[0].error_code)


def test_an_attacker_ends_and_joins_no_one_elses_transaction(cluster: Cluster) -> None:
    # the attacker may do what an ordinary client does: read and write the topic, and run
    # transactions of its own id
    tool(cluster, "acl", "add", "--allow-principal", ANON, "--operation", "All", "--topic", TOPIC)
    tool(cluster, "acl", "add", "--allow-principal", ANON, "--operation", "Write",
         "--transactional-id", "mallory")  # fmt: skip
    victim = Producer(
        {**sasl(cluster, "alice", "alice-pw"), "transactional.id": VICTIM_ID, "linger.ms": 0}
    )
    wait_for(lambda: _initialised(victim), 60, what="the victim's init_transactions")
    victim.begin_transaction()
    sent = []
    for i in range(3):
        sent.append(b"victim-%d" % i)
        victim.produce(TOPIC, sent[-1], partition=0)
        victim.flush(30)
    admin = kafka_python_admin(cluster)
    tp = KafkaTopicPartition(TOPIC, 0)
    try:
        (mine,) = [
            p
            for p in admin.describe_producers([tp])[tp].active_producers
            if p.current_transaction_start_offset >= 0
        ]
        pid, epoch, last = mine.producer_id, mine.producer_epoch, mine.last_sequence

        assert forged_marker(cluster, pid, epoch) == CLUSTER_AUTHORIZATION_FAILED
        assert forged_marker(cluster, pid, 32767) == CLUSTER_AUTHORIZATION_FAILED
        assert forged_produce(cluster, pid, epoch, last + 1) == TXN_ID_AUTHORIZATION_FAILED
        with pytest.raises(KE.TransactionCoordinatorFencedError):  # not even the super user
            admin.abort_transaction(AbortTransactionSpec(tp, pid, epoch))

        sent.append(b"victim-3")  # the batch the forged one would have made a duplicate
        victim.produce(TOPIC, sent[-1], partition=0)
        victim.commit_transaction(60)
        assert read_committed(cluster, 0) == sent

        # with WRITE on the victim's id the same batch goes into its transaction (Kafka's
        # rule): the ACL is what stopped it
        tool(cluster, "acl", "add", "--allow-principal", ANON, "--operation", "Write",
             "--transactional-id", VICTIM_ID)  # fmt: skip
        victim.begin_transaction()
        victim.produce(TOPIC, b"victim-4", partition=0)
        victim.flush(30)
        (mine,) = [
            p
            for p in admin.describe_producers([tp])[tp].active_producers
            if p.current_transaction_start_offset >= 0
        ]
        assert forged_produce(cluster, pid, epoch, mine.last_sequence + 1) == NONE
        victim.commit_transaction(60)
        assert b"forged" in read_committed(cluster, 0)
    finally:
        admin.close()


def _initialised(producer: Producer) -> bool:
    try:
        producer.init_transactions(10)
    except KafkaException as e:
        if e.args[0].retriable():
            return False
        raise
    return True


def test_the_super_user_is_the_tools_only_for_the_local_cluster(cluster: Cluster) -> None:
    """Given --bootstrap, the CLI takes no credentials it was not given: the SASL listener
    then cuts it off."""
    refused = tool(cluster, "topic", "list", "--bootstrap", cluster.bootstrap, check=False)
    assert refused.returncode != 0
