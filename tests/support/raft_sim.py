"""A seeded, deterministic simulation of a Raft group built from raftlog.raft.core (issue 27).

N replicas of the core in one process; a network that drops, duplicates, delays (so reorders)
messages and cuts directed links; crashes that lose whatever a replica had not synced (a Ready
is handed out, then synced later: the hard state and entries it asked for are only durable
then, and its messages only leave then); restarts from the durable state alone; stalls (a
replica's node held for up to two election timeouts, as a SIGSTOP or a long loop turn holds
it: nothing ticked, read or sent, then `resume` as the driver calls it); replicas that
compact their logs up to their commit, and snapshot installs (FORK 7) that take a few ticks,
sometimes fail, and restore the state machine to the snapshot point. After every
Ready and every sync it checks Raft's safety properties, and after each heal that a leader is
elected and a proposal commits everywhere within a bound of ticks.

Node-level liveness runs as the mesh and the driver run it (`mesh_turn`): each node holds a
connection to each peer it can reach, its keepalive rounds ping them and find the silent or
dead ones by raft/keepalive.py's own functions, and each group answers a change by the
driver's `peer_changed` (FORK 9: a quiet group runs no timers; only this wakes it when its
leader's node dies or is cut off). `detect` runs the failure-detection schedules (issue 45):
a quiet group whose leader is lost must be led again within 5 s; their nodes tick at phases
of their own and read a message a millisecond after it was sent (`SimConfig.latency`), the
others' all tick at once and read it a tick or more later.

With `SimConfig.storage` (STORAGE) each replica runs on its real partition storage instead of
a MemoryLog (tests/support/sim_disk.py): its Readies' messages go through the driver's wire
encoding when taken (lazy payloads read from their segments then), a crash tears the file it
was writing or (`ready_tears`) stops the replica inside its Ready's writes, and a restart
recovers from its directory, installs go through raft/install.py;
every entry's stored bytes are checked against the first replica's that stored that index and
term, and all segments against each other after each heal (issue 43).

A failure raises SimFailure naming the seed and how to replay it: `run_seed(seed)` or
`RAFTLOG_SIM_REPLAY=<seed> pytest tests/unit/test_raft_sim.py -k replay` (`-k
replay_on_storage` for a storage schedule).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from typing import NoReturn

import msgpack

from raftlog.raft.core.log import MemoryLog
from raftlog.raft.core.raft import Raft
from raftlog.raft.core.rules import Config, Rules
from raftlog.raft.core.values import (
    NONE,
    Entry,
    HardState,
    Install,
    Message,
    MsgType,
    Payload,
    Ready,
    Role,
)
from raftlog.raft.driver import (
    TICK_SECONDS,
    decode,
    encode,
    in_ticks,
    peer_changed,
    tick_group,
    wake_to_lead,
)
from raftlog.raft.keepalive import PING_INTERVAL, find, heard_at, hold_ago, judges, last_hold
from raftlog.raft.membership import Membership
from raftlog.raft.replica import NO_OP, recovered_membership
from support.sim_disk import GROUP, DiskSim, batch


class SimFailure(AssertionError):
    pass


@dataclass(frozen=True)
class SimConfig:
    nodes: tuple[int, ...] = (3, 5)  # one is drawn per seed
    rounds: int = 2  # chaos then heal, this many times
    chaos_ticks: int = 60
    # ticks after a heal by which a proposal must commit everywhere: elections are randomized,
    # so this is a bound with room (2,000 seeds: median 23, p99 65, max 122)
    heal_bound: int = 300
    drop: float = 0.1
    dup: float = 0.05
    max_delay: int = 3
    crash: float = 0.02
    stall: float = 0.01  # chance a running replica's node is held, for 1..2 election timeouts
    restart: float = 0.1
    cut: float = 0.04
    mend: float = 0.1
    propose: float = 0.5
    # Chance a seed's clients propose 25 times less often: its groups go quiet (FORK 9),
    # with followers down too, and wake.
    sparse: float = 0.3
    transfer: float = 0.01
    sync: float = 0.6  # chance a pending Ready is synced at each turn
    compact: float = 0.03  # chance a replica compacts its log to its commit at each turn
    install_ticks: int = 5  # a snapshot install takes 1..this many ticks
    install_fail: float = 0.15  # and fails (its source went away) this often
    election_tick: int = 10
    heartbeat_tick: int = 2
    max_append: tuple[int, ...] = (1, 3, 64)  # entries per append, one drawn per seed
    rules: Rules = field(default_factory=Rules)
    send_before_sync: bool = False  # only to show why a Ready's messages wait for its sync
    quiesce_ticks: int = 4  # FORK 9; 0: groups never go quiet
    # Node-level liveness, as the mesh and the driver run it (`mesh_turn`): each node's
    # keepalive round pings every peer it holds a connection to, this often (seconds), and
    # finds the peers it has heard nothing from (pings or Raft messages) for two intervals
    # (raft/keepalive.py); a connection closes when its peer's process dies or the keepalive
    # finds it dead, and opens again once both ways work. The driver wakes the quiet groups
    # a change concerns (driver.peer_changed).
    ping_interval: float = PING_INTERVAL
    watch: bool = True  # False: the driver is told nothing of peers' nodes (its rule test)
    silence: bool = True  # False: a silent peer is not told, only a closed connection
    # False: a follower woken by its leader's silence counts all of it, not two keepalive
    # rounds less (driver.peer_changed's leader_lag), as the driver once did (seed 309).
    leader_lag: bool = True
    # False: a client's proposal (a transfer, a change of members) wakes a quiet leader with
    # its lease from now, not from when its followers' nodes were heard (driver.wake_to_lead).
    wake_to_lead: bool = True
    # Each replica on the real partition storage (tests/support/sim_disk.py) instead of a
    # MemoryLog: segment journal, per-term segments, truncation, compaction, snapshot
    # installs by raft/install.py, crashes that tear a file being written and restarts
    # from disk; messages through the driver's wire encoding, lazy payloads read then.
    storage: bool = False
    # Membership change (issue 44): the group starts with this many of its nodes as voters
    # (0: all) and, this often in a chaos turn, its leader is asked for new members: one
    # voter or learner more or less, or a new voter set altogether (through a joint one).
    voters: int = 0
    conf_change: float = 0.0
    learner_bytes_per_tick: int = 0  # a learner's catch-up throttled (Config's)
    # On the storage: a crash may stop a replica inside its Ready's writes (after some of
    # them, before the others, one torn: sim_disk.Disk.crash's `within`), also right after
    # its messages left, while it writes the commit record.
    ready_tears: bool = False
    # On the storage: records carry keys (of KEYS) and each replica runs the partition's
    # key-based compaction (cleanup.policy=compact) on its own, at `clean` per turn; a pass
    # in chaos is killed at one of its durable steps `clean_crash` of the time.
    key_compaction: bool = False
    clean: float = 0.03
    clean_crash: float = 0.3
    # On the storage: a compaction's rewrite of the window runs off the loop in steps (a
    # copy synced, a rename; raft/journal.py); each turn, each running replica's next step
    # lands at this rate (drawn from a generator of its own, so the other draws of a seed
    # stay as they were): crashes and Readies fall between, before and after them.
    file_step: float = 0.3
    # Detection schedules (`detect`): the share whose clients send proposals to the old leader
    # around the fault (`Clients`).
    clients: float = 0.5
    # Detection schedules: the share whose old leader's node is held (SIGSTOP, a long turn)
    # for 1..2 election timeouts, the fault falling inside the hold (one awake through the
    # hold resumes with Raft.resume's grace) (`detect`). Its clients'
    # writes sent meanwhile wait; when it runs again it reads what its peers sent before the
    # fault, then answers them, then its timers run: uvloop's pass after a SIGCONT (the poll
    # returns, its timers run after it, the requests' tasks in the next pass's callbacks).
    hold: float = 0.0
    # Of those, the share whose old leader a client's write wakes just before the hold (drawn
    # from a generator of its own): awake through it, it resumes as the driver resumes it
    # (Raft.resume), its followers' answers and pings waiting for it.
    hold_wakes: float = 0.0
    # False: what a node reads right after its own hold counts as heard when read, not when
    # the hold began (keepalive.heard_at, in Mesh.silences).
    hold_ages_heard: bool = True
    # False: only the keepalive's late rounds find a node's hold (over about 0.5 s), not its
    # driver's first tick after it (Driver.tick's gap, Mesh.loop_held).
    tick_holds: bool = True
    # False: a peer's message wakes a quiet leader with a lease from now (Raft.step's own
    # wake), not from its followers' nodes' silences (Driver.receive's wake_to_lead).
    wake_to_step: bool = True
    # Sub-tick timing (seconds; 0: lockstep, every node ticking at once and each message read
    # a whole tick after it was sent). Otherwise each node ticks at its own phase within the
    # tick, as its driver's loop does: from its start, or from the wake that restarted a loop
    # every group of it had let stop (driver._keep_ticking: a quiet node does not tick); and a
    # message is read this long after it was sent. Lockstep, two followers whose election
    # timers ran out a tick apart split their votes too (the later one stood before it read
    # the other's request, 50 ms old), which on a LAN, where a request is read within a
    # millisecond, only timers started within that of each other do.
    latency: float = 0.0


KEYS = 5  # distinct record keys with key_compaction: most records are superseded


def replay_hint(seed: int, cfg: SimConfig | None = None) -> str:
    if cfg is not None and cfg.latency:  # a failure-detection schedule (`detect`)
        family = "HELD" if cfg.hold else "DETECTION"
        return (
            f"seed={seed}; replay: support.raft_sim.detect({seed}, {family}, lease=True), "
            "with the test's rules if it switched any"
        )
    if cfg is not None and cfg.storage:
        return (
            f"seed={seed}; replay: RAFTLOG_SIM_REPLAY={seed} pytest tests/unit/test_raft_sim.py "
            f"-k replay_on_storage (or support.raft_sim.run_seed({seed}, STORAGE))"
        )
    return (
        f"seed={seed}; replay: RAFTLOG_SIM_REPLAY={seed} pytest tests/unit/test_raft_sim.py "
        f"-k replay (or support.raft_sim.run_seed({seed}))"
    )


class Replica:
    def __init__(self, node: int) -> None:
        self.id = node
        self.core: Raft | None = None
        self.durable_log: list[Entry] = []
        self.durable_first = 1  # the durable log's first index (after compactions)
        self.durable_hs = HardState()
        self.log = MemoryLog()  # the core's log
        self.install: tuple[int, Install] | None = None  # (due time, what) under way
        self.pending: Ready | None = None
        self.applied: list[Entry] = []  # this incarnation's state machine
        self.seen_commit = 0
        self.was_leader_term = 0
        self.held: tuple[int, int] | None = None  # (since, until): its node is stalled
        self.stopped = False  # (cfg.latency) its node's tick loop stopped: its group was quiet
        self.woke = -1  # (cfg.latency) the turn its stopped loop started again
        self.ticked = 0.0  # when its node's driver last ticked (Sim.clock)
        self.durable_base: Membership | None = None  # the configuration at durable_first


@dataclass
class Link:
    """A node's end of its connection to a peer (raft/mesh_connection.py's fields)."""

    last_received: float  # seconds, on the simulation's clock
    silent: bool = False


class Sim:
    def __init__(self, seed: int, cfg: SimConfig | None = None) -> None:
        self.seed = seed
        self.cfg = cfg or SimConfig()
        self.rng = random.Random(seed)
        self.files_rng = random.Random(f"files {seed}")
        n = self.rng.choice(self.cfg.nodes)
        self.ids = tuple(range(1, n + 1))
        self.initial = self.ids[: self.cfg.voters] if self.cfg.voters else self.ids
        self.max_append = self.rng.choice(self.cfg.max_append)
        self.propose_rate = self.cfg.propose
        if self.cfg.sparse and self.rng.random() < self.cfg.sparse:
            self.propose_rate /= 25
        self.replicas = {i: Replica(i) for i in self.ids}
        self.time = 0
        self.seq = 0
        self.net: list[tuple[float, int, Message]] = []
        self.cut: set[tuple[int, int]] = set()
        self.drop = self.cfg.drop
        self.dup = self.cfg.dup
        self.entry_at: dict[
            tuple[int, int], tuple[Payload, int]
        ] = {}  # (index, term) -> (data, prev term)
        self.committed: dict[int, Entry] = {}
        self.leaders: dict[int, int] = {}
        self.proposed = 0
        self.trace: list[str] = []
        self.heal_ticks: list[int] = []  # how long each heal took to commit everywhere
        self.sent: list[Message] = []  # every message a replica sent (the rule tests count them)
        # The mesh: (node, peer) -> the node's connection to the peer, while it has one.
        self.links: dict[int, dict[int, Link]] = {i: {} for i in self.ids}
        self.told: dict[int, set[int]] = {i: set() for i in self.ids}  # peers its driver knows up
        # (peer, up, when in ticks): what each node's driver is still to be told
        self.notices: dict[int, list[tuple[int, bool, float]]] = {i: [] for i in self.ids}
        self.pings_rng = random.Random(f"pings {seed}")  # the other draws stay as they were
        self.pings: list[tuple[float, int, int, int]] = []  # (due, seq, from, to)
        self.rounds = {i: self.pings_rng.random() * self.cfg.ping_interval for i in self.ids}
        self.last_round = {i: 0.0 for i in self.ids}
        self.holds = {i: (0.0, 0.0) for i in self.ids}  # each node's last hold (keepalive.held)
        # cfg.latency: the time now in ticks, within a turn, and each node's tick phase
        self.clock = 0.0
        self.phases_rng = random.Random(f"phases {seed}")
        self.phase = {i: self.phases_rng.random() for i in self.ids}
        self.storage: DiskSim | None = None
        # A finished install, as its installer reported it: (index, term), or None if failed.
        self.installed: dict[int, tuple[int, int] | None] = {}
        self.votes: dict[tuple[int, int], int] = {}  # (voter, term) -> whom it granted
        self.chaos = False  # in a chaos turn (not healing)
        # (cfg.hold) called with a held node's id once it runs again and read what waited
        self.on_resume: Callable[[int], None] | None = None
        # called with a replica's id the moment it leads a new term (its Ready says so)
        self.on_elected: Callable[[int], None] | None = None
        if self.cfg.storage:
            self.storage = DiskSim(self.ids, lambda: self.time * TICK_SECONDS)
            for disk in self.storage.disks.values():
                disk.trace = self.cfg.ready_tears
            self.committed[1] = Entry(0, 1, NO_OP)  # every journal starts with it, committed
        for i in self.ids:
            self.start(i)

    def close(self) -> None:
        if self.storage is not None:
            self.storage.close()

    # ---- failures ----------------------------------------------------------------------------

    def fail(self, what: str) -> NoReturn:
        tail = "\n".join(self.trace[-15:])
        hint = replay_hint(self.seed, self.cfg)
        raise SimFailure(f"{what} (t={self.time}, {hint})\nlast events:\n{tail}")

    def note(self, what: str) -> None:
        self.trace.append(f"t={self.time} {what}")

    # ---- replicas ----------------------------------------------------------------------------

    def start(self, i: int) -> None:
        r = self.replicas[i]
        config = Config(
            id=i,
            peers=self.initial,
            membership=r.durable_base,
            conf_entries=tuple(e for e in r.durable_log if e.conf is not None),
            election_tick=self.cfg.election_tick,
            heartbeat_tick=self.cfg.heartbeat_tick,
            max_append=self.max_append,
            quiesce_ticks=self.cfg.quiesce_ticks,
            rules=self.cfg.rules,
            learner_bytes_per_tick=self.cfg.learner_bytes_per_tick,
        )
        # A compacted log restarts from its snapshot point: the state machine holds it already.
        snapshot = r.durable_first if r.durable_first > 1 else 0
        config = replace(config, applied=snapshot)
        rng = random.Random(self.rng.getrandbits(32))
        r.stopped = False  # a node's loop runs from its start
        r.ticked = self.clock
        if self.storage is not None:
            self.start_on_disk(r, config, rng)
            return
        r.log = MemoryLog(r.durable_log, r.durable_first)
        r.core = Raft(config, r.log, r.durable_hs, rng)
        r.applied = self.committed_prefix(snapshot)
        r.seen_commit = r.durable_hs.commit
        r.pending = None
        r.install = None
        r.held = None

    def start_on_disk(self, r: Replica, config: Config, rng: random.Random) -> None:
        """A replica starts from what its directory holds, recovered by the journal and the
        log as a node's start recovers them: the state machine holds the window's first
        entry (a snapshot point, or the term-0 entry) and re-applies from there."""
        assert self.storage is not None
        i = r.id
        log, hs = self.storage.disks[i].open(
            self.storage.controls,
            lambda index, term: self.installed.__setitem__(i, (index, term)),
            lambda: self.installed.__setitem__(i, None),
        )
        first = log.first_index()
        entries = [self.plain(e) for e in log.entries(first, log.last_index() + 1)]
        self.check_recovered(r, entries, hs)
        r.durable_log, r.durable_first, r.durable_hs = entries, first, hs
        r.log = log  # type: ignore[assignment]  # the core's log is the journal's
        disk = self.storage.disks[i]
        assert disk.journal is not None
        base, confs = recovered_membership(disk.journal)  # as a partition's replica does
        config = replace(config, applied=first, membership=base, conf_entries=confs)
        r.core = Raft(config, log, hs, rng)
        r.applied = self.committed_prefix(first)
        r.seen_commit = hs.commit
        r.pending = None
        r.install = None
        r.held = None

    def check_recovered(self, r: Replica, entries: list[Entry], hs: HardState) -> None:
        """What a replica's Readies made durable (its messages left) survives its crash: the
        term and vote, and every committed entry it held, byte for byte."""
        old = r.durable_hs
        if hs.term < old.term or (hs.term == old.term and old.vote not in (NONE, hs.vote)):
            self.fail(f"replica {r.id} restarted with term/vote {hs} after {old}")
        first = entries[0].index
        for e in r.durable_log:
            if e.index < first or self.committed.get(e.index) != e:
                continue
            if e.index >= first + len(entries) or entries[e.index - first] != e:
                self.fail(f"replica {r.id} restarted without committed entry {e.index}")

    def plain(self, e: Entry) -> Entry:
        """An entry with its bytes: on the real storage, as its replica stored them."""
        if self.storage is None or isinstance(e.data, bytes):
            return e
        return Entry(e.term, e.index, bytes(e.data), e.conf)

    def carries(self, e: Entry, value: bytes) -> bool:
        if self.storage is None:
            return e.data == value
        return value in bytes(e.data)

    def crash(self, i: int, within: bool | None = None) -> None:
        r = self.replicas[i]
        if self.storage is not None and self.storage.disks[i].log is not None:
            if within is None:
                within = self.cfg.ready_tears and self.rng.random() < 0.5
            torn = self.storage.disks[i].crash(self.rng, within)
            if torn is not None:
                self.note(f"{i}: {torn}")
        r.core = None
        r.pending = None  # whatever was not synced is lost
        r.install = None
        r.held = None
        self.links[i].clear()  # its connections close; a peer cut from it misses the close
        self.told[i].clear()
        for j in self.ids:
            if (i, j) not in self.cut:
                self.links[j].pop(i, None)
        self.notices[i].clear()
        self.note(f"crash {i}")

    def live(self) -> list[int]:
        return [i for i in self.ids if self.replicas[i].core is not None]

    def idle(self, i: int) -> Raft | None:
        """The core of a live, running replica with no Ready in flight (one may step it)."""
        r = self.replicas[i]
        return r.core if r.pending is None and r.held is None else None

    def stall(self, i: int) -> None:
        """Hold replica i's node: no ticks, nothing read, synced or sent until it resumes."""
        ticks = 1 + self.rng.randrange(2 * self.cfg.election_tick)
        self.replicas[i].held = (self.time, self.time + ticks)
        self.note(f"stall {i} for {ticks}")

    def resume(self, i: int) -> None:
        """The driver's first tick after a stall: the core is told the ticks it missed."""
        r = self.replicas[i]
        if r.held is None or r.held[1] > self.time:
            return
        since, r.held = r.held[0], None
        if r.core is not None:
            self.loop_held(i)
            r.core.resume(self.time - since)
            self.note(f"resume {i}")
            self.process(i)
            if self.cfg.hold:
                # the poll: what waited for it is read (others' due items with it, as they
                # would be read at this instant anyway), then the requests that waited
                self.deliver_until(self.time + 1e-9)
                if self.on_resume is not None:
                    self.on_resume(i)

    def loop_held(self, i: int) -> None:
        """Node i's driver ticks for the first time after its node's hold: if it ticked through
        it (a group awake), a tick a tick or more late tells the mesh of the hold (Driver.tick,
        Mesh.loop_held)."""
        r = self.replicas[i]
        if not self.cfg.tick_holds or r.core is None or r.core.quiet:
            return
        gap = self.clock - r.ticked
        if int(gap) - 1 >= 1:  # the driver's missed ticks
            now = self.now()
            self.holds[i] = (now - gap * TICK_SECONDS, now)

    def process(self, i: int) -> None:
        """Take a Ready if there is one; sync it now or leave it pending for a later turn."""
        r = self.replicas[i]
        core = r.core
        if r.stopped and core is not None and not core.quiet:
            self.restart_loop(i)
        if core is None or r.pending is not None or not core.has_ready():
            return
        rd = core.ready()
        self.check_ready(r, core, rd)
        if self.storage is not None:
            # As the driver does: the term and vote saved, the messages encoded (lazy
            # payloads read from their segments) when the Ready is taken.
            disk = self.storage.disks[i]
            if rd.hard_state is not None:
                disk.set_term(rd.hard_state.term, rd.hard_state.vote)
            rd = replace(rd, messages=tuple(_wire(m) for m in rd.messages))
            assert disk.journal is not None
            disk.journal.write_pending()  # the entries appended since the last Ready
        if self.cfg.send_before_sync:  # breaking the caller's one rule, for its test
            for m in rd.messages:
                self.send(m)
            rd = replace(rd, messages=())
        r.pending = rd
        if self.stops_writing(rd):
            self.note(f"{i} stops writing its Ready")
            self.crash(i, within=True)
        elif self.rng.random() < self.cfg.sync:
            self.sync(i)

    def stops_writing(self, rd: Ready) -> bool:
        """Whether a replica dies while it writes what `rd` asked for (cfg.ready_tears: at
        the crash rate, per Ready that writes, in chaos)."""
        writes = rd.entries or rd.hard_state is not None or rd.truncate_after is not None
        return (
            self.cfg.ready_tears
            and self.storage is not None
            and self.chaos
            and bool(writes)
            and self.rng.random() < self.cfg.crash
        )

    def sync(self, i: int) -> None:
        r = self.replicas[i]
        rd, core = r.pending, r.core
        if rd is None or core is None:
            return
        r.pending = None
        self.persist(r, rd)
        for m in rd.messages:
            self.send(m)
        self.apply(r, rd)
        if self.storage is not None:
            disk = self.storage.disks[i]
            stop = (
                self.cfg.ready_tears
                and self.chaos
                and rd.committed
                and self.rng.random() < self.cfg.crash
            )
            if stop:
                disk.settle()  # its messages left: everything they rely on is owed
            if rd.committed:  # as raft/replica.py's apply
                assert disk.journal is not None
                disk.journal.set_commit_index(rd.committed[-1].index)
            if stop:
                self.note(f"{i} stops writing its commit")
                self.crash(i, within=True)
                return
            if (
                rd.entries
                or rd.committed
                or rd.hard_state is not None
                or rd.truncate_after is not None
            ):
                disk.settle()  # a Ready of messages alone wrote nothing
        if rd.install is not None:
            due = self.time + 1 + self.rng.randrange(self.cfg.install_ticks)
            r.install = (due, rd.install)
            self.note(f"{i} installs {rd.install}")
            if self.storage is not None:
                self.installed.pop(i, None)
                w = rd.install
                self.storage.start_install(i, w.index, w.term, w.source)
        core.advance(rd)
        self.process(i)

    # ---- compaction and snapshots (FORK 7) -----------------------------------------------------

    def committed_prefix(self, index: int) -> list[Entry]:
        """The state machine at a snapshot point: every committed entry up to `index`."""
        return [self.committed[k] for k in range(1, index + 1)]

    def compact(self, i: int) -> None:
        """Replica i drops its log before an entry it has committed, applied and made durable
        (as a partition's window is cut; that cut is durable at once)."""
        r = self.replicas[i]
        core = r.core
        if core is None or r.pending is not None:
            return
        to = min(core.commit, core.applied, r.durable_hs.commit)
        if self.storage is not None:
            to -= 1  # the journal's cut counts the entry after it as committed
        if to <= r.durable_first:
            return
        for e in r.durable_log[: to - r.durable_first + 1]:
            if e.index < to and self.committed.get(e.index) != e:
                self.fail(f"replica {i} compacted {e}, which is not the committed entry")
            if e.conf is not None:
                r.durable_base = e.conf  # saved with the snapshot: the log no longer says it
        del r.durable_log[: to - r.durable_first]
        r.durable_first = to
        if self.storage is not None:
            disk = self.storage.disks[i]
            assert disk.journal is not None
            disk.journal.compact_to(to)  # the window's rewrite lands later (file_step)
            disk.settle()
            return
        r.log.compact(to)

    def file_step(self, i: int) -> None:
        """The next step of replica i's window rewrite off the loop, if one is due: whatever
        its Readies are doing (the thread does not wait for them)."""
        if self.storage is None or self.replicas[i].core is None:
            return
        if self.files_rng.random() < self.cfg.file_step:
            step = self.storage.disks[i].file_step()
            if step is not None:
                self.note(f"{i}: {step}")

    def finish_install(self, i: int) -> None:
        r = self.replicas[i]
        core = r.core
        if r.install is None or core is None or r.pending is not None or r.install[0] > self.time:
            return
        _, what = r.install
        r.install = None
        failed = self.rng.random() < self.cfg.install_fail
        if self.storage is not None:
            if not failed:  # the installer's messages to and from the source, until none is left
                self.storage.pump(i, lambda j: self.up(j, j))
                failed = self.installed.pop(i, None) is None  # refused, or its source is down
            self.storage.give_up(i, "its source went away")  # nothing if it is done
        if failed:
            self.note(f"{i} install {what} failed")
            core.install_failed()
            self.process(i)
            return
        known = self.committed.get(what.index)
        if known is None or known.term != what.term:
            self.fail(f"replica {i} was sent snapshot {what}, not a committed entry ({known})")
        if core.commit >= what.index:
            self.fail(f"replica {i} installs {what} below its commit {core.commit}")
        if self.storage is not None:
            anchor = self.plain(core.log.entries(what.index, what.index + 1)[0])
            if anchor != known or core.log.first_index() != what.index:
                self.fail(f"replica {i} installed {anchor}, not {known}")
            self.storage.disks[i].settle()
        else:
            r.log.reset(known)
        r.durable_log = [known]  # the install is durable before it is done
        r.durable_base = what.membership or r.durable_base
        r.durable_first = what.index
        r.durable_hs = replace(r.durable_hs, commit=max(r.durable_hs.commit, what.index))
        r.applied = self.committed_prefix(what.index)
        r.seen_commit = max(r.seen_commit, what.index)
        self.note(f"{i} installed {what}")
        core.install_done(what.index, what.term)
        self.process(i)

    # ---- the checks ----------------------------------------------------------------------------

    def check_ready(self, r: Replica, core: Raft, rd: Ready) -> None:
        # commit indexes never go back (within an incarnation; durable ones are checked in persist)
        if core.commit < r.seen_commit:
            self.fail(f"replica {r.id}'s commit went back from {r.seen_commit} to {core.commit}")
        first = core.log.first_index()
        for index in range(max(r.seen_commit + 1, first), core.commit + 1):
            got = core.log.entries(index, index + 1)
            if not got:
                self.fail(f"replica {r.id} committed {index} beyond its log")
            self.record_commit(r.id, self.plain(got[0]))
        r.seen_commit = core.commit
        for e in rd.entries:  # every entry a replica takes passes through a Ready
            prev = core.log.term_at(e.index - 1)
            self.check_entry(self.plain(e), 0 if prev is None else prev)
        if rd.soft_state.role == Role.LEADER and r.was_leader_term != core.term:
            r.was_leader_term = core.term
            other = self.leaders.setdefault(core.term, r.id)
            if other != r.id:
                self.fail(f"two leaders in term {core.term}: {other} and {r.id}")
            self.note(f"{r.id} leads term {core.term}")
            if self.on_elected is not None:
                self.on_elected(r.id)
            # Leader completeness: a new leader holds every committed entry of its term's
            # past. A leader of an older term elected late (its node held while its vote
            # grants waited; the storage schedule 1548 of MEMBERSHIP_STORAGE) need not hold
            # what a later term committed: Raft's property is for higher terms only.
            for index, known in self.committed.items():
                if index < first or known.term > core.term:
                    continue  # in its snapshot (checked when compacted or installed), or later
                mine = core.log.entries(index, index + 1)
                if not mine or self.plain(mine[0]) != known:
                    self.fail(f"leader {r.id} of term {core.term} lacks committed entry {known}")

    def check_entry(self, e: Entry, prev_term: int) -> None:
        """Log matching, one entry at a time: an (index, term) names one entry, always with the
        same term before it; by induction two logs that share an entry share all before it."""
        data, prev = self.entry_at.setdefault((e.index, e.term), (e.data, prev_term))
        if (data, prev) != (e.data, prev_term):
            self.fail(f"log matching: two different entries at index {e.index} term {e.term}")

    def record_commit(self, node: int, e: Entry) -> None:
        known = self.committed.setdefault(e.index, e)
        if known != e:
            self.fail(f"committed entry {e.index} changed: {known} then {e} (at {node})")

    def persist(self, r: Replica, rd: Ready) -> None:
        log, first = r.durable_log, r.durable_first
        if rd.truncate_after is not None:
            if rd.truncate_after < r.durable_hs.commit:
                self.fail(f"replica {r.id} cut its durable log below its commit")
            del log[rd.truncate_after + 1 - first :]
        for e in map(self.plain, rd.entries):  # on the real storage, the bytes it stored
            if e.index != first + len(log):
                self.fail(f"replica {r.id} appended {e.index} after {first + len(log) - 1}")
            self.check_entry(e, log[-1].term if log else 0)
            log.append(e)
        hs = rd.hard_state
        old = r.durable_hs
        if hs is not None:
            if hs.term < old.term or (hs.term == old.term and old.vote not in (NONE, hs.vote)):
                self.fail(f"replica {r.id}'s durable term/vote went from {old} to {hs}")
            if hs.commit < old.commit:
                self.fail(f"replica {r.id}'s durable commit went back: {old} to {hs}")
            r.durable_hs = hs
        # Below the old durable commit nothing can change (no cut reaches it, appends go after
        # the end): check what the durable commit newly covers.
        for index in range(max(old.commit + 1, first), r.durable_hs.commit + 1):
            c = self.committed.get(index)
            if index >= first + len(log) or (c is not None and log[index - first] != c):
                self.fail(f"replica {r.id}'s durable log lost or changed committed entry {index}")

    def apply(self, r: Replica, rd: Ready) -> None:
        for e in map(self.plain, rd.committed):
            if e.index != len(r.applied) + 1:
                self.fail(f"replica {r.id} applied {e.index} after {len(r.applied)}")
            if self.committed.get(e.index) != e:
                self.fail(
                    f"replica {r.id} applied {e} but {self.committed.get(e.index)} is committed"
                )
            r.applied.append(e)

    # ---- the network -------------------------------------------------------------------------

    def send(self, m: Message) -> None:
        self.sent.append(m)
        if m.type == MsgType.VOTE_RESP and not m.reject:
            granted = self.votes.setdefault((m.src, m.term), m.dst)
            if granted != m.dst:
                self.fail(f"replica {m.src} voted for {granted} and {m.dst} in term {m.term}")
        if (m.src, m.dst) in self.cut or self.rng.random() < self.drop:
            return
        copies = 2 if self.rng.random() < self.dup else 1
        for _ in range(copies):
            self.seq += 1
            at: float = self.time + 1 + self.rng.randrange(self.cfg.max_delay)
            if self.cfg.latency:
                at = self.clock + self.cfg.latency / TICK_SECONDS
            heapq.heappush(self.net, (at, self.seq, m))

    def deliver_due(self) -> None:
        """Deliver what is due, in random order; a replica steps all its due messages, then
        makes one Ready (as a driver does each loop turn). One whose Ready is not yet synced
        takes none of them, nor does one whose node is held: they wait a turn."""
        if self.cfg.latency:
            self.deliver_until(self.time + 1)
            return
        while self.pings and self.pings[0][0] <= self.time:
            _, _, src, dst = heapq.heappop(self.pings)
            if self.replicas[dst].held is not None:  # read when it runs again
                self.seq += 1
                heapq.heappush(self.pings, (self.time + 1, self.seq, src, dst))
            elif self.replicas[dst].core is not None:
                self.hear(dst, src)
        due: list[Message] = []
        while self.net and self.net[0][0] <= self.time:
            due.append(heapq.heappop(self.net)[2])
        self.rng.shuffle(due)
        inbox: dict[int, list[Message]] = {}
        for m in due:
            inbox.setdefault(m.dst, []).append(m)
        for dst, msgs in inbox.items():
            r = self.replicas[dst]
            if r.core is None:
                continue
            if r.held is None:
                for m in msgs:
                    self.hear(dst, m.src)
            if r.pending is not None or r.held is not None:
                for m in msgs:
                    self.seq += 1
                    heapq.heappush(self.net, (self.time + 1, self.seq, m))
                continue
            for m in msgs:
                self.wake_to_step(dst, r.core, m)
                r.core.step(m)
            self.process(dst)

    def deliver_until(self, limit: float) -> None:
        """cfg.latency: each message sent before `limit` (in ticks) less the latency is read
        in the order sent, when it arrives, and its replica makes a Ready at once; a ping
        too, when it arrives."""
        while self.pings and self.pings[0][0] < limit or self.net and self.net[0][0] < limit:
            if self.pings and (not self.net or self.pings[0][:2] < self.net[0][:2]):
                due, _, src, dst = heapq.heappop(self.pings)
                self.clock = max(self.clock, due)
                if self.replicas[dst].held is not None:  # read when it runs again
                    self.seq += 1
                    heapq.heappush(self.pings, (self.time + 1, self.seq, src, dst))
                elif self.replicas[dst].core is not None:
                    self.hear(dst, src)
                continue
            at, _, m = heapq.heappop(self.net)
            self.clock = max(self.clock, at)
            r = self.replicas[m.dst]
            if r.core is None:
                continue
            if r.held is None:
                self.hear(m.dst, m.src)
            if r.pending is not None or r.held is not None:
                self.seq += 1
                heapq.heappush(self.net, (self.time + 1, self.seq, m))
                continue
            self.wake_to_step(m.dst, r.core, m)
            r.core.step(m)
            self.process(m.dst)

    def restart_loop(self, i: int) -> None:
        """cfg.latency: node i's group woke with its loop stopped: the loop ticks again a
        tick from now, at this phase (driver._keep_ticking)."""
        r = self.replicas[i]
        r.stopped = False
        r.woke = self.time
        r.ticked = self.clock
        self.phase[i] = self.clock % 1.0

    # ---- the schedule ------------------------------------------------------------------------

    def turn(self, chaos: bool) -> None:
        self.time += 1
        self.clock = float(self.time)
        self.chaos = chaos
        rng = self.rng
        if chaos:
            for i in self.ids:
                r = self.replicas[i]
                if r.core is not None and rng.random() < self.cfg.crash:
                    self.crash(i)
                elif (
                    self.cfg.stall
                    and r.core is not None
                    and r.held is None
                    and rng.random() < self.cfg.stall
                ):
                    self.stall(i)
                elif r.core is None and rng.random() < self.cfg.restart:
                    self.start(i)
                    self.note(f"restart {i}")
            if rng.random() < self.cfg.cut:
                a, b = rng.sample(self.ids, 2)
                self.cut.add((a, b))
                if rng.random() < 0.5:
                    self.cut.add((b, a))
            if self.cut and rng.random() < self.cfg.mend:
                self.cut.discard(rng.choice(sorted(self.cut)))
        if rng.random() < self.propose_rate:
            # clients mostly find the leader; some ask a follower and are refused
            leader = self.leader()
            self.propose(leader if leader and rng.random() < 0.8 else rng.choice(self.ids))
        if chaos and self.cfg.conf_change and rng.random() < self.cfg.conf_change:
            self.change_members()
        if chaos and rng.random() < self.cfg.transfer:
            for i in self.live():
                core = self.idle(i)
                if core is not None and core.role == Role.LEADER:
                    self.wake_to_lead(i, core)
                    core.transfer_leadership(rng.choice(self.ids))
                    self.process(i)
        for i in self.ids:
            self.resume(i)
        self.mesh_turn()
        if self.cfg.latency:
            self.phased_turn()
        else:
            for i in self.ids:
                self.tick_node(i)
        self.deliver_due()
        for i in self.ids:
            r = self.replicas[i]
            if r.pending is not None and r.held is None and rng.random() < self.cfg.sync:
                self.sync(i)

    def tick_node(self, i: int) -> None:
        """Node i's turn: its replica's chores, then its tick (unless its node is held)."""
        r = self.replicas[i]
        if r.held is not None:
            return
        r.ticked = self.clock
        rng = self.rng
        if self.cfg.compact and rng.random() < self.cfg.compact:
            self.compact(i)
        if self.cfg.key_compaction and rng.random() < self.cfg.clean:
            self.clean(i)
        self.file_step(i)
        self.finish_install(i)
        core = self.idle(i)
        if core is not None:
            # tick_group reads the nodes heard only for a leader whose lease ends next
            heard = list(in_ticks(self.silences(i)).items()) if core.lease_ending() else []
            tick_group(core, heard, frozenset(self.links[i]), True)
            self.process(i)

    def phased_turn(self) -> None:
        """cfg.latency: the turn's events in the order of their times: each node's tick at its
        phase, its keepalive round when due (and what its driver is told of it), and each
        message and ping as it arrives in between."""
        events: list[tuple[float, int, bool]] = []
        for i in self.ids:
            events.append((self.time + self.phase[i], i, False))
            due = self.rounds[i] / TICK_SECONDS
            if due < self.time + 1:
                events.append((max(due, self.time), i, True))
        for at, i, mesh in sorted(events):
            self.deliver_until(at)
            self.clock = max(self.clock, at)
            if mesh:
                self.keepalive(i)
                self.notify(i)
                continue
            r = self.replicas[i]
            if r.core is not None and r.core.quiet:
                r.stopped = True
            if not r.stopped and r.woke != self.time:  # a restarted loop ticks a tick on
                self.tick_node(i)

    def change_members(self) -> None:
        """The leader is asked for new members: mostly one change (a learner added, promoted
        or dropped, a voter added or removed), sometimes a new voter set altogether."""
        i = self.leader()
        core = self.idle(i) if i else None
        if core is None:
            return
        rng, conf = self.rng, core.conf
        voters, learners = set(conf.voters), set(conf.learners)
        others = [n for n in self.ids if n not in voters | learners]
        roll = rng.random()
        if roll < 0.25 and others:
            learners.add(rng.choice(others))
        elif roll < 0.45 and learners:
            n = rng.choice(sorted(learners))
            learners.discard(n)
            voters.add(n)
        elif roll < 0.55 and learners:
            learners.discard(rng.choice(sorted(learners)))
        elif roll < 0.7 and others:
            voters.add(rng.choice(others))
        elif roll < 0.85 and len(voters) > 1:
            n = rng.choice(sorted(voters))
            voters.discard(n)
            if rng.random() < 0.5:
                learners.add(n)
        else:
            voters = set(rng.sample(self.ids, rng.choice((1, 2, 3, 3, 4, 5))))
            learners = {n for n in self.ids if n not in voters and rng.random() < 0.3}
        target = Membership.of(voters, learners)
        self.wake_to_lead(i, core)
        result = core.propose_conf(target)
        self.note(f"{i} asked for {target}: {result}")
        self.process(i)

    def now(self) -> float:
        """The simulation's clock in seconds, as the mesh's (cfg.latency: within the turn)."""
        return (self.clock if self.cfg.latency else self.time) * TICK_SECONDS

    def mesh_turn(self) -> None:
        """Each node's mesh (raft/mesh.py) and what its driver is told of it: connections
        that open, keepalive rounds that ping and judge, and the groups woken."""
        self.connect()
        if not self.cfg.latency:  # else each round at its own time (`phased_turn`)
            for i in self.ids:
                self.keepalive(i)
        for i in self.ids:
            self.notify(i)
        self.clock = float(self.time)

    def connect(self) -> None:
        """A pair of running nodes, neither held, with both ways open, holds a connection
        (the dialler's handshake needs both); one that was dropped or closed opens again."""
        n = len(self.ids)
        if sum(map(len, self.links.values())) == n * (n - 1):
            return  # every connection open
        for i in self.ids:
            for j in self.ids:
                if j <= i or (j in self.links[i] and i in self.links[j]):
                    continue
                ri, rj = self.replicas[i], self.replicas[j]
                if ri.core is None or rj.core is None or ri.held or rj.held:
                    continue
                if (i, j) in self.cut or (j, i) in self.cut:
                    continue
                self.links[i][j] = Link(self.now())
                self.links[j][i] = Link(self.now())

    def keepalive(self, i: int) -> None:
        """Node i's keepalive round, when one is due (a held node's comes late, when it
        runs again): raft/keepalive.py's findings, as the mesh acts on them."""
        r = self.replicas[i]
        now, interval = self.now(), self.cfg.ping_interval
        if r.core is None or r.held is not None or now < self.rounds[i] - 1e-9:
            return
        judge = judges(now, self.last_round[i], interval)
        self.holds[i] = last_hold(now, self.last_round[i], self.holds[i], interval)
        self.last_round[i], self.rounds[i] = now, now + interval
        links = self.links[i]
        for j in self.ids:
            link = links.get(j)
            if link is None:
                continue
            found = find(now, link.last_received, link.silent, judge, interval)
            if found.newly_silent and self.cfg.silence:
                self.notices[i].append((j, False, self.clock))
            link.silent = found.silent
            if found.dead:
                self.note(f"{i} drops its connection to {j}: silent")
                del links[j]
                if (i, j) not in self.cut:
                    self.links[j].pop(i, None)
            elif (i, j) not in self.cut and self.pings_rng.random() >= self.drop:
                self.seq += 1
                at: float = self.time + 1 + self.pings_rng.randrange(self.cfg.max_delay)
                if self.cfg.latency:
                    at = self.clock + self.cfg.latency / TICK_SECONDS
                heapq.heappush(self.pings, (at, self.seq, i, j))

    def hear(self, i: int, j: int) -> None:
        """Node i read something from node j (a ping, a Raft message)."""
        link = self.links[i].get(j)
        if link is not None:
            link.last_received = self.now()

    def notify(self, i: int) -> None:
        """Node i's driver is told of its connections that opened or closed and of peers its
        keepalive found silent, in order, and each group decides by driver.peer_changed. A
        replica with a Ready in flight (or a held node) is told on a later turn. A connection
        that closed is told once what its peer sent before is read, as TCP delivers it: told
        first, followers woken by their killed leader's close read its last heartbeat after,
        the quiesce one, went quiet again with no close left to come, and never elected
        (the detection schedules with clients, which make a group quiesce as it is killed)."""
        if not self.cfg.watch:
            self.notices[i].clear()
            return
        links, told, notices = self.links[i], self.told[i], self.notices[i]
        if len(links) != len(told) or not told.issuperset(links):
            for j in sorted(told.symmetric_difference(links)):
                if j in links:
                    told.add(j)
                elif any(m.src == j and m.dst == i for _, _, m in self.net):
                    continue  # what j sent before its connection closed is read first (TCP)
                else:
                    told.discard(j)
                # all of a node's peers read its close within the latency of each other
                at = self.time + self.phases_rng.random() * self.cfg.latency / TICK_SECONDS
                notices.append((j, j in links, at))
        while notices:
            core = self.idle(i)
            if core is None:
                return
            j, up, at = notices.pop(0)
            if self.cfg.latency:
                self.clock = at
            was = (core.quiet, core.role, core.election_elapsed)
            silences = in_ticks(self.silences(i))
            lag = 2 * round(self.cfg.ping_interval / TICK_SECONDS) if self.cfg.leader_lag else 0
            if peer_changed(core, j, up, silences, 2 * self.cfg.election_tick, lag):
                if was != (core.quiet, core.role, core.election_elapsed):
                    self.note(f"{i} wakes: node {j} {'up' if up else 'silent or gone'}")
                self.process(i)

    def up(self, j: int, i: int) -> bool:
        """Node i hears node j: j runs and the link from j is not cut."""
        peer = self.replicas[j]
        return peer.core is not None and peer.held is None and (j, i) not in self.cut

    def silences(self, i: int) -> dict[str, float]:
        """Seconds since node i last heard each node it holds a connection to, what it read
        right after its own hold counted from the hold's start (Mesh.silences)."""
        now = self.now()
        if not self.cfg.hold_ages_heard:
            return {str(j): now - link.last_received for j, link in self.links[i].items()}
        hold = last_hold(now, self.last_round[i], self.holds[i], self.cfg.ping_interval)
        return {
            str(j): now - heard_at(link.last_received, hold) for j, link in self.links[i].items()
        }

    def hold(self, i: int) -> tuple[int, int]:
        """Node i's last hold, how long and how long ago it ended, in ticks (Driver._hold);
        none without hold_ages_heard."""
        if not self.cfg.hold_ages_heard:
            return 0, 0
        now = self.now()
        interval = self.cfg.ping_interval
        held, since = hold_ago(now, last_hold(now, self.last_round[i], self.holds[i], interval))
        return min(int(held / TICK_SECONDS), 2 * self.cfg.election_tick), int(since / TICK_SECONDS)

    def propose(self, i: int) -> int | None:
        core = self.idle(i)
        if core is None:
            return None
        self.proposed += 1
        self.wake_to_lead(i, core)
        result = core.propose(self.command(f"{self.seed}:{self.proposed}".encode()))
        self.process(i)
        return result if isinstance(result, int) else None

    def wake_to_lead(self, i: int, core: Raft) -> None:
        """What node i's driver does before a quiet leader acts as one (driver.wake_to_lead)."""
        if self.cfg.wake_to_lead and core.quiet:
            silences = in_ticks(self.silences(i))
            wake_to_lead(core, silences, 2 * self.cfg.election_tick, self.hold(i))

    def wake_to_step(self, i: int, core: Raft, m: Message) -> None:
        """What node i's driver does before a peer's message reaches a quiet leader
        (Driver.receive): it wakes as to lead, its lease from its followers' nodes' silences."""
        if self.cfg.wake_to_step and core.wakes_leader(m):
            silences = in_ticks(self.silences(i))
            wake_to_lead(core, silences, 2 * self.cfg.election_tick, self.hold(i))

    def command(self, value: bytes) -> bytes:
        """A client's proposal: on the real storage, a record batch holding `value` (with
        key_compaction, under one of KEYS keys)."""
        if self.storage is None:
            return value
        key = f"k{self.proposed % KEYS}".encode() if self.cfg.key_compaction else None
        return batch(b"<" + value + b">", key)

    def clean(self, i: int) -> None:
        """Replica i's key-based compaction pass, on its own schedule; killed in the middle
        (in chaos, cfg.clean_crash of the time), the replica restarts from what the pass left."""
        r = self.replicas[i]
        if self.storage is None or r.core is None or r.pending is not None:
            return
        kill = self.chaos and self.rng.random() < self.cfg.clean_crash
        now_ms = int(self.time * TICK_SECONDS * 1000)
        stopped = self.storage.disks[i].clean(now_ms, self.rng if kill else None)
        if stopped is not None:
            self.note(f"{i}: {stopped}")
            self.crash(i)

    def check_stored(self) -> None:
        """Every byte a replica's segments hold below its high watermark is the leader's (and
        every other replica's) for that offset."""
        if self.storage is None:
            return
        disks = [self.storage.disks[i] for i in self.live()]
        marks = [d.journal.high_watermark for d in disks if d.journal is not None]
        upper = min(marks)
        if self.cfg.key_compaction:
            self.check_cleaned()
            return
        stored = [d.stored(upper) for d in disks]
        for i, data in zip(self.live(), stored, strict=True):
            if data != stored[0]:
                self.fail(f"replica {i}'s segments differ from replica {self.live()[0]}'s")

    def check_leader_votes(self) -> None:
        """Once a heal committed, its group is led by one of its voters: a leader the group
        removed hands over as that change commits."""
        leader = self.leader()
        if not leader:
            return
        core = self.core(leader)
        if core.confs[-1][0] <= core.commit and not core.conf.votes(leader):
            self.fail(f"{leader} leads {core.conf}, which removed it and committed")

    def check_cleaned(self) -> None:
        """Replicas compact their logs each on its own, so their segments differ; what
        compaction keeps must not: every offset two replicas hold below their high
        watermarks is the same record (bytes, key, leader epoch), and every replica holds,
        of every key, the latest record below its own high watermark (what it may have
        cleaned against), from its log start on."""
        assert self.storage is not None
        held: dict[int, dict[int, tuple[int, bytes | None, bytes]]] = {}
        union: dict[int, tuple[int, bytes | None, bytes]] = {}
        for i in self.live():
            journal = self.storage.disks[i].journal
            assert journal is not None
            held[i] = self.storage.disks[i].records(journal.high_watermark)
            for offset, record in held[i].items():
                if union.setdefault(offset, record) != record:
                    self.fail(f"replica {i} holds another record at offset {offset}")
        ordered = sorted(union.items())
        for i, records in held.items():
            disk = self.storage.disks[i]
            assert disk.log is not None and disk.journal is not None
            start, upper = disk.log.log_start_offset, disk.journal.high_watermark
            latest = {r[1]: offset for offset, r in ordered if start <= offset < upper}
            for key, offset in latest.items():
                if offset not in records:
                    self.fail(f"replica {i} lost offset {offset}, the latest record of {key!r}")

    def heal(self) -> None:
        """Mend every link, restart every replica, stop dropping: within heal_bound ticks a
        leader must be elected and a new proposal applied by every replica."""
        self.cut.clear()
        for i in self.ids:
            if self.replicas[i].core is None:
                self.start(i)
        self.drop, self.dup = 0.0, 0.0
        self.note("heal")
        start = self.time
        target: bytes | None = None
        proposer: tuple[int, int] = (NONE, 0)  # (leader, term) that took the target
        while self.time - start < self.cfg.heal_bound:
            self.turn(chaos=False)
            if target is not None:
                if all(
                    any(self.carries(e, target) for e in self.replicas[i].applied)
                    for i in self.members()
                ):
                    self.heal_ticks.append(self.time - start)
                    self.check_stored()
                    self.check_leader_votes()
                    self.drop, self.dup = self.cfg.drop, self.cfg.dup
                    return
                core = self.replicas[proposer[0]].core
                lost = core is None or core.term != proposer[1] or core.role != Role.LEADER
                if lost and not any(self.carries(e, target) for e in self.committed.values()):
                    target = None  # its leader was deposed before it committed: the client retries
            if target is None:
                for i in self.ids:
                    core = self.idle(i)
                    if core is not None and core.role == Role.LEADER:
                        self.proposed += 1
                        data = f"{self.seed}:{self.proposed}:heal".encode()
                        self.wake_to_lead(i, core)
                        if isinstance(core.propose(self.command(data)), int):
                            target, proposer = data, (i, core.term)
                            self.process(i)
                        break
        self.fail(f"no proposal committed everywhere within {self.cfg.heal_bound} ticks of a heal")

    # ---- scripted scenarios (the rule tests drive the group hop by hop) ---------------------

    def act(self, i: int, what: Callable[[Raft], object]) -> None:
        """Call `what` on replica i's core (it must be live and idle), then take its Ready."""
        core = self.replicas[i].core
        if core is None or self.replicas[i].pending is not None:
            raise RuntimeError(f"replica {i} cannot act now")
        what(core)
        self.process(i)

    def hop(self) -> None:
        """Deliver every message now in the network (no ticks), then sync every replica."""
        self.time = max([self.time + 1, *(math.ceil(at) for at, _, _ in self.net)])
        self.deliver_due()
        for i in self.ids:
            self.sync(i)

    def hops(self, n: int = 20) -> None:
        for _ in range(n):
            if not self.net and all(r.pending is None for r in self.replicas.values()):
                return
            self.hop()

    def ticks(self, n: int) -> None:
        for _ in range(n):
            self.turn(chaos=False)

    def isolate(self, i: int, inbound: bool = True, outbound: bool = True) -> None:
        for j in self.ids:
            if j != i:
                if outbound:
                    self.cut.add((i, j))
                if inbound:
                    self.cut.add((j, i))

    def core(self, i: int) -> Raft:
        core = self.replicas[i].core
        if core is None:
            raise RuntimeError(f"replica {i} is down")
        return core

    def members(self) -> tuple[int, ...]:
        """The replicas a heal waits for: the members of the latest committed configuration
        (a replica removed from the group hears no more of it)."""
        confs = [e.conf for _, e in sorted(self.committed.items()) if e.conf is not None]
        return tuple(sorted(confs[-1].members())) if confs else self.initial

    def leads(self, i: int, held: bool = False) -> bool:
        """Whether replica i leads. One `held` (its node was, in a detection schedule) and
        quiet leads only if a wake now would leave it a lease: woken by a write or a peer's
        message, it would step down first (driver.wake_to_lead). Its node may have run again
        after its followers found it silent: until its own keepalive finds them silent, a
        round or two later, nothing wakes it (waking every quiet leader of a node after each
        of its holds is the wake storm raft/keepalive.py's `judges` keeps off)."""
        core = self.core(i)
        if core.role != Role.LEADER or not (held and core.quiet):
            return core.role == Role.LEADER
        silence = core.quorum_silence(in_ticks(self.silences(i)), 2 * self.cfg.election_tick)
        return silence < core.lease_ticks()

    def leader(self) -> int:
        """The live leader of the highest term, NONE if there is none."""
        best = (0, NONE)
        for i in self.live():
            core = self.core(i)
            if core.role == Role.LEADER and core.term > best[0]:
                best = (core.term, i)
        return best[1]

    def run(self) -> None:
        for _ in range(self.cfg.rounds):
            for _ in range(self.cfg.chaos_ticks):
                self.turn(chaos=True)
            self.heal()


