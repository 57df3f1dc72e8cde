"""A real node's two HTTP listeners, the admin port and the consume proxy, bounded as its
Kafka port is (issue 42; raftlog/common/http_listener.py), over real sockets on loopback:
- a connection that sends its request head a byte at a time is closed after
  http.header.read.timeout.ms, and so is an idle keep-alive connection after an answer;
- past http.max.connections.per.ip from one address a new connection is closed at once while
  another address gets in; past http.max.connections a new one takes the place of the oldest
  connection waiting for a request head, and is refused only when every one has a request in
  progress; the slots come back;
- a 100 KB URL is a 414 and a 64 KB header a 431, with one INFO line and no ERROR or
  traceback in the node's log;
- /metrics answers throughout and counts what was refused.
Before, all of these connections were held (aiohttp's keep-alive timer is an hour) and the
long URL and header were 400s with an ERROR traceback each."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.cluster import Cluster, tail, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TIMEOUT_S = 3.0  # http.header.read.timeout.ms, short to keep the module fast
PER_ADDRESS = 4
PER_LISTENER = 10
# each listener's cheapest GET
PATHS = {"admin": "/v1/status", "proxy": "/v1/openapi.json"}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(
        tmp_path_factory.mktemp("http_limits"),
        nodes=1,
        name="http_limits",
        broker={
            "http.header.read.timeout.ms": int(TIMEOUT_S * 1000),
            "http.max.connections": PER_LISTENER,
            "http.max.connections.per.ip": PER_ADDRESS,
        },
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        if not cluster.failed:
            cluster.wipe_data()


@pytest.fixture(params=["admin", "proxy"])
def listener(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def address(cluster: Cluster, listener: str) -> tuple[str, int]:
    node = cluster.nodes[1]
    host, port = (node.admin if listener == "admin" else node.proxy).rsplit(":", 1)
    return host, int(port)


def connect(to: tuple[str, int], source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(to, timeout=5, source_address=(source, 0))


def read_until_closed(sock: socket.socket, within: float = 5.0) -> bytes:
    """Everything the server sends before it closes (a reset counts as closed)."""
    sock.settimeout(within)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def exchange(to: tuple[str, int], request: bytes, source: str = "127.0.0.1") -> bytes:
    with connect(to, source) as sock:
        # closed while sending: what it answered is still read below
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(request)
        return read_until_closed(sock)


def get(to: tuple[str, int], path: str, source: str = "127.0.0.1") -> int:
    """The status of a GET on its own connection (0: closed without an answer)."""
    answer = exchange(
        to, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode(), source
    )
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0


def metric(cluster: Cluster, name: str, **labels: str) -> float:
    """A sample of the node's /metrics (a listing may be reused for a moment: poll)."""
    answer = exchange(
        address(cluster, "admin"),
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "127.0.0.99",
    )
    text = answer.split(b"\r\n\r\n", 1)[1].decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    raise AssertionError(f"{name} {labels} not in /metrics")


def assert_no_error_logged(cluster: Cluster) -> str:
    log = tail(cluster.nodes[1].log, lines=2000, max_bytes=1024 * 1024)
    assert " ERROR " not in log and "Traceback" not in log, log[-5000:]
    return log


