"""What the mesh's keepalive decides each round, apart from its sockets and its loop: whether
a round may judge its peers at all, and what it finds of each (newly silent, dead). The mesh
(raft/mesh.py) calls these on its clock; the Raft simulation (tests/support/raft_sim.py) calls
the same ones on its logical clock, so what it proves of quiet groups holds for this code.

Quiet Raft groups (FORK.md 9) stop their own heartbeats and timers: these pings, and the
silence they reveal, are what wakes them when a peer's node dies or is cut off."""

from __future__ import annotations

from typing import NamedTuple

PING_INTERVAL = 0.25  # a silent link shows within a second, idle or not
DEAD_AFTER = 6.0  # seconds without a byte from a connected peer
# After this node's hold, how soon its peers' frames show they heard it again (`heard_at`):
# a round trip on a LAN, with room.
HOLD_ECHO = 0.05


class Finding(NamedTuple):
    """A round's finding on one peer."""

    silent: bool  # unheard for over SILENT_AFTER (what the connection keeps till next round)
    newly_silent: bool  # and was not at the last round: its groups are told, once
    dead: bool  # unheard for over DEAD_AFTER: the connection is dropped


def silent_after(interval: float) -> float:
    """A peer not heard from for this long wakes the quiet Raft groups it shares (FORK.md,
    9): their own timers take over from the pings, as if they had never stopped. Two ping
    intervals: one ping late is no silence."""
    return 2 * interval


SILENT_AFTER = silent_after(PING_INTERVAL)


def judges(now: float, last_round: float, interval: float = PING_INTERVAL) -> bool:
    """Whether a round may judge its peers. A round that comes late found this node's own loop
    busy: what its peers sent meanwhile may still be unread, so no peer is judged silent (or
    dead) by it. Judged anyway, a node back from a long turn woke every quiet group it holds,
    and that work made its next turns long too (issue 12, spread produce); a node back from
    a pause of over 6 s dropped every peer at once, their frames still unread."""
    return now - last_round < interval + silent_after(interval) / 2


def last_hold(
    now: float, last_round: float, hold: tuple[float, float], interval: float = PING_INTERVAL
) -> tuple[float, float]:
    """This node's own loop's last hold (SIGSTOP, a long turn), as (from, until): `hold`, the
    one the last late round found, or, while a round is overdue now (`judges`), the one under
    way (the requests read with the frames that waited run before the round does)."""
    return hold if judges(now, last_round, interval) else (last_round, now)


def hold_ago(now: float, hold: tuple[float, float]) -> tuple[float, float]:
    """This node's loop's last hold (as `last_hold` gives it): how long it was held, and how
    long ago that ended. A quiet leader woken now is charged it (driver.wake_to_lead) as one
    awake through it is (Raft.resume)."""
    start, until = hold
    return until - start, now - until


def heard_at(last_received: float, hold: tuple[float, float]) -> float:
    """When a peer counts as heard for a leader's lease (FORK 5). What was read right after
    this node's loop was held may have waited in the socket through the hold, and what its
    peers sent until its first ping after the hold reached them (HOLD_ECHO) was sent with
    this node silent since the hold began, their timers on it running: either counts as
    heard when the hold began. Read at once as heard, the frames that waited gave a leader cut
    off during its hold a whole lease more (the Raft simulation's held detection schedules,
    seed 11); a ping sent a millisecond before the leader's first one after its hold arrived,
    a lease from then (seed 624)."""
    start, until = hold
    return start if start < last_received <= until + HOLD_ECHO else last_received


def find(
    now: float,
    last_received: float,
    was_silent: bool,
    judge: bool,
    interval: float = PING_INTERVAL,
) -> Finding:
    """One peer at one round: `last_received` when it last sent anything (pings included),
    `was_silent` what the last round found, `judge` what `judges` said of this round."""
    quiet_for = now - last_received
    silent = judge and quiet_for > silent_after(interval)
    return Finding(silent, silent and not was_silent, judge and quiet_for > DEAD_AFTER)
