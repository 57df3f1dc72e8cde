"""GET /metrics of real nodes, scraped by a real Prometheus (Debian's `prometheus`, started
by the test, tests/support/prometheus.py) and asked over its HTTP API: the produce count and
rate and a consumer group's lag it reports are what the test did with confluent-kafka; with
1,000 partitions every node's listing stays within the cardinality budget (docs/metrics.md);
every metric the Grafana dashboard in deploy/ queries exists; the deploy scrape config is
valid for promtool.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families
from support import prometheus
from support.cluster import wait_for

from kafka_api.handlers import HANDLERS
from raftlog.node.metrics import SERIES_PER_REPLICA, series_budget

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "raftlog.json"
SCRAPE_CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"
TOPIC = "metered"
PARTITIONS = 3
GROUP = "metered-readers"
RATE = 400  # records a second, produced for SECONDS in steps of STEP seconds
SECONDS = 12
STEP = 0.1
WINDOW = 8  # seconds of the steady part Prometheus' rate() is asked about


def scrape(admin: str) -> str:
    with urllib.request.urlopen(f"http://{admin}/metrics", timeout=30) as r:  # noqa: S310
        assert r.headers["Content-Type"].startswith("text/plain"), r.headers["Content-Type"]
        return r.read().decode()


def exposed_names(text: str) -> set[str]:
    """Every name a query can use: families (even those without samples yet) and the
    sample names of each (a histogram's _bucket, _sum and _count)."""
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name + ("_total" if family.type == "counter" else ""))
        if family.type == "histogram":
            names.update(f"{family.name}_{s}" for s in ("bucket", "sum", "count"))
        names.update(s.name for s in family.samples)
    return names


def dashboard_metrics() -> set[str]:
    """Metric names in the dashboard's queries (PromQL functions and labels are not ours)."""
    found = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "definition") and isinstance(value, str):
                    found.update(re.findall(r"\b((?:raftlog|process)_[a-z_]+)\b", value))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(json.loads(DASHBOARD.read_text()))
    return found


def paced_produce(bootstrap: str) -> tuple[dict[int, int], float]:
    """RATE records a second, round robin over the partitions, for SECONDS (acks=all);
    returns the records acknowledged per partition and when the production started."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    acked = dict.fromkeys(range(PARTITIONS), 0)
    errors: list[str] = []

    def done(err, msg) -> None:  # noqa: ANN001
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.partition()] += 1

    per_step = round(RATE * STEP)
    started = time.time()
    for step in range(round(SECONDS / STEP)):
        for i in range(per_step):
            producer.produce(
                TOPIC, value=b"%d-%d" % (step, i), partition=i % PARTITIONS, on_delivery=done
            )
        producer.poll(0)
        time.sleep(max(0.0, started + (step + 1) * STEP - time.time()))
    assert producer.flush(60) == 0
    assert errors == []
    return acked, started


def commit(bootstrap: str, offsets: dict[int, int]) -> None:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False}
    )
    try:
        consumer.commit(
            offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def read_all(bootstrap: str, total: int) -> int:
    """Reads the topic from the start with an assigned consumer (no commits)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "metered-scan", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got = 0
    deadline = time.monotonic() + 60
    try:
        while got < total and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1.0):
                assert msg.error() is None, msg.error()
                got += 1
    finally:
        consumer.close()
    return got


def by_partition(result: list[tuple[dict[str, str], float]]) -> dict[int, float]:
    return {int(labels["partition"]): value for labels, value in result}


