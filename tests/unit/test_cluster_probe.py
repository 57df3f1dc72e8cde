"""`raftlog cluster up` waits for every node's Kafka listener to answer ApiVersions; a listener
that takes connections and drops them (how a broken node looked: registered, port open, every
client reset) or answers with an error does not count as up."""

from __future__ import annotations

import contextlib
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from raftlog_app import local_nodes


@contextmanager
def listener(serve: Callable[[socket.socket], None]) -> Iterator[int]:
    server = socket.create_server((local_nodes.HOST, 0))
    port = server.getsockname()[1]

    def run() -> None:
        conn, _ = server.accept()
        with conn:
            serve(conn)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        server.close()
        thread.join(5)


def answer(error: int) -> Callable[[socket.socket], None]:
    def serve(conn: socket.socket) -> None:
        (size,) = struct.unpack(">i", conn.recv(4))
        request = conn.recv(size)
        (correlation,) = struct.unpack_from(">i", request, 4)
        body = struct.pack(">ih", correlation, error) + struct.pack(">i", 0)
        conn.sendall(struct.pack(">i", len(body)) + body)

    return serve


def test_a_listener_that_answers_counts_as_up() -> None:
    with listener(answer(0)) as port:
        assert local_nodes.kafka_answers(port)


def test_an_error_answer_or_a_dropped_connection_does_not() -> None:
    with listener(answer(35)) as port:  # UNSUPPORTED_VERSION
        assert not local_nodes.kafka_answers(port)
    with listener(lambda conn: conn.recv(64)) as port:  # reads, then closes
        assert not local_nodes.kafka_answers(port)


def test_nothing_listening_does_not() -> None:
    with socket.create_server((local_nodes.HOST, 0)) as s:
        port = s.getsockname()[1]
    assert not local_nodes.kafka_answers(port)


def test_a_port_held_by_time_wait_only_is_named_so() -> None:
    """`cluster up` refused such a port without saying why. A server's own TIME-WAIT does not
    stop a node's bind (SO_REUSEADDR), and is not refused; one a client connection left on its
    local port does stop it, and the refusal says it clears by itself."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    client = socket.create_connection(server.getsockname())
    port = client.getsockname()[1]
    accepted, _ = server.accept()
    client.close()  # the client closes first: its side, this port, goes to TIME-WAIT
    time.sleep(0.05)
    accepted.close()
    server.close()
    assert (
        local_nodes.busy_ports([port])
        == f"{port} (a closed connection's TIME-WAIT: free within 60 s)"
    )

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    taken = listening.getsockname()[1]
    assert local_nodes.busy_ports([taken]) == str(taken)
    listening.close()
    assert local_nodes.busy_ports([taken]) is None


def test_a_node_is_alive_until_killed_and_then_reaped_not_left_a_zombie() -> None:
    """alive(), the one check of a node's process for the CLI, the tests and the benchmark: a
    running process whose name holds ") Z" is alive (the state is read after the last ')');
    one killed with -9 is not, and, a child of ours, is reaped on the way rather than left
    in the process table."""
    name = "node) Z x"
    child = subprocess.Popen(
        [sys.executable, "-c", f"open('/proc/self/comm', 'w').write({name!r})\n"
         "import time; time.sleep(60)"],
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        comm = Path(f"/proc/{child.pid}/comm")
        while comm.read_text().strip() != name and time.monotonic() < deadline:
            time.sleep(0.01)
        assert local_nodes.alive(child.pid)
        child.send_signal(signal.SIGKILL)
        while local_nodes.alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not local_nodes.alive(child.pid)
        assert not Path(f"/proc/{child.pid}").exists()  # reaped, no zombie left
    finally:
        child.kill()
        with contextlib.suppress(ChildProcessError):
            child.wait(5)
    assert not local_nodes.alive(None) and not local_nodes.alive(0)
