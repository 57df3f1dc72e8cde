"""Workload 9, scale: one topic of many partitions on a fresh cluster, and what it costs
(create time, idle CPU, RSS, Metadata and scrape time, spread produce, failover)."""

from __future__ import annotations

import statistics
import time
import urllib.request
from collections import Counter
from collections.abc import Callable

from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
)

from bench.procs import BenchError, cpu_seconds, kill9, rss_mb, wait_until
from bench.systems import Raftlog, System
from bench.workloads import (
    Settings,
    client_config,
    idle_cpu_per_node,
    produce,
)

# scale: a slow create or failover is a figure (None and a note), not the end of the run.
SCALE_CREATE_TIMEOUT = 300.0


SCALE_FAILOVER_TIMEOUT = 120.0


METADATA_SAMPLES = 5


SCRAPE_SAMPLES = 3  # fresh /metrics listings per node for scrape_ms


SCRAPE_RETRY_S = 1.0  # between asks while a node gives its last listing again


SCRAPE_FRESH_TIMEOUT_S = 120.0


BASELINE_PARTITIONS = 6  # what the spread over many partitions is compared with


def scale(
    system: Raftlog,
    settings: Settings,
    partitions: int,
    values: list[bytes],
    baseline: bool,
    note: Callable[[str], None],
) -> dict:
    """Workload 9, on a fresh cluster: one topic of `partitions` partitions. Its creation
    until Metadata shows every partition led; idle CPU and RSS; Metadata time; acks=all
    produce spread over all partitions (with `baseline`, also over six, to compare with);
    then kill -9 of the node leading most partitions, until a live node's Metadata shows
    every partition led again. A figure that fails or times out is None, with the reason in
    "failed" (or "skipped", when it needs a figure that failed), so the rest still count."""
    topic = "scale"
    admin = AdminClient(client_config(system, log_level=2))  # no line per refused reconnect
    result: dict = {"partitions": partitions, "per_node": {}, "failed": {}, "skipped": {}}

    def measure(field: str, fn: Callable[[], float], needs: str | None = None) -> None:
        result[field] = None
        if needs and result[needs] is None:
            result["skipped"][field] = f"no {needs}"
            note(f"{field} skipped: no {needs}")
            return
        try:
            result[field] = fn()
        except Exception as exc:  # noqa: BLE001 - one failed figure must not lose the others
            result["failed"][field] = f"{type(exc).__name__}: {exc}"
            note(f"{field} failed: {result['failed'][field]}")
            return
        note(f"{field}={result[field]:.4g}")

    def idle_cpu_pct() -> float:
        result["per_node"]["idle_cpu_pct"] = cpu = idle_cpu_per_node(system, settings)
        return max(cpu.values())

    def rss() -> float:
        result["per_node"]["rss_mb"] = per_node = {
            label: rss_mb(pid) for label, pid in system.pids().items()
        }
        return max(v or 0 for v in per_node.values())

    def scrape_ms() -> float:
        idle = result["per_node"].get("idle_cpu_pct", {})
        result["per_node"]["scrape_ms"], result["series"] = _scrape_ms(system, idle)
        return max(result["per_node"]["scrape_ms"].values())

    def over_six() -> float:
        system.create_topic("scale-six", BASELINE_PARTITIONS)
        return produce(system, "scale-six", settings.scale_records, "none", values)["mb_s"]

    def spread() -> float:
        return produce(system, topic, settings.scale_records, "none", values)["mb_s"]

    def failover() -> float:
        victim, led = Counter(_metadata_leaders(admin, topic).values()).most_common(1)[0]
        result["failover_node"], result["failover_led"] = victim, led
        return _failover_s(system, topic, partitions, victim)

    measure("create_s", lambda: _create_s(admin, system, topic, partitions))
    measure("idle_cpu_pct", idle_cpu_pct)
    measure("rss_mb", rss)
    measure("metadata_ms", lambda: _metadata_ms(admin, topic))
    measure("scrape_ms", scrape_ms)
    if baseline:
        measure("six_mb_s", over_six)
    measure("spread_mb_s", spread, needs="create_s")
    measure("failover_s", failover, needs="create_s")
    return result


