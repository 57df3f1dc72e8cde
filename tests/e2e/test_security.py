"""TLS and SASL with real clients against a real three-node cluster whose nodes each have four
listeners: PLAINTEXT (for the test's own setup), SASL_SSL, SSL with required client
certificates, and SASL_PLAINTEXT. The certificates are made here (tests/support/tls.py).

Users are made as an operator makes them: `raftlog user create` (the admin API) and Kafka's
AlterUserScramCredentials through confluent-kafka's AdminClient."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
import socket
import ssl
import struct
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from kio.index import load_request_schema
from support import wire as W
from support.authz import join_outcome, produce_error, wait_produce
from support.cluster import Cluster, wait_for

from raftlog.config.node_config import NodeConfig
from raftlog_app.dev_certs import Authority, Issued

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

LISTENERS = ("PLAINTEXT", "SASL_SSL", "SSL", "SASL_PLAINTEXT")
PASSWORD = "alice-secret"
KEY_PASSWORD = "node-key-secret"
RECORDS = 50
POLICY_VIOLATION, UNACCEPTABLE_CREDENTIAL, RESOURCE_NOT_FOUND = 44, 93, 91


class Pki:
    def __init__(self, directory: Path) -> None:
        self.ca = Authority(directory / "ca", "raftlog-test-ca")
        self.node = self.ca.issue("node", "raftlog-node", server=True, password=KEY_PASSWORD)
        self.client = self.ca.issue("client", "alice", "eng")
        self.expired = self.ca.issue("expired", "old", expired=True)
        self.foreign = Authority(directory / "foreign", "foreign-ca").issue("foreign", "eve")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory, pki: Pki):
    c = Cluster(
        tmp_path_factory.mktemp("secure"),
        nodes=3,
        name="secure",
        listeners=LISTENERS,
        broker={
            "ssl.keystore.location": str(pki.node.bundle),
            "ssl.truststore.location": str(pki.ca.cert),
            "ssl.key.password": KEY_PASSWORD,
            "ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            # on, but allowing what no ACL covers: the ACL test below denies by principal
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": True,
        },
    )
    try:
        c.start()
        c.cli("user", "create", "alice", "--password", PASSWORD, "--data", str(c.data_root))
        c.cli(
            "user", "create", "alice", "--password", PASSWORD,
            "--mechanism", "SCRAM-SHA-256", "--data", str(c.data_root),
        )  # fmt: skip
        yield c
    finally:
        c.stop()
        c.wipe_data()


def bootstrap(c: Cluster, listener: str) -> str:
    return ",".join(c.node(n).listeners[listener] for n in c.node_ids)


def address(c: Cluster, listener: str, node_id: int = 1) -> tuple[str, int]:
    host, port = c.node(node_id).listeners[listener].rsplit(":", 1)
    return host, int(port)


def sasl_conf(
    c: Cluster, pki: Pki, mechanism: str, user: str = "alice", password: str = PASSWORD
) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap(c, "SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(pki.ca.cert),
    }


def round_trip(conf: dict[str, Any], topic: str) -> list[bytes]:
    """Produces RECORDS records with acks=all and reads them back in a consumer group."""
    from confluent_kafka import Consumer, Producer

    producer = Producer({**conf, "acks": "all"})
    failures: list[Any] = []
    for i in range(RECORDS):
        producer.produce(
            topic, f"{topic}-{i}".encode(), on_delivery=lambda e, _m: e and failures.append(e)
        )
    assert producer.flush(60) == 0 and not failures, failures
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < RECORDS and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    return got


def refused(conf: dict[str, Any]) -> list[str]:
    """What librdkafka reports when it cannot log in (its error callback), within 15 s."""
    from confluent_kafka.admin import AdminClient

    errors: list[str] = []
    admin = AdminClient({**conf, "error_cb": lambda e: errors.append(e.str())})
    with pytest.raises(Exception):  # noqa: B017 - KafkaException for a metadata timeout
        admin.list_topics(timeout=4)
    admin.poll(1)  # serves the error callback
    return errors


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_confluent_kafka_over_sasl_ssl(secure: Cluster, pki: Pki, mechanism: str) -> None:
    topic = f"sasl-{mechanism.lower()}"
    secure.create_topic(topic, partitions=3, replication_factor=3)
    got = round_trip(sasl_conf(secure, pki, mechanism), topic)
    assert sorted(got) == sorted(f"{topic}-{i}".encode() for i in range(RECORDS))


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_kcat_over_sasl_ssl(secure: Cluster, pki: Pki, mechanism: str) -> None:
    topic = f"kcat-{mechanism.lower()}"
    secure.create_topic(topic, partitions=1, replication_factor=3)
    flags = [
        "-b", bootstrap(secure, "SASL_SSL"),
        "-X", "security.protocol=SASL_SSL",
        "-X", f"sasl.mechanisms={mechanism}",
        "-X", "sasl.username=alice",
        "-X", f"sasl.password={PASSWORD}",
        "-X", f"ssl.ca.location={pki.ca.cert}",
    ]  # fmt: skip
    lines = [f"kcat-{i}" for i in range(10)]
    subprocess.run(
        ["kcat", *flags, "-P", "-t", topic, "-X", "acks=all"],
        input="\n".join(lines) + "\n",
        text=True,
        check=True,
        timeout=60,
    )
    out = subprocess.run(
        ["kcat", *flags, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert out.split() == lines


def test_kafka_python_with_scram_sha_256(secure: Cluster, pki: Pki) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = "kafka-python-scram"
    secure.create_topic(topic, partitions=1, replication_factor=3)
    conf = {
        "bootstrap_servers": bootstrap(secure, "SASL_SSL").split(","),
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "alice",
        "sasl_plain_password": PASSWORD,
        "ssl_cafile": str(pki.ca.cert),
    }
    producer = KafkaProducer(acks="all", **conf)
    for i in range(10):
        producer.send(topic, f"kp-{i}".encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **conf)
    assert [m.value for m in consumer] == [f"kp-{i}".encode() for i in range(10)]
    consumer.close()


def test_aiokafka_with_scram_sha_512(secure: Cluster, pki: Pki) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = "aiokafka-scram"
    secure.create_topic(topic, partitions=1, replication_factor=3)

    async def run() -> list[bytes]:
        conf = {
            "bootstrap_servers": bootstrap(secure, "SASL_SSL"),
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "alice",
            "sasl_plain_password": PASSWORD,
            "ssl_context": create_ssl_context(cafile=str(pki.ca.cert)),
        }
        producer = AIOKafkaProducer(acks="all", **conf)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, f"aio-{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
        await consumer.start()
        try:
            batches = await consumer.getmany(timeout_ms=10000, max_records=10)
            return [m.value for msgs in batches.values() for m in msgs]
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"aio-{i}".encode() for i in range(10)]


def test_the_cli_on_a_secured_listener_with_command_config(secure: Cluster, pki: Pki) -> None:
    secure.create_topic("cli-visible", partitions=1, replication_factor=3)
    props = secure.workdir / "client.properties"
    props.write_text(
        "# as a kcat or confluent-kafka user writes them\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.username=alice\nsasl.password={PASSWORD}\n"
        f"ssl.ca.location={pki.ca.cert}\n"
    )
    sasl = bootstrap(secure, "SASL_SSL")
    listed = secure.cli("topic", "list", "--bootstrap", sasl, "--command-config", str(props))
    assert "cli-visible" in listed.stdout
    refused_cli = secure.cli("topic", "list", "--bootstrap", sasl, check=False, timeout=90)
    assert refused_cli.returncode != 0


def test_users_through_kafkas_admin_api(secure: Cluster, pki: Pki) -> None:
    """AlterUserScramCredentials / DescribeUserScramCredentials from confluent-kafka's admin,
    on the PLAINTEXT listener; the new user logs in; a deleted one no longer does."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap(secure, "PLAINTEXT")})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    for future in admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("bob", info, b"bob-pw", b"some-salt")]
    ).values():
        future.result(30)
    described = {
        user: future.result(30)
        for user, future in admin.describe_user_scram_credentials(["bob", "alice"]).items()
    }
    assert [(i.mechanism, i.iterations) for i in described["bob"].scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)
    ]
    assert {i.mechanism for i in described["alice"].scram_credential_infos} == {
        ScramMechanism.SCRAM_SHA_256,
        ScramMechanism.SCRAM_SHA_512,
    }
    secure.create_topic("bobs", partitions=1, replication_factor=3)
    conf = sasl_conf(secure, pki, "SCRAM-SHA-512", "bob", "bob-pw")
    assert len(round_trip(conf, "bobs")) == RECORDS
    listed = secure.cli("user", "list", "--data", str(secure.data_root)).stdout
    assert "bob" in listed and "SCRAM-SHA-512 (8192 iterations)" in listed

    too_few = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000)
    bad = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("bob", too_few, b"x", b"salt")]
    )["bob"]
    with pytest.raises(Exception, match="(?i)iterations"):
        bad.result(30)

    deletion = UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_512)
    admin.alter_user_scram_credentials([deletion])["bob"].result(30)
    assert any("Authentication failed" in e for e in refused(conf))

    # No salt given: librdkafka makes one (64 bytes), which the salt bound leaves room for.
    # What an unauthenticated client-first fetches stays small (the salt is sent back in it).
    salted_by_client = UserScramCredentialUpsertion("dan", info, b"dan-pw")
    admin.alter_user_scram_credentials([salted_by_client])["dan"].result(30)
    secure.create_topic("dans", partitions=1, replication_factor=3)
    conf = sasl_conf(secure, pki, "SCRAM-SHA-512", "dan", "dan-pw")
    assert len(round_trip(conf, "dans")) == RECORDS
    answer = server_first(secure, "dan")
    salt = base64.b64decode(dict(p.split(b"=", 1) for p in answer.split(b","))[b"s"])
    assert 0 < len(salt) <= 128 and len(answer) < 300, (len(salt), answer)


