"""The epoch audit's metrics and invariants on small hand-made histories, on a real local
Spark (one session for the module). Each invariant is shown holding on a sound history and
broken, with its offending rows, on one made to break it."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

import pytest
from support.wire import make_batch

from analytics import generate, invariants, job, tables
from analytics.collect import read_replica, write_replicas
from analytics.invariants import Derived
from epoch.history import (
    RECORD_TYPES,
    Ack,
    ConfAppended,
    ConfCommitted,
    ConfTruncated,
    Election,
    EpochAnswer,
    HighWatermark,
    LeaderSeen,
    LogStart,
    Record,
    ReplicaCreated,
    ReplicaDropped,
    SnapshotInstall,
    Truncation,
    TxnComplete,
    TxnDecision,
    TxnMarker,
    to_json,
)
from epoch.replica_state import UNKNOWN, EpochSpan, ReplicaState
from raftlog.storage.log import Log, LogConfig

pytestmark = pytest.mark.timeout(600)

T0 = 1_800_000_000_000
TP = ("t", 0)


# One session runs every test's small queries. Its compiled code is kept for all of them
# (Spark keeps 100 classes; one history's audit compiles about 400), and joins shuffle
# instead of broadcasting: the broadcast build sides stayed on the heap from test to test
# until its garbage collection took most of the time (130 MB more live heap per audited
# history). Either way the results are the same rows.
@pytest.fixture(scope="module")
def spark():
    session = job.session(
        "local[2]",
        {
            "spark.sql.codegen.cache.maxEntries": "10000",
            "spark.sql.autoBroadcastJoinThreshold": "-1",
        },
    )
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _uncache(spark):
    """Each test's cached inputs go with it."""
    yield
    spark.catalog.clearCache()


class History:
    """A hand-made cluster history, written in the layout `collect` produces."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.records: dict[int, list[Record]] = defaultdict(list)
        self.replicas: dict[int, list[ReplicaState]] = defaultdict(list)
        self.raw: dict[int, list[str]] = defaultdict(list)

    def add(self, *records: Record) -> History:
        for r in records:
            self.records[r.node].append(r)
            self.raw[r.node].append(to_json(r))
        return self

    def line(self, node: int, text: str) -> History:
        self.raw[node].append(text)
        return self

    def replica(
        self,
        node: int,
        epochs: list[tuple[int, int]],
        leo: int,
        hw: int | None = None,
        log_start: int | None = None,
        term: int | None = None,
        epoch_bytes: int = 100,
    ) -> History:
        spans = [EpochSpan(e, s, epoch_bytes) for e, s in epochs]
        self.replicas[node].append(
            ReplicaState(
                node,
                *TP,
                term if term is not None else (epochs[-1][0] if epochs else 0),
                log_start if log_start is not None else (epochs[0][1] if epochs else 0),
                leo,
                hw if hw is not None else leo,
                spans,
            )
        )
        return self

    def write(self) -> Path:
        for node in set(self.raw) | set(self.replicas):
            d = self.root / "nodes" / f"node-{node}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "history.jsonl").write_text("".join(line + "\n" for line in self.raw[node]))
            write_replicas(d / "replicas.jsonl", self.replicas[node])
        return self.root


def sound(h: History) -> History:
    """Node 1 leads term 1 (offsets 0-100), is killed; node 2 leads term 2 (100-150)."""
    h.add(
        LeaderSeen(T0, 1, *TP, 1, -1),
        LeaderSeen(T0, 2, *TP, 1, -1),
        Election(T0 + 10, 1, *TP, 1, 0, 0),
        LeaderSeen(T0 + 12, 2, *TP, 1, 1),
        LeaderSeen(T0 + 12, 3, *TP, 1, 1),
        Ack(T0 + 100, 1, *TP, 1, -1, 100),
        HighWatermark(T0 + 101, 1, *TP, 1, 100),
        HighWatermark(T0 + 102, 2, *TP, 1, 100),
        # node 1 dies at T0+100; node 2 notices at T0+1100 and wins at T0+1300
        LeaderSeen(T0 + 1100, 2, *TP, 2, -1),
        LeaderSeen(T0 + 1150, 3, *TP, 2, -1),
        Election(T0 + 1300, 2, *TP, 2, 100, 100),
        LeaderSeen(T0 + 1301, 3, *TP, 2, 2),
        Ack(T0 + 1400, 2, *TP, 2, -1, 150),
        HighWatermark(T0 + 1401, 2, *TP, 2, 150),
        HighWatermark(T0 + 1402, 3, *TP, 2, 150),
        EpochAnswer(T0 + 1500, 2, *TP, 2, 1, 1, 100),
        EpochAnswer(T0 + 1501, 2, *TP, 2, 2, 2, 150),
        EpochAnswer(T0 + 1502, 2, *TP, 2, 5, -1, -1),
    )
    for node in (1, 2, 3):
        h.replica(node, [(1, 0), (2, 100)], leo=150, hw=150)
    return h


def rows(df) -> list[dict]:
    return [r.asDict(recursive=True) for r in df.collect()]


def audit(spark, h: History):
    return audit_dir(spark, h.write())


def broken(spark, h: History, name: str) -> list[dict]:
    inputs, _, derived = audit(spark, h)
    return sorted(
        rows(invariants.INVARIANTS[name](inputs, derived)),
        key=lambda r: (r["node"] or 0, r["term"]),
    )


def test_a_sound_history_holds_every_invariant(spark, tmp_path):
    inputs, _, derived = audit(spark, sound(History(tmp_path)))
    for name, check in invariants.INVARIANTS.items():
        assert rows(check(inputs, derived)) == [], name


def test_every_record_kind_reads_back_as_written(spark, tmp_path):
    """The Spark schema is derived from the writer's dataclasses: nothing is dropped."""
    samples = [
        Ack(T0, 1, *TP, 3, 1, 10),
        Election(T0, 1, *TP, 3, 7, 5),
        LeaderSeen(T0, 1, *TP, 3, -1),
        Truncation(T0, 1, *TP, 4, "install", 5, 9, 7, 12, [2, 3], 5, 2, 900),
        HighWatermark(T0, 1, *TP, 3, 5),
        SnapshotInstall(T0, 1, *TP, 3, 2, 0, 40),
        LogStart(T0, 1, *TP, 3, 25, "delete_records"),
        EpochAnswer(T0, 1, *TP, 3, 2, 2, 7),
        TxnDecision(T0, 1, "__transaction_state", 4, 3, "tx", 42, 0, 1, 17, ["t:0", "t:1"]),
        TxnMarker(T0, 1, *TP, 3, 42, 0, 1, 88, 4, 17, 3),
        TxnComplete(T0, 1, "__transaction_state", 4, 3, "tx", 17),
        ConfAppended(T0, 1, *TP, 3, 9, 3, 40, [1, 2, 4], [1, 2, 3], [5]),
        ConfCommitted(T0, 1, *TP, 3, 9, 3, 40, [1, 2, 4], [1, 2, 3], []),
        ConfTruncated(T0, 1, *TP, 4, 9, 3, 40, [1, 2], [], [4]),
        ReplicaDropped(T0, 1, *TP, 4, "moved", 120, 4),
        ReplicaCreated(T0, 1, *TP, 0, "new"),
    ]
    assert {type(s) for s in samples} == set(RECORD_TYPES.values())
    inputs = tables.load(spark, History(tmp_path).add(*samples).write())
    got = {r["kind"]: r for r in rows(inputs.events)}
    for sample in samples:
        back = {k: v for k, v in got[sample.kind].items() if v is not None}
        assert back == {
            "kind": sample.kind,
            "seq": back["seq"],
            "incarnation": back["incarnation"],
            **asdict(sample),
        }


