"""kafkajs 2.2.4 (pinned in tests/clients/kafkajs, installed by `make test`) against three
real nodes: a consumer joining with rebalanceTimeout 0 (what kafkajs's own tests leave it
at) reads everything after one join; a transactional producer's committed transaction is
read by a read_committed consumer and its aborted one never, and a second producer with the
same transactional id fences the first; a read-process-write loop commits its output and
its consumer offsets together (sendOffsets)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CLIENT = Path(__file__).resolve().parents[1] / "clients" / "kafkajs"


def _run(cluster: Any, flow: str, topic: str) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None or not (CLIENT / "node_modules" / "kafkajs").is_dir():
        pytest.fail("node and kafkajs are needed: `make test` installs them (npm ci)")
    proc = subprocess.run(
        [node, str(CLIENT / "client.js"), flow, cluster.bootstrap, topic],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_consumer_joining_with_rebalance_timeout_zero_reads_everything(module_cluster) -> None:
    module_cluster.create_topic("kjs-join0", partitions=2, replication_factor=3)
    result = _run(module_cluster, "join0", "kjs-join0")
    assert result == {"consumed": 30, "joins": 1}


def test_transactions_commit_abort_and_fence(module_cluster) -> None:
    module_cluster.create_topic("kjs-txn", partitions=3, replication_factor=3)
    result = _run(module_cluster, "transactions", "kjs-txn")
    committed = sorted([f"committed-{i}" for i in range(10)] + [f"successor-{i}" for i in range(5)])
    assert result["values"] == committed
    assert result["fenced"] == "INVALID_PRODUCER_EPOCH"  # kafkajs asks AddPartitionsToTxn v1


def test_read_process_write_commits_offsets_with_the_output(module_cluster) -> None:
    module_cluster.create_topic("kjs-rpw", partitions=1, replication_factor=3)
    module_cluster.create_topic("kjs-rpw-out", partitions=1, replication_factor=3)
    result = _run(module_cluster, "sendOffsets", "kjs-rpw")
    assert result == {"processed": 10, "committed": [10]}
