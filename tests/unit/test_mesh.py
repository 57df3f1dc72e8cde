"""The Raft port (raftlog/raft/mesh.py) over real loopback sockets: what a connection may send
before it proves it holds the cluster secret, and what the log says about it."""

from __future__ import annotations

import asyncio
import gc
import logging
import time

import msgpack
import pytest
from pysyncobj.node import Node
from support.aio import until
from support.compiled import pure_only

from raftlog.controller.transport import GroupTransport
from raftlog.raft import keepalive, mesh_connection, mesh_frames
from raftlog.raft import mesh as mesh_module
from raftlog.raft.mesh import Mesh


class Inbox:
    """A group's end of the mesh that keeps what it is sent, and says hello when a peer
    comes up (in the same loop turn as the handshake's last frame)."""

    def __init__(self, mesh: Mesh, greeting: dict | None = None) -> None:
        self.mesh = mesh
        self.greeting = greeting
        self.received: list[tuple[str, dict]] = []

    def peer_up(self, peer_id: str) -> None:
        if self.greeting is not None:
            self.mesh.send(peer_id, "g", self.greeting)

    def peer_down(self, peer_id: str) -> None:
        pass

    def peer_silent(self, peer_id: str) -> None:
        pass

    def deliver(self, peer_id: str, message: dict) -> None:
        self.received.append((peer_id, message))


@pytest.fixture
async def listener():
    mesh = Mesh("1", ("127.0.0.1", 0), {}, b"secret")
    await mesh.start()
    yield mesh, mesh._server.sockets[0].getsockname()[1]
    await mesh.close()


async def test_a_large_frame_right_after_the_handshake_arrives(listener) -> None:
    """The handshake is read under a 4 KiB budget; the frames that follow it in the same
    read (here a 64 KiB one) go on to the full-size reader."""
    a, port = listener
    inbox = Inbox(a)
    a.register("g", inbox)
    b = Mesh("2", ("127.0.0.1", 0), {"1": ("127.0.0.1", port)}, b"secret")
    b.register("g", Inbox(b, greeting={"data": b"x" * 65536}))
    await b.start()
    try:
        await until(lambda: inbox.received, "the greeting")
        assert inbox.received == [("2", {"data": b"x" * 65536})]
    finally:
        await b.close()