ALTER_USERS, DESCRIBE_USERS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 51, 50, 17, 36


def kafka_call(
    c: Cluster, listener: str, api_key: int, version: int, data: dict, node_id: int = 1
) -> Any:
    with W.KafkaWire(address(c, listener, node_id), timeout=60) as w:
        return w.request(W.build(load_request_schema(api_key, version), data))


def alter_users(c: Cluster, upsertions: list[tuple[str, bytes]]) -> dict[str, int]:
    """Raw AlterUserScramCredentials of (name, salt) SCRAM-SHA-512 upsertions: user -> error."""
    answer = kafka_call(c, "PLAINTEXT", ALTER_USERS, 0, {
        "deletions": [],
        "upsertions": [
            {"name": name, "mechanism": 2, "iterations": 4096, "salt": salt,
             "salted_password": bytes(64)}
            for name, salt in upsertions
        ],
    })  # fmt: skip
    return {r.user: W.code(r.error_code) for r in answer.results}


def described(c: Cluster, names: list[str], node_id: int = 1) -> dict[str, int]:
    answer = kafka_call(
        c, "PLAINTEXT", DESCRIBE_USERS, 0, {"users": [{"name": n} for n in names]}, node_id
    )
    return {r.user: W.code(r.error_code) for r in answer.results}


