"""A node's metrics (raftlog/node/metrics.py): the plain-int counters where events happen, and
what a scrape of a node's registry shows, over real replicas (support/replicas.py: three
Raft replicas of a partition on an in-process network) and a real group coordinator."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.clock import ManualClock
from support.members import every_member
from support.raftnet import Clock
from support.replicas import IDS, Replicas
from support.wire import make_batch

from kafka_api.codec import build, response_module
from raftlog.cluster.reassignment import Reassigner
from raftlog.common.counters import Histogram
from raftlog.common.errors import ErrorCode
from raftlog.common.http_listener import HttpStats
from raftlog.config import group_config
from raftlog.groups.coordinator import GroupConfig, GroupCoordinator
from raftlog.groups.offsets_log import LogRecord
from raftlog.groups.results import CommitOffset
from raftlog.node import metrics
from raftlog.node.listener_metrics import (
    ERROR_CODES_PER_API,
    ApiStats,
    KafkaMetrics,
    api_name,
    response_error,
)
from raftlog.node.loop_stall import LoopStallMonitor
from raftlog.node.metrics import (
    GROUP_FAILURE_SERIES,
    GROUP_LAG_SERIES,
    SCRAPE_REUSE_FACTOR,
    NodeCollector,
    NodeMetrics,
    series_budget,
)
from raftlog.node.node import Node
from raftlog.share.manager import ShareManager
from raftlog.storage.batch import records_in_batches

E = ErrorCode


def test_a_histogram_counts_a_value_on_a_bound_in_that_bucket() -> None:
    h = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 1.0, 7.0):
        h.observe(value)
    buckets, total = h.read()
    assert buckets == [("0.1", 2.0), ("1.0", 4.0), ("+Inf", 5.0)]
    assert total == pytest.approx(8.65)


def test_records_of_whole_batches_come_from_their_headers() -> None:
    batches = make_batch([(None, b"a")]) + make_batch([(b"k", b"v")] * 5)
    assert records_in_batches(batches) == 6
    assert records_in_batches(b"") == 0


def test_api_names_are_kafkas() -> None:
    assert [api_name(k) for k in (0, 1, 23, 78)] == [
        "Produce",
        "Fetch",
        "OffsetForLeaderEpoch",
        "ShareFetch",
    ]


def produce_response(*errors: ErrorCode) -> object:
    m = response_module(0, 9)
    partitions = tuple(
        build(
            m.PartitionProduceResponse,
            index=i,
            error_code=e,
            base_offset=0,
            log_append_time=-1,
            log_start_offset=0,
            record_errors=(),
            error_message=None,
        )
        for i, e in enumerate(errors)
    )
    return build(
        m.ProduceResponse,
        responses=(build(m.TopicProduceResponse, name="t", partition_responses=partitions),),
    )


def test_a_response_error_is_its_top_level_code_else_its_first_partition_code() -> None:
    assert response_error(produce_response(E.none, E.none)) == 0
    assert response_error(produce_response(E.none, E.not_leader_or_follower)) == 6
    m = response_module(12, 4)  # Heartbeat: a top-level code, no topics
    beat = build(
        m.HeartbeatResponse, throttle_time=timedelta(0), error_code=E.rebalance_in_progress
    )
    assert response_error(beat) == 27


def test_an_apis_error_codes_are_bounded() -> None:
    stats = ApiStats()
    for code in range(1, ERROR_CODES_PER_API + 4):
        stats.answered(0.001, produce_response(ErrorCode(code)))
    stats.failed(0.002)
    assert stats.requests == ERROR_CODES_PER_API + 4
    assert len(stats.errors) == ERROR_CODES_PER_API + 1
    assert stats.errors[None] == 4  # three codes past the bound, then UNKNOWN_SERVER_ERROR


async def samples(
    node: ReplicaNode, kafka: KafkaMetrics, http: dict[str, HttpStats] | None = None
) -> dict[tuple[str, tuple], float]:
    """A scrape of the node, as Prometheus' text format, parsed."""
    scrape = NodeMetrics(node, kafka, http=http)  # type: ignore[arg-type]
    body, content_type = await scrape.exposition("")
    assert content_type.startswith("text/plain")
    text = body.decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict, name: str, **labels: str) -> float:
    return found[name, tuple(sorted(labels.items()))]