def test_unreadable_lines_are_counted_not_dropped_silently(spark, tmp_path):
    h = sound(History(tmp_path)).line(1, "not json").line(1, '{"kind": "mystery", "v": 1}')
    inputs = tables.load(spark, h.write())
    assert sorted(r["value"] for r in rows(inputs.unreadable)) == [
        "not json",
        '{"kind": "mystery", "v": 1}',
    ]
    assert inputs.events.count() == sum(len(r) for r in h.records.values())


def test_replicas_read_from_files_take_term_and_high_watermark_from_history(spark, tmp_path):
    h = sound(History(tmp_path))
    h.replicas[3] = [ReplicaState(3, *TP, UNKNOWN, 0, 150, UNKNOWN, [EpochSpan(1, 0, 1)])]
    inputs = tables.load(spark, h.write())
    (r3,) = rows(inputs.replicas.filter("node = 3"))
    assert (r3["term"], r3["high_watermark"]) == (2, 150)


def test_elections_leaderless_time_and_winners(spark, tmp_path):
    inputs, elected, _ = audit(spark, sound(History(tmp_path)))
    e = {r["term"]: r for r in rows(elected)}
    assert (e[1]["leader"], e[1]["previous_leader"], e[1]["leaderless_ms"]) == (1, None, 10)
    assert e[2]["leader"] == 2 and e[2]["previous_leader"] == 1
    assert e[2]["leaderless_ms"] == 200  # node 2 gave up at +1100, won at +1300
    assert e[2]["since_leader_seen_ms"] == 1199  # node 1's last act as leader: its hw at +101
    (s,) = rows(tables.election_summary(inputs, elected))
    assert (s["elections"], s["winners"], s["max_leaderless_ms"]) == (
        2,
        "node 1: 1, node 2: 1",
        200,
    )
    assert s["per_hour"] == pytest.approx(2 / (1502 / 3_600_000), rel=0.01)


def test_epoch_timeline(spark, tmp_path):
    h = sound(History(tmp_path))
    # term 3 was won by node 3 but nothing of it survived in any log
    h.add(Election(T0 + 1600, 3, *TP, 3, 150, 150))
    inputs, elected, _ = audit(spark, h)
    got = {r["epoch"]: r for r in rows(tables.epoch_timeline(inputs, elected))}
    assert set(got) == {1, 2, 3}
    one, two, three = got[1], got[2], got[3]
    assert (one["leader"], one["start_offset"], one["end_offset"], one["records"]) == (
        1,
        0,
        100,
        100,
    )
    assert (one["start_ms"], one["end_ms"], one["duration_ms"]) == (T0 + 10, T0 + 1300, 1290)
    assert (two["leader"], two["start_offset"], two["end_offset"], two["records"]) == (
        2,
        100,
        150,
        50,
    )
    assert two["bytes"] == 100 and two["in_log"]
    assert (three["leader"], three["in_log"], three["records"]) == (3, False, 0)


