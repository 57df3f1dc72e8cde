"""Where `raftlog cluster decommission` and `rebalance` send replicas (raftlog_app/replicas_cli.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from raftlog.common.errors import ConfigError
from raftlog_app.replicas_cli import admin_addresses, balance, plan, size_text


def test_each_replica_goes_to_a_new_rack_and_the_least_loaded_node() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "c", 5: "c"}
    replicas = {("t", 0): [4, 1, 3], ("t", 1): [1, 3, 5], ("t", 2): [3, 4, 2]}
    moves = plan(4, racks, replicas)
    assert set(moves) == {("t", 0), ("t", 2)}
    # t-0 keeps racks a and b: 5 (rack c) takes node 4's place; 4 led it, so 1 leads now.
    assert moves[("t", 0)] == [1, 3, 5]
    # t-2 holds b and a: only rack c is new, and 5 is the one there.
    assert moves[("t", 2)] == [3, 5, 2]


def test_without_a_free_rack_any_other_node_and_none_twice() -> None:
    moves = plan(3, {1: None, 2: None, 3: None, 4: None}, {("t", 0): [1, 2, 3]})
    assert moves == {("t", 0): [1, 2, 4]}


def test_a_partition_on_every_node_cannot_leave_one() -> None:
    with pytest.raises(ConfigError, match="no node can take node 3's"):
        plan(3, {1: None, 2: None, 3: None}, {("t", 0): [1, 2, 3]})


def test_a_node_added_later_takes_its_share_and_leads_its_share() -> None:
    """Six partitions at RF 2 on nodes 1-3 (four replicas each), node 4 new and empty: after
    the plan every node holds three, and leads (is first in) one or two."""
    racks = {1: None, 2: None, 3: None, 4: None}
    replicas = {("t", p): [1 + p % 3, 1 + (p + 1) % 3] for p in range(6)}
    moves = balance(racks, replicas)
    after = {**replicas, **moves}
    held = Counter(b for r in after.values() for b in r)
    assert sorted(held.values()) == [3, 3, 3, 3]
    leads = Counter(r[0] for r in after.values())
    assert max(leads.values()) - min(leads[n] for n in racks) <= 1
    assert all(len(set(r)) == 2 for r in after.values())


def test_a_move_keeps_the_partition_on_the_most_racks() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    replicas = {("t", 0): [1, 3], ("t", 1): [1, 2], ("t", 2): [1, 3]}
    moves = balance(racks, replicas)
    after = {**replicas, **moves}
    assert {racks[b] for b in after[("t", 1)]} == {"a", "b"}  # t-1 left rack a only


def test_a_balanced_cluster_needs_no_move() -> None:
    racks = {1: None, 2: None, 3: None}
    assert balance(racks, {("t", 0): [1, 2], ("t", 1): [2, 3], ("t", 2): [3, 1]}) == {}


def test_bytes_still_to_copy_read_for_a_person() -> None:
    """The progress lines' and `topic describe`'s figure (powers of 1000, as the bench's MB)."""
    assert [size_text(n) for n in (0, 999, 1500, 340_250_000, 1_073_741_824)] == [
        "0 B",
        "999 B",
        "1.5 kB",
        "340.2 MB",
        "1.07 GB",
    ]


def test_admin_listeners_given_are_checked() -> None:
    assert admin_addresses(None, "127.0.0.1:11092, localhost:11093") == [
        "127.0.0.1:11092",
        "localhost:11093",
    ]
    with pytest.raises(ConfigError):
        admin_addresses(None, "127.0.0.1")