class OffsetsLog:
    """The coordinator's storage seam in memory: every append is committed at once."""

    index = 0
    leader_epoch = 1

    def __init__(self) -> None:
        self.end = 0

    def append(
        self,
        records: Sequence[tuple[bytes, bytes | None]],
        producer: tuple[int, int] | None = None,
    ) -> asyncio.Future[int]:
        future = asyncio.get_running_loop().create_future()
        future.set_result(self.end)
        self.end += len(records)
        return future

    def read_committed(self) -> Iterator[LogRecord]:
        return iter(())


class ReplicaNode:
    """What NodeCollector reads of a Node, over one node's replica of support/replicas.py and
    a real coordinator and share manager."""

    in_sync_replicas = Node.in_sync_replicas
    expected_in_sync = Node.expected_in_sync
    _assignment = Node._assignment

    def __init__(self, replicas: Replicas, node_id: str) -> None:
        # The controller's topic "t": its one partition on the replicas' nodes.
        topic = {"id": "x", "partitions": [[int(i) for i in IDS]], "configs": {}}
        self.controller = SimpleNamespace(state=SimpleNamespace(topics={"t": topic}))
        self.node_id = int(node_id)
        self.partitions = {("t", 0): replicas.partitions[node_id]}
        self.ctx = replicas.contexts[node_id]
        self.groups = GroupCoordinator(self.node_id, GroupConfig(num_partitions=1))
        self.share = ShareManager(lambda _g: group_config.values({}), every_member)
        self.loop_stalls = LoopStallMonitor(ManualClock())
        self.mover = Reassigner(
            self.node_id, lambda: self.partitions, lambda: self.controller.state.topics, _never
        )


async def _never(topic: str, index: int, target: list[int]) -> None:
    raise AssertionError("the mover is not started here")


@pytest.fixture
async def replicas(tmp_path: Path):
    clock = Clock()
    r = Replicas(tmp_path, clock)
    yield r
    r.close()


async def test_under_replicated_counts_the_replicas_the_controller_has_now(
    replicas: Replicas,
) -> None:
    """A partition's replicas as the controller has them now, less those a move is still
    adding (KIP-352), must all be in sync; not the replicas its replica opened with. Moving
    to 1, 2, 4 (4 has no replica yet): not under-replicated while 4 is being added; once the
    move is over and 4 still holds nothing, it is (the old count said 0: 1, 2, 3 in sync)."""
    leader = await replicas.leader()
    await replicas.run(0.5)
    node = ReplicaNode(replicas, leader)
    topic = node.controller.state.topics["t"]
    tp = {"topic": "t", "partition": "0"}
    topic["partitions"] = [[1, 2, 4, 3]]
    topic["moves"] = {0: {"target": [1, 2, 4], "original": [1, 2, 3]}}
    found = await samples(node, KafkaMetrics())
    assert value(found, "raftlog_partition_under_replicated", **tp) == 0
    topic["partitions"], topic["moves"] = [[1, 2, 4]], {}
    found = await samples(node, KafkaMetrics())
    assert value(found, "raftlog_partition_under_replicated", **tp) == 1