def test_truncations_tell_lost_acks1_from_committed(spark, tmp_path):
    h = sound(History(tmp_path))
    h.add(
        # node 2 as leader of term 2 acked acks=1 up to 180; node 3 later cuts 150-180 of term 2
        Ack(T0 + 1600, 2, *TP, 2, 1, 180),
        Truncation(T0 + 2000, 3, *TP, 3, "raft", 9, 12, 150, 180, [2], 30, 1, 3000),
        # node 1 cuts an uncommitted term-1 tail nobody was told about: 100-120
        Truncation(T0 + 1200, 1, *TP, 2, "raft", 5, 6, 100, 120, [1], 20, 1, 2000),
    )
    inputs, elected, derived = audit(spark, h)
    cuts = {r["node"]: r for r in rows(derived.truncations)}
    assert cuts[3]["lost_acks1"] and not cuts[3]["cut_committed"]
    assert not cuts[1]["lost_acks1"] and not cuts[1]["cut_committed"]
    summary = rows(
        tables.partition_summary(
            tables.epoch_timeline(inputs, elected),
            tables.election_summary(inputs, elected),
            derived.truncations,
        )
    )
    assert (
        summary[0]["truncations"],
        summary[0]["truncated_bytes"],
        summary[0]["truncations_losing_acks1"],
    ) == (2, 5000, 1)
    assert broken(spark, h, "no_committed_record_truncated") == []


def test_truncating_committed_records_breaks_the_invariant(spark, tmp_path):
    h = sound(History(tmp_path))
    h.add(
        # below the high watermark (150) every node had recorded
        Truncation(T0 + 2000, 3, *TP, 3, "raft", 9, 12, 140, 150, [2], 10, 1, 1000),
    )
    (row,) = broken(spark, h, "no_committed_record_truncated")
    assert (row["invariant"], row["node"], row["term"]) == ("no_committed_record_truncated", 3, 3)
    assert (
        "cut offsets [140, 150)" in row["detail"]
        and "high watermark already at 150" in row["detail"]
    )

    h2 = History(tmp_path / "acked")
    h2.add(
        Election(T0, 1, *TP, 1, 0, 0),
        Ack(T0 + 10, 1, *TP, 1, -1, 50),  # acks=all answered, no hw recorded yet
        Truncation(T0 + 20, 2, *TP, 2, "raft", 1, 3, 20, 50, [1], 30, 1, 3000),
    )
    h2.replica(1, [(1, 0)], leo=50, hw=0)
    (row,) = broken(spark, h2, "no_committed_record_truncated")
    assert "acks=all answered up to 50" in row["detail"]


def test_cutting_a_deposed_leaders_tail_under_a_new_leaders_high_watermark_holds(spark, tmp_path):
    """Node 1 led term 1 and wrote 100-103 that never committed; node 2 led term 2 from 100
    and committed up to 150 (every other node recorded it) before node 1 came back and cut
    its term-1 tail. Offsets below other nodes' high watermarks, entries never committed:
    a legal Raft truncation, which the fault run's audit flagged."""
    h = sound(History(tmp_path))
    h.add(Truncation(T0 + 2000, 1, *TP, 2, "raft", 5, 8, 100, 103, [1], 3, 1, 300))
    assert broken(spark, h, "no_committed_record_truncated") == []


def test_a_cut_of_entries_the_committed_log_holds_breaks_the_invariant(spark, tmp_path):
    """Node 3 cut term-2 entries at 120 that every replica's committed log holds there (and
    got them back later, identical): for a while they had one copy fewer than committed."""
    h = sound(History(tmp_path))
    h.records[3] = [r for r in h.records[3] if not isinstance(r, HighWatermark)]
    h.raw[3] = [to_json(r) for r in h.records[3]]
    h.add(Truncation(T0 + 1450, 3, *TP, 2, "install", 9, 12, 120, 150, [2], 30, 1, 3000))
    (row,) = broken(spark, h, "no_committed_record_truncated")
    assert "own high watermark already at -" in row["detail"]
    assert "in the committed log of nodes 1,2,3" in row["detail"]


def test_an_old_term_ack_after_a_newer_term_keeps_epochs_increasing(spark, tmp_path):
    """A leader of term 1 saw term 2 begin, then applied its committed term-1 entries and
    answered their producers: the ack's term is the records' epoch, not the node's term."""
    h = sound(History(tmp_path))
    h.add(LeaderSeen(T0 + 1100, 1, *TP, 2, -1), Ack(T0 + 1101, 1, *TP, 1, -1, 100))
    assert broken(spark, h, "epochs_increase") == []


def test_decreasing_epochs_break_epochs_increase(spark, tmp_path):
    h = sound(History(tmp_path))
    h.replicas[3] = []
    h.replica(3, [(1, 0), (4, 80), (2, 100)], leo=150, hw=150)
    h.add(HighWatermark(T0 + 3000, 2, *TP, 1, 150))  # node 2's journal goes back to term 1
    got = broken(spark, h, "epochs_increase")
    assert [(r["node"], r["term"]) for r in got] == [(2, 1), (3, 2)]
    assert (
        "hw record in term 1 after a offset_for_leader_epoch record in term 2" in got[0]["detail"]
    )
    assert "epoch 2 at offset 100 follows epoch 4" in got[1]["detail"]


def test_epoch_start_going_back_breaks_the_invariant(spark, tmp_path):
    h = sound(History(tmp_path))
    h.replicas[2] = []
    h.replica(2, [(1, 0), (2, 100), (3, 90)], leo=150, hw=150)
    (row,) = broken(spark, h, "epoch_starts_never_decrease")
    assert (row["node"], row["term"]) == (2, 3)
    assert "epoch 3 starts at 90, before epoch 2's start 100" in row["detail"]


