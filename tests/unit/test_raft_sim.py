"""The pure Raft core (raftlog/raft/core/) under a seeded simulation, and each FORK.md rule
switched off once to show what it prevents (issue 27).

More schedules: RAFTLOG_SIM_SEEDS=N (the default is the in-suite count below).
Replay one: RAFTLOG_SIM_REPLAY=<seed> pytest tests/unit/test_raft_sim.py -k replay

The same schedules over each replica's real partition storage (issue 43: segment journal,
per-term segments, truncation, window and key-based compaction, installs, torn files, crashes
inside a Ready's writes or a cleaner's pass and restarts from disk; tests/support/sim_disk.py),
in two processes: RAFTLOG_SIM_STORAGE_SEEDS=N, replayed with `-k replay_on_storage`.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import pytest
from support.compiled import pure_only
from support.raft_sim import (
    DETECT_BOUND,
    DETECTION,
    FAULTS,
    HELD,
    STORAGE,
    Sim,
    SimConfig,
    SimFailure,
    detect,
    run_seed,
    run_spread,
    scripted,
)

from raftlog.raft import raft_state
from raftlog.raft.core.raft import Raft
from raftlog.raft.core.rules import Rules
from raftlog.raft.core.values import NONE, Entry, Message, MsgType, NotLeader, Role
from raftlog.raft.driver import wake_to_lead

SEEDS = int(os.environ.get("RAFTLOG_SIM_SEEDS", "2000"))
CHUNK = 250
# About 40 ms of CPU each on tmpfs, with crashes inside Readies and key compaction (83 ms
# before, without them: every Ready re-read every file and waited for the flusher's
# thread), in two processes: 2,000 take about 45 s on two idle cores.
STORAGE_SEEDS = int(os.environ.get("RAFTLOG_SIM_STORAGE_SEEDS", "1000"))
STORAGE_CHUNK = 100
# A few ms each: a quiet group, one fault, an election.
DETECT_SEEDS = int(os.environ.get("RAFTLOG_SIM_DETECT_SEEDS", "500"))


@pytest.mark.parametrize("chunk", range((SEEDS + CHUNK - 1) // CHUNK))
def test_seeded_schedules_keep_raft_safe_and_live(
    chunk: int, workers: ProcessPoolExecutor | None
) -> None:
    """SimFailure names the seed and how to replay it, from either worker."""
    run_spread(range(chunk * CHUNK, min(SEEDS, (chunk + 1) * CHUNK)), None, workers)


def test_replay() -> None:
    """Replays RAFTLOG_SIM_REPLAY's seed (the one a failure printed)."""
    seed = os.environ.get("RAFTLOG_SIM_REPLAY")
    if seed is None:
        pytest.skip("set RAFTLOG_SIM_REPLAY=<seed> to replay one schedule")
    run_seed(int(seed))