# The real partition storage under the same schedules (issue 43).
STORAGE = SimConfig(storage=True, ready_tears=True, key_compaction=True)
# Members that change under the same faults: three voters of five or six nodes to start;
# and the same on the real storage (configuration entries in the journal, saved as the
# window is cut, carried by snapshot installs).
MEMBERSHIP = SimConfig(nodes=(5, 6), voters=3, conf_change=0.1, learner_bytes_per_tick=40)
MEMBERSHIP_STORAGE = replace(STORAGE, nodes=(5, 6), voters=3, conf_change=0.1)


# A quiet group's leader lost (issue 45): its process killed (the connections close), its node
# cut off both ways (only the pings' silence tells), its host lost (cut off and killed: no
# close arrives), or its outbound link cut (it still hears the others).
FAULTS = ("kill", "isolate", "host", "mute")
# The bound: every partition led again within 5 s of its leader's host lost.
DETECT_BOUND = round(5.0 / TICK_SECONDS)
# A LAN: lossless, each message read a millisecond after it was sent, each node ticking at a
# phase of its own (`SimConfig.latency`). The chaos schedules' delays of up to 150 ms each way
# made two followers woken together split their votes again and again; so did lockstep ticks
# with each message read a tick later (a whole tick of 50 ms): 2 of 40,000 schedules were not
# led again within 5 s (seeds 19867, 28568: five split votes in a row, three of them between
# timers a tick apart), 13.7 % split at least once; ticking at phases of their own, none of
# 40,000 (the slowest 4.1 s), 2.8 % split at least once (8 % of those whose leader was
# killed: its followers read the close at once, and tick together from then).
DETECTION = SimConfig(
    drop=0.0, dup=0.0, max_delay=1, propose=0.0, sparse=0.0, sync=1.0, compact=0.0, latency=0.001
)