def test_describing_no_users_describes_them_all(secure: Cluster) -> None:
    """DescribeUserScramCredentials naming no user, by a null or an empty list, describes every
    user, as Kafka does: confluent-kafka's describe_user_scram_credentials() sends it."""
    from confluent_kafka.admin import AdminClient, ScramMechanism

    admin = AdminClient({"bootstrap.servers": bootstrap(secure, "PLAINTEXT")})
    every = admin.describe_user_scram_credentials().result(30)
    assert "alice" in every, every
    assert {i.mechanism for i in every["alice"].scram_credential_infos} == {
        ScramMechanism.SCRAM_SHA_256,
        ScramMechanism.SCRAM_SHA_512,
    }
    for users in (None, []):
        answer = kafka_call(secure, "PLAINTEXT", DESCRIBE_USERS, 0, {"users": users})
        assert W.code(answer.error_code) == 0, answer
        assert {r.user: W.code(r.error_code) for r in answer.results} == dict.fromkeys(every, 0)


def server_first(c: Cluster, user: str) -> bytes:
    """What an unauthenticated client gets for a SCRAM-SHA-512 client-first naming `user`."""
    with W.KafkaWire(address(c, "SASL_PLAINTEXT"), timeout=30) as w:
        w.request(W.build(load_request_schema(SASL_HANDSHAKE, 1), {"mechanism": "SCRAM-SHA-512"}))
        first = f"n,,n={user},r=abcdefgh".encode()
        answer = w.request(
            W.build(load_request_schema(SASL_AUTHENTICATE, 1), {"auth_bytes": first})
        )
        assert W.code(answer.error_code) == 0, answer
        return bytes(answer.auth_bytes)