def _scrape_ms(system: Raftlog, idle_pct: dict[str, float]) -> tuple[dict[str, float], int]:
    """Per node, the CPU milliseconds one GET /metrics costs it (the mean of SCRAPE_SAMPLES,
    less its idle CPU meanwhile), and the most series a node listed. Fresh listings only: the
    bench's scraper is paused, and a listing byte for byte the last one is a node giving its
    last listing again (raftlog.node.metrics.SCRAPE_REUSE_FACTOR): it is asked again until it
    makes a new one. (Waiting a fixed time instead, the 3,000-partition figure, whose
    listings take seconds to make under load and are kept nine times that, measured 6 ms.)"""
    pids, urls = system.pids(), system.metrics_urls()
    spent, series = dict.fromkeys(urls, 0.0), 0
    with system.scraper_paused():
        for label, url in urls.items():
            last = _get(url)
            for _ in range(SCRAPE_SAMPLES):
                deadline = time.monotonic() + SCRAPE_FRESH_TIMEOUT_S
                while True:
                    before, start = cpu_seconds(pids[label]), time.monotonic()
                    listing = _get(url)
                    took = time.monotonic() - start
                    if listing != last or time.monotonic() > deadline:
                        break
                    time.sleep(SCRAPE_RETRY_S)
                idle_s = idle_pct.get(label, 0.0) / 100 * took
                spent[label] += max(0.0, cpu_seconds(pids[label]) - before - idle_s)
                series = max(series, sum(1 for line in listing.splitlines() if line[:1] != b"#"))
                last = listing
    return {label: 1000 * cpu / SCRAPE_SAMPLES for label, cpu in spent.items()}, series


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as answer:  # noqa: S310 - loopback
        return answer.read()


def _metadata_leaders(
    admin: AdminClient, topic: str, timeout: float = 10.0, dead: int = -1
) -> dict[int, int]:
    """{partition: leader node id} as Metadata tells it, for the partitions led by a node
    other than `dead`."""
    meta = admin.list_topics(topic, timeout=timeout).topics[topic]
    return {p: m.leader for p, m in meta.partitions.items() if m.leader not in (-1, dead)}


def _create_s(admin: AdminClient, system: System, topic: str, partitions: int) -> float:
    """Seconds from sending CreateTopics until Metadata shows a leader for every partition."""
    start = time.monotonic()
    futures = admin.create_topics(
        [NewTopic(topic, partitions, system.replication_factor)],
        request_timeout=SCALE_CREATE_TIMEOUT,
    )
    try:
        futures[topic].result(SCALE_CREATE_TIMEOUT)
    except TimeoutError:
        raise BenchError(f"CreateTopics unanswered after {SCALE_CREATE_TIMEOUT:g} s") from None
    wait_until(
        lambda: len(_metadata_leaders(admin, topic)) == partitions,
        start + SCALE_CREATE_TIMEOUT - time.monotonic(),
        f"leaders of all {partitions} partitions of {topic}",
        step=0.1,
    )
    return time.monotonic() - start


def _metadata_ms(admin: AdminClient, topic: str) -> float:
    """Median wall time of a Metadata request for `topic`, after one to warm up (the
    client's decoding of the answer included)."""
    admin.list_topics(topic, timeout=30)
    samples = []
    for _ in range(METADATA_SAMPLES):
        start = time.perf_counter()
        admin.list_topics(topic, timeout=30)
        samples.append(time.perf_counter() - start)
    return 1000 * statistics.median(samples)


def _failover_s(system: Raftlog, topic: str, partitions: int, victim: int) -> float:
    """kill -9 of node `victim`; seconds until a live node's Metadata shows every partition
    of `topic` led by a live node."""
    live = next(info["kafka"] for i, info in system.node_info.items() if i != victim)
    watcher = AdminClient({"bootstrap.servers": live, "log_level": 2})
    _metadata_leaders(watcher, topic)  # connected before the kill
    start = time.monotonic()
    kill9(system.pids()[f"node-{victim}"])
    wait_until(
        lambda: len(_metadata_leaders(watcher, topic, timeout=5, dead=victim)) == partitions,
        SCALE_FAILOVER_TIMEOUT,
        f"leaders of all {partitions} partitions of {topic} after node {victim}'s kill",
        step=0.1,
    )
    return time.monotonic() - start