async def test_a_stranger_cannot_make_the_node_buffer_and_is_logged_once(
    listener, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, an unauthenticated connection could make the node buffer up to 256 MB (a
    frame's worth), and each bad frame logged a traceback."""
    a, port = listener
    with caplog.at_level(logging.WARNING, logger=mesh_module.__name__):
        for _ in range(3):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            # The start of a 100 MB msgpack bin: valid so far, so only the budget stops it.
            writer.write(b"\xc6" + (100 * 1024 * 1024).to_bytes(4, "big") + b"y" * 8000)
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "rejected Raft connection from 127.0.0.1" in lines[0]
    assert "before authentication" in lines[0]
    assert "Traceback" not in caplog.text


async def test_a_peer_with_the_wrong_secret_is_refused(
    listener, caplog: pytest.LogCaptureFixture
) -> None:
    a, port = listener
    b = Mesh("2", ("127.0.0.1", 0), {"1": ("127.0.0.1", port)}, b"not the secret")
    with caplog.at_level(logging.WARNING, logger=mesh_module.__name__):
        await b.start()
        try:
            await until(lambda: "failed authentication" in caplog.text, "the refused handshake")
            assert not a.connected("2") and not b.connected("1")
        finally:
            await b.close()


async def test_past_max_handshakes_the_oldest_stranger_makes_room_and_a_peer_still_gets_in(
    listener, caplog: pytest.LogCaptureFixture
) -> None:
    """Strangers that connect and say nothing were each held HANDSHAKE_TIMEOUT, as many as
    came: a flood held most of a node's descriptors. Now the oldest of MAX_HANDSHAKES is
    closed for a new one (logged once), and a peer's handshake still completes."""
    a, port = listener
    with caplog.at_level(logging.WARNING, logger=mesh_module.__name__):
        strangers = [
            await asyncio.open_connection("127.0.0.1", port)
            for _ in range(mesh_module.MAX_HANDSHAKES + 1)
        ]
        assert await asyncio.wait_for(strangers[0][0].read(), 5) == b""  # the oldest
        await until(lambda: len(a._handshakes) == mesh_module.MAX_HANDSHAKES, "the rest held")
        b = Mesh("2", ("127.0.0.1", 0), {"1": ("127.0.0.1", port)}, b"secret")
        await b.start()
        try:
            await until(lambda: a.connected("2") and b.connected("1"), "the peer's handshake")
        finally:
            await b.close()
    for _, writer in strangers:
        writer.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "handshakes in progress" in lines[0], lines


async def test_a_strangers_closed_connection_is_not_kept_until_its_handshake_deadline(
    listener,
) -> None:
    """The deadline's timer held every stranger's connection, and its reader's 40 KB, for
    HANDSHAKE_TIMEOUT after it closed: a node grew by 1.3 GB in 20 s of reconnects."""
    a, port = listener

    def held() -> int:
        gc.collect()
        return sum(isinstance(o, mesh_connection.Connection) for o in gc.get_objects())

    for _ in range(20):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
    give_up = time.monotonic() + mesh_connection.HANDSHAKE_TIMEOUT / 2
    while held() and time.monotonic() < give_up:
        await asyncio.sleep(0.05)
    assert held() == 0, "closed connections kept until their handshake deadline"


async def test_a_groups_messages_wait_for_its_own_raft_state_save_only(listener, tmp_path) -> None:
    """A vote must be on disk before the peer hears of it. Three hundred saves of group g's
    term go to disk as one batch (concurrent fsyncs); g's messages sent after them leave only
    then, in order. Group h saved nothing: its message does not wait behind g's disk."""
    a, port = listener
    files = [tmp_path / f"g{i}" / "state" for i in range(300)]
    for path in files:
        path.parent.mkdir()
    arrivals: list[tuple[str, int, int]] = []  # (group, n, g's saves on disk then)

    class Witness(Inbox):
        def __init__(self, mesh: Mesh, group: str) -> None:
            super().__init__(mesh)
            self.group = group

        def deliver(self, peer_id: str, message: dict) -> None:
            arrivals.append((self.group, message["n"], sum(p.exists() for p in files)))

    a.register("g", Witness(a, "g"))
    a.register("h", Witness(a, "h"))
    b = Mesh("2", ("127.0.0.1", 0), {"1": ("127.0.0.1", port)}, b"secret")
    peer = Node("1")
    g = GroupTransport(b, "g", Node("2"), {peer}, lambda: None)
    h = GroupTransport(b, "h", Node("2"), {peer}, lambda: None)
    saved = [0]
    g.state_seq = lambda: saved[0]
    await b.start()
    try:
        await until(lambda: b.connected("1"), "the connection")
        g.send(peer, {"n": 0})
        for i, path in enumerate(files):
            image = b"term %d" % i
            saved[0] = b.durability.save(path, image, 0, len(image))
        g.send(peer, {"n": 1})
        g.send_side_message("1", {"n": 2})
        h.send(peer, {"n": 0})
        await until(lambda: len(arrivals) == 4, "the frames")
        assert [(group, n) for group, n, _ in arrivals if group == "g"] == [
            ("g", 0),
            ("g", 1),
            ("g", 2),
        ]
        on_disk = {(group, n): seen for group, n, seen in arrivals}
        assert on_disk[("g", 1)] == on_disk[("g", 2)] == 300
        assert arrivals.index(("h", 0, on_disk[("h", 0)])) < arrivals.index(("g", 1, 300))
        assert files[7].read_bytes() == b"term 7"
        assert b.durability.durable == b.durability.seq == 300
    finally:
        await b.close()


@pure_only(mesh_module, "spies on _Connection._frame, which it calls directly")
async def test_a_turns_heartbeats_and_answers_to_a_peer_travel_as_one_frame_in_order(
    listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every awake group heartbeats each peer every interval; a thousand of them were a
    thousand frames. The plain heartbeats and success answers sent in one loop turn go as
    one frame of compact beats, and a group's other messages keep their place among them."""
    a, port = listener
    frames: list[tuple[int, int]] = []  # (kind, beats in it)
    handle = mesh_connection.Connection._frame

    def spy(self, frame: list) -> None:
        if self.authenticated:
            frames.append((frame[0], len(frame[1]) if frame[0] == mesh_frames.BEATS else 0))
        handle(self, frame)

    monkeypatch.setattr(mesh_connection.Connection, "_frame", spy)
    inboxes = {name: Inbox(a) for name in "gh"}
    for name, inbox in inboxes.items():
        a.register(name, inbox)
    b = Mesh("2", ("127.0.0.1", 0), {"1": ("127.0.0.1", port)}, b"secret")
    peer = Node("1")
    g, h = (GroupTransport(b, name, Node("2"), {peer}, lambda: None) for name in "gh")
    await b.start()
    try:
        await until(lambda: b.connected("1"), "the connection")

        def heartbeat(prev: int) -> dict:
            return {
                "type": "append_entries",
                "term": 3,
                "commit_index": prev,
                "entries": [],
                "prevLogIdx": prev,
                "prevLogTerm": 3,
            }

        append = heartbeat(5) | {"entries": [(b"data", 6, 3)]}
        answer = {"type": "next_node_idx", "next_node_idx": 9, "reset": False, "success": True}
        refusal = answer | {"success": False, "reset": True}
        g.send(peer, heartbeat(5))
        h.send(peer, answer)
        g.send(peer, append)
        g.send(peer, heartbeat(6))
        h.send(peer, refusal)
        await until(lambda: len(inboxes["h"].received) == 2, "the frames")
        beats, raft = mesh_frames.BEATS, mesh_frames.RAFT
        assert frames == [(beats, 2), (raft, 0), (beats, 1), (raft, 0)]
        assert inboxes["g"].received == [
            ("2", [3, 5, 5, 3]),
            ("2", heartbeat(5) | {"entries": [[b"data", 6, 3]]}),
            ("2", [3, 6, 6, 3]),
        ]
        assert inboxes["h"].received == [("2", [9]), ("2", refusal)]
    finally:
        await b.close()


async def test_a_node_back_from_a_long_loop_turn_does_not_take_its_peers_for_silent(
    listener,
) -> None:
    """Under spread produce a node's loop turns grew past the silence threshold; on its
    return the keepalive found every peer unheard (their frames were still unread) and woke
    every quiet group it held, which made the next turns long too. A late keepalive round
    judges no peer; a peer that stays silent is still reported by the next one."""
    a, port = listener
    silences: list[str] = []
    inbox = Inbox(a)
    inbox.peer_silent = silences.append  # type: ignore[method-assign]
    a.register("g", inbox)
    b = Mesh("2", ("127.0.0.1", 0), {"1": ("127.0.0.1", port)}, b"secret")
    await b.start()
    try:
        await until(lambda: a.connected("2"), "the connection")
        await asyncio.sleep(2 * keepalive.PING_INTERVAL)
        time.sleep(2 * keepalive.SILENT_AFTER)  # one long turn of the shared loop
        await asyncio.sleep(4 * keepalive.PING_INTERVAL)
        assert silences == []
        for task in b._tasks:  # now b really falls silent: no more pings
            if task.get_name() == "mesh keepalive":
                task.cancel()
        await until(lambda: silences == ["2"], "the silence")
    finally:
        await b.close()


async def test_what_a_node_reads_right_after_its_loop_was_held_counts_from_the_hold(
    listener,
) -> None:
    """A peer's pings that waited in the socket while this node's loop was held are read the
    moment it runs again: they say nothing of when the peer last heard this node (not since
    the hold began). The silences a Raft leader's lease runs from count them from the hold's
    start (keepalive.heard_at), and `hold_ago` says how long it was; the peer's next ping,
    sent once it could hear this node again, counts from its reading."""
    a, port = listener
    b = Mesh("2", ("127.0.0.1", 0), {"1": ("127.0.0.1", port)}, b"secret")
    await b.start()
    try:
        await until(lambda: a.connected("2"), "the connection")
        await asyncio.sleep(2 * keepalive.PING_INTERVAL)
        time.sleep(0.8)  # one long turn of the shared loop: b's pings wait
        await asyncio.sleep(0.01)
        last = a.last_heard("2")
        assert last is not None and time.monotonic() - last < 0.1  # read after the hold
        held, since = a.hold_ago()
        assert a.silences()["2"] >= 0.8 and held >= 0.8 and since < 0.1
        await until(lambda: a.silences()["2"] < keepalive.PING_INTERVAL + 0.1, "a fresh ping")
    finally:
        await b.close()


async def test_a_hold_the_raft_driver_found_ages_what_is_read_right_after_it(listener) -> None:
    """The driver's tick found the loop held 0.3 s (too short for the keepalive's late round
    to find): what was read in it and right after counts from the hold's start, and
    `hold_ago` says how long it was; a ping read once its peers could hear this node again
    counts from its reading."""
    a, port = listener
    b = Mesh("2", ("127.0.0.1", 0), {"1": ("127.0.0.1", port)}, b"secret")
    await b.start()
    try:
        await until(lambda: a.connected("2"), "the connection")
        await until(lambda: a.silences()["2"] < 0.05, "a ping just read")
        a.loop_held(0.3)
        held, since = a.hold_ago()
        assert a.silences()["2"] >= 0.3 and held == pytest.approx(0.3) and since < 0.05
        await asyncio.sleep(keepalive.HOLD_ECHO)
        await until(lambda: a.silences()["2"] < keepalive.PING_INTERVAL, "a fresh ping")
    finally:
        await b.close()


def _tls(directory, authority=None, name="node"):
    from raftlog.security.tls import TlsSettings
    from raftlog_app.dev_certs import Authority

    authority = authority or Authority(directory / "ca", "ca")
    issued = authority.issue(name, name, server=True)
    settings = TlsSettings(keystore=str(issued.bundle), truststore=str(authority.cert))
    return authority, (settings.server_context("required"), settings.client_context())


async def test_peers_talk_over_mutual_tls_and_a_foreign_certificate_is_refused(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    """peer_tls: both sides show a certificate of the cluster's CA under the HMAC handshake;
    a peer that holds the secret but a certificate of another CA gets nowhere."""
    from raftlog_app.dev_certs import Authority

    authority, tls_a = _tls(tmp_path, name="a")
    _, tls_b = _tls(tmp_path, authority, name="b")
    _, tls_foreign = _tls(tmp_path / "x", Authority(tmp_path / "foreign", "foreign"), "x")
    a = Mesh("1", ("127.0.0.1", 0), {}, b"secret", tls=tls_a)
    inbox = Inbox(a)
    a.register("g", inbox)
    await a.start()
    port = a._server.sockets[0].getsockname()[1]
    peers = {"1": ("127.0.0.1", port)}
    b = Mesh("2", ("127.0.0.1", 0), peers, b"secret", tls=tls_b)
    b.register("g", Inbox(b, greeting={"hello": "over tls"}))
    stranger = Mesh("3", ("127.0.0.1", 0), peers, b"secret", tls=tls_foreign)
    stranger.register("g", Inbox(stranger, greeting={"hello": "from afar"}))
    plain = Mesh("4", ("127.0.0.1", 0), peers, b"secret")
    plain.register("g", Inbox(plain, greeting={"hello": "in the clear"}))
    try:
        await stranger.start()
        await plain.start()
        await b.start()
        await until(lambda: inbox.received, "b's greeting")
        await asyncio.sleep(1.0)  # (the others have dialled and failed by now, many times)
        assert inbox.received == [("2", {"hello": "over tls"})]
    finally:
        for m in (b, stranger, plain, a):
            await m.close()


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_peer_silent_past_dead_after_is_logged_once_and_its_return_with_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 43: with a peer cut off, "peer 2 silent for 6.0s; dropping" was logged at every
    keepalive round (four times a second, 165 lines in one node's 15-minute log): its close
    waited to send what the peer would never read, and the connection stayed. The drop is
    one line and aborts the connection at once; what the node sends the peer meanwhile is
    counted, and its return is one line with that count."""
    clock = ManualClock()
    a = Mesh("1", ("127.0.0.1", 0), {}, b"secret", clock=clock)
    await a.start()
    port = a._server.sockets[0].getsockname()[1]
    b = Mesh("2", ("127.0.0.1", 0), {"1": ("127.0.0.1", port)}, b"secret")
    await b.start()
    try:
        await until(lambda: a.connected("2"), "the connection")
        # Node 2 is cut off: it reads nothing, and what node 1 sends it stays queued.
        b._connections["1"].transport.pause_reading()
        a.send_core("2", [["g", b"x" * (4 << 20)]])
        await asyncio.sleep(0.05)
        assert a.queued("2") > 0
        with caplog.at_level(logging.INFO, logger=mesh_module.__name__):
            clock.now += keepalive.DEAD_AFTER + 1  # nothing heard from node 2 since
            # A late round (node 1's own loop was held) judges nobody: node 2's frames may be
            # waiting unread.
            a._keepalive_round(clock.now, judge=False)
            await asyncio.sleep(0.05)
            assert a.connected("2")
            for _ in range(8):  # two seconds of keepalive rounds
                a._keepalive_round(clock.now, judge=True)
                await asyncio.sleep(0)
            await until(lambda: not a.connected("2"), "the drop")
            assert not a.send_core("2", [["g", 1], ["h", 2], ["i", 3]])
            assert not a.send("2", "c", {"type": "append"})
            clock.now += 2.5
            await until(lambda: a.connected("2"), "node 2 to connect again")
        messages = [r.getMessage() for r in caplog.records if r.name == mesh_module.__name__]
        lines = [m for m in messages if m.startswith("peer 2")]  # node 1's (node 2 logs too)
        assert lines == [
            "peer 2 silent for 6.0s; dropping",
            "peer 2 back after 9.5s (4 messages dropped)",
        ]
    finally:
        await b.close()
        await a.close()


async def test_a_duplicate_connection_closed_in_its_handshake_is_not_logged_as_rejected(
    listener, caplog: pytest.LogCaptureFixture
) -> None:
    """Two nodes that dial each other at once keep the connection the lower id dialled; the
    other is closed as its handshake ends. The frames its dialler sent right after its last
    handshake frame (a restarted node's catch-up) were read on as if still before
    authentication, and past 4 KiB the close was logged as a rejected connection: a WARNING
    that failed a fault run."""
    a, port = listener
    b = Mesh("3", ("127.0.0.1", 0), {}, b"secret")
    await b.start()
    try:
        b_port = b._server.sockets[0].getsockname()[1]
        a.add_peer("3", ("127.0.0.1", b_port))
        await until(lambda: a.connected("3"), "node 1's own connection to node 3")
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        packer = msgpack.Packer()
        nonce = b"n" * 16
        writer.write(packer.pack([mesh_frames.HELLO, "3", nonce, ["127.0.0.1", b_port]]))
        unpacker = msgpack.Unpacker(raw=False)
        while (welcome := next(iter(unpacker), None)) is None:
            unpacker.feed(await reader.read(4096))
        auth = mesh_connection._mac(b"secret", "A", welcome[2], nonce, "3", "1")
        catch_up = [mesh_frames.CONTROL, "k", {"data": b"x" * 1000}]
        with caplog.at_level(logging.INFO, logger=mesh_module.__name__):
            writer.write(packer.pack([mesh_frames.AUTH, auth]) + packer.pack(catch_up) * 8)
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed as the duplicate
        writer.close()
        assert "rejected" not in caplog.text
        assert a.connected("3")
    finally:
        await b.close()


async def test_a_peer_that_accepts_but_never_answers_gets_one_dial_until_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A paused (SIGSTOPped) peer's kernel still accepts connections. Each reconnect round
    dialled again while the last dial's handshake waited, so a 10 s pause piled up 16
    connections that all completed and replaced each other when the peer woke ("peer 4
    connected" 16 times in CI's log). One dial waits for its handshake or its deadline."""
    monkeypatch.setattr(mesh_module, "RECONNECT_DELAY", 0.005)
    accepted: list[asyncio.StreamWriter] = []

    async def asleep(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # reads nothing, answers nothing: a paused process

    server = await asyncio.start_server(asleep, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    a = Mesh("1", ("127.0.0.1", 0), {"2": ("127.0.0.1", port)}, b"secret")
    await a.start()
    try:
        await until(lambda: accepted, "the first dial")
        await asyncio.sleep(0.25)  # fifty reconnect rounds, all within the handshake deadline
        assert len(accepted) == 1
        assert not a.connected("2")
    finally:
        await a.close()
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_connected_peers_dialler_waits_for_the_connections_loss_not_a_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each peer's dialler polled every RECONNECT_DELAY even while connected: at 12 brokers,
    37 wake-ups a second of an idle node's loop. Connected, it waits for the connection's
    loss, and dials again at once after it. Here RECONNECT_DELAY is 0: a dialler that still
    polled would spin the loop (its CPU time) while the nodes idle."""
    monkeypatch.setattr(mesh_module, "RECONNECT_DELAY", 0.0)
    a = Mesh("1", ("127.0.0.1", 0), {}, b"secret")
    await a.start()
    port = a._server.sockets[0].getsockname()[1]
    b = Mesh("2", ("127.0.0.1", 0), {"1": ("127.0.0.1", port)}, b"secret")
    await b.start()
    try:
        await until(lambda: a.connected("2") and b.connected("1"), "the connection")
        await asyncio.sleep(0.05)
        cpu = time.process_time()
        await asyncio.sleep(0.5)
        assert time.process_time() - cpu < 0.1
        lost = b._connections["1"]
        lost.abort()  # the nodes dial each other again at once
        await until(lambda: b._connections.get("1") not in (None, lost), "a new connection")
        await until(lambda: a.connected("2"), "node 1's side of it")
    finally:
        await b.close()
        await a.close()


def test_a_core_frame_is_msgpacks_bytes_with_large_entries_left_uncopied() -> None:
    """The Raft driver's frame goes out as msgpack would pack it, byte for byte (a follower
    reads it with msgpack), but an entry larger than INLINE_ENTRY_BYTES is one of the
    buffers as it is, not copied into the frame."""
    packer = msgpack.Packer(use_bin_type=True)
    big, huge = bytes(range(256)) * 80, b"x" * 70_000  # bin 16 and bin 32 in msgpack
    beat = ["g0", 3, 2, 7, 2, 7, 0, 0, []]
    items = [beat, ["g1", 0, 2, 7, 2, 6, 0, 0, [2, big, 2, b"small", 2, huge]], beat]
    for frame in (items, items[:1], items[:2], [items[1]]):
        parts = mesh_frames.core_frame(packer, frame)
        assert b"".join(parts) == packer.pack([mesh_frames.CORE, frame])
        has_entries = any(item[-1] for item in frame)
        assert any(p is big for p in parts) == any(p is huge for p in parts) == has_entries
