"""The node's Raft driver (raft/driver.py) with real groups on real journals and the node's
real batched saves; the link to the peers records what would go on the wire. What a user
relies on: a vote or a new term never leaves before it is on disk, one frame per peer per
loop turn carries every group's messages, and idle groups cost nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.journal import RecordingListener

from raftlog.raft.core import Message, MsgType, Role
from raftlog.raft.driver import TICK_SECONDS, Driver, decode, encode
from raftlog.raft.durability import Durability
from raftlog.raft.journal import SegmentJournal
from raftlog.raft.replica import CoreGroup, Outcome


class Link:
    """The mesh as the driver sees it; frames are kept, with what was durable when sent."""

    def __init__(self) -> None:
        self.durability = Durability()
        self.frames: list[tuple[str, list[Any], int]] = []
        self.on_peer_change: list[Callable[[str, bool], None]] = []
        self.on_peer_silent: list[Callable[[str], None]] = []

    def send_core(self, peer_id: str, items: list[Any]) -> bool:
        self.frames.append((peer_id, items, self.durability.durable))
        return True

    def on_core(self, handler: Callable[[str, list[Any]], None]) -> None:
        self.handler = handler

    heard = {"2", "3"}
    silent_for = 0.0  # how long ago the peers in `heard` last sent anything

    def heard_from(self, within: float) -> set[str]:
        return self.heard

    def silences(self) -> dict[str, float]:
        return {p: self.silent_for for p in self.heard}


class Clocked:
    """The driver on a clock the test moves: `tick` moves it on and ticks once, as the loop's
    timer would after that long (a long move is a held loop)."""

    def __init__(self, link: Link) -> None:
        self.now = 1000.0
        self.driver = Driver(1, link, election_seconds=0.5, clock=lambda: self.now)

    def tick(self, seconds: float = TICK_SECONDS) -> None:
        self.now += seconds
        self.driver.tick()


def groups(tmp_path: Path, driver: Driver, count: int) -> list[CoreGroup]:
    made = []
    for g in range(count):
        journal = SegmentJournal(tmp_path / f"g{g}", None, RecordingListener())
        made.append(
            CoreGroup(
                f"g{g}",
                "1",
                ["1", "2", "3"],
                journal,
                driver,
                election_seconds=0.5,
                heartbeat_seconds=0.1,
            )
        )
    return made


async def elected(tmp_path: Path, link: Link, driver: Driver) -> CoreGroup:
    """One group whose replica on this node stood in term 1 and got node 2's vote."""
    (group,) = groups(tmp_path, driver, 1)
    group.raft.campaign(pre=False)
    driver.wake(group)
    await asyncio.sleep(0.1)
    link.handler("2", [encode(group.name, Message(MsgType.VOTE_RESP, 2, 1, 1))])
    await asyncio.sleep(0.05)
    assert group.is_leader
    return group


def answer_appends(link: Link, peers: tuple[str, ...] = ("2", "3")) -> None:
    """The followers answer the last frames' appends (heartbeats included) with success."""
    answers = []
    for peer, items, _ in link.frames[-10:]:
        if peer not in peers:
            continue
        for item in items:
            name, m = decode(item, 1, int(peer))
            if m.type == MsgType.APP:
                last = m.index + len(m.entries)
                answer = Message(MsgType.APP_RESP, int(peer), 1, m.term, last, commit=m.commit)
                answers.append((peer, encode(name, answer)))
    for peer, item in answers:
        link.handler(peer, [item])


