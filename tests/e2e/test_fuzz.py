"""Generated and mutated Kafka requests against real node processes.

Every (API, version) the node serves gets request bodies that Hypothesis builds from the
request schemas (kio's, or raftlog's where kio has none; `st.from_type`), then mutated as a
hostile client would: cut short, bytes flipped, lengths pushed to extremes, junk tagged fields
added, or sent as generated. Each goes to one node of a running cluster on a fresh
connection; the node may answer, close the connection, or hold a long poll. It must not die, freeze or lose data: every node stays
alive under a 4 GiB address-space cap (a bomb would hit it, not the machine), answers
ApiVersions on a new connection at every check, and at the end the records acknowledged
before the run are all still there and a real client produces and reads back; no node logs
an ERROR.

The node's other ports get the same treatment: the Raft port (before a peer proves it holds
the cluster secret) generated msgpack frames and junk, and the HTTP consume proxy and admin
port generated paths and JSON bodies, well-formed ones with absurd values among them.

`RAFTLOG_FUZZ_EXAMPLES` sets the number of requests (`make fuzz` runs many more).
"""

from __future__ import annotations

import io
import json
import os
import random
import resource
import socket
import urllib.parse
import urllib.request
from collections import Counter
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.primitive import Records
from support import node_logs
from support import records as R
from support import wire as W
from support.cluster import Cluster

from kafka_api.codec import request_schema
from kafka_api.handlers import HANDLERS
from raftlog.raft.mesh_frames import AUTH, HELLO, WELCOME

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

EXAMPLES = int(os.environ.get("RAFTLOG_FUZZ_EXAMPLES", "400"))
# Every run's settings: generated only (a lost node is reported with its request, not shrunk).
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=[Phase.generate],
    suppress_health_check=list(HealthCheck),
    database=None,
)
ADDRESS_SPACE = 4 * 1024**3
CHECK_EVERY = 25
TOPIC = "fuzz"
SERVED = sorted(
    (key, version)
    for key, handler in HANDLERS.items()
    for version in range(handler.MIN_VERSION, handler.MAX_VERSION + 1)
)
EXTREMES = [b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\x0f"]

st.register_type_strategy(Records, st.binary(max_size=300).map(Records))


@st.composite
def requests(draw: Any, served: list[tuple[int, int]] = SERVED) -> tuple[int, int, bytes]:
    """(api key, version, framed request), generated from the schema, then maybe mutated."""
    key, version = draw(st.sampled_from(served))
    request_type = request_schema(key, version)  # kio's, or raftlog's where kio has none
    body = io.BytesIO()
    entity_writer(request_type)(body, draw(st.from_type(request_type)))
    data = bytearray(body.getvalue())
    how = draw(st.sampled_from(["as is", "cut", "flip", "extreme", "insert", "tags"]))
    at = draw(st.integers(0, max(0, len(data) - 1)))
    if how == "cut":
        del data[at:]
    elif how == "flip" and data:
        data[at] = draw(st.integers(0, 255))
    elif how == "extreme":
        data[at : at + 4] = draw(st.sampled_from(EXTREMES))
    elif how == "insert":
        data[at:at] = draw(st.binary(min_size=1, max_size=8))
    elif how == "tags" and request_type.__flexible__ and data:
        data[-1:] = b"\x02" + b"\x21\x03abc" + b"\x7f\x01\x00"  # two tags nobody defines
    correlation_id = draw(st.integers(0, 2**31 - 1))
    frame = W.encode_raw_request(
        key, version, correlation_id, bytes(data), flexible_header=request_type.__flexible__
    )
    return key, version, frame


@pytest.fixture(scope="module")
def fuzzed(module_cluster):
    cluster = module_cluster
    cluster.create_topic(TOPIC, partitions=3, replication_factor=3)
    before = R.produce_confluent(cluster.bootstrap, TOPIC, R.make_records("before", 60, 3))
    assert len(before.acked) == 60, before.failed[:3]
    for n in cluster.node_ids:
        resource.prlimit(cluster.node(n).pid, resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    return cluster, before


def test_generated_and_mutated_requests_keep_every_node_serving(fuzzed) -> None:
    cluster, before = fuzzed
    outcomes: Counter[str] = Counter()
    per_api: Counter[int] = Counter()
    rng = random.Random(EXAMPLES)

    @FUZZ
    @given(requests())
    def send(request: tuple[int, int, bytes]) -> None:
        key, version, frame = request
        node = rng.choice(cluster.node_ids)
        with W.KafkaWire(cluster.node(node).kafka, timeout=5) as w:
            w.send_bytes(frame)
            try:
                w.recv_frame(timeout=1.0)
                outcome = "answered"
            except TimeoutError:
                outcome = "waiting"  # a long poll, a join waiting for its rebalance
            except (W.ConnectionClosed, W.WireError, OSError):
                outcome = "closed"
        outcomes[outcome] += 1
        per_api[key] += 1
        total = sum(outcomes.values())
        if total % CHECK_EVERY == 0:
            _all_serving(cluster, f"after request {total} (api {key} v{version}: {frame!r:.300})")

    send()
    _all_serving(cluster, "after the run")
    _no_errors_logged(cluster)
    print(
        f"\nfuzz: {sum(outcomes.values())} requests over {len(per_api)} APIs "
        f"({len(SERVED)} API versions served): {dict(outcomes)}; nodes lost: 0"
    )
    # Everything acknowledged before the run is still there, once, where it was acked.
    ends = W.end_offsets(cluster.bootstrap, TOPIC)
    got = R.consume_confluent(cluster.bootstrap, TOPIC, ends, timeout=120)
    R.check_log(before.acked, got, foreign_ok=True).raise_if_failed()
    after = R.produce_confluent(cluster.bootstrap, TOPIC, R.make_records("after", 30, 3))
    assert len(after.acked) == 30, after.failed[:3]


# --------------------------------------------------------------------------- the other ports

EXTREME_INTS = [0, -1, 1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 2**64 - 1, 10**30]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)  # what msgpack can hold
    | st.sampled_from([i for i in EXTREME_INTS if -(2**63) <= i < 2**64])
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
PACKABLE = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=5) | st.integers(0, 9), inner, max_size=5)
    ),
    max_leaves=20,
)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.sampled_from(EXTREME_INTS)
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=20,
)
NAMES = st.sampled_from([TOPIC, "__consumer_offsets", "", "ü" * 300, "a" * 256]) | st.text(
    max_size=12
)


