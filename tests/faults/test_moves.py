"""The reassignment workload's parent side on hand-made data: the mover's figures and a
move left running (move_stuck), and caught_up_hosted over a topic of replication factor 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .moves import summarize
from .nodes import caught_up_hosted


def _write(path: Path, rows: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_figures_count_starts_finishes_cancels_and_what_was_left(tmp_path: Path) -> None:
    path = tmp_path / "moves.jsonl"
    _write(
        path,
        [
            {"kind": "begin", "t": 0},
            {"kind": "start", "partition": 0, "source": [1, 2], "target": [2, 3]},
            {"kind": "start", "partition": 1, "source": [1, 2], "target": [1, 3]},
            {"kind": "error", "call": "list", "error": "timeout"},
            {"kind": "finish", "partition": 0, "seconds": 2.0},
            {"kind": "cancel", "partition": 1, "seconds": 0.5},
            {"kind": "start", "partition": 1, "source": [1, 2], "target": [2, 3]},
            {"kind": "finish", "partition": 1, "seconds": 6.0},
            {"kind": "start", "partition": 0, "source": [2, 3], "target": [1, 3]},
            {
                "kind": "done",
                "stuck": {"0": {"source": [2, 3], "target": [1, 3], "seconds": 190.0}},
            },
        ],
    )
    m = summarize(path)
    assert (m["started"], m["finished"], m["cancelled"], m["call_errors"]) == (4, 2, 1, 1)
    assert m["finish_s"]["max"] == 6.0 and m["drained"]
    assert list(m["stuck"]) == ["0"]


def test_a_mover_that_never_reported_its_end_is_not_drained(tmp_path: Path) -> None:
    path = tmp_path / "moves.jsonl"
    _write(path, [{"kind": "start", "partition": 0, "source": [1, 2], "target": [2, 3]}])
    assert not summarize(path)["drained"]


def _entry(p: int, leader: int, hw: int, replicas: list[int], is_leader: bool) -> dict[str, Any]:
    return {
        "topic": "m",
        "partition": p,
        "leader": leader,
        "term": 4,
        "is_leader": is_leader,
        "high_watermark": hw,
        "log_end_offset": hw,
        "replicas": replicas,
    }


def test_caught_up_hosted_wants_exactly_the_leaders_replicas_at_one_offset() -> None:
    st: dict[int, dict[str, Any]] = {
        1: {"partitions": [_entry(0, 1, 10, [1, 2], True)]},
        2: {"partitions": [_entry(0, 1, 10, [1, 2], False)]},
        3: {"partitions": []},
    }
    assert caught_up_hosted(st, "m", 1)
    # a node a move took out still holds its copy
    st[3]["partitions"] = [_entry(0, 1, 10, [1, 2, 3], False)]
    assert not caught_up_hosted(st, "m", 1)
    # a replica behind
    st[3]["partitions"] = []
    st[2]["partitions"] = [_entry(0, 1, 9, [1, 2], False)]
    assert not caught_up_hosted(st, "m", 1)