async def test_votes_wait_for_their_save_and_leave_in_one_frame_per_peer(tmp_path: Path) -> None:
    link = Link()
    driver = Driver(1, link, election_seconds=0.5)
    made = groups(tmp_path, driver, 20)
    for g in made:
        g.raft.campaign(pre=False)  # a real election: term 1 and a vote for itself to save
        driver.wake(g)
    await asyncio.sleep(0.3)
    votes = [
        (peer, decode(item, 1, int(peer))[1], durable)
        for peer, items, durable in link.frames
        for item in items
    ]
    assert {peer for peer, _, _ in votes} == {"2", "3"}
    assert sum(1 for _, m, _ in votes if m.type == MsgType.VOTE) == 40
    # Not one vote request left before the save of the term and vote it asks for was durable.
    assert all(durable >= 1 for _, _, durable in votes)
    assert all(g.journal.term == 1 for g in made)
    # The twenty groups' requests to a peer shared frames: far fewer frames than messages.
    assert len(link.frames) <= 4
    link.durability.close()


async def test_grants_elect_the_groups_and_idle_groups_go_quiet(tmp_path: Path) -> None:
    link = Link()
    driver = Driver(1, link, election_seconds=0.5)
    driver.start()
    made = groups(tmp_path, driver, 5)
    for g in made:
        g.raft.campaign(pre=False)
        driver.wake(g)
    await asyncio.sleep(0.2)
    link.handler("2", [encode(g.name, Message(MsgType.VOTE_RESP, 2, 1, 1)) for g in made])
    await asyncio.sleep(0.05)
    assert all(g.raft.role == Role.LEADER for g in made)
    for _ in range(20):
        answer_appends(link)
        await asyncio.sleep(TICK_SECONDS)
        if all(g.quiet for g in made):
            break
    assert all(g.quiet for g in made)
    sent = len(link.frames)
    await asyncio.sleep(10 * TICK_SECONDS)
    assert len(link.frames) == sent  # quiet: no ticks, no heartbeats
    driver.stop()
    link.durability.close()


async def test_a_leader_that_steps_down_answers_its_pending_writes_possibly_persisted(
    tmp_path: Path,
) -> None:
    """Its entries may still be committed by the next leader: LEADER_CHANGED (the produce
    queue's REQUEST_TIMED_OUT), never "not written"."""
    link = Link()
    driver = Driver(1, link, election_seconds=0.5)
    group = await elected(tmp_path, link, driver)
    answers: list[Outcome] = []
    group.propose(b"S" + b"x", answers.append)
    await asyncio.sleep(0.05)
    assert answers == []  # not committed: no follower answered
    link.handler("3", [encode(group.name, Message(MsgType.APP, 3, 1, 5, index=0, log_term=0))])
    await asyncio.sleep(0.05)
    assert not group.is_leader and answers == [Outcome.LEADER_CHANGED]
    link.durability.close()


async def test_a_leader_leads_while_a_followers_node_is_heard_and_stops_once_it_fell_silent(
    tmp_path: Path,
) -> None:
    """FORK 10 with the lease: no group answers at all, but node 2's pings keep the leader's
    lease; once node 2 was last heard longer ago than an election timeout, it stops within one."""
    link = Link()
    link.heard = {"2"}
    driver = Driver(1, link, election_seconds=0.5)
    driver.start()
    group = await elected(tmp_path, link, driver)
    await asyncio.sleep(30 * TICK_SECONDS)  # three election timeouts
    assert group.is_leader
    link.silent_for = 1.0  # node 2's last word is now two election timeouts old
    await asyncio.sleep(12 * TICK_SECONDS)
    assert not group.is_leader
    driver.stop()
    link.durability.close()


async def test_a_leader_stopped_longer_than_an_election_timeout_stops_unless_its_majority_answers(
    tmp_path: Path,
) -> None:
    """A leader whose loop was held for five seconds (SIGSTOP) heartbeats on its first tick
    and, with no follower heard since, steps down within half an election timeout: it does
    not answer metadata and take writes for another whole timeout in a term that may have
    been replaced."""
    link = Link()
    clock = Clocked(link)
    group = await elected(tmp_path, link, clock.driver)
    link.heard = set()  # the followers' nodes went silent while this one was stopped
    link.frames.clear()
    clock.tick(5.0)
    await asyncio.sleep(0.05)  # the turn, and the save the heartbeats wait for
    sent = {
        (peer, decode(item, 1, int(peer))[1].type)
        for peer, items, _ in link.frames
        for item in items
    }
    assert sent == {("2", MsgType.APP), ("3", MsgType.APP)}
    for _ in range(5):  # half an election timeout (0.5 s)
        clock.tick()
    assert not group.is_leader
    link.durability.close()