async def test_a_moves_leader_shows_the_bytes_its_added_replicas_lack(replicas: Replicas) -> None:
    """raftlog_reassignment_bytes_remaining (issue 44): on the leader of a moving partition,
    its log's bytes that the replicas the move adds lack: all of them for node 4, which holds
    nothing; none for node 3, which holds everything (a move that adds it back). None on a
    follower, none for a partition that does not move."""
    leader = await replicas.leader()
    acks = [replicas.send(leader, make_batch([(None, b"r%d" % i)] * 3)) for i in range(10)]
    await replicas.run(0.5)
    assert [a.result().error for a in acks] == [E.none] * 10
    node = ReplicaNode(replicas, leader)
    name = "raftlog_reassignment_bytes_remaining"
    tp = {"topic": "t", "partition": "0"}
    assert not any(key[0] == name for key in await samples(node, KafkaMetrics()))
    topic = node.controller.state.topics["t"]
    topic["partitions"] = [[1, 2, 4, 3]]
    topic["moves"] = {0: {"target": [1, 2, 4], "original": [1, 2, 3]}}
    size = sum(s.size for s in replicas.partitions[leader].log.segments())
    assert size > 10 * 3 * 2
    assert value(await samples(node, KafkaMetrics()), name, **tp) == size
    topic["moves"] = {0: {"target": [1, 2, 3], "original": [1, 2]}}  # 3 holds it all
    assert value(await samples(node, KafkaMetrics()), name, **tp) == 0
    follower = ReplicaNode(replicas, next(i for i in IDS if i != leader))
    follower.controller.state.topics["t"].update(topic)
    assert not any(key[0] == name for key in await samples(follower, KafkaMetrics()))


async def test_a_scrape_shows_what_the_leader_appended_and_its_followers_lag(
    replicas: Replicas,
) -> None:
    leader = await replicas.leader()
    batches = [make_batch([(None, b"r%d" % i)] * 3) for i in range(10)]
    acks = [replicas.send(leader, batch) for batch in batches]
    await replicas.run(0.5)
    assert [a.result().error for a in acks] == [E.none] * 10
    raft = replicas.contexts[leader].metrics
    assert raft.elections == 1 and raft.leader_changes >= 1
    assert raft.commit_latency.counts[-1] == 0 and sum(raft.commit_latency.counts) >= 2

    node = ReplicaNode(replicas, leader)
    node.groups.attach(0, OffsetsLog())
    await asyncio.sleep(0)
    commit = CommitOffset("t", 0, 12)
    assert await node.groups.offset_commit("g", -1, "", None, [commit]) == [E.none]
    kafka = KafkaMetrics()
    kafka.api(0).answered(0.003, produce_response(E.none))
    kafka.connections_opened, kafka.connections_closed = 3, 1
    kafka.authentication_failed()
    admin = HttpStats()
    admin.open, admin.refused["address"], admin.bad_requests[431] = 2, 5, 1
    found = await samples(node, kafka, {"admin": admin, "consume_proxy": HttpStats()})
    tp = {"topic": "t", "partition": "0"}
    assert value(found, "raftlog_partition_records_in_total", **tp) == 30
    assert value(found, "raftlog_partition_bytes_in_total", **tp) == sum(map(len, batches))
    assert value(found, "raftlog_partition_records_out_total", **tp) == 0
    hw = replicas.partitions[leader].high_watermark
    assert value(found, "raftlog_partition_high_watermark", **tp) == hw
    assert value(found, "raftlog_partition_is_leader", **tp) == 1
    assert value(found, "raftlog_partition_under_replicated", **tp) == 0
    for follower in set(IDS) - {leader}:
        assert value(found, "raftlog_raft_follower_lag_entries", **tp, follower=follower) == 0
    assert value(found, "raftlog_consumer_group_lag", group="g", **tp) == hw - 12
    assert value(found, "raftlog_consumer_group_members", group="g") == 0
    assert value(found, "raftlog_kafka_requests_total", api="Produce") == 1
    assert (
        value(found, "raftlog_kafka_request_duration_seconds_bucket", api="Produce", le="0.005")
        == 1
    )
    assert value(found, "raftlog_kafka_connections_open") == 2
    assert value(found, "raftlog_kafka_authentication_failures_total") == 1
    assert value(found, "raftlog_http_connections_open", listener="admin") == 2
    refused = "raftlog_http_connections_refused_total"
    assert value(found, refused, listener="admin", cap="address") == 5
    assert value(found, refused, listener="consume_proxy", cap="listener") == 0
    assert value(found, "raftlog_http_bad_requests_total", listener="admin", status="431") == 1
    assert value(found, "raftlog_raft_leader_elections_total") == 1
    assert value(found, "raftlog_raft_commit_latency_seconds_count") >= 2
    assert value(found, "raftlog_event_loop_stall_seconds_count") == 0
    assert value(found, "process_resident_memory_bytes") > 0
    # the budget holds with the lag series it allows for, and is exact without them
    budget = series_budget(apis=1, replicas=1, follower_replicas_led=2, groups=1)
    unused_errors = ERROR_CODES_PER_API + 1
    assert len(found) == budget - unused_errors - GROUP_LAG_SERIES + 1 - GROUP_FAILURE_SERIES

    follower = next(i for i in IDS if i != leader)
    on_follower = await samples(ReplicaNode(replicas, follower), KafkaMetrics())
    assert value(on_follower, "raftlog_partition_is_leader", **tp) == 0
    assert value(on_follower, "raftlog_partition_records_in_total", **tp) == 0
    assert ("raftlog_raft_follower_lag_entries", (("follower", leader), *tp.items())) not in (
        on_follower
    )


