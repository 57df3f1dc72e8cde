"""A partition's Raft group on the pure core (raft/core/), driven by the node's driver
(raft/driver.py): the core's log is the partition's segment journal, its hard state the
journal's Raft state file.

It answers what the partition, its produce queue and the admin API ask of a group. A
follower that needs entries its leader compacted installs a snapshot through its `installer`
(raft/install.py).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from enum import Enum

from raftlog.raft.core.raft import Raft
from raftlog.raft.core.rules import Config
from raftlog.raft.core.values import NONE, Entry, HardState, Ready, Role
from raftlog.raft.driver import TICK_SECONDS, Driver
from raftlog.raft.install import Installer
from raftlog.raft.journal import NO_OP as NO_OP_TYPE
from raftlog.raft.journal import SegmentJournal
from raftlog.raft.membership import CONF, Membership, parse
from raftlog.raft.timings import FIRST_ELECTION_ROUNDS
from raftlog.raft.window_entries import Batches

# A new term's first entry, as the journal format has it.
NO_OP = bytes([NO_OP_TYPE])
# A leader's window may hold this much for a follower that is heard but behind; past it the
# follower installs a snapshot instead.
HARD_WINDOW_BYTES = 256 * 1024 * 1024
# A window this short is not cut by the timed checkpoint: cutting rewrites and fsyncs it on
# the event loop, and a new topic's first checkpoint wave (a few election entries in each of
# thousands of windows) was a fifth of an idle node's samples (py-spy).
MIN_CHECKPOINT_ENTRIES = 64
STAND_RETRY_SECONDS = 0.1


class Outcome(Enum):
    """What became of a proposal."""

    COMMITTED = "committed"  # in the term it was proposed in
    NOT_LEADER = "not leader"  # not appended: this replica does not lead (never forwarded)
    # Appended, but this replica stopped leading before it committed: a next leader holding it
    # may still commit it.
    LEADER_CHANGED = "leader changed"


Callback = Callable[[Outcome], None]


class JournalLog:
    """The core's RaftLog over a segment journal. Entries go into the journal in
    `truncate_and_append` and reach the OS when the driver persists the Ready that hands them
    out (CoreGroup.persist), one write per file for all of them; data is read back only when
    an append carrying it is encoded."""

    def __init__(self, journal: SegmentJournal) -> None:
        self._journal = journal

    def first_index(self) -> int:
        return self._journal.first_index

    def last_index(self) -> int:
        return self._journal.last_index

    def term_at(self, index: int) -> int | None:
        if index == 0:
            return 0
        entry = self._journal.entry_by_index(index)
        return None if entry is None else entry.term

    def entries(self, lo: int, hi: int) -> list[Entry]:
        return [
            Entry(term, idx, command, parse(command))
            if isinstance(command, bytes) and command[0] == CONF
            else Entry(term, idx, command)
            for command, idx, term in self._journal.raft_entries(lo, hi)
        ]

    def truncate_and_append(self, after: int, entries: Sequence[Entry]) -> None:
        if after < self.last_index():
            self._journal.cut_after(after)
        for e in entries:
            # The leader's own proposal keeps its object (the journal judges a Proposal's
            # producer sequences as it appends); the new term's first entry is a no-op.
            data = e.data if isinstance(e.data, bytes | Batches) else bytes(e.data)
            self._journal.add(data or NO_OP, e.index, e.term)


class CoreGroup:
    def __init__(
        self,
        name: str,
        self_id: str,
        peer_ids: list[str],
        journal: SegmentJournal,
        driver: Driver,
        *,
        election_seconds: float,
        heartbeat_seconds: float,
        restart: Callable[[], None],
        checkpoint_seconds: float = 60.0,
        learner_bytes_per_second: int = 0,
        on_change: Callable[[CoreGroup], None] | None = None,
    ) -> None:
        """`restart`: the owner's way to close this replica and open it again from its files
        (the driver calls it after the group raised, see `restart`)."""
        self.name = name
        self.self_id = self_id
        self.journal = journal
        self._driver = driver
        self._on_change = on_change
        self._restart = restart
        self._closed = False
        self._peers = [int(p) for p in peer_ids]
        self._pending: dict[int, tuple[int, Callback | None]] = {}  # index -> (term, callback)
        self._compacting = False
        self.installer: Installer | None = None  # set by the partition right after
        self._seen: tuple[int, int, Role] = (NONE, 0, Role.FOLLOWER)
        first = len(self._peers) == 1 or self._peers[0] == int(self_id)
        self._deferred = 0 if first else FIRST_ELECTION_ROUNDS
        if len(journal) == 0:
            journal.add(NO_OP, 1, 0)  # every replica's log starts with the same term-0 entry
        journal.defer_writes()  # a Ready's entries reach the OS together, in persist
        if len(self._peers) > 1:
            journal.durable_through(driver.durability)
        log = JournalLog(journal)
        last_term = log.term_at(log.last_index()) or 0
        voted = journal.voted_for
        state = HardState(
            max(journal.term, last_term),
            int(voted) if voted else NONE,
            min(journal.commit_index, log.last_index()),
        )
        base, conf_entries = recovered_membership(journal)
        config = Config(
            id=int(self_id),
            peers=tuple(self._peers),
            election_tick=max(2, round(election_seconds / TICK_SECONDS)),
            heartbeat_tick=max(1, round(heartbeat_seconds / TICK_SECONDS)),
            applied=state.commit,
            membership=base,
            conf_entries=conf_entries,
            learner_bytes_per_tick=round(learner_bytes_per_second * TICK_SECONDS),
        )
        self.raft = Raft(config, log, state, random.Random())
        driver.add(self)
        # Kept for the produce path: get_running_loop() is a getpid() system call on 3.11.
        self.loop = loop = asyncio.get_running_loop()
        # Each group on its own schedule: a thousand partitions checkpointing in the same
        # second held the loop.
        self._checkpoint_seconds = checkpoint_seconds
        self._election_seconds = election_seconds
        self._checkpointing = loop.call_later(
            checkpoint_seconds * random.uniform(1.0, 1.5), self._checkpoint
        )
        if len(self._peers) == 1:
            self.raft.campaign(pre=False)
            driver.wake(self)
        elif self._peers[0] == int(self_id):
            # The first replica (Kafka's preferred leader, spread over the nodes by the
            # controller) stands one to two heartbeats after a start instead of after a whole
            # election timeout (it was 0.2-0.5 s: a restart of every node then had its 30
            # partitions led 1.67 s after the processes started, now 1.37-1.48 s); PreVote
            # keeps it from disturbing a leader that is alive, the node's election budget
            # from starting a thousand at once.
            driver.later(random.uniform(heartbeat_seconds, 2 * heartbeat_seconds), self._stand)

    # --- the driver's ----------------------------------------------------------------------

    def persist(self, rd: Ready) -> int:
        """The Ready's entries to the OS (the journal held them since they were appended, so
        one turn's go in one write per file) before anything can count them or hear of them,
        and a changed term or vote into the node's batched save."""
        self.journal.write_pending()
        hs = rd.hard_state
        if hs is not None:
            voted = str(hs.vote) if hs.vote != NONE else None
            journal = self.journal
            if (hs.term, voted) != (journal.term, journal.voted_for):
                journal.set_term(hs.term, voted)
        return self.journal.state_seq

    def apply(self, rd: Ready) -> None:
        if rd.committed:
            self.journal.set_commit_index(rd.committed[-1].index)
            pending = self._pending
            if pending:
                for e in rd.committed:
                    waiter = pending.pop(e.index, None)
                    if waiter is not None:
                        term, callback = waiter
                        ok = e.term == term  # committed in the term it was written in
                        _answer(callback, Outcome.COMMITTED if ok else Outcome.NOT_LEADER)
        if rd.soft_state.role != Role.LEADER and self._pending:
            self._unknown_outcome()
        if rd.install is not None:
            if self.installer is None:
                self.raft.install_failed()
            else:
                self.installer.start(rd.install.index, rd.install.term, str(rd.install.source))
        seen = (rd.soft_state.leader, self.raft.term, rd.soft_state.role)
        if seen != self._seen:
            self._seen = seen
            if self._on_change is not None:
                self._on_change(self)

    def restart(self) -> None:
        """The driver stopped this group after it raised: the owner reopens the replica, unless
        it was closed meanwhile (its partition deleted or moved)."""
        if not self._closed:
            self._restart()

    def may_stand(self) -> bool:
        budget = self._driver.elections
        if self._deferred and self.raft.term == 0 and not budget.held:
            self._deferred -= 1
            return False
        return budget.take()

    # --- what the partition asks -------------------------------------------------------------

    def propose(self, command: bytes | Batches, callback: Callback | None) -> None:
        """Appends a command if this replica leads; the callback gets its Outcome once the entry
        commits in its term, or fails (FORK 6: never forwarded). A group the driver stopped
        (it raised; its restart is due) takes nothing."""
        if self.raft.quiet:
            self._driver.wake_to_lead(self)
        result = self.raft.propose(command) if self._driver.holds(self) else None
        if isinstance(result, int):
            self._pending[result] = (self.raft.term, callback)
            self._driver.wake(self)
        elif callback is not None:
            self.loop.call_soon(callback, Outcome.NOT_LEADER)

    def schedule(self) -> None:
        self._driver.wake(self)

    def wake(self) -> None:
        self.raft.wake()
        self._driver.wake(self)

    def transfer_leadership(self, to: str | None = None) -> bool:
        """To `to`, or else to the follower whose node is heard that holds the most of the log
        (a node stopping after another handed its groups to the one that had just left, tie
        first by id, until its 5 s ran out); False when this replica does not lead, `to` is
        not a follower, or no follower is caught up."""
        matches = self.match_indexes()
        heard = self.connected_peers()
        target = (
            to
            if to is not None
            else max((p for p in matches if p in heard), key=lambda p: matches[p], default=None)
        )
        if self.raft.quiet:
            self._driver.wake_to_lead(self)
        if target is None or not self.raft.transfer_leadership(int(target)):
            return False
        self._driver.wake(self)
        return True

    @property
    def transferring(self) -> bool:
        """A transfer is under way (the core drops it after an election timeout)."""
        return self.raft.lead_transferee != NONE

    def members(self) -> set[str]:
        """The group's replicas, voters and learners, as its latest configuration says."""
        return {str(p) for p in self.raft.conf.members()}

    @property
    def membership(self) -> Membership:
        return self.raft.conf

    def settled(self) -> bool:
        """The latest configuration committed: the core takes a new change only then."""
        return self.raft.confs[-1][0] <= self.raft.commit

    def change_members(self, target: Membership) -> int | str:
        """Asks the leader's core for new members (issue 44): the index of the configuration
        entry appended, or why not now."""
        if not self._driver.holds(self):
            return "the group is stopped"
        if self.raft.quiet:
            self._driver.wake_to_lead(self)
        result = self.raft.propose_conf(target)
        if isinstance(result, int):
            self._driver.wake(self)
            return result
        return getattr(result, "reason", "this replica does not lead")

    def match_indexes(self) -> dict[str, int]:
        if self.raft.role != Role.LEADER:
            return {}
        return {str(p): pr.match for p, pr in self.raft.progress.items()}

    def connected_peers(self) -> set[str]:
        """The peers whose nodes were heard within an election timeout (the in-sync replicas
        are read from these): the core's own answers-seen set restarts every election timeout
        and when a quiet group wakes, and the ISR would flicker with it."""
        return self._driver.heard() & self.members() if self.is_leader else set()

    def install_done(self, index: int, term: int) -> None:
        self.raft.install_done(index, term)
        self._driver.wake(self)

    def install_failed(self) -> None:
        self.raft.install_failed()
        self._driver.wake(self)

    def force_compaction(self) -> None:
        """The window holds too much: cut it (see _compact) this loop turn."""
        if not self._compacting:
            self._compacting = True
            asyncio.get_running_loop().call_soon(self._compact)

    def close(self) -> None:
        self._closed = True
        self._checkpointing.cancel()
        if self.installer is not None:
            self.installer.close()
        self._driver.remove(self)
        self._unknown_outcome()
        self.journal.close()  # its window file, and a last save of term and vote

    @property
    def is_leader(self) -> bool:
        """Not while the driver has it stopped: its core's role is whatever it was left in."""
        return self.raft.role == Role.LEADER and self._driver.holds(self)

    @property
    def leader_id(self) -> str | None:
        leader = self.raft.leader
        return str(leader) if leader != NONE else None

    @property
    def quiet(self) -> bool:
        return self.raft.quiet

    @property
    def term(self) -> int:
        return self.raft.term

    @property
    def commit_index(self) -> int:
        return self.raft.commit

    # --- internals -------------------------------------------------------------------------------

    def _unknown_outcome(self) -> None:
        """FORK 5: a leader that steps down answers what it has not committed at once. Those
        entries are in its log and the next leader may still commit them: LEADER_CHANGED, which
        the produce queue answers as Kafka's "possibly persisted" REQUEST_TIMED_OUT. Answered
        NOT_LEADER (librdkafka: not persisted), a producer whose next batch then succeeded at
        the new leader saw skipped sequence numbers, bumped its epoch and sent its batches
        again under new sequence numbers: the fault suite found 8 records written twice."""
        pending, self._pending = self._pending, {}
        for _, callback in pending.values():
            _answer(callback, Outcome.LEADER_CHANGED)

    def _stand(self, waited: float = 0.0) -> None:
        if (
            self.raft.leader != NONE
            or self.raft.role != Role.FOLLOWER
            or not self._driver.holds(self)
        ):
            return
        if not self._driver.heard() & self.members() and waited < self._election_seconds:
            # A node starting beside its peers (every node killed and started again): a
            # pre-vote sent before any peer is connected is lost, and the next try waits a
            # whole election timeout. Stand as soon as one is heard instead.
            retry = STAND_RETRY_SECONDS
            self._driver.later(retry, lambda: self._stand(waited + retry))
            return
        if self._driver.elections.take():  # refused: its election timer stands it later
            self.raft.campaign(pre=True)
            self._driver.wake(self)

    def _checkpoint(self) -> None:
        """Every minute or so the window is cut (_compact) and the producer state saved.
        Without it a restart read every partition's whole log to rebuild producer state (the
        fault suite's kill_all: 4 s loop stalls at start, heal to first ack 6.8 s median
        against 1.9 s on the pysyncobj engine of the time, which compacted every minute)."""
        self._checkpointing = asyncio.get_running_loop().call_later(
            self._checkpoint_seconds * random.uniform(1.0, 1.5), self._checkpoint
        )
        if len(self.journal) < MIN_CHECKPOINT_ENTRIES or not self._compact():
            self.journal.checkpoint()

    def _compact(self) -> bool:
        """Cuts the window below the commit index and, on a leader, below what every follower
        whose node is heard holds: a follower that is merely behind then catches up by
        appends, and only one that was away (or one whose leader changed) installs a
        snapshot. Past HARD_WINDOW_BYTES a leader cuts anyway. Whether it cut (which saves
        the producer state too)."""
        self._compacting = False
        if self.raft.installing is not None:
            return False  # the installer owns the log
        floor = self.raft.commit - 1
        if self.is_leader and self.journal.window_bytes < HARD_WINDOW_BYTES:
            heard = {int(p) for p in self._driver.heard()}
            for peer, pr in self.raft.progress.items():
                if peer in heard:
                    floor = min(floor, pr.match)
        if floor <= self.journal.first_index:
            return False
        self.journal.compact_to(floor)
        return True


def recovered_membership(journal: SegmentJournal) -> tuple[Membership | None, tuple[Entry, ...]]:
    """What a replica restarts its configuration from: the one in force at its window's start
    (saved when the entry that set it left the window) and the configuration entries the
    window holds."""
    base = journal.base_conf
    entries = tuple(Entry(0, idx, cmd, parse(cmd)) for idx, cmd in journal.conf_commands())
    return (parse(base[1]) if base is not None else None), entries


def _answer(callback: Callback | None, outcome: Outcome) -> None:
    if callback is not None:
        callback(outcome)