def test_prometheus_reports_the_produce_rate_and_the_consumer_lag(cluster_factory, tmp_path):
    cluster = cluster_factory(name="metrics")
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    admins = [cluster.node(i).admin for i in cluster.node_ids]
    with prometheus.running(tmp_path / "prometheus", admins) as prom:
        prom.wait_up()
        acked, started = paced_produce(cluster.bootstrap)
        total = sum(acked.values())
        assert total == RATE * SECONDS

        produced = f'sum(raftlog_partition_records_in_total{{topic="{TOPIC}"}})'
        wait_for(lambda: prom.value(produced) == total, 30, what=f"Prometheus to count {total}")
        # the steady part: a window well inside the production, asked after the fact
        at = started + 2 + WINDOW
        rate = prom.value(
            f'sum(rate(raftlog_partition_records_in_total{{topic="{TOPIC}"}}[{WINDOW}s]))', at
        )
        print(f"\nproduced {RATE}/s; Prometheus' rate over {WINDOW}s: {rate:.1f}/s")
        assert rate is not None and abs(rate - RATE) <= 0.2 * RATE, rate
        appended = f'sum by (partition) (raftlog_partition_records_in_total{{topic="{TOPIC}"}})'
        assert by_partition(prom.query(appended)) == {p: float(n) for p, n in acked.items()}

        committed = {p: n // (p + 2) for p, n in acked.items()}
        commit(cluster.bootstrap, committed)
        expected = {p: float(acked[p] - committed[p]) for p in acked}
        lag = f'raftlog_consumer_group_lag{{group="{GROUP}",topic="{TOPIC}"}}'
        wait_for(
            lambda: by_partition(prom.query(lag)) == expected,
            30,
            what=f"Prometheus to report lag {expected}",
        )
        lag_sum = prom.value(f'raftlog_consumer_group_lag_sum{{group="{GROUP}"}}')
        assert lag_sum == sum(expected.values())

        assert read_all(cluster.bootstrap, total) == total
        sent = f'sum(raftlog_partition_records_out_total{{topic="{TOPIC}"}})'
        wait_for(lambda: prom.value(sent) == total, 30, what=f"Prometheus to count {total} out")
        requests = prom.query('sum by (api) (raftlog_kafka_requests_total{api=~"Produce|Fetch"})')
        assert {labels["api"] for labels, n in requests if n > 0} == {"Produce", "Fetch"}

    # what the dashboard asks for is in a real node's listing
    names = exposed_names(scrape(admins[0]))
    missing = dashboard_metrics() - names
    assert not missing, f"the dashboard queries metrics no node exposes: {sorted(missing)}"


def test_the_dashboard_and_the_deploy_scrape_config_are_well_formed() -> None:
    """The dashboard queries metrics (and only ours or the process's); promtool accepts the
    scrape config that deploy/ ships for the compose cluster."""
    assert {"raftlog_partition_records_in_total", "raftlog_consumer_group_lag"} <= (
        dashboard_metrics()
    )
    check = subprocess.run(
        [prometheus.binary("promtool"), "check", "config", str(SCRAPE_CONFIG)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    compose = (REPO / "docker-compose.yml").read_text()
    for port in re.findall(r'"127\.0\.0\.1:(\d+)"', SCRAPE_CONFIG.read_text()):
        assert f"127.0.0.1:{port}:{port}" in compose, f"admin port {port} is not published"


def test_a_thousand_partitions_stay_within_the_series_budget(cluster_factory, tmp_path):
    partitions = 1000
    cluster = cluster_factory(name="metrics-many")
    cluster.cli(
        "topic", "create", "many", "--partitions", str(partitions), "--replication-factor", "3",
        "--bootstrap", cluster.bootstrap, timeout=300,
    )  # fmt: skip
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_for(
        lambda: all(
            p.leader >= 0
            for p in admin.list_topics("many", timeout=30).topics["many"].partitions.values()
        ),
        180,
        what=f"a leader for each of {partitions} partitions",
    )
    admins = [cluster.node(i).admin for i in cluster.node_ids]
    # a scrape of 12,000 series costs a node 0.2-0.3 s of a core: every 5 s, not every second
    with prometheus.running(tmp_path / "prometheus", admins, interval="5s") as prom:
        prom.wait_up()

        def scraped() -> dict[str, tuple[float, float, float, float]]:
            """Per node, from one scrape: samples, replicas, leaders, scrape seconds."""
            found: dict[str, list[float]] = {}
            at = time.time() - 5  # one moment for every query, so all read the same scrape
            for expr in (
                "scrape_samples_scraped",
                "raftlog_node_partition_replicas",
                "raftlog_node_partition_leaders",
                "scrape_duration_seconds",
            ):
                for labels, value in prom.query(expr, at):
                    found.setdefault(labels["instance"], []).append(value)
            return {k: (v[0], v[1], v[2], v[3]) for k, v in found.items() if len(v) == 4}

        nodes = wait_for(
            lambda: (
                (s := scraped())
                and set(s) == set(admins)
                and all(v[1] >= partitions for v in s.values())
                and s
            ),
            60,
            what="every node scraped hosting the topic",
        )
    for instance, (samples, replicas, leaders, seconds) in sorted(nodes.items()):
        # every partition here is RF 3: a leader reports two followers' lag
        budget = series_budget(
            apis=len(HANDLERS), replicas=int(replicas), follower_replicas_led=2 * int(leaders)
        )
        print(
            f"\n{instance}: {samples:.0f} series for {replicas:.0f} replicas "
            f"({leaders:.0f} led), budget {budget}, scraped in {seconds * 1000:.0f} ms"
        )
        assert SERIES_PER_REPLICA * replicas <= samples <= budget
