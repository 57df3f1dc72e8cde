"""The faults: what each kind does to the network or the processes, and how it heals.

Network faults are iptables rules in the target nodes' own namespaces, matched on the peers'
addresses (so "the peers cannot reach it" leaves the clients, which come from the bridge
address, alone) or on everything but loopback (clients cut off too); slow links are tbf on
both ends of a node's veth. Healing is always total: every namespace's rules flushed, every
qdisc removed, every paused node continued, every killed node restarted. A cycle that fails
half-way therefore leaves nothing behind for the next one.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from .netns import TBF_ARGS, Net
from .nodes import Nodes

LOSS = 0.25  # drop probability of the lossy fault
NETEM_DELAY = ["netem", "delay", "150ms", "50ms"]

KINDS = [
    "isolate_leader",  # the leader and its peers cannot talk, either way; clients reach it
    "isolate_leader_full",  # nobody, clients included, reaches the leader
    "split",  # one node alone against the other two (alternately the leader and a follower)
    "bridge",  # two nodes cannot talk to each other; the third sees both
    "one_way_out",  # the leader's packets to its peers are dropped; theirs arrive
    "one_way_in",  # the peers' packets to the leader are dropped; its own arrive
    "pause_leader",  # SIGSTOP the leader, later SIGCONT
    "kill_one",  # kill -9 the leader, later restart it
    "kill_all",  # kill -9 every node, later restart them all
    "lossy",  # random drop of peer traffic, alternately on the leader and on every node
    "slow",  # tbf rate limit on the leader's link, both directions
]
NETEM_KINDS = ["delay"]  # netem delay on the leader's link: only where the kernel has netem


def kinds(netem: bool) -> list[str]:
    return KINDS + (NETEM_KINDS if netem else [])


def schedule(cycles: int, kinds: list[str], seed: int, shuffle: bool = True) -> list[str]:
    """Round-robin over `kinds`, each round in a seeded random order: every kind occurs
    once per round, so a run of N cycles has each at least N // len(kinds) times."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < cycles:
        round_ = list(kinds)
        if shuffle:
            rng.shuffle(round_)
        out += round_
    return out[:cycles]


@dataclass
class Applied:
    kind: str
    targets: list[int]
    description: str
    killed: list[int] = field(default_factory=list)
    paused: list[int] = field(default_factory=list)


def _drop_peers(net: Net, peers: list[int], inbound: bool, outbound: bool) -> list[str]:
    """Rules for a node's namespace dropping traffic from (inbound) / to (outbound) `peers`
    only: the bridge address the clients come from stays reachable."""
    rules = []
    for j in peers:
        if inbound:
            rules.append(f"-A INPUT -s {net.ip(j)} -j DROP")
        if outbound:
            rules.append(f"-A OUTPUT -d {net.ip(j)} -j DROP")
    return rules


def _lossy(net: Net, i: int) -> list[str]:
    """Random drop of node i's peer traffic, both directions."""
    stat = f"-m statistic --mode random --probability {LOSS}"
    rules = []
    for j in net.ids:
        if j != i:
            rules.append(f"-A INPUT -s {net.ip(j)} {stat} -j DROP")
            rules.append(f"-A OUTPUT -d {net.ip(j)} {stat} -j DROP")
    return rules


class Injector:
    """Applies one fault at a time and heals everything."""

    def __init__(self, net: Net, nodes: Nodes) -> None:
        self.net = net
        self.nodes = nodes
        self.seen: Counter[str] = Counter()

    def apply(self, kind: str, leader: int) -> Applied:
        """Apply `kind` with `leader` (the leader of the cycle's partition) as the usual
        target. Kinds with a choice (split: leader or follower alone; bridge: which node in
        the middle; lossy: one node or all) rotate it over their occurrences."""
        net, ids = self.net, self.net.ids
        n = self.seen[kind]
        self.seen[kind] += 1
        others = [j for j in ids if j != leader]
        if kind in ("isolate_leader", "one_way_out", "one_way_in"):
            inbound = kind != "one_way_out"
            outbound = kind != "one_way_in"
            net.set_rules(leader, _drop_peers(net, others, inbound, outbound))
            return Applied(kind, [leader], f"node {leader} (leader) {kind}")
        if kind == "isolate_leader_full":
            net.set_rules(leader, ["-A INPUT ! -i lo -j DROP", "-A OUTPUT ! -o lo -j DROP"])
            return Applied(kind, [leader], f"node {leader} (leader) cut off from everyone")
        if kind == "split":
            alone = leader if n % 2 == 0 else others[n // 2 % len(others)]
            rest = [j for j in ids if j != alone]
            net.set_rules(alone, _drop_peers(net, rest, True, True))
            for j in rest:
                net.set_rules(j, _drop_peers(net, [alone], True, True))
            role = "leader" if alone == leader else "follower"
            return Applied(kind, [alone], f"node {alone} ({role}) alone, nodes {rest} together")
        if kind == "bridge":
            middle = ids[n % len(ids)]
            a, b = [j for j in ids if j != middle]
            net.set_rules(a, _drop_peers(net, [b], True, True))
            net.set_rules(b, _drop_peers(net, [a], True, True))
            return Applied(kind, [a, b], f"nodes {a} and {b} apart, node {middle} sees both")
        if kind == "pause_leader":
            self.nodes.pause(leader)
            return Applied(kind, [leader], f"node {leader} (leader) SIGSTOP", paused=[leader])
        if kind == "kill_one":
            self.nodes.kill(leader)
            return Applied(kind, [leader], f"node {leader} (leader) kill -9", killed=[leader])
        if kind == "kill_all":
            for j in [leader, *others]:
                self.nodes.kill(j)
            return Applied(kind, list(ids), "every node kill -9", killed=[leader, *others])
        if kind == "lossy":
            on = [leader] if n % 2 == 0 else list(ids)
            for j in on:
                net.set_rules(j, _lossy(net, j))
            return Applied(kind, on, f"{LOSS:.0%} loss of peer traffic on nodes {on}")
        if kind == "slow":
            net.shape(leader, ["tbf", *TBF_ARGS])
            return Applied(kind, [leader], f"node {leader} (leader) link tbf {TBF_ARGS[1]}")
        if kind == "delay":
            net.shape(leader, NETEM_DELAY)
            return Applied(kind, [leader], f"node {leader} (leader) link {' '.join(NETEM_DELAY)}")
        raise ValueError(f"unknown fault kind {kind!r}")

    def heal(self) -> None:
        """Undo every fault: rules flushed and qdiscs removed everywhere, paused nodes
        continued, dead nodes restarted (not waited for: recovery is what is measured)."""
        self.net.heal_all()
        for i in self.net.ids:
            self.nodes.resume(i)
        for i in self.net.ids:
            if not self.nodes.nodes[i].alive():
                self.nodes.start(i)
