"""Who may open a share session (raftlog/share/members.py), over two real meshes on loopback:
node 1 coordinates the group (a real ShareGroups on a manual clock), node 2 leads a partition
and asks it. A member id nobody joined with opens nothing; a member opens a session as soon
as its join was answered; a member that leaves or is fenced loses its sessions everywhere
(once its last acknowledgements had LEAVE_GRACE_SECONDS to arrive: test_share_close.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest
from support.aio import until
from support.clock import ManualClock, settle

from raftlog.common.errors import ErrorCode
from raftlog.config import group_config
from raftlog.raft.mesh import Mesh
from raftlog.share import members as M
from raftlog.share.manager import ShareManager
from raftlog.share.members import ShareMembers
from raftlog.share.membership import ShareGroups
from raftlog.share.sessions import LEAVE_GRACE_SECONDS

E = ErrorCode
HOST = "/127.0.0.1"


@dataclass
class Pair:
    clock: ManualClock
    groups: ShareGroups  # node 1's, the coordinator's
    coordinator: ShareMembers  # node 1
    leader: ShareMembers  # node 2
    share: ShareManager  # node 2's sessions
    meshes: tuple[Mesh, Mesh]

    def join(self, member: str, group: str = "g") -> None:
        result = self.groups.heartbeat(group, member, 0, None, ["t"], "c", HOST)
        assert result.error is E.none

    def left(self, member: str, group: str = "g") -> bool:
        """Whether this node heard that the member left (its session takes only acks)."""
        session = self.share.sessions.get(group, member)
        return session is not None and session.left

    def open(self, member: str, group: str = "g") -> ErrorCode:
        step = self.share.sessions.for_fetch(group, member, 0, [("t", 0)], (), False, False)
        return step.error


def _drop(_group: str, _member: str) -> None:
    pass


def _known(groups: ShareGroups) -> Callable[[str, str], ErrorCode]:
    return lambda g, m: E.none if groups.is_member(g, m) else E.unknown_member_id


async def _meshes() -> tuple[Mesh, Mesh]:
    one = Mesh("1", ("127.0.0.1", 0), {}, b"secret")
    await one.start()
    port = one._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    two = Mesh("2", ("127.0.0.1", 0), {"1": ("127.0.0.1", port)}, b"secret")
    await two.start()
    await until(lambda: one.connected("2") and two.connected("1"), "the two nodes connected")
    return one, two


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    clock = ManualClock()
    one, two = await _meshes()
    groups = ShareGroups(lambda _t: 1, clock)
    coordinator = ShareMembers(1, one, lambda _g: 1, _known(groups), _drop, clock)
    groups.on_member_left.append(coordinator.left)
    share = ShareManager(
        lambda _g: group_config.values({}),
        lambda g, m: leader.check(g, m),
        clock,
    )
    leader = ShareMembers(
        2, two, lambda _g: 1, lambda _g, _m: E.not_coordinator, share.member_left, clock
    )
    yield Pair(clock, groups, coordinator, leader, share, (one, two))
    groups.close()
    for mesh in (one, two):
        await mesh.close()


async def test_a_made_up_member_is_refused_and_a_member_is_admitted_right_after_joining(
    pair: Pair,
) -> None:
    assert await pair.leader.check("g", "stranger") is E.unknown_member_id
    assert await pair.leader.check("nope", "stranger") is E.unknown_member_id
    pair.join("m")  # its heartbeat was answered: its first fetch follows
    assert await pair.leader.check("g", "m") is E.none
    assert await pair.leader.check("other-group", "m") is E.unknown_member_id
    # the coordinator's own node answers without asking anyone
    assert await pair.coordinator.check("g", "m") is E.none
    assert await pair.coordinator.check("g", "stranger") is E.unknown_member_id


async def test_ids_no_heartbeat_accepts_are_refused_without_asking(pair: Pair) -> None:
    asked: list[object] = []
    pair.meshes[0].on_control(M.ASK, lambda _p, payload: asked.append(payload))
    assert await pair.leader.check("g", "m" * (M.MAX_MEMBER_ID_BYTES + 1)) is E.unknown_member_id
    assert await pair.leader.check("g" * (M.MAX_GROUP_ID_BYTES + 1), "m") is E.unknown_member_id
    assert await pair.leader.check("g", "") is E.unknown_member_id
    assert asked == []
    # and the heartbeat refuses such a member id: nobody can join with it
    result = pair.groups.heartbeat("g", "m" * 256, 0, None, ["t"], "c", HOST)
    assert result.error is E.invalid_request


async def test_a_member_that_leaves_or_is_fenced_loses_its_sessions_on_every_node(
    pair: Pair,
) -> None:
    pair.join("a")
    pair.join("b")
    for member in ("a", "b"):
        assert await pair.leader.check("g", member) is E.none
        assert pair.open(member) is E.none
    assert pair.groups.heartbeat("g", "a", -1, None, None, "c", HOST).error is E.none
    await until(lambda: pair.left("a"), "a's session told it left")
    # it only waits for a's last acknowledgements (test_share_close.py), then ends
    await pair.clock.advance(LEAVE_GRACE_SECONDS)
    assert pair.share.sessions.get("g", "a") is None
    assert pair.share.sessions.get("g", "b") is not None and not pair.left("b")
    # b stops heartbeating: its group session (45 s) expires and the coordinator fences it
    await pair.clock.advance(45.0)
    # (the word may come while the clock moves on, and the grace run out with it)
    await until(
        lambda: pair.left("b") or pair.share.sessions.get("g", "b") is None,
        "b's session told it was fenced",
    )
    await pair.clock.advance(LEAVE_GRACE_SECONDS)
    assert pair.share.sessions.get("g", "b") is None
    step = pair.share.sessions.for_fetch("g", "b", 1, [], [], False, False)
    assert step.error is E.share_session_not_found  # b's client starts over: rejoin first
    assert await pair.leader.check("g", "b") is E.unknown_member_id


async def test_a_coordinator_that_cannot_be_asked_refuses_for_now(pair: Pair) -> None:
    def node_2(coordinator: int | None) -> ShareMembers:
        mesh = Mesh("2", ("127.0.0.1", 0), {}, b"secret")  # connected to nobody
        return ShareMembers(2, mesh, lambda _g: coordinator, _known(pair.groups), _drop)

    assert await node_2(3).check("g", "m") is E.coordinator_not_available  # not connected
    assert await node_2(None).check("g", "m") is E.coordinator_not_available  # no leader known
    assert await node_2(M.NO_GROUPS).check("g", "m") is E.unknown_member_id  # no group yet
    # a coordinator that does not answer: the open waits ASK_TIMEOUT_S, not longer
    pair.meshes[0].on_control(M.ASK, lambda _p, _payload: None)
    pair.join("m")
    waiting = asyncio.ensure_future(pair.leader.check("g", "m"))
    await settle()
    assert not waiting.done()
    await pair.clock.advance(M.ASK_TIMEOUT_S)
    assert await waiting is E.coordinator_not_available


async def test_opens_waiting_for_the_coordinator_are_bounded(pair: Pair) -> None:
    pair.meshes[0].on_control(M.ASK, lambda _p, _payload: None)  # it never answers
    waiting = [asyncio.ensure_future(pair.leader.check("g", f"m{i}")) for i in range(M.MAX_ASKING)]
    again = asyncio.ensure_future(pair.leader.check("g", "m0"))  # the same one: one question
    await settle()
    assert await pair.leader.check("g", "one-more") is E.share_session_limit_reached
    await pair.clock.advance(M.ASK_TIMEOUT_S)
    results = await asyncio.gather(*waiting, again)
    assert set(results) == {E.coordinator_not_available}
    # answered or timed out, they make room again
    pair.meshes[0].on_control(M.ASK, pair.coordinator._asked)
    assert await pair.leader.check("g", "one-more") is E.unknown_member_id
