"""The fault suite's checker on hand-made histories: legal behaviour passes, each rule
catches its own breakage (no namespaces, no nodes)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from . import checker
from .checker import (
    Anomaly,
    Delivery,
    ProducerInfo,
    ReadRecord,
    check_audit,
    check_deliveries,
    check_epoch_caches,
    check_log,
    implicit_ack_ranges,
    implicitly_acked,
    load_deliveries,
)
from .faults import KINDS, schedule
from .nodes import agreed_leaders, caught_up
from .report import attribute
from .run import check_node_logs, epoch_bumps

PRODUCERS = {
    "idem": ProducerInfo("idem", True, sent=10),
    "plain": ProducerInfo("plain", False, sent=10),
}


def ack(name: str, seq: int, partition: int, offset: int | None, t: float = 1.0) -> Delivery:
    return Delivery(name, seq, f"{name}:{seq}", partition, offset, None, 0.5, t)


def fail(name: str, seq: int, partition: int) -> Delivery:
    return Delivery(name, seq, f"{name}:{seq}", partition, None, "Local: Message timed out", 0, 9)


def rec(partition: int, offset: int, value: str | None, epoch: int | None = 1) -> ReadRecord:
    return ReadRecord(partition, offset, value, epoch)


def kinds(anomalies: list[Anomaly]) -> list[str]:
    return sorted(a.kind for a in anomalies)


def legal_history() -> tuple[list[Delivery], list[ReadRecord]]:
    """Everything a correct cluster may do under faults, in one partition 0 log:
    - plain:1 was written twice (a retry after a lost answer); the ack names the second copy;
    - idem:2 and plain:3 failed (timed out): one is in the log, the other is not;
    - idem:4 was sent twice (a retry after a lost answer) and answered with the first copy;
    - epochs grow along the log."""
    deliveries = [
        ack("idem", 0, 0, 0),
        ack("plain", 1, 0, 2),
        fail("idem", 2, 0),
        fail("plain", 3, 0),
        ack("idem", 4, 0, 4),
        ack("plain", 5, 0, 5),
    ]
    log = [
        rec(0, 0, "idem:0", 1),
        rec(0, 1, "plain:1", 1),
        rec(0, 2, "plain:1", 2),
        rec(0, 3, "idem:2", 2),
        rec(0, 4, "idem:4", 4),
        rec(0, 5, "plain:5", 4),
    ]
    return deliveries, log


def test_legal_history_holds() -> None:
    deliveries, log = legal_history()
    assert check_deliveries(deliveries, PRODUCERS, log) == []
    assert check_log(log, {0: 6}) == []


def test_acked_record_missing_is_flagged_for_both_producers() -> None:
    deliveries, log = legal_history()
    log = [r for r in log if r.value not in ("idem:0", "plain:5")]
    found = check_deliveries(deliveries, PRODUCERS, log)
    assert kinds(found) == ["acked_missing", "acked_missing"]
    assert {a.details["producer"] for a in found} == {"idem", "plain"}
    plain = next(a for a in found if a.details["producer"] == "plain")
    assert plain.details["idempotent"] is False  # the at-least-once rule
    assert plain.at == 1.0  # attributed by its ack time


def test_unacked_record_lost_is_legal() -> None:
    deliveries, log = legal_history()
    log = [r for r in log if r.value != "idem:2"]  # idem:2 failed: it may be gone
    assert check_deliveries(deliveries, PRODUCERS, log) == []


def test_acked_record_at_another_offset() -> None:
    deliveries = [ack("idem", 0, 0, 1), ack("plain", 1, 0, 0), ack("idem", 2, 1, 0)]
    log = [rec(0, 0, "idem:0"), rec(0, 1, "plain:1"), rec(0, 2, "idem:2")]
    found = check_deliveries(deliveries, PRODUCERS, log)
    assert kinds(found) == ["acked_wrong_offset"] * 3
    wrong_partition = next(a for a in found if a.details["value"] == "idem:2")
    assert wrong_partition.details["found_at"] == [(0, 2)]


def test_acks_with_an_invalid_base_offset() -> None:
    """A batch answered with base offset -1 is reported by librdkafka as None, 0, 1: never
    legal, a retried duplicate included (it is answered with the first copy's offset)."""
    deliveries = [
        ack("idem", 0, 0, None),
        ack("idem", 3, 0, 0),
        ack("idem", 6, 0, 1),
        ack("plain", 1, 1, None),
        ack("plain", 4, 1, 0),
        ack("plain", 7, 2, 40),
    ]
    log = [
        rec(0, 0, "plain:9"),
        rec(0, 1, "plain:9"),
        rec(0, 7, "idem:0"),
        rec(0, 8, "idem:3"),
        rec(0, 9, "idem:6"),
        rec(1, 3, "plain:1"),
        rec(1, 4, "plain:4"),
        rec(2, 40, "plain:7"),
    ]
    idem, plain = check_deliveries(deliveries, PRODUCERS, log)
    assert idem.kind == plain.kind == "acked_invalid_offset"
    assert idem.details["values"] == ["idem:0", "idem:3", "idem:6"]
    assert plain.details["values"] == ["plain:1", "plain:4"]
    assert plain.details["reported_offsets"] == [None, 0]
    # presence is still required
    found = check_deliveries(deliveries, PRODUCERS, [r for r in log if r.value != "idem:3"])
    assert kinds(found) == ["acked_invalid_offset", "acked_invalid_offset", "acked_missing"]


def test_librdkafka_implicit_acks_need_presence_not_an_offset() -> None:
    """A 300-cycle run's only anomaly: 61 records of the idempotent producer reported
    delivered without an offset. librdkafka's debug=eos log said why: their request failed
    with an unknown outcome and a later batch's success showed them persisted. Each was in
    the log once; one that is not, or is twice, is still an anomaly."""
    line = (
        "%7|1795518476.791|IMPLICITACK|idem#producer-1| [thrd:10.231.25.1:9092/1]: "
        "10.231.25.1:9092/1: faults [0] 2 message(s) implicitly acked by subsequent batch "
        "success (msgids 2..3, last acked 5)"
    )
    ranges = implicit_ack_ranges(["unrelated line", line])
    assert ranges == {0: [(2, 3)]}
    # Partition 0 got seqs 0, 3, 6, 9 (msgids 1-4); 3 and 6 were implicitly acked.
    deliveries = [
        ack("idem", 0, 0, 0),
        ack("idem", 3, 0, None),
        ack("idem", 6, 0, None),
        ack("idem", 9, 0, 3),
        ack("idem", 1, 1, None),  # partition 1: no implicit ack explains it
    ]
    implicit = implicitly_acked(deliveries, "idem", ranges)
    assert implicit == {"idem:3", "idem:6"}
    log = [rec(0, 0, "idem:0"), rec(0, 1, "idem:3"), rec(0, 2, "idem:6"), rec(0, 3, "idem:9")]
    log.append(rec(1, 0, "idem:1"))
    (unexplained,) = check_deliveries(deliveries, PRODUCERS, log, implicit)
    assert unexplained.kind == "acked_invalid_offset"
    assert unexplained.details["values"] == ["idem:1"]
    missing = [r for r in log if r.value != "idem:6"] + [rec(0, 4, "idem:3")]
    found = check_deliveries(deliveries, PRODUCERS, missing, implicit)
    assert sorted(kinds(found)) == ["acked_invalid_offset", "acked_missing", "duplicate"]


def test_idempotent_duplicate_is_flagged_acked_or_not() -> None:
    deliveries = [ack("idem", 0, 0, 0), fail("idem", 1, 0)]
    log = [rec(0, 0, "idem:0"), rec(0, 1, "idem:1"), rec(0, 2, "idem:0"), rec(0, 3, "idem:1")]
    found = check_deliveries(deliveries, PRODUCERS, log)
    assert kinds(found) == ["duplicate", "duplicate"]
    assert {a.details["value"] for a in found} == {"idem:0", "idem:1"}


def test_non_idempotent_duplicate_is_legal() -> None:
    deliveries = [ack("plain", 0, 0, 1)]
    log = [rec(0, 0, "plain:0"), rec(0, 1, "plain:0"), rec(0, 2, "plain:0")]
    assert check_deliveries(deliveries, PRODUCERS, log) == []


def test_unexpected_records() -> None:
    log = [rec(0, 0, "idem:10"), rec(0, 1, "stranger:1"), rec(0, 2, "garbage")]
    found = check_deliveries([], PRODUCERS, log)
    assert kinds(found) == ["unexpected_record"] * 3
    unknown_count = {"idem": ProducerInfo("idem", True, sent=None)}
    assert check_deliveries([], unknown_count, [rec(0, 0, "idem:10")]) == []


def test_gaps_in_the_middle_at_the_start_and_at_the_tail() -> None:
    log = [rec(0, 1, "a"), rec(0, 2, "b"), rec(0, 5, "c")]
    (gap,) = check_log(log, {0: 8}, {0: 0})
    assert gap.kind == "gap"
    assert gap.details["missing"] == [[0, 0], [3, 4], [6, 7]]
    assert check_log(log[:2], {0: 3}, {0: 1}) == []  # the log starts at 1: no gap


def test_offset_read_twice_with_two_values() -> None:
    log = [rec(0, 0, "a"), rec(0, 1, "b"), rec(0, 1, "c")]
    assert kinds(check_log(log, {0: 2})) == ["offset_conflict"]
    assert check_log([rec(0, 0, "a"), rec(0, 0, "a")], {0: 1}) == []  # a re-read is fine


def test_epoch_decrease() -> None:
    log = [rec(0, 0, "a", 1), rec(0, 1, "b", 3), rec(0, 2, "c", 2), rec(0, 3, "d", None)]
    (a,) = check_log(log, {0: 4})
    assert a.kind == "epoch_decrease"
    assert a.details["before"][:2] == [1, 3] and a.details["after"][:2] == [2, 2]
    assert check_log([rec(1, 0, "a", 2), rec(1, 1, "b", 2), rec(1, 2, "c", 5)], {1: 3}) == []


def replica(node: int, epochs: list[tuple[int, int]], hw: int, leo: int | None = None) -> dict:
    return {
        "node": node,
        "topic": "t",
        "partition": 0,
        "term": epochs[-1][0],
        "log_start_offset": 0,
        "log_end_offset": leo if leo is not None else hw,
        "high_watermark": hw,
        "epochs": [{"epoch": e, "start_offset": s, "bytes": 1} for e, s in epochs],
    }


def answers(*states: dict) -> dict[int, dict]:
    return {s["node"]: {"node_id": s["node"], "partitions": [s]} for s in states}


def test_epoch_caches_that_agree_on_the_committed_prefix() -> None:
    # node 3 has an uncommitted tail of its own epoch 6 above the shared high watermark:
    # legal until it is truncated; and a replica behind (lower hw) is compared up to its hw.
    epochs = answers(
        replica(1, [(1, 0), (2, 10), (5, 20)], hw=30),
        replica(2, [(1, 0), (2, 10)], hw=15),
        replica(3, [(1, 0), (2, 10), (5, 20), (6, 30)], hw=30, leo=35),
    )
    log = [rec(0, o, f"v{o}", 1 if o < 10 else 2 if o < 20 else 5) for o in range(30)]
    assert check_epoch_caches(epochs, {"t": log}) == []


def test_epoch_caches_that_disagree() -> None:
    epochs = answers(
        replica(1, [(1, 0), (2, 10), (3, 20)], hw=30),
        replica(2, [(1, 0), (3, 10)], hw=30),
    )
    found = check_epoch_caches(epochs)
    assert kinds(found) == ["epoch_cache_disagreement"]
    assert found[0].details["nodes"] == [1, 2]


def test_epoch_cache_against_the_log() -> None:
    epochs = answers(replica(1, [(1, 0), (2, 10)], hw=20))
    log = [rec(0, o, f"v{o}", 1 if o < 12 else 2) for o in range(20)]  # 10, 11 read as epoch 1
    (a,) = check_epoch_caches(epochs, {"t": log})
    assert a.kind == "epoch_cache_vs_log"
    assert a.details["count"] == 2 and a.details["first"][0] == [10, 1, 2]
    # another topic's partition 0 is not compared with these records
    assert check_epoch_caches(epochs, {"other": log}) == []


def test_audit_verdicts() -> None:
    assert check_audit(0, {"invariants": {}}) == []
    summary = {
        "invariants": {
            "epochs_increase": {"held": True, "violations": 0, "rows": []},
            "no_committed_record_truncated": {
                "held": False,
                "violations": 2,
                "rows": [{"detail": "cut offsets [5, 9)"}],
            },
        }
    }
    (a,) = check_audit(1, summary)
    assert a.kind == "audit"
    assert list(a.details["failing"]) == ["no_committed_record_truncated"]
    assert "no_committed_record_truncated (2)" in a.message
    (b,) = check_audit(2, None, "raftlog audit: nothing to audit")
    assert b.details["exit_code"] == 2 and "nothing to audit" in b.message


def test_load_deliveries_ignores_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "idem.jsonl"
    rows = [
        {"kind": "start", "t": 0, "name": "idem"},
        {
            "kind": "dr",
            "seq": 0,
            "value": "idem:0",
            "partition": 2,
            "offset": 7,
            "error": None,
            "sent": 1.0,
            "t": 1.5,
            "epoch": None,
        },
        {"kind": "done", "t": 2, "sent": 1},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"kind": "dr", "se')
    deliveries, meta = load_deliveries(path)
    assert deliveries == [Delivery("idem", 0, "idem:0", 2, 7, None, 1.0, 1.5)]
    assert meta["done"]["sent"] == 1


# --------------------------------------------------------------------------- runner helpers


def status(node: int, entries: list[tuple[int, int | None, int, bool]]) -> dict:
    """entries: (partition, leader, term, is_leader)."""
    return {
        "node_id": node,
        "partitions": [
            {
                "topic": "t",
                "partition": p,
                "leader": leader,
                "term": term,
                "is_leader": is_leader,
                "high_watermark": 5,
                "log_end_offset": 5,
            }
            for p, leader, term, is_leader in entries
        ],
    }


def test_a_deposed_leader_alone_does_not_count() -> None:
    statuses = {
        1: status(1, [(0, 1, 3, True)]),  # cut off, still believes it leads term 3
        2: status(2, [(0, 2, 4, True)]),
        3: status(3, [(0, 2, 4, False)]),
    }
    assert agreed_leaders(statuses, "t", 1) == {0: (2, 4)}
    del statuses[3]
    assert agreed_leaders(statuses, "t", 1) == {}
    assert not caught_up(statuses, "t", 1, 3)


def test_schedule_covers_every_kind_each_round() -> None:
    order = schedule(2 * len(KINDS) + 1, KINDS, seed=7)
    assert sorted(order[: len(KINDS)]) == sorted(KINDS)
    assert sorted(order[len(KINDS) : 2 * len(KINDS)]) == sorted(KINDS)
    assert order == schedule(2 * len(KINDS) + 1, KINDS, seed=7)


def test_anomalies_are_attributed_to_the_cycle_they_happened_in() -> None:
    cycles = [{"cycle": 1, "start": 10.0}, {"cycle": 2, "start": 20.0}]
    found = attribute(
        [Anomaly("x", "", 15.0), Anomaly("y", "", 25.0), Anomaly("z", "", 5.0), Anomaly("w", "")],
        cycles,
    )
    assert [a.kind for a in found[1]] == ["x"]
    assert [a.kind for a in found[2]] == ["y"]
    assert sorted(a.kind for a in found[-1]) == ["w", "z"]


def test_epoch_bumps_are_counted_by_reason(tmp_path) -> None:
    log = tmp_path / "idem.stderr.log"
    log.write_text(
        "%7|1.0|DRAIN|idem#producer-1| [thrd:main]: Beginning partition drain in state "
        "Assigned for PID{Id:1,Epoch:0} epoch bump for 1 partition(s) with in-flight "
        "requests: skipped sequence numbers\n"
        "%3|1.1|FAIL|idem#producer-1| [thrd:x]: Connect failed: Connection refused\n"
        "%7|1.2|DRAIN|idem#producer-1| [thrd:main]: Beginning partition drain in state "
        "Assigned for PID{Id:1,Epoch:1} epoch bump for 2 partition(s) with in-flight "
        "requests: 3 message(s) timed out on faults [1]\n"
    )
    assert epoch_bumps(log) == {
        "skipped sequence numbers": 1,
        "3 message(s) timed out on faults [1]": 1,
    }
    assert epoch_bumps(tmp_path / "absent.log") == {}


# --------------------------------------------------------------------------- transactions


def _txn(first: int, last: int, outcome: str) -> checker.Transaction:
    return checker.Transaction("txn", first, last, outcome, 0.0)


def _read(*values: str) -> list[checker.ReadRecord]:
    return [checker.ReadRecord(0, i, v, 1) for i, v in enumerate(values)]


def test_transactions_are_read_whole_or_not_at_all():
    txns = [
        _txn(0, 1, "committed"),
        _txn(2, 3, "aborted"),
        _txn(4, 5, "unknown"),
        _txn(6, 7, "unknown"),
        _txn(8, 9, "committed"),
    ]
    log = _read("txn:0", "txn:1", "txn:2", "txn:4", "txn:5", "txn:6", "txn:9", "txn:9", "x:1")
    kinds = sorted((a.kind, a.details.get("first")) for a in checker.check_transactions(txns, log))
    assert kinds == [
        ("duplicate", None),
        ("txn_aborted_visible", 2),
        ("txn_partial", 6),  # open outcome, half there
        ("txn_partial", 8),  # committed, one missing
        ("unexpected_record", None),
    ]


def test_a_clean_transactional_history_has_no_anomaly():
    txns = [_txn(0, 1, "committed"), _txn(2, 3, "aborted"), _txn(4, 5, "unknown")]
    assert checker.check_transactions(txns, _read("txn:0", "txn:1")) == []


# One line of each warning a fault run may legally log, as the node writes it.
LEGAL_SAMPLES = {
    "no_authorizer": "no authorizer (authorizer.class.name is empty): any client that reaches",
    "event_loop_stall": "event loop stalled for 5.12s (2 more since the last report)",
    "peer_silent": "peer 2 silent for 6.0s; dropping",
    "raft_handshake_unfinished": "rejected Raft connection from 10.0.0.2:4711: no handshake "
    "within 5.0s",
    "window_torn_tail": "/d/t-0/raft/window: dropping 31 bytes of window past a torn or "
    "unlogged entry",
    "window_cut_log": "/d/t-0/raft: cut 4096 bytes the window does not know",
    "segment_torn_tail": "/d/t-0/00000000000000000000-3.log: cut 77 bytes of torn or invalid data",
    "segment_indexes_rebuilt": "/d/t-0/0-3.log: indexes missing or inconsistent, rebuilding them",
    "offset_file_torn": "/d/t-0/recovery-point: unreadable, starting from 0",
    "compaction_interrupted": "/d/t-0/0-3.log: completing an interrupted compaction swap",
    "controller_commit_clamped": "raftCommitIndex (120) exceeds journal end (118) after loading "
    "dump, likely due to unsynced journal entries lost on crash; clamping to journal end",
    "snapshot_install_given_up": "id/2: snapshot install 812 from node 3: the source stopped "
    "answering",
}


def node_line(level: str, logger: str, message: str, t: str = "2026-12-06 04:57:38,892") -> str:
    return f"{t} {level} [node 3] {logger}: {message}\n"


def test_every_legal_warning_is_named_and_passes() -> None:
    assert set(LEGAL_SAMPLES) == set(checker.LEGAL_WARNINGS)
    for name, message in LEGAL_SAMPLES.items():
        assert checker.legal_warning(message) == name
    lines = [
        "\n==== fault suite: starting node 3 at Sun Dec  6 04:57:38 2026 ====\n",
        node_line("INFO", "raftlog.raft.mesh", "peer 2 back after 9.5s (4 messages dropped)"),
        *(node_line("WARNING", "raftlog.x", m) for m in LEGAL_SAMPLES.values()),
    ]
    assert checker.check_node_log(3, lines) == []


def test_an_error_a_traceback_or_an_unlisted_warning_in_a_node_log_is_an_anomaly() -> None:
    """Issue 43's fault passed a run: the data was intact, and only the node's log said that
    a Raft group had failed halfway through its Ready."""
    ready_failed = (
        "raft group abc/2: ready failed\\nTraceback (most recent call last):\\n  File "
        '"driver.py", line 1, in _turn\\nValueError: Segment(base=16682, term=9, next=21218, '
        "size=330124) has no 79 bytes at 330124"
    )
    lines = [
        node_line("INFO", "raftlog.node.node", "node 3: room for 1100 partition replicas"),
        node_line("ERROR", "raftlog.raft.driver", ready_failed, "2026-12-06 05:00:01,250"),
        node_line("ERROR", "asyncio", "Task exception was never retrieved\\nfuture: <Task>"),
        node_line("INFO", "raftlog.x", "went on\\nTraceback (most recent call last):\\n  ..."),
        node_line("WARNING", "raftlog.partition.partition", "t-0: reopened from its files"),
        "Traceback (most recent call last):\n",
        '  File "raftlog_app/process.py", line 9, in main\n',
        "    run()\n",
        "MemoryError\n",
        node_line("INFO", "raftlog.node.node", "node 3: room for 1100 partition replicas"),
    ]
    found = checker.check_node_log(3, lines, "console.log")
    expected = [
        ("node_error", "node 3 raftlog.raft.driver: raft group abc/2: ready failed"),
        ("node_error", "node 3 asyncio: Task exception was never retrieved"),
        ("node_traceback", "node 3 raftlog.x: went on"),
        ("node_warning", "node 3 raftlog.partition.partition: t-0: reopened from its files"),
        ("node_traceback", "node 3: MemoryError"),
    ]
    assert [(a.kind, a.message) for a in found] == expected
    assert found[0].details == {
        "node": 3,
        "file": "console.log",
        "line": 2,
        "logger": "raftlog.raft.driver",
    }
    # Timed as the node logged it (local time), for the cycle it happened in.
    assert (
        found[0].at == time.mktime(time.strptime("2026-12-06 05:00:01", "%Y-%m-%d %H:%M:%S")) + 0.25
    )
    assert found[-1].details["traceback"][-1] == "MemoryError"


def test_the_runner_checks_every_nodes_log_and_a_traceback_cut_off_at_the_end(
    tmp_path: Path,
) -> None:
    for node in (1, 2, 3):
        (tmp_path / f"node-{node}").mkdir()
        (tmp_path / f"node-{node}" / "console.log").write_text(
            node_line("INFO", "raftlog.node.node", "started")
        )
    (tmp_path / "node-2" / "console.log").write_text(
        node_line("INFO", "raftlog.node.node", "started") + "Traceback (most recent call last):\n"
    )
    found = check_node_logs(tmp_path)
    assert [(a.kind, a.details["node"]) for a in found] == [("node_traceback", 2)]