def test_two_leaders_in_one_term_break_the_invariant(spark, tmp_path):
    h = sound(History(tmp_path)).add(Election(T0 + 1305, 3, *TP, 2, 100, 100))
    (row,) = broken(spark, h, "one_leader_per_term")
    assert row["term"] == 2 and "nodes 2, 3" in row["detail"]
    # a follower that names another leader for the term counts too
    h2 = sound(History(tmp_path / "seen")).add(LeaderSeen(T0 + 1310, 1, *TP, 2, 1))
    (row,) = broken(spark, h2, "one_leader_per_term")
    assert row["term"] == 2 and "nodes 1, 2" in row["detail"]


def test_high_watermark_going_back_on_a_node_breaks_the_invariant(spark, tmp_path):
    h = sound(History(tmp_path)).add(HighWatermark(T0 + 2000, 3, *TP, 2, 120))
    (row,) = broken(spark, h, "high_watermark_never_decreases")
    assert row["node"] == 3 and "from 150 back to 120" in row["detail"]
    # another node being behind is not a decrease
    h2 = sound(History(tmp_path / "behind")).add(HighWatermark(T0 + 2000, 1, *TP, 2, 120))
    assert broken(spark, h2, "high_watermark_never_decreases") == []


def test_offset_for_leader_epoch_answers_checked_against_the_cache(spark, tmp_path):
    h = sound(History(tmp_path)).add(
        EpochAnswer(T0 + 1600, 2, *TP, 2, 1, 1, 90),  # epoch 1 ends at 100, not 90
        EpochAnswer(T0 + 1601, 2, *TP, 2, 1, 0, 100),  # there is an epoch 1: answered 0
        EpochAnswer(T0 + 1602, 2, *TP, 2, 2, 2, 80),  # own term answered below its start
    )
    got = broken(spark, h, "offset_for_leader_epoch_agrees")
    assert [(r["time_ms"] - T0) for r in sorted(got, key=lambda r: r["time_ms"])] == [
        1600,
        1601,
        1602,
    ]
    assert any(
        "answered epoch 1 ending at 90; the cache says epoch 1 ending at 100" in r["detail"]
        for r in got
    )
    # epochs removed by retention since the answer cannot be checked, and are not blamed
    h2 = sound(History(tmp_path / "retention"))
    h2.replicas[2] = []
    h2.replica(2, [(2, 120)], leo=150, hw=150, log_start=120)
    assert broken(spark, h2, "offset_for_leader_epoch_agrees") == []


def test_replicas_must_agree_inside_their_committed_prefix(spark, tmp_path):
    h = sound(History(tmp_path))
    h.replicas[3] = []
    h.replica(3, [(1, 0), (2, 90)], leo=150, hw=150)
    got = broken(spark, h, "replica_epoch_caches_agree")
    assert {(r["node"], r["term"]) for r in got} == {(1, 2), (2, 2)}
    assert "epoch 2 starts at 100 on node 1 and at 90 on node 3" in got[0]["detail"]

    # a follower's uncommitted epoch above the shared high watermark, and a replica whose
    # retention removed its early epochs, are not disagreements
    h2 = sound(History(tmp_path / "fine"))
    h2.replicas[1] = []
    h2.replica(1, [(1, 0), (2, 100), (3, 150)], leo=170, hw=150)
    h2.replicas[3] = []
    h2.replica(3, [(2, 120)], leo=150, hw=150, log_start=120)
    assert broken(spark, h2, "replica_epoch_caches_agree") == []


def test_a_prefix_deleted_by_delete_records_holds_and_a_lost_one_breaks(spark, tmp_path):
    """After a DeleteRecords to 120 in term 2, committed on nodes 2 and 3 (each records the
    start it applied), their logs start at 120 with the segments below it gone: deleted, not
    lost. A node that installed a snapshot resuming at 100 is explained too. A log starting
    past every start its node recorded lost records."""
    h = sound(History(tmp_path / "deleted")).add(
        LogStart(T0 + 1600, 2, *TP, 2, 120, "delete_records"),
        LogStart(T0 + 1601, 3, *TP, 2, 120, "delete_records"),
        SnapshotInstall(T0 + 1700, 1, *TP, 2, 2, 100, 150),
    )
    for node, start in ((1, 100), (2, 120), (3, 120)):
        h.replicas[node] = []
        h.replica(node, [(2, 100)], leo=150, hw=150, log_start=start)
    inputs, _, derived = audit(spark, h)  # every invariant, prefix_deleted_not_lost among them
    for name, check in invariants.INVARIANTS.items():
        assert rows(check(inputs, derived)) == [], name

    lost = sound(History(tmp_path / "lost")).add(
        LogStart(T0 + 1600, 2, *TP, 2, 120, "delete_records"),
    )
    lost.replicas[2] = []
    lost.replica(2, [(2, 100)], leo=150, hw=150, log_start=130)  # past the recorded 120
    lost.replicas[3] = []
    lost.replica(3, [(2, 100)], leo=150, hw=150, log_start=100)  # nothing recorded at all
    got = broken(spark, lost, "prefix_deleted_not_lost")
    assert [(r["node"], r["detail"]) for r in got] == [
        (2, "the log starts at 130, but this node recorded a log start of at most 120"),
        (
            3,
            "the log starts at 100, but this node recorded a log start of at most 0 (none recorded)",
        ),
    ]


