"""Log replication (Raft 5.3), both sides of an append: the follower's matching, commit and
conflict hint (FORK 1, 2, 8) and the snapshot install a follower needs once its leader compacted
what it lacks (FORK 7); the leader's progress per follower, its flow control (probe and
replicate, batches, the learner throttle) and its answer to a refusal."""

from __future__ import annotations

from collections.abc import Sequence

from raftlog.raft.core.state import Progress, State
from raftlog.raft.core.values import NONE, Entry, Install, Message, MsgType, Role

LEARNER_BURST = 10  # ticks of a learner's throttled rate it may be sent at once


class Replication(State):
    """The appends and snapshots between a leader and its followers."""

    # ---- the follower's side of appends --------------------------------------------------

    def handle_append(self, m: Message) -> None:
        if m.index < self.commit:
            # Everything up to our commit matches any leader's log: say so, the leader moves on.
            self._accept(m.src, self.commit)
            return
        if self.log.term_at(m.index) == m.log_term:
            last_new = self.append_matching(m.index, m.entries)
            self.commit_to(self.follower_commit(m.commit, last_new))
            self._accept(m.src, last_new)
            return
        hint, hint_term = self.reject_hint(m.index, m.log_term)
        self._send(
            Message(
                MsgType.APP_RESP,
                self.id,
                m.src,
                self.term,
                index=m.index,
                log_term=hint_term,
                reject=True,
                reject_hint=hint,
            )
        )

    def _accept(self, leader: int, matched: int) -> None:
        """A success answer: this log matches the leader's up to `matched`; our commit with it
        (a leader goes quiet only once every follower knows its commit)."""
        self._send(
            Message(MsgType.APP_RESP, self.id, leader, self.term, index=matched, commit=self.commit)
        )

    def append_matching(self, prev: int, entries: Sequence[Entry]) -> int:
        """FORK 2: after a matching prev entry, keep entries whose index and term match (log
        matching says they are the same) and cut only from the first conflicting one. Cutting
        after prev on every append let a late, reordered append remove entries this replica
        had already acknowledged (and the leader counted). Returns the last new entry's index."""
        last_new = prev + len(entries)
        if not self.rules.keep_matching_entries:
            self._cut(prev, entries)  # upstream pysyncobj: delete everything after prev
            return last_new
        for i, e in enumerate(entries):
            if self.log.term_at(e.index) != e.term:
                self._cut(e.index - 1, entries[i:])
                break
        return last_new

    def follower_commit(self, leader_commit: int, last_new: int) -> int:
        """FORK 1: min(leaderCommit, the last entry this message showed to match the leader's).
        Our own last index may be a deposed leader's divergent tail: never count it."""
        if not self.rules.follower_commit_rule:
            return min(leader_commit, self.last_index())
        return min(leader_commit, last_new)

    def reject_hint(self, prev: int, prev_term: int) -> tuple[int, int]:
        """FORK 8: a refused append proves divergent the entry at prev (when we have one) and
        all after it, and every entry before it of a term above prev_term (the leader's terms
        there are at most prev_term). Cut exactly those (never at or below commit) and name
        where the leader should probe next: (index, term there), as etcd's findConflictByTerm."""
        last = self.last_index()
        if not self.rules.conflict_hint:
            return min(prev - 1, last), 0  # upstream: back off one entry per round trip
        j = min(prev - 1, last)
        while j > self.commit and self._term(j) > prev_term:
            j -= 1
        if max(j, self.commit) < last:
            self._cut(max(j, self.commit))
        return j, self.log.term_at(j) or 0  # 0: compacted, the leader probes back from j

    # ---- snapshots (FORK 7) --------------------------------------------------------------

    def handle_snapshot(self, m: Message) -> None:
        """FORK 7: a snapshot confirms its last entry only. A log that already holds that entry
        keeps it and everything after it (Raft's InstallSnapshot rule: cutting them removed
        committed, acknowledged entries until they came again) and answers that index, not its
        own last one; a log that lacks it asks the caller to install it."""
        if m.index <= self.commit:
            self._accept(m.src, self.commit)
        elif self.rules.snapshot_keeps_log and self.log.term_at(m.index) == m.log_term:
            self.commit_to(m.index)  # the leader's snapshot holds only committed entries
            self._accept(m.src, m.index)
        else:
            wanted = Install(m.index, m.log_term, m.src, m.conf)
            self.installing = self.install_wanted = wanted

    def install_done(self, index: int, term: int) -> None:
        """The caller installed the snapshot: the log is now entry `index` (of `term`) alone,
        durable, and the state machine holds everything up to it."""
        if self.log.first_index() != index or self.log.term_at(index) != term:
            raise ValueError(f"install_done({index}, {term}) but the log starts elsewhere")
        wanted = self.installing
        if wanted is not None and wanted.membership is not None:
            self.confs = [(0, wanted.membership)]
            self._use(wanted.membership)
        self.installing = self.install_wanted = None
        self.commit = max(self.commit, index)
        self.applied = max(self.applied, index)
        self.stable = self.last_index()
        self.unsent_from = self.last_index() + 1
        self.truncated_to = None
        if self.role == Role.FOLLOWER and self.leader != NONE:
            self._accept(self.leader, index)

    def install_failed(self) -> None:
        """The caller gave up (its source went away): the next snapshot message starts over."""
        self.installing = self.install_wanted = None

    # ---- the leader's side ---------------------------------------------------------------

    def _refill_learners(self, ticks: int = 1) -> None:
        per_tick = self.cfg.learner_bytes_per_tick
        for p in self.conf.learners:
            pr = self.progress.get(p)
            if pr is not None:
                pr.budget = min(pr.budget + ticks * per_tick, LEARNER_BURST * per_tick)

    def learner_budget(self, peer: int) -> int | None:
        """FORK 7 under the learner throttle: what a snapshot install may send learner `peer`
        now, from the budget its appends draw on (<= 0: nothing until ticks refill it), so a
        move's copy is paced the same whichever way it goes. None: `peer` is not throttled
        (no throttle, or it votes). A replica that does not lead refills no budget: 0."""
        if not self.cfg.learner_bytes_per_tick or peer not in self.conf.learners:
            return None
        pr = self.progress.get(peer) if self.role == Role.LEADER else None
        return 0 if pr is None else pr.budget

    def learner_sent(self, peer: int, size: int) -> None:
        """A snapshot install sent learner `peer` `size` bytes (see learner_budget)."""
        pr = self.progress.get(peer) if self.role == Role.LEADER else None
        if pr is not None and self.learner_budget(peer) is not None:
            pr.budget -= size

    def send_append(self, peer: int) -> None:
        """Probe: one append, then wait for its answer or the next heartbeat. Replicate: send
        everything `next` has not reached, up to `max_batches` appends, so a follower that fell
        behind catches up faster than a busy leader appends. A throttled learner whose budget
        is spent gets a heartbeat at what it holds."""
        pr = self.progress[peer]
        throttled = self.cfg.learner_bytes_per_tick > 0 and peer in self.conf.learners
        for _ in range(self.cfg.max_batches):
            if pr.paused:
                return
            if throttled and pr.budget <= 0:
                held = self.log.term_at(pr.match)
                if held is not None:
                    beat = Message(MsgType.APP, self.id, peer, self.term, pr.match, held)
                    beat.commit = min(self.commit, pr.match)
                    self._send(beat)
                return
            prev = pr.next - 1
            prev_term = self.log.term_at(prev)
            if prev_term is None or pr.next < self.log.first_index():
                self.send_snapshot(peer, pr)  # compacted: only the snapshot catches it up
                return
            entries = self._append_batch(pr.next)
            if throttled:
                pr.budget -= sum(len(e.data) for e in entries)
            self._send(
                Message(
                    MsgType.APP, self.id, peer, self.term, prev, prev_term, entries, self.commit
                )
            )
            if not pr.replicate:
                pr.paused = True
                return
            pr.next += len(entries)
            if pr.next > self.last_index():
                return

    def send_snapshot(self, peer: int, pr: Progress) -> None:
        """FORK 7: the follower needs entries this log compacted. It is told the snapshot point
        (the first entry held) once per heartbeat until it answers; the data is the caller's
        to move."""
        first = self.log.first_index()
        pr.replicate = False
        pr.paused = True
        self._send(
            Message(
                MsgType.SNAP,
                self.id,
                peer,
                self.term,
                first,
                self._term(first),
                commit=self.commit,
                conf=self.membership_at(first),
            )
        )

    def _append_batch(self, lo: int) -> tuple[Entry, ...]:
        """Entries from `lo` for one append: up to max_append of them and max_append_bytes of
        data, at least one."""
        hi = min(self.last_index() + 1, lo + self.cfg.max_append)
        if lo >= hi:
            return ()  # a heartbeat: most appends of an awake group carry nothing
        entries = self.log.entries(lo, hi)
        budget = self.cfg.max_append_bytes
        for i, e in enumerate(entries):
            budget -= len(e.data)
            if budget < 0 and i > 0:
                return tuple(entries[:i])
        return tuple(entries)

    def broadcast_append(self) -> None:
        for p in self.progress:
            self.send_append(p)

    def handle_reject(self, pr: Progress, m: Message) -> None:
        """Move `next` back as far as the hint proves, ignoring stale refusals (an answer to an
        append sent before a newer one matched) so they cannot pull `next` back past it."""
        if m.index <= pr.match:
            return
        if not pr.replicate and m.index != pr.next - 1:
            return
        probe = m.reject_hint
        if self.rules.conflict_hint and m.log_term > 0:
            probe = self.find_conflict_by_term(m.reject_hint, m.log_term)
        pr.replicate = False
        pr.paused = False
        pr.next = max(pr.match + 1, min(m.index, probe + 1))
        self.send_append(m.src)

    def find_conflict_by_term(self, index: int, term: int) -> int:
        """The last index <= `index` whose term here is <= `term`: where both logs may agree."""
        index = min(index, self.last_index())
        while index > 0:
            here = self.log.term_at(index)
            if here is None or here <= term:  # None: compacted; send_append finds it behind
                return index
            index -= 1
        return index
