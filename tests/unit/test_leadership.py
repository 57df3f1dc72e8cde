"""Leaders tell the other nodes about their groups (raftlog/cluster/leadership.py), over real meshes."""

from __future__ import annotations

import asyncio

from support.aio import until

from raftlog.cluster.leadership import GOSSIP, LeadershipDirectory
from raftlog.raft.mesh import Mesh


async def test_a_leader_tells_a_change_once_and_an_unchanged_view_never() -> None:
    """A node re-observes every group it leads each second; only a change is sent at once
    (announce() repeats the whole view), or a thousand led groups cost two thousand frames
    a second while idle."""
    a = Mesh("1", ("127.0.0.1", 0), {}, b"secret")
    await a.start()
    port = a._server.sockets[0].getsockname()[1]
    b = Mesh("2", ("127.0.0.1", 0), {"1": ("127.0.0.1", port)}, b"secret")
    heard: list[dict] = []
    b.on_control(GOSSIP, lambda _peer, payload: heard.append(payload))
    await b.start()
    directory = LeadershipDirectory(1, a)
    try:
        await until(lambda: a.connected("2"), "the connection")
        await asyncio.sleep(0.1)
        heard.clear()
        for _ in range(50):
            directory.observe("t/0", 1, 4, (1, 2))
        await until(lambda: heard, "the change")
        directory.observe("t/0", 1, 4, (1,))  # the ISR shrank: a change
        await until(lambda: len(heard) == 2, "the second change")
        directory.announce()
        await until(lambda: len(heard) == 3, "the announcement")
        await asyncio.sleep(0.1)
        assert heard == [{"t/0": [1, 4, [1, 2]]}, {"t/0": [1, 4, [1]]}, {"t/0": [1, 4, [1]]}]
        assert directory.lookup("t/0").isr == (1,)
    finally:
        await b.close()
        await a.close()