@st.composite
def mesh_bytes(draw: Any) -> bytes:
    """What a stranger sends the Raft port: junk, a generated msgpack tree, or handshake
    frames with generated fields (a claimed peer id, nonce, address, MAC)."""
    how = draw(st.sampled_from(["junk", "tree", "handshake"]))
    if how == "junk":
        return draw(st.binary(min_size=1, max_size=600))
    if how == "tree":
        return msgpack.packb(draw(PACKABLE), use_bin_type=True)
    frames = draw(
        st.lists(
            st.tuples(st.sampled_from([HELLO, WELCOME, AUTH, 99]), st.lists(PACKABLE, max_size=4)),
            min_size=1,
            max_size=3,
        )
    )
    return b"".join(msgpack.packb([kind, *rest], use_bin_type=True) for kind, rest in frames)


@st.composite
def proxy_request(draw: Any) -> tuple[str, bytes]:
    """(path, body) for the consume proxy: a generated group and action, and a body that is
    junk, any JSON, or a read or settle with absurd values."""
    group = urllib.parse.quote(draw(st.text(max_size=300)), safe="")
    action = draw(st.sampled_from(["read", "acknowledge", "cancel", "nothing"]))
    shape = draw(st.sampled_from(["junk", "json", "read", "settle", "batch"]))
    if shape == "junk":
        return f"/v1/share/{group}/{action}", draw(st.binary(max_size=300))
    if shape == "json":
        body: Any = draw(JSON_VALUES)
    elif shape == "read":
        body = {
            "topic": draw(NAMES),
            "max_records": draw(st.sampled_from(EXTREME_INTS) | JSON_VALUES),
            "timeout_ms": draw(st.sampled_from([0, 1, 100, -1, 2**31 - 1, 10**30])),
            "pending_timeout_ms": draw(st.sampled_from(EXTREME_INTS) | JSON_VALUES),
            "text": draw(JSON_VALUES),
        }
    else:
        record = st.fixed_dictionaries(
            {
                "topic": NAMES,
                "partition": st.sampled_from(EXTREME_INTS) | st.integers(0, 3),
                "offset": st.sampled_from(EXTREME_INTS) | st.integers(0, 100),
            }
        )
        body = (
            draw(record)
            if shape == "settle"
            else {"records": draw(st.lists(record, max_size=draw(st.sampled_from([3, 1001]))))}
        )
    return f"/v1/share/{group}/{action}", json.dumps(body).encode()