# The same with the old leader's node held (SIGSTOP, a long turn) through the fault, its group
# quiet then or, in half of them, woken by a client's write just before (`SimConfig.hold`,
# `hold_wakes`): frames and writes wait, and it runs again in uvloop's order.
HELD = replace(DETECTION, hold=1.0, hold_wakes=0.5)


class Clients:
    """Producers of a detection schedule (cfg.clients of them have any): each sends to the
    leader it knows, the old one, at ticks drawn around the fault (from a generator of its
    own, so a schedule without clients is the one it was). A proposal the old leader takes
    while another leads a later term is an acks=1 write answered by a deposed leader."""

    def __init__(self, seed: int, cfg: SimConfig) -> None:
        rng = random.Random(f"clients {seed}")
        lead = round(2 * cfg.ping_interval / TICK_SECONDS)
        at: list[int] = []
        if rng.random() < cfg.clients:
            span = lead + 4 * cfg.election_tick
            at = sorted(rng.randrange(span) - lead for _ in range(1 + rng.randrange(3)))
        self.before = max(0, -min(at, default=0))  # ticks before the fault
        self.at = [t + self.before for t in at]  # ticks from the first
        self.tick = 0
        self.waiting = 0  # writes sent while the old leader's node was held
        self.grace_until = -1  # (cfg.hold) the tick Raft.resume's grace after the hold ends
        self.lease = False

    def propose(self, sim: Sim, old: int, term: int, lease: bool = False) -> None:
        """This tick's proposals, to the old leader (a follower refuses: NotLeader). One sent
        while its node is held waits for it (cfg.hold: `answer_waiting`)."""
        self.lease = lease
        while self.at and self.at[0] == self.tick:
            self.at.pop(0)
            if sim.replicas[old].core is not None and sim.replicas[old].held is not None:
                self.waiting += 1
                continue
            self.take(sim, old, term, lease)
        self.tick += 1
        self.before = max(0, self.before - 1)

    def take(self, sim: Sim, old: int, term: int, lease: bool) -> None:
        if sim.replicas[old].core is None or sim.idle(old) is None:
            return
        sim.note(f"a client proposes to {old}")
        took = sim.propose(old)
        if lease and took is not None and sim.time > self.grace_until:
            new = [i for i in sim.live() if i != old and sim.core(i).role == Role.LEADER]
            if new and sim.core(new[0]).term > term:
                sim.fail(f"{old}, cut off, took a proposal in term {term}; {new[0]} leads")

    def answer_waiting(self, sim: Sim, old: int, term: int) -> None:
        """The old leader's node runs again: the writes sent to it meanwhile are answered."""
        waiting, self.waiting = self.waiting, 0
        for _ in range(waiting):
            self.take(sim, old, term, self.lease)


