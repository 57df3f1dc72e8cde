"""The node's Raft driver (raft/driver.py) with real groups on real journals and the node's
real batched saves; the link to the peers records what would go on the wire. What a user
relies on: a vote or a new term never leaves before it is on disk, one frame per peer per
loop turn carries every group's messages, and idle groups cost nothing."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.compiled import pure_only
from support.journal import RecordingListener

from raftlog.raft import replica
from raftlog.raft.core import raft as raft_module
from raftlog.raft.core.values import Entry, Message, MsgType, Ready, Role
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
        self.holds: list[float] = []  # the holds the driver's late ticks found (Mesh.loop_held)

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

    held = 0.0  # the node's loop's last hold, ended just now (Mesh.hold_ago)

    def hold_ago(self) -> tuple[float, float]:
        return self.held, 0.0

    def loop_held(self, seconds: float) -> None:
        self.holds.append(seconds)


class Clocked:
    """The driver on a clock the test moves: `tick` moves it on and ticks once, as the loop's
    timer would after that long (a long move is a held loop)."""

    def __init__(self, link: Link) -> None:
        self.now = 1000.0
        self.driver = Driver(1, link, election_seconds=0.5, clock=lambda: self.now)

    def tick(self, seconds: float = TICK_SECONDS) -> None:
        self.now += seconds
        self.driver.tick()


class Hosted:
    """A group's replica as its owner (a partition) holds it: restarted by the driver, it
    closes the group and opens its journal again from its files under a new group."""

    def __init__(
        self, path: Path, driver: Driver, name: str, peers: tuple[str, ...] = ("1", "2", "3")
    ) -> None:
        self.path, self.driver, self.name, self.peers = path, driver, name, peers
        self.restarts = 0
        self.group = self._open()

    def _open(self) -> CoreGroup:
        return CoreGroup(
            self.name,
            "1",
            list(self.peers),
            SegmentJournal(self.path, None, RecordingListener()),
            self.driver,
            election_seconds=0.5,
            heartbeat_seconds=0.1,
            restart=self.restart,
        )

    def restart(self) -> None:
        self.group.close()
        self.restarts += 1
        self.group = self._open()


def groups(tmp_path: Path, driver: Driver, count: int) -> list[CoreGroup]:
    return [Hosted(tmp_path / f"g{g}", driver, f"g{g}").group for g in range(count)]


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
    """The followers answer the last frames' appends (heartbeats included) with success, and
    a quiesce heartbeat quiet, as a follower that went quiet on it does."""
    answers = []
    for peer, items, _ in link.frames[-10:]:
        if peer not in peers:
            continue
        for item in items:
            name, m = decode(item, 1, int(peer))
            if m.type == MsgType.APP:
                last = m.index + len(m.entries)
                answer = Message(
                    MsgType.APP_RESP, int(peer), 1, m.term, last, commit=m.commit, quiesce=m.quiesce
                )
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


async def test_an_idle_driver_stops_ticking_and_a_wake_starts_it_again(tmp_path: Path) -> None:
    """With every group quiet and no timer due, the tick stops: an idle node's loop is not
    woken 20 times a second for nothing. A proposal wakes its group, and its heartbeats go on
    from the ticks that start again."""
    link = Link()
    reads = 0

    def clock() -> float:
        nonlocal reads
        reads += 1
        return time.monotonic()

    driver = Driver(1, link, election_seconds=0.5, clock=clock)
    driver.start()
    group = await elected(tmp_path, link, driver)
    for _ in range(20):
        answer_appends(link)
        await asyncio.sleep(TICK_SECONDS)
        if group.quiet:
            break
    assert group.quiet and driver.awake == 0
    await asyncio.sleep(2 * TICK_SECONDS)
    before = reads
    await asyncio.sleep(10 * TICK_SECONDS)
    assert reads == before  # no tick ran (each reads the clock)
    group.propose(b"S" + b"x", lambda outcome: None)
    await asyncio.sleep(0.01)
    link.frames.clear()
    await asyncio.sleep(8 * TICK_SECONDS)  # four heartbeat intervals, nobody answering
    beats = [
        m
        for peer, items, _ in link.frames
        if peer == "2"
        for m in (decode(item, 1, 2)[1] for item in items)
        if m.type == MsgType.APP
    ]
    assert len(beats) >= 2 and reads > before
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


def test_a_tick_a_tick_late_tells_the_mesh_the_loop_was_held() -> None:
    """FORK 5: the driver's tick is the finest clock of the node's loop. One that comes a
    tick or more late (the ticks it missed are `Raft.resume`'s) tells the mesh how long
    since the last one (`Link.loop_held`): what is read right after counts as heard from
    then. One on time, or under a tick late, says nothing."""
    link = Link()
    clock = Clocked(link)
    clock.tick()
    clock.tick(1.9 * TICK_SECONDS)
    assert link.holds == []
    clock.tick(0.3)
    clock.tick()
    assert link.holds == [pytest.approx(0.3)]


async def test_a_follower_does_not_stand_for_its_own_nodes_stall(tmp_path: Path) -> None:
    """A loop held for two election timeouts was this node's pause, not its leader's silence:
    the leader's frames that waited meanwhile are still to be read. The follower's missed
    ticks are dropped (etcd's ticker drops them too); ticked, every follower of a loaded node
    stood after each long turn. A leader that is really silent is still replaced: after an
    election timeout of the follower's own ticks it stands."""
    link = Link()
    clock = Clocked(link)
    driver = clock.driver
    group = Hosted(tmp_path / "g", driver, "g", ("2", "1", "3")).group
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
    group = Hosted(tmp_path / "g", clock.driver, "g", ("2", "1", "3")).group
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


async def quiet_leader(tmp_path: Path, link: Link, clock: Clocked) -> CoreGroup:
    """A group elected on `clock`'s driver whose followers answer until it has gone quiet."""
    group = await elected(tmp_path, link, clock.driver)
    for _ in range(40):
        answer_appends(link)
        clock.tick()
        await asyncio.sleep(0.005)
        if group.quiet:
            break
    assert group.quiet
    return group


async def held_quiet_leader_written_to(
    tmp_path: Path, link: Link
) -> tuple[Clocked, CoreGroup, list[Outcome]]:
    """A quiet leader held 0.8 s (its followers' nodes last heard then too) and written to
    just after, before its catch-up runs: its clock, the group, the write's answers."""
    clock = Clocked(link)
    group = await quiet_leader(tmp_path, link, clock)
    link.silent_for = link.held = 0.8
    clock.tick(0.8)
    answers: list[Outcome] = []
    group.propose(b"S" + b"x", answers.append)
    await asyncio.sleep(0.05)
    return clock, group, answers


async def test_a_quiet_leader_woken_after_a_stall_is_not_charged_the_stall(
    tmp_path: Path,
) -> None:
    """An idle partition's leader is quiet: no ticks, no lease to keep. Held for 0.8 s and
    woken just after by a write, its followers' nodes heard only in the reading right after
    the hold (counted from its start, Mesh.silences), it is charged the hold as a leader awake
    through it is (Raft.resume's grace), takes the write, and leads on once they answer;
    charged the missed ticks of a time it was quiet, or left with the lease the silences
    alone give, it stepped down with nothing heard since its wake."""
    link = Link()
    _, group, answers = await held_quiet_leader_written_to(tmp_path, link)
    assert group.is_leader
    answer_appends(link)
    await asyncio.sleep(0.05)
    assert answers == [Outcome.COMMITTED]
    link.durability.close()


async def test_a_quiet_leader_woken_by_a_write_leads_on_only_while_its_followers_were_heard(
    tmp_path: Path,
) -> None:
    """FORK 5: a quiet leader cut off from its followers, woken by a write before its
    keepalive round found them silent, keeps the lease their nodes' last words gave it, not
    a fresh one: they have been silent for more than an election timeout, so it steps down
    before it takes the write (Raft.check_woken_lease), which is answered "not leader" (not
    written). With a fresh lease it led (and took writes) for another election timeout while
    they elected another (driver.wake_to_lead); stepping down at its next tick, it took the
    write first."""
    link = Link()
    clock = Clocked(link)
    group = await quiet_leader(tmp_path, link, clock)
    link.silent_for = 0.6  # nothing from nodes 2 and 3 since the cut, 0.6 s ago
    answers: list[Outcome] = []
    group.propose(b"S" + b"x", answers.append)
    await asyncio.sleep(0.05)
    assert not group.is_leader and answers == [Outcome.NOT_LEADER]
    link.durability.close()


async def test_a_quiet_leader_held_and_cut_off_stops_after_the_holds_grace(
    tmp_path: Path,
) -> None:
    """FORK 5's allowance: held 0.8 s and cut off meanwhile, the quiet leader woken by a
    write just after takes it within Raft.resume's grace (half an election timeout) and,
    with no answer, stops once that is over; the write is answered "possibly persisted"."""
    link = Link()
    clock, group, answers = await held_quiet_leader_written_to(tmp_path, link)
    ticks = 0
    while group.is_leader:
        clock.tick()
        await asyncio.sleep(0.005)
        ticks += 1
    assert ticks == round(0.25 / TICK_SECONDS)  # Raft.resume's grace, no more
    assert answers == [Outcome.LEADER_CHANGED]
    link.durability.close()


def sent_to(link: Link, peer: str) -> list[tuple[str, Message]]:
    """(group, message) of every frame sent to `peer` so far."""
    return [
        decode(item, 1, int(peer)) for p, items, _ in link.frames if p == peer for item in items
    ]


@pure_only(replica, "sets a CoreGroup's apply; a compiled instance takes no new attribute")
async def test_a_group_whose_ready_raises_is_restarted_from_its_files_and_its_neighbours_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 43: a Ready raised halfway (there: reading an entry past the end of its
    segment). The group is stopped with none of that Ready's messages sent, counted, and its
    owner reopens it from its files at the next tick: a follower of the term and vote it had
    saved, with the entry it had written, that answers the next leader. Its four neighbours
    on the node lead on, and their appends leave in the same frames as before."""
    link = Link()
    clock = Clocked(link)
    driver = clock.driver
    hosted = [Hosted(tmp_path / f"g{i}", driver, f"g{i}") for i in range(5)]
    for h in hosted:
        h.group.raft.campaign(pre=False)
        driver.wake(h.group)
    await asyncio.sleep(0.05)
    link.handler("2", [encode(h.name, Message(MsgType.VOTE_RESP, 2, 1, 1)) for h in hosted])
    await asyncio.sleep(0.05)
    assert all(h.group.is_leader for h in hosted)
    answer_appends(link)  # the followers hold the new terms' no-ops: appends go out at once
    await asyncio.sleep(0.05)
    bad = hosted[2]
    failing = bad.group

    def apply_halfway(rd: Ready) -> None:
        if rd.committed:
            failing.journal.set_commit_index(rd.committed[-1].index)
        raise ValueError("injected: the Ready's second half")

    failing.apply = apply_halfway  # type: ignore[method-assign]
    answers: dict[str, list[Outcome]] = {h.name: [] for h in hosted}
    link.frames.clear()
    for h in hosted:
        h.group.propose(b"S" + h.name.encode(), answers[h.name].append)
    with caplog.at_level(logging.ERROR, logger="raftlog.raft.driver"):
        await asyncio.sleep(0.05)
    # The failing Ready's appends never left; the four others' did, one frame per peer.
    for peer in ("2", "3"):
        appends = [(g, m) for g, m in sent_to(link, peer) if m.type == MsgType.APP and m.entries]
        assert sorted(g for g, _ in appends) == ["g0", "g1", "g3", "g4"]
    assert len(link.frames) == 2
    assert driver.failures_total == 1 and driver.failures == {"g2": 1}
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "raft group g2: ready failed" in errors[0].getMessage()
    assert not driver.holds(failing)
    # Stopped, it leads nothing and takes nothing until it is reopened.
    late: list[Outcome] = []
    failing.propose(b"S" + b"late", late.append)
    await asyncio.sleep(0)
    assert not failing.is_leader and late == [Outcome.NOT_LEADER]
    # The neighbours lead on in term 1 and commit what they were asked to.
    answer_appends(link)
    await asyncio.sleep(0.05)
    for h in hosted:
        if h is not bad:
            assert h.group.is_leader and h.group.term == 1 and h.restarts == 0
            assert answers[h.name] == [Outcome.COMMITTED]
    assert bad.restarts == 0  # at the next tick
    clock.tick()
    assert bad.restarts == 1 and bad.group is not failing and driver.holds(bad.group)
    # The proposal's outcome is unknown (the entry is in its log): as a leader's that stepped down.
    assert answers["g2"] == [Outcome.LEADER_CHANGED]
    again = bad.group
    assert again.raft.role == Role.FOLLOWER and (again.term, again.raft.vote) == (1, 1)
    assert again.journal.last_index == 3  # term 0's entry, term 1's no-op, the proposal
    # It goes on with its peers: node 2, elected in term 2, appends and is answered.
    link.frames.clear()
    link.handler(
        "2",
        [
            encode(
                "g2",
                Message(MsgType.APP, 2, 1, 2, index=3, log_term=1, entries=(Entry(2, 4, b"S2"),)),
            )
        ],
    )
    await asyncio.sleep(0.05)
    (answer,) = [m for g, m in sent_to(link, "2") if g == "g2"]
    assert answer.type == MsgType.APP_RESP and not answer.reject and answer.index == 4
    assert again.raft.leader == 2 and again.journal.last_index == 4
    link.durability.close()


@pure_only(raft_module, "sets a Raft's tick; a compiled instance takes no new attribute")
async def test_a_group_that_fails_again_at_once_waits_longer_before_each_restart(
    tmp_path: Path,
) -> None:
    """A group that raises at every start costs the node little: its second failure within a
    minute waits half a second for its restart, its third a second."""
    link = Link()
    clock = Clocked(link)
    driver = clock.driver
    hosted = Hosted(tmp_path / "g", driver, "g")

    def fail() -> None:
        def raising(*_: object) -> bool:
            raise ValueError("injected")

        hosted.group.raft.tick = raising  # type: ignore[method-assign,assignment]

    fail()
    clock.tick()  # raises: stopped, and reopened at the end of the same tick
    assert hosted.restarts == 1 and driver.holds(hosted.group)
    for restarts, wait in ((2, 0.5), (3, 1.0)):
        fail()
        clock.tick()
        assert not driver.holds(hosted.group)
        clock.tick(wait - TICK_SECONDS)
        assert hosted.restarts == restarts - 1
        clock.tick()
        assert hosted.restarts == restarts and driver.holds(hosted.group)
    assert driver.failures_total == 3 and driver.failures == {"g": 3}
    link.durability.close()


async def test_a_transfer_goes_to_a_follower_whose_node_is_heard(tmp_path: Path) -> None:
    """The fault run's graceful stop: node 1 had just left, and node 2, stopping next, handed
    each of its 22 groups to the follower holding the most of the log, ties first by id:
    node 1, gone. Its 5 s ran out with every group still led. The transfer goes to node 3."""
    link = Link()
    clock = Clocked(link)
    group = await elected(tmp_path, link, clock.driver)
    answer_appends(link)  # nodes 2 and 3 hold the whole log
    await asyncio.sleep(0.05)
    assert group.match_indexes() == {"2": 2, "3": 2}
    link.heard = {"3"}  # node 2 stopped
    link.frames.clear()
    assert group.transfer_leadership()
    await asyncio.sleep(0.05)
    sent = [(p, m.type) for p in ("2", "3") for _, m in sent_to(link, p)]
    assert sent == [("3", MsgType.TIMEOUT_NOW)]
    link.durability.close()


def test_an_entry_sent_to_two_followers_is_read_once_and_both_get_the_same_bytes() -> None:
    """A Ready's appends to its followers share each entry's bytes: reading a lazy entry out
    of its segment (and copying it) is done once, not once per follower."""

    class Lazy:
        reads = 0

        def __len__(self) -> int:
            return 4

        def __bytes__(self) -> bytes:
            Lazy.reads += 1
            return b"Kabc"

    entries = (Entry(1, 5, Lazy()),)
    read: dict[tuple[int, int], bytes] = {}
    sent = [
        encode("g", Message(MsgType.APP, 1, peer, 1, index=4, log_term=1, entries=entries), read)
        for peer in (2, 3)
    ]
    assert Lazy.reads == 1
    assert sent[0][-1] == [1, b"Kabc"] and sent[0][-1][1] is sent[1][-1][1]
    assert decode(sent[1], 1, 3)[1].entries[0].data == b"Kabc"
