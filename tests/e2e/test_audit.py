"""The epoch audit on a real cluster's real history.

The test produces, kills a partition leader with kill -9, hands another partition's
leadership over through the admin endpoint, restarts the whole cluster, and runs
`raftlog audit` on the data directories: the epoch timeline must match what the test did and
saw (elections, leaders, offsets), every invariant must hold, and report.html must render in
headless Chromium with its charts drawn (the screenshot is kept in the test artifacts). A copy
of the collected history with a decreasing epoch injected must fail the audit, naming the
invariant.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from collections import Counter, defaultdict
from pathlib import Path

import matplotlib.image
import numpy as np
import pyarrow.parquet as pq
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from support import history as H
from support import records as R
from support import segments as S
from support import wire as W

from analytics.collect import collect_admin, collect_local
from raftlog.config.node_config import NodeConfig

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

TOPIC = "audited"
PARTITIONS = 3
KILLED = 0  # partition whose leader is killed with kill -9
MOVED = 1  # partition whose leadership is transferred
BATCH = 1500  # records produced between the steps
DELETED = "audited-deleted"  # a topic whose start DeleteRecords moves before the failovers


def produce(cluster, run: str) -> None:
    outcome = R.produce_confluent(cluster.bootstrap, TOPIC, R.make_records(run, BATCH, PARTITIONS))
    assert len(outcome.acked) == BATCH, outcome.failed[:3]


def transfer(cluster, partition: int) -> dict:
    leader, _ = cluster.leader(TOPIC, partition)
    url = (
        f"http://{cluster.node(leader).admin}/v1/partitions/{TOPIC}/{partition}/transfer-leadership"
    )
    token = NodeConfig.load(cluster.node(leader).config).admin_token
    request = urllib.request.Request(
        url, method="POST", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.load(r)


def table(out: Path, name: str) -> list[dict]:
    return pq.read_table(out / "tables" / name).to_pylist()


def rendered_colours(png: Path) -> set[tuple[int, int, int]]:
    pixels = (matplotlib.image.imread(png)[:, :, :3] * 255).round().astype(np.uint8)
    return {tuple(int(c) for c in p) for p in np.unique(pixels.reshape(-1, 3), axis=0)}


def test_audit_of_a_cluster_through_failovers_and_restart(cluster_factory, artifacts_dir):
    cluster = cluster_factory(name="audit")
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    W.topic_metadata(cluster.bootstrap, TOPIC)
    seen: dict[int, dict[int, int]] = defaultdict(dict)  # partition -> {term: leader} observed
    for p, (leader, term) in cluster.wait_topic_leaders(TOPIC, PARTITIONS).items():
        seen[p][term] = leader
    produce(cluster, "first")

    # DeleteRecords moves another topic's start, which each replica records: the audit must
    # take that prefix for deleted, not lost
    cluster.create_topic(DELETED, partitions=1, replication_factor=3)
    outcome = R.produce_confluent(cluster.bootstrap, DELETED, R.make_records(DELETED, 300, 1))
    assert len(outcome.acked) == 300, outcome.failed[:3]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deleted = admin.delete_records([TopicPartition(DELETED, 0, 150)], request_timeout=30)
    assert deleted[TopicPartition(DELETED, 0)].result(timeout=60).low_watermark == 150

    # kill -9 the leader of one partition; a new leader takes over; the node comes back
    victim, victim_term = cluster.leader(TOPIC, KILLED)
    cluster.kill(victim)
    leader, kill_term = cluster.leader(
        TOPIC, KILLED, timeout=60, exclude=[victim], min_term=victim_term
    )
    seen[KILLED][kill_term] = leader
    produce(cluster, "after-kill")
    cluster.restart(victim)
    for p in range(PARTITIONS):
        cluster.wait_caught_up(victim, TOPIC, p, timeout=120)

    # hand another partition's leadership over
    before, before_term = cluster.leader(TOPIC, MOVED)
    moved = transfer(cluster, MOVED)
    assert moved["leader"] not in (None, before) and moved["term"] > before_term, moved
    seen[MOVED][moved["term"]] = moved["leader"]
    produce(cluster, "after-transfer")

    # the whole cluster stops and starts again
    for n in cluster.node_ids:
        for p in range(PARTITIONS):
            cluster.wait_caught_up(n, TOPIC, p, timeout=120)
    for n in cluster.node_ids:  # SIGTERM: each hands its leaderships over and stops
        assert cluster.terminate(n), f"node {n} did not stop on SIGTERM"
    for n in cluster.node_ids:
        cluster.restart(n, wait=False)
    cluster.wait_all_ready(timeout=120)
    for p, (leader, term) in cluster.wait_topic_leaders(TOPIC, PARTITIONS, timeout=120).items():
        seen[p][term] = leader
    produce(cluster, "after-restart")
    ends = W.end_offsets(cluster.bootstrap, TOPIC)
    for n in cluster.node_ids:
        for p in range(PARTITIONS):
            cluster.wait_caught_up(n, TOPIC, p, timeout=120)

    # the admin endpoints serve what the data directories hold
    by_admin, by_files = artifacts_dir / "audit-admin", artifacts_dir / "audit-files"
    for d in (by_admin, by_files):
        shutil.rmtree(d, ignore_errors=True)
    collect_admin([cluster.node(n).admin for n in cluster.node_ids], by_admin)
    collect_local(cluster.data_root, by_files)
    for n in cluster.node_ids:
        files = [json.loads(line) for line in (by_files / f"nodes/node-{n}/replicas.jsonl").open()]
        admin = [json.loads(line) for line in (by_admin / f"nodes/node-{n}/replicas.jsonl").open()]
        mine = lambda rs: {(r["topic"], r["partition"]): r for r in rs if r["topic"] == TOPIC}  # noqa: E731
        for key, r in mine(files).items():
            a = mine(admin)[key]
            assert (r["epochs"], r["log_end_offset"]) == (a["epochs"], a["log_end_offset"]), key

    out = artifacts_dir / "audit"
    shutil.rmtree(out, ignore_errors=True)
    run = cluster.cli("audit", "--data", str(cluster.data_root), "--out", str(out), timeout=600)
    progress = [line for line in run.stderr.splitlines() if line.startswith("audit [")]
    assert len(progress) == 8 and progress[-1].startswith("audit [8/8]"), run.stderr

    summary = json.loads((out / "summary.json").read_text())
    broken = {k: v for k, v in summary["invariants"].items() if not v["held"]}
    assert not broken, json.dumps(broken, indent=2)
    assert summary["invariants"]["prefix_deleted_not_lost"]["held"]
    for n in cluster.node_ids:
        starts = [
            r["log_start_offset"]
            for r in H.records(cluster, topic=DELETED)
            if r["kind"] == "log_start" and r["node"] == n
        ]
        assert starts and starts[-1] == 150, (n, starts)
    assert summary["unreadable_lines"] == 0
    assert summary["nodes"] == cluster.node_ids

    # the timeline matches what happened, read independently from the journals and the disks
    history = H.records(cluster, topic=TOPIC)
    elected = defaultdict(dict)
    for r in history:
        if r["kind"] == "election":
            elected[r["partition"]][r["term"]] = r["node"]
    timeline = defaultdict(list)
    for row in table(out, "epoch_timeline"):
        if row["topic"] == TOPIC:
            timeline[row["partition"]].append(row)
    for p in range(PARTITIONS):
        rows = sorted(timeline[p], key=lambda r: r["epoch"])
        assert {r["epoch"]: r["leader"] for r in rows} == elected[p], p
        for term, leader in seen[p].items():
            assert elected[p].get(term) == leader, (
                f"p{p}: the test saw node {leader} lead term {term}"
            )
        leader_now, _ = cluster.leader(TOPIC, p)
        on_disk = S.epochs_on_disk(cluster.partition_dir(leader_now, TOPIC, p))
        in_log = [r for r in rows if r["in_log"]]
        assert [(r["epoch"], r["start_offset"]) for r in in_log] == on_disk, p
        assert in_log[-1]["end_offset"] == ends[p]
        assert sum(r["records"] for r in in_log) == ends[p]
        assert sum(r["bytes"] for r in in_log) == sum(
            s.stat().st_size for s in cluster.partition_dir(leader_now, TOPIC, p).glob("*.log")
        )
    # epochs the test caused: the start, the kill, the transfer, the restart
    assert len(elected[KILLED]) >= 3 and len(elected[MOVED]) >= 3 and len(elected[2]) >= 2
    elections = [r for r in table(out, "elections") if r["topic"] == TOPIC]
    assert len(elections) == sum(len(e) for e in elected.values())
    # The kill's election: up to the term the test saw the new leader in. Later elections may
    # follow the victim again (the full restart) and the victim may rightly win those.
    after_kill = [
        r for r in elections if r["partition"] == KILLED and victim_term < r["term"] <= kill_term
    ]
    assert after_kill and all(
        r["previous_leader"] == victim and r["leader"] != victim for r in after_kill
    ), after_kill
    per_partition = {r["partition"]: r for r in summary["partitions"] if r["topic"] == TOPIC}
    assert Counter({p: r["elections"] for p, r in per_partition.items()}) == Counter(
        {p: len(e) for p, e in elected.items()}
    )
    cuts = [r for r in table(out, "truncations") if r["topic"] == TOPIC]
    assert not any(r["cut_committed"] for r in cuts)

    # report.html renders in headless Chromium, charts drawn
    shot = artifacts_dir / "audit-report.png"
    shot.unlink(missing_ok=True)
    subprocess.run(
        [
            shutil.which("chromium") or "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1280,2000",
            f"--screenshot={shot}",
            (out / "report.html").resolve().as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    colours = rendered_colours(shot)
    tab10_blue, tab10_orange = (31, 119, 180), (255, 127, 14)  # matplotlib's first colours
    assert tab10_blue in colours and tab10_orange in colours, "no chart colours on the page"

    # a decreasing epoch injected into a copy of the history breaks the audit
    broken_copy = artifacts_dir / "audit-broken-input"
    shutil.rmtree(broken_copy, ignore_errors=True)
    shutil.copytree(out / "collected", broken_copy)
    node = cluster.node_ids[0]
    journal = broken_copy / f"nodes/node-{node}/history.jsonl"
    last = [json.loads(line) for line in journal.read_text().splitlines()]
    mine = [r for r in last if r["topic"] == TOPIC and r["partition"] == KILLED][-1]
    injected = {**mine, "kind": "hw", "term": mine["term"] - 1, "high_watermark": ends[KILLED]}
    injected = {
        k: injected[k]
        for k in ("kind", "v", "time_ms", "node", "topic", "partition", "term", "high_watermark")
    }
    with journal.open("a") as f:
        f.write(json.dumps(injected) + "\n")
    bad_out = artifacts_dir / "audit-broken"
    shutil.rmtree(bad_out, ignore_errors=True)
    bad = cluster.cli(
        "audit", "--collected", str(broken_copy), "--out", str(bad_out), timeout=600, check=False
    )
    assert bad.returncode == 1, bad.stderr
    assert "BROKEN epochs_increase" in bad.stderr
    verdict = json.loads((bad_out / "summary.json").read_text())["invariants"]["epochs_increase"]
    assert not verdict["held"] and verdict["violations"] == 1
    (row,) = verdict["rows"]
    assert (row["topic"], row["partition"], row["node"], row["term"]) == (
        TOPIC,
        KILLED,
        node,
        mine["term"] - 1,
    )
    assert "epochs_increase" in (bad_out / "report.html").read_text()