async def test_scrapes_that_come_while_one_is_formatted_share_its_listing(
    replicas: Replicas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Formatting runs in a thread; a scrape arriving meanwhile is not queued behind it."""
    reads: list[int] = []
    read = NodeCollector.read

    async def counted_read(self: NodeCollector) -> None:
        reads.append(1)
        await read(self)

    monkeypatch.setattr(NodeCollector, "read", counted_read)
    node = ReplicaNode(replicas, IDS[0])
    # A clock that stands still: each listing took no time, so none is given again later.
    metrics = NodeMetrics(node, KafkaMetrics(), monotonic=lambda: 0.0)  # type: ignore[arg-type]
    first, second = await asyncio.gather(metrics.exposition(""), metrics.exposition(""))
    assert first == second and len(reads) == 1
    await metrics.exposition("")
    assert len(reads) == 2


async def test_a_scrape_soon_after_the_last_gets_its_listing(
    replicas: Replicas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However often /metrics is asked for, making listings takes at most a tenth of the
    node's time: a scrape within SCRAPE_REUSE_FACTOR times the last one's duration after it
    gets that listing again."""
    now = [100.0]
    reads: list[int] = []
    read = NodeCollector.read

    async def slow_read(self: NodeCollector) -> None:
        reads.append(1)
        now[0] += 0.5  # this listing takes half a second to make
        await read(self)

    monkeypatch.setattr(NodeCollector, "read", slow_read)
    node = ReplicaNode(replicas, IDS[0])
    metrics = NodeMetrics(node, KafkaMetrics(), monotonic=lambda: now[0])  # type: ignore[arg-type]
    first, _ = await metrics.exposition("")
    now[0] += SCRAPE_REUSE_FACTOR * 0.5 - 0.1
    again, _ = await metrics.exposition("")
    assert again == first and len(reads) == 1
    _, content_type = await metrics.exposition("application/openmetrics-text")
    assert content_type.startswith("application/openmetrics-text") and len(reads) == 2
    now[0] += 0.2
    await metrics.exposition("")
    assert len(reads) == 3


async def test_a_scrape_reads_the_replicas_a_slice_a_loop_turn(
    replicas: Replicas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read in one go, 3,000 replicas held the loop for a quarter of a second (more on a
    loaded node: with a scrape every 15 s, a spread produce over them fell into an election
    storm). Other work runs between the slices, and a replica closed meanwhile is left out."""
    monkeypatch.setattr(metrics, "REPLICAS_PER_TURN", 1)
    leader = await replicas.leader()
    node = ReplicaNode(replicas, leader)
    replica = node.partitions["t", 0]
    node.partitions = {("t", i): replica for i in range(3)}

    async def close_the_last() -> None:
        await asyncio.sleep(0)
        del node.partitions["t", 2]

    found, _ = await asyncio.gather(samples(node, KafkaMetrics()), close_the_last())
    listed = {labels for name, labels in found if name == "raftlog_partition_is_leader"}
    assert listed == {(("partition", "0"), ("topic", "t")), (("partition", "1"), ("topic", "t"))}