def test_a_slow_request_head_and_an_idle_connection_are_closed_after_the_timeout(
    node: Cluster, listener: str
) -> None:
    to = address(node, listener)
    with connect(to) as slow:
        started = time.monotonic()
        slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        slow.settimeout(0.2)
        closed = False
        while not closed:  # a byte each 0.2 s, never the end of the head
            assert time.monotonic() - started < TIMEOUT_S + 15, "still open"
            try:
                assert slow.recv(1024) == b"", "answered a head that never ended"
                closed = True
            except TimeoutError:
                try:
                    slow.sendall(b"a")
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
            except ConnectionResetError:
                closed = True
        assert time.monotonic() - started >= TIMEOUT_S - 0.5  # not before the timeout
        assert get(address(node, "admin"), "/metrics", "127.0.0.2") == 200  # served meanwhile

    with connect(to) as idle:  # keep-alive: after its answer the connection waits idle
        idle.sendall(f"GET {PATHS[listener]} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        started = time.monotonic()
        answer = read_until_closed(idle, within=TIMEOUT_S + 15)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert TIMEOUT_S - 0.5 <= time.monotonic() - started < TIMEOUT_S + 15
    assert_no_error_logged(node)


def test_past_the_address_cap_a_connection_is_closed_and_the_full_listener_makes_room(
    node: Cluster, listener: str
) -> None:
    to, path = address(node, listener), PATHS[listener]
    held = [connect(to, "127.0.0.1") for _ in range(PER_ADDRESS)]
    try:
        started = time.monotonic()
        assert get(to, path, "127.0.0.1") == 0  # the address is at its cap: closed unread
        assert time.monotonic() - started < TIMEOUT_S / 2  # at once, not by the timeout
        assert get(to, path, "127.0.0.2") == 200  # another address still gets in
        # fill the listener from other addresses with connections that send nothing
        for i in range(PER_LISTENER - PER_ADDRESS):
            held.append(connect(to, f"127.0.0.{3 + i // PER_ADDRESS}"))
        # a new address takes the place of the oldest, which waits for a head
        assert get(to, path, "127.0.0.50") == 200
        assert read_until_closed(held[0], within=TIMEOUT_S) == b""
    finally:
        for sock in held:
            sock.close()
    wait_for(lambda: get(to, path, "127.0.0.1") == 200, timeout=10, what="slots released")
    name = "admin" if listener == "admin" else "consume_proxy"
    wait_for(
        lambda: (
            metric(node, "raftlog_http_connections_refused_total", listener=name, cap="address")
            >= 1
            and metric(node, "raftlog_http_connections_evicted_total", listener=name) >= 1
        ),
        timeout=10,
        what="refusals and evictions counted",
    )
    log = assert_no_error_logged(node)
    assert "(http.max.connections.per.ip)" in log and "closed the oldest waiting" in log


def test_a_listener_whose_every_connection_has_a_request_in_progress_refuses(
    node: Cluster,
) -> None:
    """The consume proxy's reads wait for their bodies: ten of them fill the listener."""
    to = address(node, "proxy")
    busy = []
    try:
        for i in range(PER_LISTENER):
            sock = connect(to, f"127.0.0.{60 + i // PER_ADDRESS}")
            busy.append(sock)
            sock.sendall(
                b"POST /v1/share/g/read HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
                b"Expect: 100-continue\r\n\r\n"
            )
            assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")  # its handler runs
        assert get(to, PATHS["proxy"], "127.0.0.70") == 0
    finally:
        for sock in busy:
            sock.close()
    wait_for(lambda: get(to, PATHS["proxy"], "127.0.0.70") == 200, timeout=10, what="slots")
    wait_for(
        lambda: (
            metric(
                node,
                "raftlog_http_connections_refused_total",
                listener="consume_proxy",
                cap="listener",
            )
            >= 1
        ),
        timeout=10,
        what="the refusal counted",
    )
    assert "(http.max.connections)" in assert_no_error_logged(node)


def test_a_long_url_is_a_414_and_a_long_header_a_431_without_a_traceback(
    node: Cluster, listener: str
) -> None:
    to = address(node, listener)
    long_url = exchange(to, b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert long_url.startswith(b"HTTP/1.0 414 "), long_url[:200]
    long_header = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 65_536 + b"\r\n\r\n"
    answer = exchange(to, long_header)
    assert answer.startswith(b"HTTP/1.0 431 "), answer[:200]
    many = b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(100)) + b"\r\n"
    assert exchange(to, many).startswith(b"HTTP/1.0 431 ")
    assert get(to, PATHS[listener]) == 200
    name = "admin" if listener == "admin" else "consume_proxy"
    bad = "raftlog_http_bad_requests_total"
    wait_for(
        lambda: (
            metric(node, bad, listener=name, status="414") >= 1
            and metric(node, bad, listener=name, status="431") >= 2
        ),
        timeout=10,
        what="bad requests counted",
    )
    log = assert_no_error_logged(node)
    assert "414 to 127.0.0.1: the URL is longer than" in log