def test_job_writes_report_summary_and_tables_and_fails_on_a_broken_invariant(spark, tmp_path):
    h = sound(History(tmp_path / "in")).add(HighWatermark(T0 + 2000, 3, *TP, 2, 120))
    out = tmp_path / "out"
    lines: list[str] = []
    status = job.run(spark, h.write(), out, "hand-made", lines.append)
    assert status == 1
    assert [line.split(":")[0] for line in lines] == [
        "read 19 history records from 3 nodes",
        "elections",
        "epoch timeline",
        "truncations",
        "invariants",
        "tables written to " + str(out / "tables"),
        "report",
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert not summary["all_invariants_held"]
    assert [k for k, v in summary["invariants"].items() if not v["held"]] == [
        "high_watermark_never_decreases"
    ]
    assert summary["invariants"]["high_watermark_never_decreases"]["rows"][0]["node"] == 3
    page = (out / "report.html").read_text()
    assert "Broken: high_watermark_never_decreases" in page and page.count("data:image/png") == 3
    for name in ("events", "epoch_timeline", "elections", "truncations", "violations"):
        assert list((out / "tables" / name).glob("*.parquet")), name
    assert all(
        (out / "charts" / f"{c}.png").stat().st_size > 1000
        for c in ("timeline", "elections", "truncations")
    )


def test_generated_history_audits_clean_with_the_generators_counts(spark, tmp_path):
    stats = generate.generate(tmp_path / "gen", events=20_000, partitions=4)
    inputs, elected, derived = audit_dir(spark, tmp_path / "gen")
    assert inputs.events.count() == stats.events
    assert elected.count() == stats.elections
    cuts = derived.truncations
    assert cuts.count() == stats.truncations
    assert cuts.filter("lost_acks1").count() == stats.lost_acks1 > 0
    for name, check in invariants.INVARIANTS.items():
        assert check(inputs, derived).count() == 0, name


def audit_dir(spark, path: Path):
    """The inputs cached as job.run caches them: each invariant's plan then reads the parsed
    journals instead of parsing them again wherever it uses them (a few times each)."""
    inputs = tables.load(spark, path)
    inputs.events.cache()
    inputs.spans.cache()
    elected = tables.elections(inputs)
    return (
        inputs,
        elected,
        Derived(tables.truncations(inputs, elected), tables.replica_agreement(inputs)),
    )


def test_replica_read_from_a_data_directory_matches_the_log(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=400))
    for term, count in [(1, 3), (1, 4), (3, 2), (4, 5)]:
        log.append(make_batch([(None, b"x" * 50)] * count, timestamp_ms=1_000), term)
    log.flush()
    with open(log.segments()[-1].path, "ab") as f:
        f.write(b"\x00" * 20)  # a torn tail: not counted
    assert log.advance_start(5)  # a DeleteRecords into the first segment
    replica = read_replica(7, tmp_path / "t-0")
    assert replica is not None
    assert (replica.node, replica.topic, replica.partition) == (7, "t", 0)
    assert [(s.epoch, s.start_offset) for s in replica.epochs] == log.epochs()
    assert replica.log_end_offset == log.log_end_offset == 14
    assert replica.log_start_offset == log.log_start_offset == 5
    assert sum(s.bytes for s in replica.epochs) == sum(s.size for s in log.segments()) + 20
    log.close()


# ------------------------------------------------------------------ transactions

TXN = ("__transaction_state", 4)


def decided(h: History, commit: int, offset: int = 17, node: int = 1, *parts: str) -> History:
    partitions = list(parts) or ["t:0", "t:1"]
    return h.add(TxnDecision(T0, node, *TXN, 3, "tx", 42, 0, commit, offset, partitions))


def marker(h: History, partition: int, commit: int, at: int, offset: int = 17) -> History:
    return h.add(TxnMarker(T0 + 5, 2, "t", partition, 2, 42, 0, commit, at, 4, offset, 3))


def test_markers_that_carry_out_their_decision_hold_transactions_whole(spark, tmp_path):
    """Both markers of a commit, one written twice (resent after a coordinator failover,
    which records the decision again), the decision completed; an abort's decision still
    being carried out (not complete) has a partition without its marker yet."""
    h = sound(History(tmp_path))
    decided(h, 1)
    decided(h, 1, 17, 3)
    marker(h, 0, 1, 150)
    marker(h, 1, 1, 151)
    marker(h, 1, 1, 152)
    h.add(TxnComplete(T0 + 9, 3, *TXN, 3, "tx", 17))
    decided(h, 0, 30)
    marker(h, 0, 0, 160, 30)
    assert broken(spark, h, "transactions_whole") == []


def test_a_marker_against_its_decision_or_a_completed_one_without_markers_breaks_it(
    spark, tmp_path
):
    h = sound(History(tmp_path))
    decided(h, 1)
    marker(h, 0, 0, 150)  # an abort where a commit was decided
    h.add(TxnComplete(T0 + 9, 1, *TXN, 3, "tx", 17))  # and t:1 never got its marker
    decided(h, 0, 30, 1, "t:0")
    marker(h, 1, 0, 160, 30)  # a partition the decision does not name
    details = sorted(r["detail"] for r in broken(spark, h, "transactions_whole"))
    assert details == [
        "abort marker at offset 150 for decision 17 of __transaction_state-4 (tx), "
        "which said commit for partitions t:0,t:1",
        "abort marker at offset 160 for decision 30 of __transaction_state-4 (tx), "
        "which said abort for partitions t:0",
        "completed decision 17 of __transaction_state-4 (tx) has no marker here",
    ]