def test_oversized_user_changes_are_refused_whole_and_store_nothing(
    secure: Cluster, pki: Pki
) -> None:
    """1,001 changes in one request (the bound is 1,000): every user POLICY_VIOLATION, promptly.
    A 10 MiB salt and a 300-byte name: UNACCEPTABLE_CREDENTIAL. None of them is stored."""
    bulk = [(f"bulk-{i}", b"salt") for i in range(1001)]
    started = time.monotonic()
    assert set(alter_users(secure, bulk).values()) == {POLICY_VIOLATION}
    assert time.monotonic() - started < 10
    refused = alter_users(secure, [("salty", bytes(10 * 1024 * 1024)), ("n" * 300, b"salt")])
    assert refused == {"salty": UNACCEPTABLE_CREDENTIAL, "n" * 300: UNACCEPTABLE_CREDENTIAL}
    names = ["bulk-0", "bulk-1000", "salty", "n" * 300]
    for node in secure.node_ids:
        assert set(described(secure, names, node).values()) == {RESOURCE_NOT_FOUND}, node
    assert_healthy(secure, pki)


def test_the_admin_api_refuses_absurd_iterations_at_once(secure: Cluster, pki: Pki) -> None:
    """POST /v1/users with a billion iterations ran PBKDF2 on the event loop for minutes; now
    it is a 400 before any hashing, the node keeps serving, and the CLI says so in one line."""
    node = secure.node(1)
    request = urllib.request.Request(
        f"http://{node.admin}/v1/users",
        method="POST",
        data=json.dumps({"name": "eve", "password": "pw", "iterations": 10**9}).encode(),
        headers={"Authorization": f"Bearer {NodeConfig.load(node.config).admin_token}"},
    )
    started = time.monotonic()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)  # noqa: S310 - loopback only
    assert time.monotonic() - started < 5
    assert refused.value.code == 400
    assert "between 4096 and 16384" in json.loads(refused.value.read())["message"]
    cli = secure.cli(
        "user", "create", "eve", "--password", "pw", "--iterations", str(10**9),
        "--data", str(secure.data_root), check=False,
    )  # fmt: skip
    assert cli.returncode == 1 and len(cli.stderr.strip().splitlines()) == 1, cli.stderr
    assert "unacceptable_credential: Iterations 1000000000 must be between" in cli.stderr
    assert "eve" not in secure.cli("user", "list", "--data", str(secure.data_root)).stdout
    assert described(secure, ["eve"]) == {"eve": RESOURCE_NOT_FOUND}
    assert_healthy(secure, pki)


def test_the_key_password_is_not_shown(secure: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap(secure, "PLAINTEXT")})
    resource = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([resource])[resource].result(30)
    password = configs["ssl.key.password"]
    assert password.is_sensitive and password.value is None
    assert configs["ssl.client.auth"].value == "required"


def ssl_conf(c: Cluster, pki: Pki) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap(c, "SSL"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca.cert),
        "ssl.certificate.location": str(pki.client.cert),
        "ssl.key.location": str(pki.client.key),
    }