def detect(seed: int, cfg: SimConfig = DETECTION, lease: bool = False) -> tuple[str, int]:
    """A failure-detection schedule: a group that went quiet (no heartbeats, no timers, only
    its nodes' pings) loses its leader to one of FAULTS at a point of the ping rounds drawn
    from the seed. Returns the fault and the ticks until another replica leads a later term;
    SimFailure past DETECT_BOUND, and with `lease` if the old leader, cut off, still leads once
    another was elected (FORK 5: its lease must end first), or takes a client's write then
    (`Clients`: cfg.clients of the schedules write to it around the fault)."""
    sim = Sim(seed, cfg)
    try:
        for _ in range(cfg.heal_bound):
            sim.turn(chaos=False)
            old = sim.leader()
            if old and all(sim.core(i).quiet for i in sim.ids):
                break
        else:
            sim.fail("the group did not go quiet")
        for _ in range(sim.rng.randrange(1 + round(2 * cfg.ping_interval / TICK_SECONDS))):
            sim.turn(chaos=False)
        fault, term = sim.rng.choice(FAULTS), sim.core(old).term
        clients = Clients(seed, cfg)
        while clients.before:
            clients.propose(sim, old, term)
            sim.turn(chaos=False)
        hold = random.Random(f"hold {seed}")
        ticks = into = 0  # the hold's length, and how far into it the fault falls
        if cfg.hold and hold.random() < cfg.hold:
            ticks = 1 + hold.randrange(2 * cfg.election_tick)
            into = hold.randrange(ticks)
            if random.Random(f"wake {seed}").random() < cfg.hold_wakes:
                sim.note(f"a client writes to {old}")
                sim.propose(old)
                sim.sync(old)  # its appends leave before the hold
            sim.replicas[old].held = (sim.time, sim.time + ticks)
            sim.note(f"hold {old} for {ticks}")
            sim.on_resume = lambda i: clients.answer_waiting(sim, old, term) if i == old else None
            clients.grace_until = sim.time + ticks + cfg.election_tick // 2

        def grace() -> bool:
            """Within Raft.resume's grace after the old leader's node ran again: FORK 5's
            allowance for a leader held through its lease (at most half an election timeout)."""
            return sim.time <= clients.grace_until

        def still_leads(new: int) -> None:
            """`new` was elected in a later term: the old leader, cut off, has stopped by now.
            Checked the moment `new` is elected: checked at the end of that tick only, an old
            leader that stopped within it went unseen (16 of the first 3,000 held schedules
            without the driver's late tick telling the mesh of the hold, Mesh.loop_held)."""
            later = new != old and sim.core(new).term > term
            if later and sim.leads(old, ticks > 0) and not grace():
                sim.fail(f"{old}, cut off, still leads term {term}; {new} was elected")

        start = sim.time
        for _ in range(into):
            clients.propose(sim, old, term, lease and fault == "isolate")
            sim.turn(chaos=False)
        sim.note(f"{fault} {old}")
        if fault in ("isolate", "host", "mute"):
            sim.isolate(old, inbound=fault != "mute")
            if lease and fault == "isolate":
                sim.on_elected = still_leads
        if fault in ("kill", "host"):
            sim.crash(old)
        while sim.time - start < DETECT_BOUND:
            clients.propose(sim, old, term, lease and fault == "isolate")
            sim.turn(chaos=False)
            new = [i for i in sim.live() if i != old and sim.core(i).role == Role.LEADER]
            if new and sim.core(new[0]).term > term:
                if lease and fault == "isolate" and sim.leads(old, ticks > 0) and not grace():
                    sim.fail(f"{old}, cut off, still leads term {term}; {new[0]} was elected")
                return fault, sim.time - start
        sim.fail(f"{fault} {old}: nobody else led within {DETECT_BOUND} ticks")
    except SimFailure:
        raise
    except Exception as e:
        sim.fail(f"{type(e).__name__}: {e}")
    finally:
        sim.close()