def test_a_decision_recorded_both_ways_breaks_it_and_a_given_up_marker_counts(spark, tmp_path):
    h = sound(History(tmp_path))
    decided(h, 1)
    decided(h, 0, 17, 3)
    marker(h, 0, 1, 150)
    h.add(Election(T0 + 1, 1, "t", 1, 5, 0, 0))  # node 1 led t-1 in term 5 before
    h.add(TxnMarker(T0 + 6, 1, "t", 1, 3, 42, 0, 1, -1, 4, 17, 3))  # given up, in its term 3
    h.add(TxnComplete(T0 + 9, 1, *TXN, 3, "tx", 17))
    (row,) = broken(spark, h, "transactions_whole")
    assert row["detail"].endswith("recorded as both commit and abort")
    assert broken(spark, h, "epochs_increase") == []  # the given-up marker's term is not t-1's


STALE = "stale_markers_fenced"


def carried_out(
    h: History,
    decision: int,
    epoch: int,
    at: int,
    commit: int = 1,
    node: int = 2,
    pid: int = 42,
    by: int | None = None,
) -> History:
    """Decision `decision` of __transaction_state-4, recorded by its coordinator of `epoch`
    (node 1 + epoch - 3), and its marker on t-0 at offset `at`, sent by that coordinator (or
    the one of epoch `by`) and committed under node `node`'s lead (term 2)."""
    return h.add(
        TxnDecision(T0 + at, epoch - 2, *TXN, epoch, "tx", pid, 0, commit, decision, ["t:0"]),
        TxnMarker(T0 + at, node, *TP, 2, pid, 0, commit, at, 4, decision, by or epoch),
    )


def unversioned(h: History, node: int) -> History:
    """Node's markers as written before they recorded their coordinator epoch."""
    h.raw[node] = [
        json.dumps({k: v for k, v in json.loads(line).items() if k != "coordinator_epoch"})
        for line in h.raw[node]
    ]
    return h


def test_markers_in_the_order_of_their_decisions_hold_stale_markers_fenced(spark, tmp_path):
    """The coordinator of epoch 3 decides 17 and writes its marker; the one of epoch 4 loads
    the decision and writes it again (a no-op), then carries out 30 and 40 (markers recorded
    by two leaders of t-0); the old one's retry of 17 is given up (-1, not in the log). A
    second producer's markers are their own sequence."""
    h = sound(History(tmp_path))
    carried_out(h, 17, 3, 150)
    carried_out(h, 17, 4, 152)
    carried_out(h, 30, 4, 155)
    carried_out(h, 40, 4, 160, commit=0, node=3)
    h.add(TxnMarker(T0 + 170, 1, *TP, 3, 42, 0, 1, -1, 4, 17, 3))
    carried_out(h, 9, 3, 165, pid=43)
    assert broken(spark, h, STALE) == []


def seed_2123(h: History) -> History:
    """On t-0: decision 17 (epoch 3, finished again by epoch 4) is carried out, then 30
    (epoch 4); the producer's next transaction writes 156-157, and the epoch-3 coordinator's
    retried commit of 17 lands at 158 (recorded by node 3, leading t-0 in term 2 too),
    before epoch 4's abort of 31: the aborted records are read as committed."""
    carried_out(h, 17, 3, 150)
    carried_out(h, 17, 4, 151)
    carried_out(h, 30, 4, 155)
    h.add(TxnMarker(T0 + 158, 3, *TP, 2, 42, 0, 1, 158, 4, 17, 3))
    return carried_out(h, 31, 4, 159, commit=0)


def test_a_deposed_coordinators_marker_after_a_later_decisions_breaks_it(spark, tmp_path):
    """transactions_whole misses it: the marker agrees with its own decision. A history
    written before markers recorded their coordinator epoch shows it by its decision."""
    (row,) = broken(spark, seed_2123(sound(History(tmp_path))), STALE)
    assert (row["topic"], row["partition"], row["node"], row["term"]) == ("t", 0, 3, 2)
    assert row["detail"] == (
        "commit marker at offset 158 (producer 42, epoch 0, coordinator epoch 3) for decision "
        "17 of __transaction_state-4 (tx, coordinator epochs 3,4), after the marker at offset "
        "155 for the later decision 30 (coordinator epochs 4), after coordinator epoch 4's "
        "marker at offset 155"
    )
    h = seed_2123(sound(History(tmp_path / "old")))
    for node in (2, 3):
        unversioned(h, node)
    (row,) = broken(spark, h, STALE)
    assert row["detail"] == (
        "commit marker at offset 158 (producer 42, epoch 0, coordinator epoch not recorded) "
        "for decision 17 of __transaction_state-4 (tx, coordinator epochs 3,4), after the "
        "marker at offset 155 for the later decision 30 (coordinator epochs 4)"
    )
    assert broken(spark, h, "transactions_whole") == []


def test_a_deposed_coordinators_marker_of_the_decision_its_successor_finished_breaks_it(
    spark, tmp_path
):
    """The epoch-3 coordinator's retry of 17 lands after epoch 4 finished 17 and the producer's
    next transaction wrote 152-153: it commits them, whatever 30 says. Only the coordinator
    epoch shows it (the decision is the latest one); recorded without it, it is not seen."""
    h = sound(History(tmp_path))
    carried_out(h, 17, 3, 150)
    carried_out(h, 17, 4, 151)
    carried_out(h, 17, 4, 154, by=3)
    carried_out(h, 30, 4, 155, commit=0)
    (row,) = broken(spark, h, STALE)
    assert row["detail"] == (
        "commit marker at offset 154 (producer 42, epoch 0, coordinator epoch 3) for decision "
        "17 of __transaction_state-4 (tx, coordinator epochs 3,4), after coordinator epoch 4's "
        "marker at offset 151"
    )
    h.root = tmp_path / "old"
    assert broken(spark, unversioned(h, 2), STALE) == []


