"""The pure Raft core (raftlog/raft/core.py) under a seeded simulation, and each FORK.md rule
switched off once to show what it prevents (issue 27).

More schedules: RAFTLOG_SIM_SEEDS=N (the default is the in-suite count below).
Replay one: RAFTLOG_SIM_REPLAY=<seed> pytest tests/unit/test_raft_sim.py -k replay
"""

from __future__ import annotations

import os
import re

import pytest
from support.raft_sim import Sim, SimConfig, SimFailure, run_seed, scripted

from raftlog.raft.core import NONE, Entry, Message, MsgType, NotLeader, Raft, Role, Rules

SEEDS = int(os.environ.get("RAFTLOG_SIM_SEEDS", "2000"))
CHUNK = 250


@pytest.mark.parametrize("chunk", range((SEEDS + CHUNK - 1) // CHUNK))
def test_seeded_schedules_keep_raft_safe_and_live(chunk: int) -> None:
    for seed in range(chunk * CHUNK, min(SEEDS, (chunk + 1) * CHUNK)):
        run_seed(seed)  # SimFailure names the seed and how to replay it


def test_replay() -> None:
    """Replays RAFTLOG_SIM_REPLAY's seed (the one a failure printed)."""
    seed = os.environ.get("RAFTLOG_SIM_REPLAY")
    if seed is None:
        pytest.skip("set RAFTLOG_SIM_REPLAY=<seed> to replay one schedule")
    run_seed(int(seed))


def test_a_failure_names_its_seed_and_replay() -> None:
    sim = Sim(7)
    with pytest.raises(SimFailure, match=r"seed=7; replay: RAFTLOG_SIM_REPLAY=7"):
        sim.fail("example")


def _first_failure(rules: Rules, seeds: range, safety_only: bool) -> str | None:
    for seed in seeds:
        try:
            run_seed(seed, SimConfig(rules=rules))
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
