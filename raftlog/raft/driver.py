"""One driver per node for every Raft group that runs on the pure core (raft/core/).

The core only changes state; this does the rest, for all groups at once. Each event-loop turn
in which something happened to groups (a tick, a peer's frame, a proposal) it takes every
such group's Ready in turn: the group persists it (its entries are already in its segment
journal; a changed term or vote joins the node's batched save, durability.py), its messages
are collected per peer, its committed entries are applied, and at the end of the turn each
peer gets **one frame** with every group's messages (Redpanda's heartbeat_manager does the
same for heartbeats; here appends, votes and answers ride along). A group's messages that
follow a save of its term or vote wait, in order, until that save is on disk; other groups'
messages do not wait for it.

Time is logical: the driver ticks every awake group each TICK_SECONDS; the core counts ticks.
Ticks follow the clock: those a held loop missed are ticked when it runs again. With no group
awake and no timer pending the tick stops, and the next group to wake (or timer) starts it:
an idle node's loop is not woken 20 times a second for nothing.

A group's Ready is taken whole or not at all: its messages are encoded (which reads their
entries' bytes from the segments) before anything else of it is done, and join the peers'
frames only once it is persisted, applied and advanced. A group that raises anywhere (its
Ready, a step, a tick) is stopped at once, counted, and restarted by its owner from its files,
as a restart of its node would (`Driven.restart`): it then goes on with its peers, and the
node's other groups never notice.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from raftlog.raft.core.raft import Raft
from raftlog.raft.core.values import Entry, Message, MsgType, Ready, Role
from raftlog.raft.durability import Durability
from raftlog.raft.elections import ELECTION_BURST, ELECTIONS_PER_SECOND, ElectionBudget
from raftlog.raft.failure_log import FailureLog
from raftlog.raft.keepalive import PING_INTERVAL
from raftlog.raft.membership import CONF, command, parse

log = logging.getLogger(__name__)

TICK_SECONDS = 0.05
# What a follower woken by its leader's silence counts short (`peer_changed`): two keepalive
# rounds, in ticks.
LEADER_LAG_TICKS = 2 * round(PING_INTERVAL / TICK_SECONDS)
# A group that fails again within this long of its last failure waits before its next
# restart, twice as long each time up to RESTART_BACKOFF_MAX: one that fails at every start
# costs the node little.
FAILURE_MEMORY_SECONDS = 60.0
RESTART_BACKOFF_FIRST = 0.5
RESTART_BACKOFF_MAX = 30.0
# Groups that have failure counts of their own (metrics); later ones count as OTHER.
FAILURE_SERIES = 16
OTHER = "OTHER"

_TYPES = tuple(MsgType)
_CODE = {t: i for i, t in enumerate(_TYPES)}
_REJECT, _TRANSFER, _QUIESCE = 1, 2, 4

# A group's message on the wire: [group, type, term, index, log_term, commit, reject_hint,
# flags, entries] with entries flat as [term, data, term, data, ...] at index + 1 on.
Item = list[Any]


def encode(group: str, m: Message, read: dict[tuple[int, int], bytes] | None = None) -> Item:
    """`read`: the entries' bytes already read for this Ready's other messages, by (index,
    term), which name one entry: every follower sent it gets the same bytes, read (and
    copied out of the segment's buffers) once."""
    flat: list[Any] = []
    for e in m.entries:
        flat.append(e.term)
        if isinstance(e.data, bytes):
            flat.append(e.data)
        elif read is None:
            flat.append(bytes(e.data))
        else:
            data = read.get((e.index, e.term))
            if data is None:
                data = read[e.index, e.term] = bytes(e.data)
            flat.append(data)
    if m.type == MsgType.SNAP and m.conf is not None:
        flat.append(command(m.conf))  # a snapshot has no entries: its configuration instead
    flags = (
        (_REJECT if m.reject else 0)
        | (_TRANSFER if m.transfer else 0)
        | (_QUIESCE if m.quiesce else 0)
    )
    return [group, _CODE[m.type], m.term, m.index, m.log_term, m.commit, m.reject_hint, flags, flat]


def decode(item: Item, src: int, dst: int) -> tuple[str, Message]:
    group, code, term, index, log_term, commit, hint, flags, flat = item
    kind = _TYPES[code]
    conf = None
    if kind == MsgType.SNAP:
        conf, flat = (parse(flat[0]) if flat else None), ()
    entries = tuple(
        _entry(flat[i], index + 1 + i // 2, flat[i + 1]) for i in range(0, len(flat), 2)
    )
    message = Message(
        _TYPES[code],
        src,
        dst,
        term,
        index,
        log_term,
        entries,
        commit,
        bool(flags & _REJECT),
        hint,
        bool(flags & _TRANSFER),
        bool(flags & _QUIESCE),
        conf,
    )
    return group, message


def _entry(term: int, index: int, data: bytes) -> Entry:
    """A configuration entry carries its configuration for the core (its first byte says)."""
    if data and data[0] == CONF:
        return Entry(term, index, data, parse(data))
    return Entry(term, index, data)


def in_ticks(silences: dict[str, float]) -> dict[int, int]:
    """The mesh's silences (seconds since each connected peer's node was last heard, pings
    included) in whole ticks, by node id."""
    return {int(p): int(s / TICK_SECONDS) for p, s in silences.items()}


def tick_group(
    raft: Raft, heard: list[tuple[int, int]], connected: frozenset[int], stand: bool
) -> bool:
    """One tick of an awake group (the driver's, and the Raft simulation's): a leader whose
    lease ends next counts its followers' nodes as heard when they were (FORK 10: a busy
    node's answers may lag behind its pings); `connected`, the nodes the mesh holds a
    connection to, are those a leader waits for before it goes quiet. True: a Ready may be
    waiting."""
    if heard and raft.lease_ending():
        for peer, ago in heard:
            raft.heard_from(peer, ago)
    return raft.tick(stand, connected)


def peer_changed(
    raft: Raft,
    peer: int,
    up: bool,
    silences: dict[int, int],
    longest: int,
    leader_lag: int = LEADER_LAG_TICKS,
) -> bool:
    """A peer's node came, went or fell silent (the mesh's connection, or its keepalive): the
    quiet groups it is in wake (FORK.md 9), so that one whose leader it was elects another
    and one it followed checks its quorum; the followers of a node whose connection closed
    stand sooner (`leader_gone`). A follower's election timer runs from when the leader's
    node was last heard, a leader's lease from when a majority of its followers' nodes was
    (`silences`, in ticks, of the connected peers; `longest` for one not connected), less
    `leader_lag` for a follower: the leader may have heard its followers up to a keepalive
    round after they last heard it, and its own round, at a phase of its own, may find
    them silent a round after theirs found it so; till then it leads on, quiet. Counted in
    full, a cut-off quiet leader still led when its followers had elected another (FORK 5:
    8 of 20,000 of the simulation's detection schedules at 0.25 s pings; one round short,
    2; two, none).
    The Raft simulation decides by this too. True: the group is awake now (to be ticked)."""
    silent_ticks = 0 if up else silences.get(peer, 0)
    if not up and peer not in silences and raft.role == Role.FOLLOWER and raft.leader == peer:
        raft.leader_gone()  # the connection closed
        return True
    if raft.quiet and raft.concerns(peer):
        if raft.role == Role.LEADER:
            raft.wake(raft.quorum_silence(silences, longest))
            raft.check_woken_lease()
        else:
            raft.wake(max(0, silent_ticks - leader_lag) if raft.leader == peer else 0)
        return True
    return False


def wake_to_lead(
    raft: Raft, silences: dict[int, int], longest: int, hold: tuple[int, int] = (0, 0)
) -> None:
    """A quiet leader about to take a client's proposal (or a transfer, a change of members)
    wakes as its followers' silence wakes it (`peer_changed`): its lease runs from when a
    majority of their nodes was last heard (`silences`, in ticks, of the connected peers;
    `longest` for one not connected), not from now. Woken from now (`Raft.propose`'s own
    wake), a cut-off quiet leader that a proposal reached before its keepalive round found
    its followers silent led on for a whole election timeout more, and took writes while
    they elected another (FORK 5: the simulation's detection schedules with clients).
    `hold`: this node's loop's last hold, how long and how long ago it ended, in ticks (the
    mesh's `hold_ago`; the silences count what was read right after it from its start): a
    leader whose majority was last heard before it is charged it as one awake through it is
    (`Raft.held_silence`, as `Raft.resume`). A peer's message that wakes it wakes it so too
    (`Driver.receive`). Woken with its lease spent, it steps down before it answers
    (`Raft.check_woken_lease`)."""
    if raft.quiet and raft.role == Role.LEADER:
        silence = raft.quorum_silence(silences, longest)
        held, since = hold
        if held and silence >= held + since:  # its majority was last heard before the hold
            silence = raft.held_silence(silence - held - since, since)
        raft.wake(silence)
        raft.check_woken_lease()


class Driven(Protocol):
    """A group as the driver sees it (raft/replica.py's CoreGroup)."""

    name: str
    raft: Raft

    def persist(self, rd: Ready) -> int:
        """Makes the Ready's state durable, or queues it in the node's batched save; returns
        the save its messages must follow."""

    def apply(self, rd: Ready) -> None:
        """Applies committed entries and role changes."""

    def may_stand(self) -> bool:
        """Whether this replica may stand for election now (the node's budget)."""

    def restart(self) -> None:
        """The driver stopped the group after it raised: its owner closes the replica and opens
        it again from its files, which adds a new group of the same name to the driver."""


class Link(Protocol):
    """The driver's view of the node's mesh (raft/mesh.py)."""

    durability: Durability

    def send_core(self, peer_id: str, items: list[Any]) -> bool: ...

    def on_core(self, handler: Callable[[str, list[Any]], None]) -> None: ...

    def heard_from(self, within: float) -> set[str]: ...

    def silences(self) -> dict[str, float]: ...

    def hold_ago(self) -> tuple[float, float]: ...

    def loop_held(self, seconds: float) -> None: ...

    @property
    def on_peer_change(self) -> list[Callable[[str, bool], None]]: ...

    @property
    def on_peer_silent(self) -> list[Callable[[str], None]]: ...


class Driver:
    def __init__(
        self,
        node_id: int,
        link: Link,
        election_seconds: float,
        elections: ElectionBudget | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_id = node_id
        self._clock = clock
        self._ticked_at = clock()
        # A stall counts up to the longest election timeout a replica can draw (two minimums).
        self._longest_timeout = 2 * round(election_seconds / TICK_SECONDS)
        # The node's, shared with the controller's ticker: one budget of elections per node.
        self.elections = elections or ElectionBudget(
            ELECTIONS_PER_SECOND, ELECTION_BURST, time.monotonic
        )
        self._link = link
        self.durability = link.durability
        self._election_seconds = election_seconds
        self._groups: dict[str, Driven] = {}
        self._awake: dict[str, Driven] = {}  # groups that are not quiet: the ones ticked
        self._dirty: dict[str, Driven] = {}  # insertion-ordered: groups with work this turn
        self._out: dict[int, list[Item]] = {}  # this turn's frame to each peer
        self._held: dict[str, list[tuple[int, int, Item]]] = {}  # group -> (save, peer, item)
        self._turn_scheduled = False
        self._timers: list[tuple[float, int, Callable[[], None]]] = []  # (due, order, call)
        self._order = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ticking: asyncio.TimerHandle | None = None  # None: stopped, or nothing to tick
        self._running = False  # between start() and stop()
        self._failures = FailureLog(log)
        self.failures_total = 0  # groups stopped and restarted after raising
        # the first FAILURE_SERIES groups that failed, then OTHER -> failures
        self.failures: dict[str, int] = {}
        self._failed_at: dict[str, tuple[float, int]] = {}  # name -> (last failure, streak)
        link.on_core(self.receive)
        link.on_peer_change.append(self._peer_changed)
        link.on_peer_silent.append(lambda peer_id: self._peer_changed(peer_id, False))

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._running = True
        self._keep_ticking()

    def stop(self) -> None:
        self._running = False
        if self._ticking is not None:
            self._ticking.cancel()
            self._ticking = None

    def _keep_ticking(self) -> None:
        """Something is to be ticked (a group awake, a timer): the tick runs, if started. Once
        stopped for want of work it starts afresh: the time it was stopped was no stall, and
        no group was awake through it to be charged for it (`tick`)."""
        if self._ticking is None and self._running and self._loop is not None:
            self._ticked_at = self._clock()
            self._ticking = self._loop.call_later(TICK_SECONDS, self._tick)

    def add(self, group: Driven) -> None:
        self._groups[group.name] = group
        self._awake[group.name] = group
        self._keep_ticking()

    def remove(self, group: Driven) -> None:
        if self._groups.get(group.name) is not group:
            return  # stopped already, and maybe restarted as a new group of that name
        self._groups.pop(group.name, None)
        self._awake.pop(group.name, None)
        self._dirty.pop(group.name, None)
        self._held.pop(group.name, None)

    def later(self, seconds: float, call: Callable[[], None]) -> None:
        """Calls `call` at the first tick at least `seconds` from now on the driver's clock
        (a group's own timers then follow the same time as its Raft ticks)."""
        heapq.heappush(self._timers, (self._clock() + seconds, next(self._order), call))
        self._keep_ticking()

    def heard(self) -> set[str]:
        """Peers whose nodes were heard within an election timeout (pings included)."""
        return self._link.heard_from(self._election_seconds)

    @property
    def awake(self) -> int:
        """Groups that are not quiet (FORK.md 9): the ones ticked."""
        return len(self._awake)

    def holds(self, group: Driven) -> bool:
        return self._groups.get(group.name) is group

    def wake(self, group: Driven) -> None:
        """Something happened to the group: its Ready is taken this loop turn (unless the
        group was stopped: a stopped group's proposal waits for its restart's answer)."""
        if self._groups.get(group.name) is not group:
            return
        self._dirty[group.name] = group
        self._schedule_turn()

    def _schedule_turn(self) -> None:
        if not self._turn_scheduled:
            self._turn_scheduled = True
            # The loop start() kept: get_running_loop() is a getpid() system call on Python 3.11.
            loop = self._loop or asyncio.get_running_loop()
            loop.call_soon(self._turn)

    # --- in --------------------------------------------------------------------------------

    def receive(self, peer_id: str, items: list[Any]) -> None:
        """A peer's frame: each message is stepped into its group; a message for a group this
        node does not hold (deleted, not yet created) is dropped, as a lost one."""
        src = int(peer_id)
        for item in items:
            try:
                name, message = decode(item, src, self.node_id)
            except Exception:
                name = str(item[0]) if item else "?"
                self._failures.exception(name, "raft group %s: undecodable message", name)
                continue
            group = self._groups.get(name)
            if group is None:
                continue
            try:
                if group.raft.wakes_leader(message):
                    self._wake_leader(group.raft)
                group.raft.step(message)
            except Exception:
                self._fail(name, group, "step")
                continue
            self.wake(group)

    def _tick(self) -> None:
        loop = self._loop
        assert loop is not None  # set by start()
        self._ticking = loop.call_later(TICK_SECONDS, self._tick)
        self.tick()
        if not self._awake and not self._timers and self._ticking is not None:
            self._ticking.cancel()  # nothing left to tick: the next wake or timer starts it
            self._ticking = None

    def tick(self) -> None:
        """One tick of every awake group (start() calls it every TICK_SECONDS; an in-process
        test calls it after moving its clock). After a stall, the leaders awake through it
        resume (`Raft.resume`): their leases age by the ticks the loop missed, with a grace to
        hear their majority again. A follower's missed ticks are dropped, as etcd's ticker
        drops them: the stall was its own node's, not its leader's silence, and the leader's
        frames that waited meanwhile are still to be read (one of 1 MB takes several reads).
        Nor is a group that was quiet then charged them: its timers did not run. The mesh is
        told of the hold (`Link.loop_held`): what is read right after it, the answers and pings
        that waited through it, counts as heard when it began (FORK 5), as do the answers a
        resumed leader steps before its second tick after it (`Raft.age_answers`)."""
        now = self._clock()
        gap = now - self._ticked_at
        self._ticked_at = now
        missed = max(0, min(int(gap / TICK_SECONDS) - 1, self._longest_timeout))
        if missed:
            self._link.loop_held(gap)  # what is read right after counts from the last tick
            for name, group in list(self._awake.items()):
                try:
                    group.raft.resume(missed)
                except Exception:
                    self._fail(name, group, "resume")
        self._tick_groups(self._link.silences())
        timers = self._timers
        while timers and timers[0][0] <= now:
            call = heapq.heappop(timers)[2]
            try:
                call()
            except Exception:
                self._failures.exception("timer", "raft driver timer failed")

    def _tick_groups(self, silences: dict[str, float]) -> None:
        heard = list(in_ticks(silences).items())
        connected = frozenset(int(p) for p in silences)
        for name, group in list(self._awake.items()):
            raft = group.raft
            try:
                stand = group.may_stand() if raft.wants_election() else True
                if tick_group(raft, heard, connected, stand):
                    self.wake(group)
            except Exception:
                self._fail(name, group, "tick")

    def wake_to_lead(self, group: Driven) -> None:
        """The group, quiet, leads and is asked to act as leader: `wake_to_lead`, and it is
        ticked from now on whether or not what it was asked for is taken."""
        raft = group.raft
        if raft.quiet and raft.role == Role.LEADER and self.holds(group):
            self._wake_leader(raft)
            self.wake(group)

    def _wake_leader(self, raft: Raft) -> None:
        """`wake_to_lead` with the mesh's silences and the node's loop's last hold (the mesh's
        `hold_ago`) in ticks: how long, at most the longest election timeout as `tick` counts
        one, and how long ago it ended."""
        held, since = self._link.hold_ago()
        hold = min(int(held / TICK_SECONDS), self._longest_timeout), int(since / TICK_SECONDS)
        wake_to_lead(raft, in_ticks(self._link.silences()), self._longest_timeout, hold)

    def _peer_changed(self, peer_id: str, up: bool) -> None:
        """A peer's node came, went or fell silent: each group's answer is `peer_changed`'s."""
        peer = int(peer_id)
        silences = in_ticks(self._link.silences())
        for name, group in list(self._groups.items()):
            try:
                if peer_changed(group.raft, peer, up, silences, self._longest_timeout):
                    self._awake[name] = group
                    self._keep_ticking()
                    if group.raft.role != Role.LEADER and group.raft.has_ready():
                        self.wake(group)  # a leader woken with its lease spent stepped down
            except Exception:
                self._fail(name, group, "wake")

    # --- the turn ----------------------------------------------------------------------------

    def _turn(self) -> None:
        self._turn_scheduled = False
        dirty, self._dirty = self._dirty, {}
        for name, group in dirty.items():
            if self._groups.get(name) is not group:
                continue  # stopped earlier in this turn
            try:
                self._handle(name, group)
            except Exception:
                self._fail(name, group, "ready")
        self._flush()

    def _handle(self, name: str, group: Driven) -> None:
        """The group's Readies, each whole: its messages are encoded first (reading their
        entries from the segments is what may fail), and leave only once it is persisted,
        applied and advanced."""
        raft = group.raft
        while raft.has_ready():
            rd = raft.ready()
            read: dict[tuple[int, int], bytes] = {}
            items = [(m.dst, encode(name, m, read)) for m in rd.messages]
            need = group.persist(rd)
            group.apply(rd)
            raft.advance(rd)
            if items:
                held = self._held.get(name)
                if held is not None or need > self._link.durability.durable:
                    self._hold(name, need, items, held)
                else:
                    for dst, item in items:
                        self._out.setdefault(dst, []).append(item)
        if raft.quiet:
            self._awake.pop(name, None)
        else:
            self._awake[name] = group
            self._keep_ticking()

    def _hold(
        self,
        name: str,
        need: int,
        items: list[tuple[int, Item]],
        held: list[tuple[int, int, Item]] | None,
    ) -> None:
        """The group's messages wait for its save (and behind its messages already waiting)."""
        if held is None:
            held = self._held[name] = []
            self._link.durability.wait(need, lambda: self._release(name))
        held.extend((need, dst, item) for dst, item in items)

    def _release(self, name: str) -> None:
        held = self._held.pop(name, None)
        if not held:
            return
        durable = self._link.durability.durable
        for i, (need, peer, item) in enumerate(held):
            if need > durable:
                self._held[name] = held[i:]
                self._link.durability.wait(need, lambda: self._release(name))
                break
            self._out.setdefault(peer, []).append(item)
        self._schedule_turn()  # every group released by this save shares the turn's frames

    # --- a group that raised -------------------------------------------------------------------

    def _fail(self, name: str, group: Driven, what: str) -> None:
        """Stops the group (no more ticks, steps or Readies; its messages not yet sent are
        dropped, as lost ones), counts it and has its owner restart it from its files: soon
        after its first failure, later after each further one within FAILURE_MEMORY_SECONDS.
        Whatever state its core was left in is dropped with it."""
        if self._groups.get(name) is not group:
            return  # already stopped
        self.remove(group)
        self.failures_total += 1
        key = name if name in self.failures or len(self.failures) < FAILURE_SERIES else OTHER
        self.failures[key] = self.failures.get(key, 0) + 1
        now = self._clock()
        last, streak = self._failed_at.get(name, (now - FAILURE_MEMORY_SECONDS, 0))
        streak = streak + 1 if now - last < FAILURE_MEMORY_SECONDS else 1
        for old in [
            n for n, (t, _) in self._failed_at.items() if now - t >= FAILURE_MEMORY_SECONDS
        ]:
            del self._failed_at[old]
        self._failed_at[name] = (now, streak)
        delay = (
            0.0
            if streak == 1
            else min(RESTART_BACKOFF_FIRST * 2 ** (streak - 2), RESTART_BACKOFF_MAX)
        )
        self._failures.exception(
            name,
            "raft group %s: %s failed; stopped, restarting it from its files in %.1f s "
            "(failure %d within %.0f s)",
            name,
            what,
            delay,
            streak,
            FAILURE_MEMORY_SECONDS,
        )
        self.later(delay, lambda: self._restart(name, group))

    def _restart(self, name: str, group: Driven) -> None:
        if name in self._groups:
            return  # its owner closed it meanwhile and a new one of that name runs
        try:
            group.restart()
        except Exception:
            # Not even its files open: nothing here can do better than say so; the partition
            # stays stopped on this node (its peers go on without it) until the node restarts.
            log.exception("raft group %s: restart failed; it stays stopped", name)

    def _flush(self) -> None:
        out, self._out = self._out, {}
        for peer, items in out.items():
            self._link.send_core(str(peer), items)  # a peer not connected: lost, as on a link