async def test_a_leader_stalled_past_its_lease_leads_on_when_its_majority_is_heard_after(
    tmp_path: Path,
) -> None:
    """A loaded node's loop held 0.8 s, longer than what was left of its leaders' leases: the
    followers' frames that waited through the stall are read after it, and the leader leads
    on. Deposed at once, every leader of such a node stepped down after each long turn: at
    3,000 partitions an election storm that never settled."""
    link = Link()
    clock = Clocked(link)
    group = await elected(tmp_path, link, clock.driver)
    for _ in range(7):  # the lease is 7 ticks old and no follower group answered
        clock.tick()
    link.silent_for = 0.8  # nothing read during the stall
    clock.tick(0.8)
    await asyncio.sleep(0.05)  # the loop runs on: the turn, the heartbeats' save
    link.silent_for = 0.0  # the followers' frames that waited are read
    for _ in range(20):  # two election timeouts
        clock.tick()
    assert group.is_leader
    link.durability.close()


async def test_a_leader_goes_quiet_without_a_follower_whose_node_is_gone(
    tmp_path: Path,
) -> None:
    """Node 3 is not connected (killed): the group's leader goes quiet once node 2 holds its
    whole log, instead of ticking and heartbeating for good. After one node's kill -9 that
    was every group on the other two, thousands a tick at 3,000 partitions. Its return wakes
    the group again."""
    link = Link()
    link.heard = {"2"}
    clock = Clocked(link)
    group = await elected(tmp_path, link, clock.driver)
    for _ in range(20):
        answer_appends(link, ("2",))  # node 3 sends nothing
        clock.tick()
        await asyncio.sleep(0.005)
    assert group.quiet and group.is_leader
    link.heard = {"2", "3"}
    for reconnected in link.on_peer_change:
        reconnected("3", True)
    assert not group.quiet
    link.durability.close()


async def test_a_first_replica_stands_on_the_drivers_clock(tmp_path: Path) -> None:
    """A new group's first replica stands one to two heartbeats after it starts, timed on the
    driver's clock as its ticks are: however long the loop runs, a node whose clock has not
    moved has not stood (an in-process test's clock is injected), and once it has moved past
    two heartbeats the replica's pre-votes go out."""
    link = Link()
    clock = Clocked(link)
    driver = clock.driver
    (group,) = groups(tmp_path, driver, 1)  # node 1 is the first of replicas 1, 2, 3
    await asyncio.sleep(0.3)
    assert group.raft.role == Role.FOLLOWER and not link.frames
    for _ in range(4):  # 0.2 s on the driver's clock, two heartbeats
        clock.tick()
    await asyncio.sleep(0.05)  # the turn, and the save its pre-votes wait for
    sent = {
        (peer, decode(item, 1, int(peer))[1].type)
        for peer, items, _ in link.frames
        for item in items
    }
    assert sent == {("2", MsgType.PREVOTE), ("3", MsgType.PREVOTE)}
    link.durability.close()


async def test_a_leader_keeps_its_lease_through_a_stall_shorter_than_an_election_timeout(
    tmp_path: Path,
) -> None:
    """Its followers' nodes were heard just before the loop was held 0.4 s (an election
    timeout is 0.5 s): no other leader can have been elected, and it leads on. Its lease was
    near its end when the stall began; counting the stall twice (once in the peers' silence,
    once in the missed ticks) deposed it, and under load every leader of a busy node with it."""
    link = Link()
    clock = Clocked(link)
    driver = clock.driver
    group = await elected(tmp_path, link, driver)
    for _ in range(7):  # the lease is 7 ticks old and no follower group answered
        clock.tick()
    link.silent_for = 8 * TICK_SECONDS  # held for 0.4 s; nothing read meanwhile
    clock.tick(8 * TICK_SECONDS)
    await asyncio.sleep(0.05)  # the catch-up of the missed ticks
    assert group.is_leader
    link.durability.close()