def scripted(
    nodes: int,
    rules: Rules | None = None,
    max_append: int = 64,
    quiesce_ticks: int = 4,
    watch: bool = True,
    seed: int = 0,
    voters: int = 0,
) -> Sim:
    """A lossless group that only moves when a test says so: every Ready synced at once,
    no chaos, no client proposals; `hop()` delivers, `act()` calls the core, `ticks()` ticks."""
    cfg = SimConfig(
        quiesce_ticks=quiesce_ticks,
        watch=watch,
        nodes=(nodes,),
        drop=0.0,
        dup=0.0,
        max_delay=1,
        propose=0.0,
        sync=1.0,
        compact=0.0,
        max_append=(max_append,),
        rules=rules or Rules(),
        voters=voters,
    )
    return Sim(seed, cfg)


def run_seed(seed: int, cfg: SimConfig | None = None) -> Sim:
    """Run one seeded schedule; raises SimFailure (with its seed) on any violation, including
    an exception raised inside the core."""
    sim = Sim(seed, cfg)
    try:
        sim.run()
    except SimFailure:
        raise
    except Exception as e:
        tail = "\n".join(sim.trace[-15:])
        raise SimFailure(
            f"{type(e).__name__}: {e} (t={sim.time}, {replay_hint(seed, sim.cfg)})\n"
            f"last events:\n{tail}"
        ) from e
    finally:
        sim.close()
    return sim


def run_seeds(seeds: range, cfg: SimConfig | None = None) -> None:
    """run_seed for each seed: a worker process's share of a chunk (tests/unit/test_raft_sim.py)."""
    for seed in seeds:
        run_seed(seed, cfg)


def run_spread(seeds: range, cfg: SimConfig | None, workers: Executor | None) -> None:
    """The seeds, split between `workers` (two processes) when there are any."""
    if workers is None:
        run_seeds(seeds, cfg)
        return
    for share in [workers.submit(run_seeds, seeds[i::2], cfg) for i in (0, 1)]:
        share.result()


def _wire(m: Message) -> Message:
    """A message as its peer receives it: through the driver's encoding and msgpack."""
    item = msgpack.unpackb(msgpack.packb(encode(GROUP, m)))
    return decode(item, m.src, m.dst)[1]
