"""`raftlog cluster decommission`'s plan (raftlog_app/decommission_cli.py): where each replica of
the node goes."""

from __future__ import annotations

import pytest

from raftlog.config import ConfigError
from raftlog_app.decommission_cli import plan


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