async def test_a_follower_does_not_stand_for_its_own_nodes_stall(tmp_path: Path) -> None:
    """A loop held for two election timeouts was this node's pause, not its leader's silence:
    the leader's frames that waited meanwhile are still to be read. The follower's missed
    ticks are dropped (etcd's ticker drops them too); ticked, every follower of a loaded node
    stood after each long turn. A leader that is really silent is still replaced: after an
    election timeout of the follower's own ticks it stands."""
    link = Link()
    clock = Clocked(link)
    driver = clock.driver
    journal = SegmentJournal(tmp_path / "g", None, RecordingListener())
    group = CoreGroup(
        "g", "1", ["2", "1", "3"], journal, driver, election_seconds=0.5, heartbeat_seconds=0.1
    )
    link.handler("2", [encode("g", Message(MsgType.APP, 2, 1, 1, index=1, log_term=0))])
    await asyncio.sleep(0.05)
    assert group.raft.leader == 2
    link.frames.clear()

    def stood() -> bool:
        return any(
            decode(item, 1, int(peer))[1].type == MsgType.PREVOTE
            for peer, items, _ in link.frames
            for item in items
        )

    clock.tick(1.0)
    await asyncio.sleep(0.05)
    assert not stood() and group.raft.leader == 2
    for _ in range(40):  # two election timeouts of its own ticks without a word from node 2
        clock.tick()
    await asyncio.sleep(0.05)
    assert stood()
    link.durability.close()


async def test_a_follower_whose_leaders_node_disconnects_stands_within_an_election_timeout(
    tmp_path: Path,
) -> None:
    """The connection to the leader's node closed (kill -9): a whole minimum election timeout
    counts as passed, and the follower stands within a random part of one (0.5 s), not after
    another whole one as when its leader merely fell silent."""
    link = Link()
    clock = Clocked(link)
    journal = SegmentJournal(tmp_path / "g", None, RecordingListener())
    group = CoreGroup(
        "g",
        "1",
        ["2", "1", "3"],
        journal,
        clock.driver,
        election_seconds=0.5,
        heartbeat_seconds=0.1,
    )
    link.handler("2", [encode("g", Message(MsgType.APP, 2, 1, 1, index=1, log_term=0))])
    await asyncio.sleep(0.05)
    assert group.raft.leader == 2
    link.frames.clear()
    link.heard = {"3"}
    for closed in link.on_peer_change:
        closed("2", False)
    for _ in range(9):  # less than a minimum election timeout (10 ticks)
        clock.tick()
    await asyncio.sleep(0.05)  # the turn, and the save its pre-votes wait for
    sent = {(p, decode(item, 1, int(p))[1].type) for p, items, _ in link.frames for item in items}
    assert ("3", MsgType.PREVOTE) in sent
    link.durability.close()


async def test_a_quiet_leader_woken_after_a_stall_is_not_charged_the_stall(
    tmp_path: Path,
) -> None:
    """An idle partition's leader is quiet: no ticks, no lease to keep. Held for 0.8 s and
    woken just after by a write, it leads on and takes the write; charged the missed ticks of
    a time it was quiet, it stepped down with nothing heard since its wake."""
    link = Link()
    clock = Clocked(link)
    driver = clock.driver
    group = await elected(tmp_path, link, driver)
    for _ in range(40):
        answer_appends(link)
        clock.tick()
        await asyncio.sleep(0.005)
        if group.quiet:
            break
    assert group.quiet
    link.silent_for = 0.8
    clock.tick(0.8)
    answers: list[Outcome] = []
    group.propose(b"S" + b"x", answers.append)  # before the catch-up runs
    await asyncio.sleep(0.05)
    assert group.is_leader
    answer_appends(link)
    await asyncio.sleep(0.05)
    assert answers == [Outcome.COMMITTED]
    link.durability.close()
