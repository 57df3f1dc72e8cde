"""Real clients against a real three-node cluster: confluent-kafka (lz4), kafka-python
(gzip) and aiokafka (zstd) each produce 20,000 records with acks=all into a 6-partition,
RF-3 topic; everything is read back by each client; kcat sees the cluster and round-trips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading

import pytest
from support import records as R
from support import segments as S
from support import wire as W

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

TOPIC = "clients"
PARTITIONS = 6
PER_CLIENT = int(os.environ.get("RAFTLOG_E2E_RECORDS", "20000"))
CODECS = {"confluent-kafka": "lz4", "kafka-python": "gzip", "aiokafka": "zstd"}
CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.fixture(scope="module")
def produced(module_cluster):
    """The three producers run concurrently; returns ({client: outcome}, end offsets)."""
    module_cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    W.topic_metadata(module_cluster.bootstrap, TOPIC)
    outcomes: dict[str, R.ProduceOutcome] = {}
    errors: dict[str, BaseException] = {}

    def run(client: str) -> None:
        try:
            recs = R.make_records(client, PER_CLIENT, PARTITIONS)
            outcomes[client] = R.PRODUCERS[client](
                module_cluster.bootstrap, TOPIC, recs, compression=CODECS[client], timeout=300
            )
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors[client] = exc

    threads = [threading.Thread(target=run, args=(c,), name=c) for c in CODECS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(360)
    assert not any(t.is_alive() for t in threads), "a producer did not finish in 360 s"
    if errors:
        raise next(iter(errors.values()))
    ends = W.end_offsets(module_cluster.bootstrap, TOPIC)
    return outcomes, ends


def _acked(outcomes):
    return [r for o in outcomes.values() for r in o.acked]


def test_every_record_acknowledged(produced):
    outcomes, ends = produced
    for client, out in outcomes.items():
        assert not out.failed, f"{client}: {len(out.failed)} sends failed, first: {out.failed[:3]}"
        assert not out.unresolved, f"{client}: {len(out.unresolved)} sends never answered"
        assert len(out.acked) == PER_CLIENT, client
    assert sum(ends.values()) == len(CODECS) * PER_CLIENT
    problems = R.check_send_order(_acked(outcomes))
    assert not problems, problems[:10]


@pytest.mark.parametrize("reader", list(R.CONSUMERS))
def test_read_back_by_each_client(produced, module_cluster, reader):
    """In order per partition; keys, values, headers, timestamps intact; offsets contiguous
    from 0 to the end; each acknowledged record exactly once at its acknowledged offset."""
    outcomes, ends = produced
    got = R.CONSUMERS[reader](module_cluster.bootstrap, TOPIC, ends, timeout=180)
    report = R.check_log(
        _acked(outcomes),
        got,
        start_offsets={p: 0 for p in ends},
        end_offsets=ends,
    )
    report.raise_if_failed()
    order = R.check_send_order(got)
    assert not order, order[:10]
    if reader == "confluent-kafka":
        epochs = {r.leader_epoch for r in got}
        assert None not in epochs and min(epochs) >= 0, f"batches without a leader epoch: {epochs}"


def test_replicas_identical_on_disk(produced, module_cluster):
    """Every replica stores the same bytes (below the smallest high watermark), and each
    partition directory follows the layout."""
    outcomes, ends = produced
    for p in range(PARTITIONS):
        caught = {}
        for node in module_cluster.node_ids:
            caught = module_cluster.wait_caught_up(node, TOPIC, p, timeout=120)
        below = min(int(s["high_watermark"]) for s in caught.values())
        assert below == ends[p]
        dirs = {n: module_cluster.partition_dir(n, TOPIC, p) for n in module_cluster.node_ids}
        for n, d in dirs.items():
            problems = S.check_partition_dir(d, below=below)
            assert not problems, f"node {n} {d}: {problems[:10]}"
        first, *others = module_cluster.node_ids
        for n in others:
            diff = S.compare_replicas(dirs[first], dirs[n], below)
            assert not diff, diff


def test_batches_stored_with_the_clients_codec(produced, module_cluster):
    """lz4, gzip and zstd batches are all on disk, stored as produced."""
    outcomes, ends = produced
    node = module_cluster.node_ids[0]
    codecs_seen: set[int] = set()
    for p in range(PARTITIONS):
        d = module_cluster.partition_dir(node, TOPIC, p)
        codecs_seen |= {b.data[22] & 0x07 for b in S.iter_batches(d, ends[p])}
    missing = {c for c in CODECS.values() if CODEC_IDS[c] not in codecs_seen}
    if missing:
        with W.KafkaWire(module_cluster.node(node).kafka) as w:
            versions = w.api_versions()
        hint = ""
        if "lz4" in missing and 10 not in versions:
            hint = (
                "; librdkafka compresses with lz4 only for brokers that advertise "
                "FindCoordinator (api 10), and this one does not"
            )
        raise AssertionError(
            f"no {sorted(missing)} batches on disk (codecs seen: {codecs_seen}){hint}"
        )


# --------------------------------------------------------------------------- kcat


def _kcat(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    exe = shutil.which("kcat") or shutil.which("kafkacat")
    if exe is None:
        pytest.fail("kcat is not installed (make test installs it: apt-get install kcat)")
    return subprocess.run(
        [exe, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_kcat_metadata_lists_brokers_and_leaders(produced, module_cluster):
    proc = _kcat("-b", module_cluster.bootstrap, "-L", "-J", "-t", TOPIC, "-m", "30")
    assert proc.returncode == 0, proc.stderr
    meta = json.loads(proc.stdout)
    brokers = {b["id"]: b["name"] for b in meta["brokers"]}
    assert sorted(brokers) == module_cluster.node_ids, meta
    for node_id, name in brokers.items():
        assert name.split("/")[0] == module_cluster.node(node_id).kafka, (node_id, name)
    (topic,) = [t for t in meta["topics"] if t["topic"] == TOPIC]
    assert "error" not in topic, topic
    assert sorted(p["partition"] for p in topic["partitions"]) == list(range(PARTITIONS))
    for p in topic["partitions"]:
        assert "error" not in p, p
        assert p["leader"] in brokers, p
        assert sorted(r["id"] for r in p["replicas"]) == module_cluster.node_ids, p
        leader, _ = module_cluster.leader(TOPIC, p["partition"])
        assert p["leader"] == leader, (
            f"kcat says {p['leader']} leads p{p['partition']}, /v1/status says {leader}"
        )


def test_kcat_round_trip(module_cluster):
    topic = "kcat"
    module_cluster.create_topic(topic, partitions=1, replication_factor=3)
    lines = [f"key-{i}:value-{i}" for i in range(50)]
    proc = _kcat(
        "-b", module_cluster.bootstrap, "-P", "-t", topic, "-p", "0", "-K:", "-H", "via=kcat",
        "-X", "acks=all", "-m", "30",
        stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    proc = _kcat(
        "-b", module_cluster.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
        "-c", str(len(lines)), "-q", "-f", "%o|%k|%s|%h\n", "-m", "30",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = proc.stdout.splitlines()
    assert got == [f"{i}|key-{i}|value-{i}|via=kcat" for i in range(len(lines))]