def _http(address: str, method: str, path: str, body: bytes = b"") -> None:
    """Sends one request as raw bytes (any path) and reads what comes back within a second."""
    host, port = address.rsplit(":", 1)
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(head.encode("latin-1", "replace") + body)
        _read_briefly(s)


def _read_briefly(s: socket.socket) -> None:
    s.settimeout(1.0)
    try:
        while s.recv(65536):
            pass
    except OSError:
        pass  # no answer within the second (a long poll, a handshake waiting): left open


def test_the_raft_and_http_ports_keep_every_node_serving(fuzzed) -> None:
    cluster, _ = fuzzed
    outcomes: Counter[str] = Counter()
    rng = random.Random(EXAMPLES + 2)

    @st.composite
    def traffic(draw: Any) -> tuple[str, Any]:
        port = draw(st.sampled_from(["raft", "proxy", "admin"]))
        if port == "raft":
            return port, draw(mesh_bytes())
        if port == "proxy":
            return port, draw(proxy_request())
        segment = urllib.parse.quote(draw(st.text(max_size=40)), safe="")
        path = draw(
            st.sampled_from(
                [
                    f"/v1/partitions/{segment}/{segment}/epochs",
                    f"/v1/partitions/{TOPIC}/{segment}/epochs",
                    f"/v1/share-groups/{segment}",
                    f"/v1/users/{segment}",
                    "/metrics",
                    "/v1/status",
                ]
            )
        )
        return port, (draw(st.sampled_from(["GET", "POST", "DELETE"])), path)

    @FUZZ
    @given(traffic())
    def send(sent: tuple[str, Any]) -> None:
        port, what = sent
        node = cluster.node(rng.choice(cluster.node_ids))
        if port == "raft":
            host, number = node.raft.rsplit(":", 1)
            with socket.create_connection((host, int(number)), timeout=5) as s:
                s.sendall(what)
                _read_briefly(s)
        elif port == "proxy":
            _http(node.proxy, "POST", *what)
        else:
            _http(node.admin, *what)
        outcomes[port] += 1
        total = sum(outcomes.values())
        if total % CHECK_EVERY == 0:
            _all_serving(cluster, f"after request {total} ({port}: {what!r:.300})")

    send()
    _all_serving(cluster, "after the run")
    _no_errors_logged(cluster)
    print(f"\nfuzz, Raft and HTTP ports: {dict(outcomes)}; nodes lost: 0")
    # The peers still talk (a produce is replicated), and the proxy still serves a read.
    produced = R.produce_confluent(cluster.bootstrap, TOPIC, R.make_records("ports", 30, 3))
    assert len(produced.acked) == 30, produced.failed[:3]
    request = urllib.request.Request(
        f"http://{cluster.node(1).proxy}/v1/share/fuzz-check/read",
        data=json.dumps({"topic": TOPIC, "timeout_ms": 100}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200


def _all_serving(cluster: Any, when: str) -> None:
    for n in cluster.node_ids:
        assert cluster.is_alive(n), f"node {n} died {when}\n{cluster.log_tails([n])}"
        with W.KafkaWire(cluster.node(n).kafka, timeout=10) as w:
            assert W.PRODUCE in w.api_versions(), f"node {n} stopped answering {when}"
        node = cluster.node(n)
        for url in (f"http://{node.admin}/v1/status", f"http://{node.proxy}/v1/openapi.json"):
            with urllib.request.urlopen(url, timeout=10) as answer:  # (raises past a 2xx)
                assert answer.status == 200, f"node {n}: {url} {when}"


def _no_errors_logged(cluster: Any) -> None:
    """A bad request closes its connection or gets Kafka's error: a node that logs an ERROR
    for one has a bug (null arrays reaching handlers as None did; a DeleteTopics answer
    holding None where its name is not nullable failed to encode)."""
    found = cluster.logged_errors()  # the suite reads them again when the cluster stops
    assert not found, node_logs.describe(cluster.name, found)


# --------------------------------------------------------------------------- the secured surfaces

# The APIs added with security and queues, served to anyone on a PLAINTEXT listener of a
# cluster whose authorizer allows what no ACL covers (so requests reach their handlers), and a
# SASL listener's pre-authentication exchange.
SECURED_APIS = frozenset({17, 29, 30, 31, 36, 50, 51, 76, 77, 78, 79})
SECURED = [(key, version) for key, version in SERVED if key in SECURED_APIS]
BEFORE_AUTHENTICATION = [(key, version) for key, version in SERVED if key in {17, 18, 36}]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Any:
    cluster = Cluster(
        tmp_path_factory.mktemp("fuzz-secured"),
        nodes=3,
        name="fuzz-secured",
        listeners=("PLAINTEXT", "SASL_PLAINTEXT"),
        broker={
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": True,
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        },
    )
    try:
        cluster.start()
        cluster.create_topic(TOPIC, partitions=3, replication_factor=3)
        cluster.cli(
            "user", "create", "alice", "--password", "secret", "--data", str(cluster.data_root)
        )
        for n in cluster.node_ids:
            resource.prlimit(
                cluster.node(n).pid, resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE)
            )
        yield cluster
    finally:
        cluster.stop()


def test_the_secured_apis_and_the_sasl_listener_keep_every_node_serving(secured) -> None:
    """ACLs, SCRAM users, share groups and SASL, generated and mutated, on the listener that
    lets them through and, before authentication, on the SASL listener (where a frame may
    also announce any size)."""
    cluster = secured
    outcomes: Counter[str] = Counter()
    rng = random.Random(EXAMPLES + 1)

    @st.composite
    def traffic(draw: Any) -> tuple[str, bytes]:
        if draw(st.booleans()):
            return "PLAINTEXT", draw(requests(SECURED))[2]
        frame = draw(requests(BEFORE_AUTHENTICATION))[2]
        if draw(st.integers(0, 5)) == 0:  # a size announcing more than it sends
            frame = draw(st.sampled_from(EXTREMES + [b"\x00\x08\x00\x01"])) + frame[4:]
        return "SASL_PLAINTEXT", frame

    @FUZZ
    @given(traffic())
    def send(sent: tuple[str, bytes]) -> None:
        listener, frame = sent
        node = rng.choice(cluster.node_ids)
        with W.KafkaWire(cluster.node(node).listeners[listener], timeout=5) as w:
            w.send_bytes(frame)
            try:
                w.recv_frame(timeout=1.0)
                outcome = "answered"
            except TimeoutError:
                outcome = "waiting"
            except (W.ConnectionClosed, W.WireError, OSError):
                outcome = "closed"
        outcomes[f"{listener} {outcome}"] += 1
        total = sum(outcomes.values())
        if total % CHECK_EVERY == 0:
            _all_serving(cluster, f"after request {total} ({listener}: {frame!r:.300})")

    send()
    # 2^31 - 1 ACL creations claimed in 4 bytes: CreateAcls is answered per entry from its
    # count before the decode, and the count was trusted (a MemoryError under the cap here).
    claim = W.encode_raw_request(30, 1, 1, b"\x7f\xff\xff\xff")
    with W.KafkaWire(cluster.node(1).kafka, timeout=10) as w:
        w.send_bytes(claim)
        with pytest.raises(W.ConnectionClosed):
            w.recv_frame()
    _all_serving(cluster, "after the run")
    _no_errors_logged(cluster)
    print(f"\nfuzz, secured surfaces: {dict(outcomes)}; nodes lost: 0")
    # A real client still logs in and round-trips through the SASL listener.
    bootstrap = ",".join(cluster.node(n).listeners["SASL_PLAINTEXT"] for n in cluster.node_ids)
    login = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "secret",
    }
    produced = R.produce_confluent(bootstrap, TOPIC, R.make_records("secured", 20, 3), extra=login)
    assert len(produced.acked) == 20, produced.failed[:3]
