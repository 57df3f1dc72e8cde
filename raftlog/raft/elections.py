"""How many elections a node starts (every Raft group on it shares one budget)."""

from __future__ import annotations

from collections.abc import Callable

# Elections (pre-votes) a node may start per second, and at once. 100 and 25 were set for the
# pysyncobj engine, whose elections each cost a state file rename and fsync on the loop; on
# the core (saves batched in a thread) a kill -9 of the node leading 1,191 of 3,000
# partitions took 12.1 s to re-lead them all at 100/s, about one node's budget a second, and
# 4.8 s at 300/s, with fewer contested terms (1,410 partitions still in term 1 after the
# create and the failover, against 894).
ELECTIONS_PER_SECOND = 300.0
ELECTION_BURST = 75


class ElectionBudget:
    """How many elections a node starts: a token bucket. A thousand groups electing at once
    (a new topic, a node's return) took every election past its timeout, so each started
    over in a higher term (median term 36 after creating 1,000 partitions). An election
    refused here waits another random election timeout, and those started complete."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self._rate, self._burst, self._clock = rate, burst, clock
        self._tokens = float(burst)
        self._at = clock()
        # Set while the node is opening partitions: it stands in no partition's election
        # then (it still votes). Its loop is busy opening, and the other replicas of the
        # groups it would stand for are opening them too; standing anyway, three nodes
        # contested every new group while opening a thousand took each of them 26 s.
        self.held = False

    def take(self) -> bool:
        """May a partition's replica stand for election now?"""
        return not self.held and self.take_unheld()

    def take_unheld(self) -> bool:
        """The controller's: cluster metadata does not wait for partitions to open."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True