def test_acls_apply_to_sasl_users_and_certificate_subjects(secure: Cluster, pki: Pki) -> None:
    """A DENY for the SCRAM user dave stops dave's produce and not alice's; a DENY for the
    client certificate's subject stops that client's group join; removing them allows both."""
    data = ("--data", str(secure.data_root))
    secure.cli("user", "create", "dave", "--password", "dave-pw", *data)
    topic, group = "guarded", "guarded-group"
    secure.create_topic(topic, partitions=1, replication_factor=3)
    plain = ("--bootstrap", bootstrap(secure, "PLAINTEXT"))
    subject = "User:CN=alice,OU=eng,O=raftlog tests"
    for resource in (("--topic", topic), ("--group", group)):
        secure.cli("acl", "add", *resource, "--allow-principal", "User:*", *plain, *data)
    secure.cli(
        "acl", "add", "--topic", topic, "--deny-principal", "User:dave",
        "--operation", "Write", *plain, *data,
    )  # fmt: skip
    secure.cli(
        "acl", "add", "--group", group, "--deny-principal", subject,
        "--operation", "Read", *plain, *data,
    )  # fmt: skip
    dave = sasl_conf(secure, pki, "SCRAM-SHA-512", "dave", "dave-pw")
    alice = sasl_conf(secure, pki, "SCRAM-SHA-512")
    wait_produce(dave, topic, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    assert produce_error(alice, topic) is None
    assert (
        join_outcome(ssl_conf(secure, pki), group, topic) == KafkaError.GROUP_AUTHORIZATION_FAILED
    )
    assert join_outcome(alice, group, topic) == "assigned"

    secure.cli(
        "acl", "remove", "--topic", topic, "--deny-principal", "User:dave",
        "--operation", "Write", *plain, *data,
    )  # fmt: skip
    secure.cli(
        "acl", "remove", "--group", group, "--deny-principal", subject,
        "--operation", "Read", *plain, *data,
    )  # fmt: skip
    wait_produce(dave, topic, None)
    assert join_outcome(ssl_conf(secure, pki), group, topic) == "assigned"


def test_wrong_credentials_are_refused_and_logged(secure: Cluster, pki: Pki) -> None:
    wrong = refused(sasl_conf(secure, pki, "SCRAM-SHA-512", password="not-it"))
    assert any("Authentication failed" in e for e in wrong), wrong
    unknown = refused(sasl_conf(secure, pki, "PLAIN", user="mallory"))
    assert any("Authentication failed" in e for e in unknown), unknown
    logs = "".join((secure.node(n).log).read_text() for n in secure.node_ids)
    # (at most one line per peer host each 10 s: which user's failure made the line varies)
    assert re.search(r"authentication failed for user '\w+' from 127\.0\.0\.1:\d+", logs)
    assert_healthy(secure, pki)


def api_versions_frame() -> bytes:
    body = struct.pack(">hhih", 18, 0, 7, 4) + b"test"
    return struct.pack(">i", len(body)) + body


def answers_api_versions(sock: socket.socket | ssl.SSLSocket) -> bool:
    """Sends ApiVersions and reads the whole answer (False: closed instead)."""
    sock.sendall(api_versions_frame())
    size = sock.recv(4)
    if len(size) != 4:
        return False
    remaining = struct.unpack(">i", size)[0]
    while remaining > 0:
        chunk = sock.recv(remaining)
        if not chunk:
            return False
        remaining -= len(chunk)
    return True


def test_requests_before_sasl_authentication_close_the_connection(secure: Cluster) -> None:
    with socket.create_connection(address(secure, "SASL_PLAINTEXT"), timeout=10) as sock:
        assert answers_api_versions(sock)  # allowed before authentication, as in Kafka
        metadata = struct.pack(">hhih", 3, 1, 8, 4) + b"test" + struct.pack(">i", -1)
        sock.sendall(struct.pack(">i", len(metadata)) + metadata)
        assert sock.recv(4) == b""  # closed, nothing answered


def tls_socket(c: Cluster, pki: Pki, listener: str, cert: Issued | None) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    if cert is not None:
        context.load_cert_chain(str(cert.cert), str(cert.key))
    raw = socket.create_connection(address(c, listener), timeout=10)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def test_ssl_listener_takes_only_certificates_of_its_ca(secure: Cluster, pki: Pki) -> None:
    with tls_socket(secure, pki, "SSL", pki.client) as sock:
        assert answers_api_versions(sock)
    for cert in (None, pki.foreign, pki.expired):
        with (
            pytest.raises((ssl.SSLError, ConnectionError, OSError)),  # noqa: PT012
            tls_socket(secure, pki, "SSL", cert) as sock,
        ):
            # TLS 1.3 reports a refused client certificate on the first read
            if not answers_api_versions(sock):
                raise ConnectionError("closed")
    secure.create_topic("mtls", partitions=1, replication_factor=3)
    assert len(round_trip(ssl_conf(secure, pki), "mtls")) == RECORDS
    assert_healthy(secure, pki)


def test_plaintext_clients_on_tls_ports_are_refused(secure: Cluster, pki: Pki) -> None:
    for listener in ("SASL_SSL", "SSL"):
        with socket.create_connection(address(secure, listener), timeout=10) as sock:
            sock.sendall(api_versions_frame())
            first = sock.recv(5)
            # no Kafka answer: the server closes, or answers with a TLS alert record (0x15)
            assert first == b"" or first[0] == 0x15
    assert_healthy(secure, pki)


def assert_healthy(c: Cluster, pki: Pki) -> None:
    """Every node still runs and serves an authenticated client."""
    assert all(c.is_alive(n) for n in c.node_ids)
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(sasl_conf(c, pki, "SCRAM-SHA-512"))
    assert len(admin.list_topics(timeout=30).brokers) == len(c.node_ids)


def test_credentials_survive_controller_failover_and_full_restart(
    secure: Cluster, pki: Pki
) -> None:
    """Last in the module: it kills nodes. A user made while the old controller leader is
    dead logs in, and so do both users after every node is killed and restarted."""
    leader = secure.controller_leader()
    assert leader is not None
    secure.kill(leader)
    survivor = next(n for n in secure.node_ids if n != leader)
    admin = f"{secure.node(survivor).admin}"

    def created() -> bool:
        done = secure.cli(
            "user", "create", "carol", "--password", "carol-pw", "--admin", admin,
            "--data", str(secure.data_root), check=False,
        )  # fmt: skip
        return done.returncode == 0

    wait_for(created, timeout=60, what="carol created on the new controller leader")
    secure.restart(leader)
    for n in secure.node_ids:
        secure.kill(n)
    for n in secure.node_ids:
        secure.restart(n, wait=False)
    secure.wait_all_ready()
    topic = f"after-restart-{uuid.uuid4().hex[:6]}"
    secure.create_topic(topic, partitions=1, replication_factor=3)
    assert len(round_trip(sasl_conf(secure, pki, "SCRAM-SHA-512"), topic)) == RECORDS
    carol = sasl_conf(secure, pki, "SCRAM-SHA-512", "carol", "carol-pw")
    secure.create_topic(topic + "-carol", partitions=1, replication_factor=3)
    assert len(round_trip(carol, topic + "-carol")) == RECORDS


def test_the_peer_mesh_over_mutual_tls(cluster_factory, pki: Pki) -> None:
    """peer_tls = true on every node: the cluster forms, elects and replicates over TLS; its
    Raft port speaks TLS and wants a certificate of the cluster's CA."""
    c = cluster_factory(
        name="meshtls",
        broker={
            "ssl.keystore.location": str(pki.node.bundle),
            "ssl.truststore.location": str(pki.ca.cert),
            "ssl.key.password": KEY_PASSWORD,
        },
    )
    for n in c.node_ids:
        c.terminate(n)
    for n in c.node_ids:
        config = c.node(n).config
        config.write_text("peer_tls = true\n" + config.read_text())
        c.restart(n, wait=False)
    c.wait_all_ready()
    c.create_topic("over-tls", partitions=1, replication_factor=3)
    conf = {"bootstrap.servers": c.bootstrap}
    assert len(round_trip(conf, "over-tls")) == RECORDS
    host, port = c.node(1).raft.rsplit(":", 1)
    with tls_raw(host, int(port), pki, pki.client) as sock:
        assert sock.version() is not None  # a handshake with a certificate of the CA
    with (
        pytest.raises((ssl.SSLError, ConnectionError)),  # noqa: PT012 - not a timeout
        tls_raw(host, int(port), pki, None) as sock,
    ):
        if not sock.recv(1):  # TLS 1.3 reports the missing certificate on the first read
            raise ConnectionError("closed")


def tls_raw(host: str, port: int, pki: Pki, cert: Issued | None) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    if cert is not None:
        context.load_cert_chain(str(cert.cert), str(cert.key))
    return context.wrap_socket(
        socket.create_connection((host, port), timeout=10), server_hostname=host
    )