@pytest.mark.parametrize("chunk", range((STORAGE_SEEDS + STORAGE_CHUNK - 1) // STORAGE_CHUNK))
def test_seeded_schedules_on_the_real_storage_keep_raft_safe_and_every_byte_the_same(
    chunk: int, workers: ProcessPoolExecutor | None
) -> None:
    """Each replica on its own segment journal: besides Raft's properties, what a follower
    stored for an index is the leader's bytes for it, every replica's records hold the same
    bytes below the high watermark after each heal (compaction keeping every key's latest),
    and a restart from torn files keeps the term, the vote and every committed entry it
    held. SimFailure names the seed and how to replay it, from either worker."""
    seeds = range(chunk * STORAGE_CHUNK, min(STORAGE_SEEDS, (chunk + 1) * STORAGE_CHUNK))
    run_spread(seeds, STORAGE, workers)


def test_replay_on_storage() -> None:
    seed = os.environ.get("RAFTLOG_SIM_REPLAY")
    if seed is None:
        pytest.skip("set RAFTLOG_SIM_REPLAY=<seed> to replay one schedule on the real storage")
    run_seed(int(seed), STORAGE)


def test_the_storage_simulation_finds_an_append_sent_with_entries_a_cut_removed() -> None:
    """Issue 43's fault, found by seed 269 on the code before its fix (no crash inside a
    Ready, no key compaction): leader 3 of term 2 is held for 20 ticks, resumes, steps in one
    turn a message that makes it send its unreplicated tail and the append of term 3's leader
    that cuts that tail; the Ready of that turn carried an entry lying just past the end of
    its segment (the old code raised `ValueError: Segment(base=20, term=2, next=22, size=152)
    has no 76 bytes at 152` as the nodes did). Without the core's rule the window check
    refuses the read; with it the append is not sent. Since the lease ends a tick short of
    the election timeout (Rules.lease_inside_timers) seed 269 no longer meets it; with
    crashes inside Readies, key compaction and the window's rewrite landing off the loop,
    seed 2,663 does (one of two in 0-5,999; seed 1,094 was the only one of 0-1,999 while the
    rewrite was synchronous)."""
    with pytest.raises(SimFailure, match=r"StaleEntry: .* left the window .*seed=2663"):
        run_seed(2663, replace(STORAGE, rules=Rules(drop_stale_appends=False)))
    run_seed(2663, STORAGE)


@pure_only(raft_state, "replaces RaftState.save, which compiled callers call directly")
def test_a_crash_inside_a_ready_finds_a_term_vote_save_over_its_only_good_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """raft_state.py saves term and vote to the slot the last save did not use, so a save
    torn by a crash leaves the one before. Saved over the same slot, a replica that stops
    while writing a new term/vote is left with neither (seeds 1, 4, 8, 12, ... of the storage
    schedules)."""
    from raftlog.raft.raft_state import RaftState

    save = RaftState.save

    def same_slot(self: RaftState) -> None:
        self._seq += 1  # the next save lands on the slot this one would have left alone
        save(self)

    monkeypatch.setattr(RaftState, "save", same_slot)
    with pytest.raises(SimFailure, match=r"neither Raft state slot is intact .*seed=1"):
        run_seed(1, STORAGE)


def test_key_compaction_killed_at_any_durable_step_recovers() -> None:
    """Each replica cleans its log on its own; every pass in chaos is killed at one of its
    durable steps (a rewrite written, a directory fsync of its swap, the checkpoint), and
    the replica restarts from what the pass left: records stay the same on every replica,
    the latest of every key kept."""
    kills = 0
    for seed in range(10):
        sim = run_seed(seed, replace(STORAGE, clean=0.1, clean_crash=1.0))
        kills += sum("killed while cleaning" in line for line in sim.trace)
    assert kills >= 10


def test_the_storage_simulation_catches_a_cleaner_that_counts_records_above_its_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Compaction maps keys only below the floor (the window's first entry, the high
    watermark): a record above it may still be cut by Raft. A cleaner that let such a
    record supersede an older one lost that key's latest record once the cut came."""
    from raftlog.storage import compaction

    init = compaction.OffsetMap.__init__

    def no_floor(self: compaction.OffsetMap, floor: int) -> None:
        init(self, 2**62)

    monkeypatch.setattr(compaction.OffsetMap, "__init__", no_floor)
    # seed 396: the first since a closed connection's last frames are read before its close
    # (355 since the window's rewrite lands off the loop, 36 before that)
    with pytest.raises(SimFailure, match=r"lost offset \d+, the latest record of .*seed=396"):
        run_seed(396, STORAGE)


def test_a_vote_given_twice_in_a_term_fails_the_simulation() -> None:
    sim = scripted(3)
    sim.send(Message(MsgType.VOTE_RESP, 1, 2, 5))
    sim.send(Message(MsgType.VOTE_RESP, 1, 2, 5))  # the same grant again: a duplicate
    with pytest.raises(SimFailure, match="replica 1 voted for 2 and 3 in term 5"):
        sim.send(Message(MsgType.VOTE_RESP, 1, 3, 5))


def test_a_failure_names_its_seed_and_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = Sim(7)
    with pytest.raises(SimFailure, match=r"seed=7; replay: RAFTLOG_SIM_REPLAY=7"):
        sim.fail("example")
    held = Sim(9, HELD)
    with pytest.raises(SimFailure, match=r"seed=9; replay: support.raft_sim.detect\(9, HELD,"):
        held.fail("example")

    def broken(self: Raft, *args: object, **kwargs: object) -> None:
        raise IndexError("a bug in the core")

    # step: the simulation calls it itself (tick it calls through the driver's tick_group, which
    # the compiled build calls natively, past a patch)
    monkeypatch.setattr(Raft, "step", broken)
    with pytest.raises(SimFailure, match=r"IndexError: a bug in the core .*seed=8; replay"):
        run_seed(8)


def _first_failure(cfg: SimConfig, seeds: range, safety_only: bool) -> str | None:
    for seed in seeds:
        try:
            run_seed(seed, cfg)
        except SimFailure as e:
            if not safety_only or "within" not in str(e).splitlines()[0]:
                return str(e)
    return None


def _elect(sim: Sim, i: int) -> None:
    """Make replica i leader now: a transfer-style election (skips PreVote and stickiness)."""
    sim.act(i, lambda c: c.campaign(pre=False, transfer=True))
    sim.hops()
    assert sim.core(i).role == Role.LEADER


def _propose(sim: Sim, i: int, data: bytes) -> int:
    out: list[object] = []
    sim.act(i, lambda c: out.append(c.propose(data)))
    assert isinstance(out[0], int)
    return out[0]


# ---- Raft 5.4.2: a leader counts replicas only for an entry of its own term ------------------


def _figure_8(rules: Rules) -> Sim:
    """Raft's figure 8 on five replicas, hop by hop."""
    sim = scripted(5, rules, max_append=1)
    _elect(sim, 1)  # term 1, its empty entry at 1 committed everywhere
    sim.cut |= {(1, 3), (1, 4), (1, 5)}
    x = _propose(sim, 1, b"x")  # (2, term 1) on 1 and 2 only
    sim.hops()
    assert [e.data for e in sim.core(2).log.entries(x, x + 1)] == [b"x"]
    sim.crash(1)
    sim.cut.clear()
    # 5 stands (term 2) with 3 and 4; its own entry (2, term 2) reaches nobody.
    sim.act(5, lambda c: c.campaign(pre=False, transfer=True))
    sim.hop()  # the vote requests
    sim.isolate(5, inbound=False)
    sim.hop()  # the grants: 5 leads, its appends are cut
    assert sim.core(5).role == Role.LEADER and sim.core(5).term == 2
    sim.crash(5)
    sim.cut.clear()
    # 1 returns, leads term 3 with 2, 3, 4 and copies x to 3 only (not its own empty entry).
    sim.start(1)
    sim.act(1, lambda c: c.campaign(pre=False, transfer=True))
    sim.hops()
    if sim.core(1).role != Role.LEADER:  # its first try was in 5's term 2: once more
        sim.act(1, lambda c: c.campaign(pre=False, transfer=True))
        sim.hop()
    sim.cut |= {(1, 4), (1, 5)}
    sim.hop()  # grants arrive; appends go to 2 and 3
    sim.hop()  # 3 refuses (it lacks x), 2 takes the empty entry
    sim.hop()  # 1 sends x (alone: max_append=1) to 3
    sim.hop()  # 3 takes x
    sim.cut |= {(1, 3)}
    sim.hop()  # 3's ack: 1, 2, 3 hold x, an entry of term 1
    sim.crash(1)
    sim.cut.clear()
    # 5 returns and can lead (its last term 2 beats x's term 1) with 3 and 4: x is overwritten.
    sim.start(5)
    for _ in range(3):
        if sim.core(5).role != Role.LEADER:
            sim.act(5, lambda c: c.campaign(pre=False, transfer=True))
            sim.hops()
    sim.start(1)
    sim.hops()
    sim.ticks(40)
    return sim


def test_leader_commits_only_its_own_terms_entries() -> None:
    sim = _figure_8(Rules())
    assert sim.committed[2].term == 2  # x was never committed; 5's entry was


def test_figure_8_commits_then_loses_an_entry_without_the_own_term_rule() -> None:
    with pytest.raises(SimFailure, match="committed entry 2 changed|lacks committed entry"):
        _figure_8(Rules(leader_commit_own_term=False))


# ---- FORK 1: the follower commit rule ----------------------------------------------------------


def _follower(log_terms: list[int], term: int, rules: Rules | None = None) -> Raft:
    """Replica 3 of {1, 2, 3} holding entries of these terms, its hard state at `term`."""
    from random import Random

    from raftlog.raft.core.log import MemoryLog
    from raftlog.raft.core.rules import Config
    from raftlog.raft.core.values import HardState

    entries = [Entry(t, i + 1, f"e{i + 1}".encode()) for i, t in enumerate(log_terms)]
    return Raft(
        Config(id=3, peers=(1, 2, 3), rules=rules or Rules()),
        MemoryLog(entries),
        HardState(term),
        Random(0),
    )


def _app(term: int, prev: int, prev_term: int, entries: list[Entry], commit: int) -> Message:
    return Message(MsgType.APP, 2, 3, term, prev, prev_term, tuple(entries), commit)


def test_follower_commits_only_what_the_append_showed_to_match() -> None:
    """3 holds a deposed leader's tail (entry 3 of term 1); leader 2 of term 2 has its own entry
    3 (term 2), committed, and sends entry 2 only. 3 may commit up to 2, never its own 3."""
    msg = _app(2, 1, 1, [Entry(1, 2, b"e2")], commit=3)
    on = _follower([1, 1, 1], 1)
    on.step(msg)
    assert on.commit == 2
    off = _follower([1, 1, 1], 1, Rules(follower_commit_rule=False))
    off.step(msg)
    assert off.commit == 3  # the divergent entry counts as committed: applied, acked, then cut
    off.step(_app(2, 2, 1, [Entry(2, 3, b"leader's")], commit=3))
    assert off.log.term_at(3) == 1  # it cannot even take the leader's entry 3 now


# ---- FORK 2: only conflicting entries are cut ------------------------------------------------------


def test_a_late_append_does_not_cut_acknowledged_entries() -> None:
    late = _app(1, 1, 1, [Entry(1, 2, b"e2")], commit=1)
    on = _follower([1, 1, 1], 1)
    on.step(late)
    assert on.last_index() == 3
    off = _follower([1, 1, 1], 1, Rules(keep_matching_entries=False))
    off.step(late)
    assert off.last_index() == 2  # entry 3, already acknowledged to the leader, is gone


def test_the_simulation_catches_cutting_after_every_append() -> None:
    cfg = SimConfig(rules=Rules(keep_matching_entries=False))
    failure = _first_failure(cfg, range(400), safety_only=True)
    assert failure is not None and "seed=" in failure, "no schedule broke safety"


def test_the_simulation_catches_messages_sent_before_their_ready_is_durable() -> None:
    """The caller's one rule: a replica that answers before it syncs, then crashes, forgets a
    vote or an entry it acknowledged; a leader then lacks a committed entry."""
    cfg = SimConfig(send_before_sync=True, sync=0.3)  # longer windows before a sync
    failure = _first_failure(cfg, range(400), safety_only=True)
    assert failure is not None and "seed=" in failure, "no schedule broke safety"


# ---- FORK 7: a snapshot confirms its last entry only ------------------------------------------------


def test_a_snapshot_the_log_already_holds_keeps_what_follows_it() -> None:
    """Follower 3 holds entries 1..5 (acknowledged) but knows commit 0; leader 2 compacted to 3
    and sends that point. 3 keeps 4 and 5, commits 3 and answers 3, not its own last index."""
    snap = Message(MsgType.SNAP, 2, 3, 1, index=3, log_term=1, commit=5)
    on = _follower([1, 1, 1, 1, 1], 1)
    on.step(snap)
    rd = on.ready()
    assert rd.install is None and on.last_index() == 5 and on.commit == 3
    assert [(m.type, m.index) for m in rd.messages] == [(MsgType.APP_RESP, 3)]
    off = _follower([1, 1, 1, 1, 1], 1, Rules(snapshot_keeps_log=False))
    off.step(snap)
    rd = off.ready()
    assert rd.install is not None and rd.messages == ()  # installed: 4 and 5 would be gone


def test_a_follower_behind_the_compacted_log_installs_the_snapshot_point() -> None:
    sim = scripted(3)
    _elect(sim, 1)
    sim.isolate(3)
    for n in range(8):
        _propose(sim, 1, f"v{n}".encode())
    sim.hops()
    sim.compact(1)
    first = sim.core(1).log.first_index()
    assert first > 2
    sim.cut.clear()
    sim.ticks(30)
    assert sim.core(3).log.first_index() == first  # the install replaced its log
    assert [e.data for e in sim.replicas[3].applied] == [e.data for e in sim.replicas[1].applied]
    assert sim.core(3).commit == sim.core(1).commit


def test_the_simulation_catches_a_snapshot_that_replaces_a_log_holding_it() -> None:
    """Seed 137 of the schedules without stalls or sparse proposals: follower 3 installed snapshot point 21
    although its log held it and the entry after it, which it had acknowledged; that entry was
    gone, and after the restarts the next leader lacked committed entry 22. (Seed 949 did it
    before followers learnt commits only from appends and heartbeats. The schedule is rare:
    the only one of seeds 0-1,500, and none of them with stalls.)"""
    cfg = SimConfig(rules=Rules(snapshot_keeps_log=False), stall=0.0, sparse=0.0)
    failure = _first_failure(cfg, range(100, 200), safety_only=True)
    assert failure is not None and "seed=" in failure, "no schedule broke safety"


# ---- FORK 3: PreVote, leader stickiness, and a transfer skipping it ------------------------------


def _steady(rules: Rules) -> Sim:
    sim = scripted(3, rules)
    _elect(sim, 1)
    sim.ticks(5)
    assert sim.leader() == 1 and sim.core(1).term == 1
    return sim


@pytest.mark.parametrize("pre_vote", [True, False])
def test_an_isolated_replica_does_not_depose_the_leader_when_it_returns(pre_vote: bool) -> None:
    sim = _steady(Rules(pre_vote=pre_vote))
    sim.isolate(3)
    sim.ticks(100)
    sim.cut.clear()
    sim.ticks(100)
    if pre_vote:
        assert sim.core(3).term == 1 and sim.leader() == 1 and sim.core(1).term == 1
    else:
        assert sim.core(3).term > 1 and sim.core(sim.leader()).term > 1  # 1 was deposed


@pytest.mark.parametrize("sticky", [True, False])
def test_a_replica_cut_from_the_leader_alone_cannot_win_the_others(sticky: bool) -> None:
    sim = _steady(Rules(leader_stickiness=sticky))
    sim.cut |= {(1, 3), (3, 1)}
    sim.ticks(100)
    terms = {sim.core(i).term for i in sim.ids}
    if sticky:
        assert terms == {1} and sim.leader() == 1
    else:
        assert max(terms) > 1  # 3 won 2's pre-vote and vote: leadership flaps while 1 is fine


@pytest.mark.parametrize("skips_lease", [True, False])
def test_leadership_transfer(skips_lease: bool) -> None:
    sim = _steady(Rules(transfer_skips_lease=skips_lease))
    sim.act(1, lambda c: c.transfer_leadership(2))
    sim.hops()
    if skips_lease:
        assert sim.leader() == 2 and sim.core(2).term == 2
    else:
        assert sim.leader() != 2  # 3 (and 1) heard a leader lately and ignore 2's votes


# ---- FORK 4: the stale-term answer ------------------------------------------------------------------


@pytest.mark.parametrize("answer", [True, False])
def test_a_replica_whose_term_ran_ahead_rejoins(answer: bool) -> None:
    sim = _steady(Rules(stale_term_answer=answer))
    sim.isolate(3, inbound=False)
    sim.act(3, lambda c: c.campaign(pre=False))  # term 2; its vote requests are lost
    sim.cut.clear()
    for _ in range(10):
        sim.ticks(10)
        leader = sim.leader()
        if leader:
            sim.act(leader, lambda c: c.propose(b"p"))
    sim.ticks(30)
    commits = {i: sim.core(i).commit for i in sim.ids}
    if answer:
        assert len(set(commits.values())) == 1, commits
    else:
        assert commits[3] < commits[sim.leader()], commits  # 3 ignores the leader forever


# ---- FORK 5: CheckQuorum ------------------------------------------------------------------------------


@pytest.mark.parametrize("check", [True, False])
def test_a_leader_cut_off_from_its_majority_steps_down(check: bool) -> None:
    sim = _steady(Rules(check_quorum=check))
    sim.isolate(1)
    sim.ticks(60)
    other = max(sim.core(2).term, sim.core(3).term)
    assert other > 1  # 2 and 3 elected a leader of their own
    if check:
        assert sim.core(1).role != Role.LEADER
        assert isinstance(sim.core(1).propose(b"p"), NotLeader)
    else:
        assert sim.core(1).role == Role.LEADER  # two leaders; 1 takes proposals never committed
        assert isinstance(sim.core(1).propose(b"p"), int)


@pytest.mark.parametrize("quiet", [False, True])
def test_a_cut_off_leader_stops_before_another_can_be_elected(quiet: bool) -> None:
    """The lease: clients that can still reach a cut-off leader must not have it take their
    writes (and answer them "not leader" later) while the others already elected a new one."""
    for seed in range(30):
        sim = scripted(3, quiesce_ticks=4 if quiet else 0, seed=seed)
        _elect(sim, 1)
        sim.ticks(10 + seed % 7)  # cut at any point of the heartbeat and lease rounds
        assert sim.core(1).quiet == quiet
        sim.isolate(1)
        stopped = elected = None
        for t in range(100):
            sim.ticks(1)
            if stopped is None and sim.core(1).role != Role.LEADER:
                stopped = t
            if elected is None and Role.LEADER in (sim.core(2).role, sim.core(3).role):
                elected = t
        assert stopped is not None and elected is not None, seed
        assert stopped <= elected, (seed, stopped, elected)


def test_a_quiet_group_whose_leader_is_lost_is_led_again_within_the_issues_bound() -> None:
    """Issue 45: a quiet group runs no timers; its nodes' pings (the mesh's keepalive,
    raft/keepalive.py, in the simulation as the mesh runs it) are all that tells its followers
    their leader's node was cut off or lost with its host, at any point of the ping rounds
    (a killed process's connections close). In half of them clients send writes to the old
    leader around the fault. Every schedule elects another leader within 5 s, and a cut-off
    leader has stopped by then and took no write meanwhile (FORK 5).
    RAFTLOG_SIM_DETECT_SEEDS=N runs more; detect(seed, lease=True) replays one."""
    faults = {detect(seed, lease=True)[0] for seed in range(DETECT_SEEDS)}
    assert faults == set(FAULTS)


def test_the_detection_schedules_catch_a_keepalive_that_never_reports_a_silent_peer() -> None:
    """Only a closed connection wakes the quiet group: a leader killed is replaced, one cut
    off or lost with its host (no close arrives) never is."""
    silence_off = replace(DETECTION, silence=False)
    with pytest.raises(SimFailure, match=rf"^isolate 5: nobody else led within {DETECT_BOUND} "):
        detect(11, silence_off)
    assert detect(11)[0] == "isolate"
    assert detect(0, silence_off)[0] == "kill"


def test_a_follower_woken_by_its_leaders_silence_counts_it_two_keepalive_rounds_short() -> None:
    """The leader may have heard its followers a round after they last heard it, and its
    keepalive rounds run at a phase of their own: it may find them silent up to two rounds
    after they found it so, and leads on, quiet, till then. Followers that counted the
    whole silence stood at once (it is as long as an election timeout) and elected another
    first (driver.peer_changed's leader_lag)."""
    quiet = replace(DETECTION, clients=0.0)  # no write wakes the group
    with pytest.raises(
        SimFailure, match=r"^3, cut off, still leads term 1; 1 was elected .*seed=22;"
    ):
        detect(22, replace(quiet, leader_lag=False), lease=True)
    assert detect(22, quiet, lease=True)[0] == "isolate"


def test_the_detection_schedules_catch_pings_too_rare_for_a_cut_off_leaders_lease() -> None:
    """Pings once a second (silence after two): the followers' keepalive rounds find the
    leader silent up to a second before the leader's own round finds them so, they elect
    another at once (the silence is longer than their election timeout), and the cut-off
    leader, quiet, still leads (and takes writes that go nowhere, FORK 5)."""
    quiet = replace(DETECTION, clients=0.0)  # no write wakes the group
    with pytest.raises(
        SimFailure, match=r"^5, cut off, still leads term 1; 2 was elected .*seed=61;"
    ):
        detect(61, replace(quiet, ping_interval=1.0), lease=True)
    assert detect(61, quiet, lease=True)[0] == "isolate"


def test_a_leader_goes_quiet_only_once_a_majority_of_its_voters_did() -> None:
    """A client's write woke the group just before its leader was cut off; the leader's
    quiesce heartbeats went out after the cut and were lost. Quiet on its own say-so, the
    leader stopped checking its lease while its followers, awake, elected another after a
    plain election timeout, and it still led, quiet, till its keepalive round woke it (seed
    599: written to at 24, cut at 28, another elected at 38; seed 59 until a leader woken
    with its lease spent stepped down at once, Raft.check_woken_lease). Going quiet only once
    a majority answered the quiesce heartbeat quiet, it keeps ticking, and its lease ends
    first (Raft.quiet_acked)."""
    with pytest.raises(
        SimFailure, match=r"^2, cut off, still leads term 1; 3 was elected .*seed=599;"
    ):
        detect(599, replace(DETECTION, rules=Rules(quiet_after_majority=False)), lease=True)
    assert detect(599, lease=True)[0] == "isolate"


def test_a_write_wakes_a_quiet_leader_with_the_lease_its_followers_last_words_gave_it() -> None:
    """A client's write reaches a cut-off quiet leader before its keepalive round has found
    its followers silent. Woken with a fresh lease (Raft.propose's own wake), it led for
    another election timeout while they, woken by its silence, elected another (seed 2780:
    cut at tick 22, its followers woken at 28-32, written to at 31, another elected at 39);
    woken by driver.wake_to_lead, its lease runs from when their nodes were last heard, and
    ends first."""
    with pytest.raises(
        SimFailure, match=r"^2, cut off, still leads term 1; 3 was elected .*seed=2780;"
    ):
        detect(2780, replace(DETECTION, wake_to_lead=False), lease=True)
    assert detect(2780, lease=True)[0] == "isolate"


def test_a_leaders_lease_ends_before_a_followers_timer_can_on_a_lan() -> None:
    """A client's write wakes the group; its leader is cut off a few ticks later, a tick after
    its followers last heard its heartbeat and a moment after it last heard their nodes'
    pings. A follower's timer counts ticks (the first after that heartbeat whole) and its
    election takes milliseconds: with a lease of a whole timeout from the pings, the old
    leader still led when another was elected (seed 19680: cut at tick 24, another elected at
    33; 2 of 40,000 schedules). A tick short, and from a heartbeat before the pings
    (Rules.lease_inside_timers), it has stopped first. Lockstep, each message read a tick
    later, the election took ticks and hid it (SimConfig.latency)."""
    loose = replace(DETECTION, rules=Rules(lease_inside_timers=False))
    with pytest.raises(
        SimFailure, match=r"^3, cut off, still leads term 1; 2 was elected .*seed=19680;"
    ):
        detect(19680, loose, lease=True)
    assert detect(19680, lease=True)[0] == "isolate"


def test_a_quiet_group_whose_leader_is_held_through_the_fault_is_led_again_in_time() -> None:
    """The detection schedules with the old leader's node held (SIGSTOP, a long turn) for up
    to two election timeouts through the fault, its group quiet then or, in half of them,
    woken by a client's write just before: what its peers sent and its clients' writes
    wait; when it runs again it reads the frames first, then answers the writes, then its
    timers run (uvloop's order). Every schedule elects another within 5 s, and a cut-off
    leader has stopped by the moment another is elected and took no write meanwhile, but
    for Raft.resume's grace after the hold (FORK 5's allowance, half an election timeout).
    RAFTLOG_SIM_DETECT_SEEDS=N runs more; detect(seed, HELD, lease=True) replays one."""
    faults = {detect(seed, HELD, lease=True)[0] for seed in range(DETECT_SEEDS)}
    assert faults == set(FAULTS)


def test_what_a_held_node_reads_right_after_its_hold_counts_from_the_holds_start() -> None:
    """A quiet leader's node is held; its followers' pings wait in its socket, then it is cut
    off. Run again, it read them as heard that instant and led, quiet, a lease on from its
    reading while its followers, whose timers on it had run since the hold began, elected
    another (seed 36: held at 23 for 10 ticks, its followers woken at 31, cut at 32,
    written to at 33, another elected at 41; seed 11 until half the held schedules had a
    write wake their leader first; 90 of the first 1,000 such schedules, 58 past
    Raft.resume's grace). Counted from the hold's start (keepalive.heard_at, Mesh.silences),
    its lease is spent: the next write or wake stops it."""
    with pytest.raises(
        SimFailure, match=r"^3, cut off, still leads term 1; 4 was elected .*seed=36;"
    ):
        detect(36, replace(HELD, hold_ages_heard=False), lease=True)
    assert detect(36, HELD, lease=True)[0] == "isolate"


def test_answers_a_held_leader_reads_right_after_its_hold_count_from_the_holds_start() -> None:
    """An awake leader (a client's write woke it) is held 0.3 s, under what the keepalive's
    late rounds find, and cut off meanwhile. Run again, it stepped its followers' answers to
    what it sent before the hold, which had waited in its socket, as heard that tick, and
    renewed its lease from them: it led 7 ticks past its resume, past Raft.resume's grace,
    while its followers, whose timers on it ran from before the hold, elected another
    (seed 705: written to at 24, held at 26 for 6 ticks, cut at 28, another elected at 39;
    39 of the first 3,000 held schedules). Raft.age_answers (Rules.held_answers_aged): what
    it steps before its second tick after the hold counts as heard when the hold began."""
    with pytest.raises(
        SimFailure, match=r"^3, cut off, still leads term 1; 2 was elected .*seed=705;"
    ):
        detect(705, replace(HELD, rules=Rules(held_answers_aged=False)), lease=True)
    assert detect(705, HELD, lease=True)[0] == "isolate"


def test_a_late_tick_tells_the_mesh_its_node_was_held() -> None:
    """A leader a write woke is held 0.25 s and cut off meanwhile: too short for its
    keepalive's late round to find (a round over half a second late), so the pings that
    waited through the hold counted as heard when read, and the lease its node's last words
    renew (FORK 10) ran a tick past another's election (seed 258: written to and held at
    22 for 5 ticks, cut at 23, another elected at 33.1, it stopped at 33.7; 16 of the first
    3,000 held schedules, none when checked at the end of each tick only). The driver's
    first tick after the hold comes a tick or more late: it tells the mesh (Driver.tick,
    Mesh.loop_held), and what is read right after counts from the hold's start."""
    with pytest.raises(
        SimFailure, match=r"^2, cut off, still leads term 1; 3 was elected .*seed=258;"
    ):
        detect(258, replace(HELD, tick_holds=False), lease=True)
    assert detect(258, HELD, lease=True)[0] == "isolate"


@pytest.mark.parametrize("held", [6, 12])
def test_a_healthy_leader_held_late_in_its_leases_cycle_leads_on(held: int) -> None:
    """A leader renews its lease only when it runs out (`check_quorum`), so when its node is
    held the lease it last renewed may be 8 ticks old though its followers answered a tick
    ago. Its grace after the hold counts from when they last answered (Raft.age_answers):
    the answers that waited through the hold, and those to its first heartbeat after it,
    count from the hold's start, and it must last till the next heartbeat's. Counted from
    that old renewal, the grace was a tick or two, and a leader whose followers all answered
    stepped down after a hold of 0.3 s."""
    sim = scripted(3, quiesce_ticks=0, seed=1)
    _elect(sim, 1)
    core = sim.core(1)
    lease = core.lease_ticks()
    while not (
        core.ticks - core.lease_from >= lease - 2
        and core.heartbeat_elapsed + 1 >= core.cfg.heartbeat_tick
    ):
        sim.act(1, lambda c: c.tick())
        sim.hops()
    sim.act(1, lambda c: c.tick())  # a heartbeat
    sim.hop()  # its followers answer; the answers wait through the hold
    assert core.ticks - core.lease_from == lease - 1
    sim.act(1, lambda c: c.resume(held))
    for _ in range(2 * core.cfg.election_tick):
        sim.hops()
        sim.act(1, lambda c: c.tick())
        assert core.role == Role.LEADER


def test_a_leader_woken_with_its_lease_spent_steps_down_at_once() -> None:
    """A quiet leader held and cut off during its hold is woken by its keepalive (its
    followers found silent) with its lease long spent; left to step down at its next tick,
    it still led when, that same tick, a follower was elected (seed 58: held at 27 for 11
    ticks, cut at 37, woken at 48, another elected at 48). Raft.check_woken_lease: at once."""
    with pytest.raises(
        SimFailure, match=r"^3, cut off, still leads term 1; 2 was elected .*seed=58;"
    ):
        detect(58, replace(HELD, rules=Rules(woken_lease_checked=False)), lease=True)
    assert detect(58, HELD, lease=True)[0] == "isolate"


def test_a_peers_message_wakes_a_quiet_leader_with_the_lease_its_silences_give() -> None:
    """A quiet leader's node is held long enough for its followers to stand; their pre-votes
    wait in its socket. Run again, the first it read woke it (Raft.step's own wake) with a
    lease from then, and the write that waited with them found it awake: it led past the
    hold's grace while another was elected (seed 3501: held at 23 for 20 ticks, cut at 42,
    written to at 43, another elected at 49). Woken by the driver first (Driver.receive,
    wake_to_lead), its lease runs from its followers' silences, charged the hold."""
    with pytest.raises(
        SimFailure, match=r"^2, cut off, still leads term 1; 3 was elected .*seed=3501;"
    ):
        detect(3501, replace(HELD, wake_to_step=False), lease=True)
    assert detect(3501, HELD, lease=True)[0] == "isolate"


@pytest.mark.parametrize("checked", [True, False])
def test_a_write_to_a_quiet_leader_whose_followers_are_long_silent_is_refused(
    checked: bool,
) -> None:
    """driver.wake_to_lead with Rules.woken_lease_checked: woken to find its followers' nodes
    silent for longer than its lease, the leader steps down before the write (NotLeader: not
    written, the client asks elsewhere) instead of taking it and stepping down a tick later."""
    sim = scripted(3, Rules(woken_lease_checked=checked), seed=1)
    _elect(sim, 1)
    sim.ticks(20)
    core = sim.core(1)
    assert core.quiet
    wake_to_lead(core, {2: 12, 3: 12}, 2 * core.cfg.election_tick)
    result = core.propose(b"x")
    if checked:
        assert isinstance(result, NotLeader) and core.role == Role.FOLLOWER
    else:
        assert isinstance(result, int) and core.role == Role.LEADER


@pytest.mark.parametrize("since", [0, 3])
def test_a_quiet_leader_woken_after_its_hold_gets_raft_resumes_grace_from_its_end(
    since: int,
) -> None:
    """Its node was held 12 ticks (longer than its lease), its followers heard only in the
    reading right after it (counted from the hold's start), and a write wakes it `since`
    ticks after the hold: it is charged the hold as a leader awake through it is
    (Raft.resume), takes the write, and keeps what is left of half an election timeout from
    the hold's end to hear a majority; unanswered, it stops after that grace."""
    sim = scripted(3, seed=1)
    _elect(sim, 1)
    sim.ticks(20)
    core = sim.core(1)
    election = core.cfg.election_tick
    silent = 12 + since
    wake_to_lead(core, {2: silent, 3: silent}, 2 * election, (12, since))
    assert isinstance(core.propose(b"x"), int)
    ticks = 0
    while core.role == Role.LEADER:
        core.tick()
        ticks += 1
    assert ticks == election // 2 - since


def test_a_follower_never_heard_counts_as_never_heard_however_young_the_leader() -> None:
    """FORK 5: a leader woken to find its followers silent for a whole election timeout stops
    at its next check. A follower not heard since the wake counted as heard at tick 0: a
    leader that went quiet a few ticks into its term led on until its own tick count reached
    the timeout, while the others, whose timers ran from the same silence, elected another
    (the simulation's lease test, once groups went quiet sooner)."""
    sim = scripted(3, seed=1)
    _elect(sim, 1)
    core = sim.core(1)
    assert core.ticks < core.cfg.election_tick
    sim.act(1, lambda c: c.quiesce())
    sim.hops()  # the followers go quiet on it, and say so
    assert core.quiet
    core.wake(core.cfg.election_tick)  # the driver: no follower's node heard for that long
    assert not core.check_quorum()


# ---- FORK 9: quiet groups ------------------------------------------------------------------------


@pytest.mark.parametrize("quiesce", [True, False])
def test_an_idle_group_goes_quiet_and_a_proposal_wakes_it(quiesce: bool) -> None:
    sim = scripted(3, quiesce_ticks=4 if quiesce else 0)
    _elect(sim, 1)
    sim.ticks(20)
    before = len(sim.sent)
    sim.ticks(100)
    if not quiesce:
        assert len(sim.sent) - before >= 100  # a heartbeat and its answers every 2 ticks
        return
    assert all(sim.core(i).quiet for i in sim.ids)
    assert len(sim.sent) == before  # nothing at all: no timers, no heartbeats
    index = _propose(sim, 1, b"wakes")
    sim.ticks(20)
    assert all(sim.replicas[i].applied[-1].index == index for i in sim.ids)
    assert all(sim.core(i).quiet for i in sim.ids) and sim.core(1).term == 1


@pytest.mark.parametrize("watch", [True, False])
def test_a_quiet_group_whose_leader_dies_elects_another(watch: bool) -> None:
    """The followers of a quiet group run no election timer: the driver's node-level
    liveness (pings) wakes them when the leader's node falls silent."""
    sim = scripted(3, watch=watch)
    _elect(sim, 1)
    sim.ticks(20)
    assert all(sim.core(i).quiet for i in sim.ids)
    sim.crash(1)
    sim.ticks(80)
    if watch:
        assert sim.leader() in (2, 3) and sim.core(sim.leader()).term == 2
    else:
        assert sim.leader() == NONE and sim.core(2).quiet and sim.core(3).quiet


@pytest.mark.parametrize("again", [True, False])
def test_a_leader_that_stepped_down_before_its_quiet_followers_woke_is_elected_again(
    again: bool,
) -> None:
    """The leader of a quiet group steps down (CheckQuorum after a stall) while its followers'
    nodes keep hearing its node: nothing wakes them, and its pre-votes are all that comes.
    They pass stickiness (FORK 3); refused, the group had no leader for good (seed 4263)."""
    sim = scripted(3, Rules(leader_may_stand_again=again))
    _elect(sim, 1)
    sim.ticks(20)
    assert all(sim.core(i).quiet for i in sim.ids)
    sim.act(1, lambda c: c.become_follower(c.term, NONE))
    sim.ticks(80)
    if again:
        assert sim.leader() == 1 and sim.core(1).term == 2
    else:
        assert sim.leader() == NONE and sim.core(2).quiet and sim.core(3).quiet


def test_a_quiet_follower_cut_from_its_leader_alone_does_not_depose_it() -> None:
    """Woken by its leader's silence, the cut follower stands; the other follower, quiet
    with its leader alive, refuses it without waking (a woken follower's timer would run
    while its leader stays quiet, and it would stand too)."""
    sim = scripted(3)
    _elect(sim, 1)
    sim.ticks(20)
    sim.cut |= {(1, 3), (3, 1)}
    sim.ticks(100)
    assert {sim.core(i).term for i in sim.ids} == {1} and sim.leader() == 1
    sim.cut.clear()
    sim.ticks(40)
    assert sim.core(3).leader == 1 and all(sim.core(i).quiet for i in sim.ids)


# ---- FORK 6: no forwarding ------------------------------------------------------------------------------


@pytest.mark.parametrize("refuse", [True, False])
def test_a_follower_refuses_proposals(refuse: bool) -> None:
    sim = _steady(Rules(no_forwarding=refuse))
    out: list[object] = []
    sim.act(2, lambda c: out.append(c.propose(b"batch")))
    sim.hops()
    if refuse:
        assert out == [NotLeader(1)]
    # The client did not get an index: it retries at the leader.
    _propose(sim, 1, b"batch")
    sim.hops()
    sim.ticks(5)
    copies = sum(1 for e in sim.committed.values() if e.data == b"batch")
    assert copies == (1 if refuse else 2)


# ---- FORK 8: a refused append names (and cuts) what it proves divergent ----------------------


@pytest.mark.parametrize("hint", [True, False])
def test_a_divergent_tail_is_replaced_in_one_round_trip(hint: bool) -> None:
    sim = scripted(3, Rules(conflict_hint=hint))
    _elect(sim, 1)
    sim.cut |= {(1, 2), (1, 3)}
    for n in range(30):
        _propose(sim, 1, f"old{n}".encode())  # 1's tail of term 1 reaches nobody
    sim.cut = {(1, 2), (1, 3), (2, 1), (3, 1)}
    _elect(sim, 2)  # term 2 with 3
    for n in range(30):
        _propose(sim, 2, f"new{n}".encode())
    sim.hops()
    _elect(sim, 3)  # term 3: 3's first append to 1 names its last entry, far into 1's tail
    sim.cut.clear()
    sim.sent.clear()
    sim.ticks(80)
    assert sim.core(1).log.entries(1, 100) == sim.core(3).log.entries(1, 100)
    refusals = sum(1 for m in sim.sent if m.src == 1 and m.type == MsgType.APP_RESP and m.reject)
    if hint:
        assert refusals <= 2
    else:
        assert refusals >= 25  # one round trip per entry


def test_a_refusal_cuts_only_entries_of_terms_above_the_leaders_prev_term() -> None:
    f = _follower([1, 1, 2, 3, 3], 3)
    f.step(_app(4, 4, 4, [], commit=1))  # the leader has a term-4 entry at 4
    assert [f.log.term_at(i) for i in range(1, 6)] == [1, 1, 2, None, None]
    (resp,) = f.outbox
    assert resp.reject and (resp.reject_hint, resp.log_term) == (3, 2)
