"""The fault workload's transactional producer against one real node, no faults: its aborted
transactions must reach the broker, or the suite's `txn_aborted_visible` check has nothing to
find. librdkafka adds a transaction's partitions only as it sends its records, and an abort
right after produce() purged them unsent: in the 300-cycle run f300 not one of 3,246 aborted
transactions wrote a record or an abort marker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import transactions as T

from .workload import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOPIC = "workload-txn"
PARTITIONS = 2


def test_aborted_transactions_write_their_records_first(cluster_factory: Any, tmp_path: Path):
    cluster = cluster_factory(
        nodes=1, name="workload", broker={"transaction.state.log.replication.factor": 1}
    )
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=1)
    out = tmp_path / "txn.jsonl"
    argv = [
        *(sys.executable, "-m", "tests.faults.workload", "--transactional", "--name", "txn"),
        *("--bootstrap", cluster.bootstrap, "--topic", TOPIC, "--partitions", str(PARTITIONS)),
        *("--out", str(out), "--rate", "1000", "--max-records", "40", "--txn-size", "5"),
        *("--abort-every", "2"),
    ]
    subprocess.run(argv, cwd=REPO, check=True, timeout=120, capture_output=True)
    txns = [r for r in map(json.loads, out.read_text().splitlines()) if r["kind"] == "txn"]
    values = {
        outcome: {f"txn:{s}".encode() for t in txns if t["outcome"] == outcome for s in seqs(t)}
        for outcome in ("committed", "aborted")
    }
    assert len(values["committed"]) == len(values["aborted"]) == 20, txns

    everything = T.read_values(
        cluster.bootstrap, TOPIC, range(PARTITIONS), "read_uncommitted", 40, settle_s=1.0
    )
    assert values["aborted"] <= set(everything)  # written, then aborted
    committed = T.read_values(
        cluster.bootstrap, TOPIC, range(PARTITIONS), expected=20, settle_s=1.0
    )
    assert sorted(committed) == sorted(values["committed"])


def seqs(txn: dict[str, Any]) -> range:
    return range(txn["first"], txn["last"] + 1)