# ------------------------------------------------------------------ configuration changes

ACKED_ON_MAJORITIES = "acknowledged_on_configuration_majorities"


def conf(cls, at: int, node: int, index: int, voters, outgoing=(), learners=(), term: int = 2):
    """A configuration entry of term 2 at offset 150 (after node 2's records), as `node`
    recorded it at T0 + `at`."""
    return cls(
        T0 + at,
        node,
        *TP,
        term,
        index,
        term,
        150,
        sorted(voters),
        sorted(outgoing),
        sorted(learners),
    )


def moved(h: History, target: tuple[int, ...], steps: list[tuple[int, ...]]) -> History:
    """Node 2, leading term 2, walks the group through `steps` (voters; a step of two sets is
    joint: new, old), each appended and committed on nodes 2 and 3."""
    for n, step in enumerate(steps):
        voters, outgoing = (step[0], step[1]) if isinstance(step[0], tuple) else (step, ())
        for node in (2, 3):
            h.add(conf(ConfAppended, 1410 + n, node, 20 + n, voters, outgoing))
            h.add(conf(ConfCommitted, 1420 + n, node, 20 + n, voters, outgoing))
    return h


def test_a_move_and_a_cut_uncommitted_configuration_hold_the_configuration_invariant(
    spark, tmp_path
):
    """1,2,3 -> 2,3,4 under node 2 in term 2: 4 a learner, then joint, then the new voters;
    node 1 drops its copy and 2 writes on (acks=all to 170) under 2,3,4. Node 1, the deposed
    leader of term 1, had appended a configuration entry nobody else got, and cut it: Raft
    takes it back, and it was never in force on a majority. Every invariant holds."""
    h = sound(History(tmp_path))
    moved(h, (2, 3, 4), [(1, 2, 3), ((2, 3, 4), (1, 2, 3)), (2, 3, 4)])
    h.add(
        conf(ConfAppended, 1409, 2, 20, (1, 2, 3), (), (4,)),  # the learner step, as appended
        Ack(T0 + 1500, 2, *TP, 2, -1, 170),
        HighWatermark(T0 + 1501, 2, *TP, 2, 170),
        HighWatermark(T0 + 1502, 4, *TP, 2, 170),
        conf(ConfAppended, 50, 1, 8, (1, 2), term=1),
        Truncation(T0 + 1200, 1, *TP, 2, "raft", 8, 8, 100, 100, [1], 0, 0, 0),
        ConfTruncated(T0 + 1201, 1, *TP, 2, 8, 1, 100, [1, 2], [], []),  # in its term 2
    )
    h.replicas[1] = []  # moved off: its copy is gone
    for node in (2, 3, 4):
        h.replicas[node] = []
        h.replica(node, [(1, 0), (2, 100)], leo=170, hw=170)
    inputs, _, derived = audit(spark, h)  # every invariant, ACKED_ON_MAJORITIES among them
    for name, check in invariants.INVARIANTS.items():
        assert rows(check(inputs, derived)) == [], name


def test_a_record_held_by_a_minority_of_the_new_configuration_breaks_it(spark, tmp_path):
    """1,2,3 -> 3,4,5 (joint, then the new voters); 4 and 5 never got term 2's records: a
    term-3 leader among them wrote other records from offset 100. The acknowledged record
    149 of term 2 is on node 3 alone of the new voters (node 2's copy is gone, its high
    watermark had passed it: held in the old half)."""
    h = sound(History(tmp_path))
    moved(h, (3, 4, 5), [((3, 4, 5), (1, 2, 3)), (3, 4, 5)])
    h.replicas[1] = []
    h.replicas[2] = []
    for node in (4, 5):
        h.replica(node, [(1, 0), (3, 100)], leo=160, hw=160)
    details = [r["detail"] for r in broken(spark, h, ACKED_ON_MAJORITIES)]
    assert sorted(details) == [
        "acknowledged offset 149 (epoch 2) is held by nodes [2,3] only, not a majority of "
        "configuration {3,4,5 & 1,2,3} (entry 20 of term 2)",
        "acknowledged offset 149 (epoch 2) is held by nodes [3] only, not a majority of "
        "configuration {3,4,5} (entry 21 of term 2)",
    ]
    # where 4 holds term 2's records, 3 and 4 are a majority of both halves
    ok = sound(History(tmp_path / "ok"))
    moved(ok, (3, 4, 5), [((3, 4, 5), (1, 2, 3)), (3, 4, 5)])
    ok.replicas[1] = []
    ok.replicas[2] = []
    ok.replica(4, [(1, 0), (2, 100)], leo=150, hw=150)
    assert broken(spark, ok, ACKED_ON_MAJORITIES) == []


def test_a_committed_configuration_entry_cut_later_breaks_it(spark, tmp_path):
    h = sound(History(tmp_path))
    moved(h, (1, 2, 3), [(1, 2, 3)])
    h.add(
        Truncation(T0 + 1600, 3, *TP, 3, "raft", 20, 20, 150, 150, [2], 0, 0, 0),
        ConfTruncated(T0 + 1601, 3, *TP, 3, 20, 2, 150, [1, 2, 3], [], []),
    )
    (row,) = broken(spark, h, ACKED_ON_MAJORITIES)
    assert (row["node"], row["term"], row["time_ms"]) == (3, 3, T0 + 1601)
    assert row["detail"] == (
        "committed configuration entry 20 of term 2 ({1,2,3}) was cut from this log"
    )


# ------------------------------------------------------------------ replicas dropped and re-created


def moved_back(
    tmp_path: Path, boundaries: bool = True, dropped: tuple[int, int] = (150, 2)
) -> History:
    """Under configuration {1,2,3} (entry 20, committed on 2 and 3), node 3, whose high
    watermark had reached 150 in term 2, drops its replica (moved off) and later opens a new,
    empty one (moved back): it starts at term 0 and high watermark 0, first copies a deposed
    leader's (node 1's, term 1) uncommitted tail [100, 120) and cuts it when node 2's term 2
    reaches it, and is still catching up when collected (epoch 1 to offset 100). Node 1, a
    voter, lags at offset 100. Acknowledged record 149 of epoch 2 is on node 2 and was on
    node 3's dropped copy. `boundaries` False leaves out the drop and creation records;
    `dropped`: the dropped copy's log end and last epoch."""
    h = moved(sound(History(tmp_path)), (1, 2, 3), [(1, 2, 3)])
    if boundaries:
        h.add(ReplicaDropped(T0 + 1500, 3, *TP, 2, "moved", *dropped))
        h.add(ReplicaCreated(T0 + 1600, 3, *TP, 0, "new"))
    h.add(
        HighWatermark(T0 + 1601, 3, *TP, 0, 0),
        LeaderSeen(T0 + 1602, 3, *TP, 1, 1),
        Truncation(T0 + 1700, 3, *TP, 2, "raft", 5, 6, 100, 120, [1], 20, 2, 2000),
        LeaderSeen(T0 + 1701, 3, *TP, 2, 2),
    )
    h.replicas[1] = []
    h.replica(1, [(1, 0)], leo=100, hw=100)
    h.replicas[3] = []
    h.replica(3, [(1, 0)], leo=100, hw=0, term=2)
    return h


def test_a_replica_dropped_and_created_again_holds_every_invariant(spark, tmp_path):
    """Its high watermark and term start again from 0, a cut below the dropped copy's high
    watermark cuts nothing committed, and the dropped copy counts for the configuration it
    was a voter of: each incarnation is followed on its own."""
    inputs, _, derived = audit(spark, moved_back(tmp_path))
    for name, check in invariants.INVARIANTS.items():
        assert rows(check(inputs, derived)) == [], name


def test_a_voter_dropped_before_it_learned_the_commit_counts_by_its_log_end(spark, tmp_path):
    """Node 3 recorded nothing past record 149 (no high watermark, no configuration entry:
    a voter a move removes may be dropped before its leader tells it the commit), but its
    log ended at 150 in epoch 2 when it was dropped: it held the record, a majority of
    {1,2,3} did. Dropped with its log's last entry of epoch 1, it did not."""
    for last_epoch, violations in ((2, 0), (1, 1)):
        h = moved_back(tmp_path / str(last_epoch), dropped=(150, last_epoch))
        h.raw[3] = [
            line
            for line in h.raw[3]
            if '"conf_' not in line
            and not ('"kind": "hw"' in line and '"high_watermark": 150' in line)
        ]
        assert len(broken(spark, h, ACKED_ON_MAJORITIES)) == violations, last_epoch


def test_the_same_history_without_the_drop_breaks_the_invariants(spark, tmp_path):
    """Without the records of the drop and the creation it is one replica going back."""
    h = moved_back(tmp_path, boundaries=False)
    (row,) = broken(spark, h, "high_watermark_never_decreases")
    assert (row["node"], row["detail"]) == (3, "high watermark went from 150 back to 0")
    (row,) = broken(spark, h, "epochs_increase")
    assert row["detail"] == "journal: hw record in term 0 after a conf_committed record in term 2"
    (row,) = broken(spark, h, "no_committed_record_truncated")
    assert "own high watermark already at 150" in row["detail"]


def test_a_high_watermark_going_back_within_a_new_replica_breaks_the_invariant(spark, tmp_path):
    h = moved_back(tmp_path).add(
        HighWatermark(T0 + 1800, 3, *TP, 2, 50), HighWatermark(T0 + 1801, 3, *TP, 2, 40)
    )
    (row,) = broken(spark, h, "high_watermark_never_decreases")
    assert (row["node"], row["detail"]) == (3, "high watermark went from 50 back to 40")


def test_a_dropped_replicas_log_start_does_not_explain_the_new_ones(spark, tmp_path):
    """Node 3's dropped copy applied a DeleteRecords to 50; its new copy starts at 50 with
    nothing recorded since (no install, no log start): records 0-49 were lost, not deleted."""
    h = moved(sound(History(tmp_path)), (1, 2, 3), [(1, 2, 3)]).add(
        LogStart(T0 + 1450, 3, *TP, 2, 50, "delete_records"),
        ReplicaDropped(T0 + 1500, 3, *TP, 2, "moved", 150, 2),
        ReplicaCreated(T0 + 1600, 3, *TP, 0, "new"),
        LeaderSeen(T0 + 1601, 3, *TP, 2, 2),
    )
    h.replicas[3] = []
    h.replica(3, [(1, 50), (2, 100)], leo=150, hw=150, log_start=50)
    (row,) = broken(spark, h, "prefix_deleted_not_lost")
    assert (row["node"], row["detail"]) == (
        3,
        "the log starts at 50, but this node recorded a log start of at most 0 (none recorded)",
    )
    # recorded again by the new copy (its snapshot install), it holds
    h.add(SnapshotInstall(T0 + 1602, 3, *TP, 2, 2, 50, 150))
    h.root = tmp_path / "installed"
    assert broken(spark, h, "prefix_deleted_not_lost") == []
