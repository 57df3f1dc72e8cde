"""Handler semantics that real clients rarely exercise on purpose: proposal order, fencing
order, KIP-74 limits, long-poll, divergence, validation. The facade here is the smallest fake
that lets each rule be observed; behaviour against real nodes is tested in tests/e2e."""

import asyncio
import uuid
from datetime import timedelta

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType
from kio.static.primitive import i8
from support.answers import client_reads
from support.broker_stub import BrokerStub
from support.members import every_member
from support.wire import make_batch

from kafka_api.codec import build, encode_response
from kafka_api.context import RequestContext
from kafka_api.errors import CloseConnection
from kafka_api.handlers import (
    alter_configs,
    create_partitions,
    create_topics,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_log_dirs,
    fetch,
    incremental_alter_configs,
    init_producer_id,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    produce,
    share_fetch,
)
from kafka_api.legacy import describe_configs_v0
from raftlog.api.broker import Broker
from raftlog.api.values import (
    BrokerInfo,
    ConfigEntry,
    Partition,
    PartitionInfo,
    ProduceResult,
    TimestampOffset,
    TopicInfo,
    TopicResult,
)
from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.config import group_config
from raftlog.partition.producer_state import AbortedTxn
from raftlog.raft.mesh import Mesh
from raftlog.security.acl import AclOperation as Op
from raftlog.security.acl import PatternType as Pat
from raftlog.security.acl import PermissionType as Perm
from raftlog.security.acl import ResourceType as Res
from raftlog.security.acl_index import AclIndex
from raftlog.security.authorizer import Authorizer
from raftlog.share.manager import ShareManager
from raftlog.share.members import ShareMembers
from raftlog.share.membership import ShareGroups
from raftlog.share.store import ShareStore, encode

E = ErrorCode


class FakePartition:
    def __init__(self, topic, index, epoch=5, leader=True):
        self.topic, self.index = topic, index
        self.leader_epoch = epoch
        self.is_leader = leader
        self.log_start_offset = 0
        self.high_watermark = 0
        self.data: dict[int, bytes] = {}  # offset -> what read() returns from there
        self.calls: list[tuple] = []
        self.results: list[asyncio.Future] = []
        self.epoch_ends: dict[int, tuple[int, int]] = {}
        self.timestamps: dict[int, TimestampOffset | KafkaError] = {}
        self._appended = asyncio.Event()
        self.waits: list[float] = []  # the timeout of each wait_for_data
        self.term_committed = True
        self.shares = ShareStore()  # share updates count as committed when written
        self.out = [0, 0]  # bytes and records answers handed out (sent)
        self.open_from: int | None = None  # first offset of an open transaction
        self.aborted: list[AbortedTxn] = []
        self.committed_reads: list[bool] = []  # isolation of each read and lookup

    @property
    def last_stable_offset(self):
        if self.open_from is None:
            return self.high_watermark
        return min(self.open_from, self.high_watermark)

    def aborted_transactions(self, start, end):
        return [t for t in self.aborted if t.last_offset >= start and t.first_offset < end]

    def write_marker(self, producer_id, producer_epoch, commit, coordinator_epoch):
        raise NotImplementedError  # the transaction coordinator's; no handler calls it

    def active_producers(self):
        raise NotImplementedError  # DescribeProducers', tested in test_txn_admin_handlers.py

    def transaction_start(self, producer_id):
        raise NotImplementedError  # WriteTxnMarkers', tested in test_txn_admin_handlers.py

    def delete_records(self, offset, timeout_ms):
        raise NotImplementedError  # DeleteRecords', tested on real nodes (e2e/test_delete_records)

    def share_state(self, group_id):
        return self.shares.get(group_id)

    def write_share(self, update):
        self.shares.apply(self.shares.applied + 1, encode([update]))
        done = asyncio.get_running_loop().create_future()
        done.set_result(E.none)
        return done

    def produce(self, records, acks, timeout_ms, transactional=False):
        self.calls.append(("produce", records, acks, timeout_ms))
        self.results.append(asyncio.get_running_loop().create_future())
        return self.results[-1]

    @property
    def log_end_offset(self):
        return self.high_watermark

    def append(self, offset, data):
        self.data[offset] = data
        self.high_watermark = offset + 1
        self._appended.set()

    def read(self, offset, max_bytes, min_one, committed=False):
        self.calls.append(("read", offset, max_bytes, min_one))
        self.committed_reads.append(committed)
        end = self.last_stable_offset if committed else self.high_watermark
        if offset >= end and self.log_start_offset <= offset <= self.high_watermark:
            return b""
        if not self.log_start_offset <= offset <= self.high_watermark:
            raise KafkaError(E.offset_out_of_range)
        data = self.data.get(offset, b"")
        return data if len(data) <= max_bytes or min_one else b""

    def sent(self, size, records):
        self.out[0] += size
        self.out[1] += records

    async def wait_for_data(self, offset, timeout, committed=False):
        self.waits.append(timeout)
        if (self.last_stable_offset if committed else self.high_watermark) <= offset:
            self._appended.clear()
            await asyncio.wait_for(self._appended.wait(), timeout)

    def end_offset_for_epoch(self, epoch):
        self.calls.append(("epoch", epoch))
        return self.epoch_ends.get(epoch, (-1, -1))

    def epoch_for_offset(self, offset):
        raise NotImplementedError  # in the Partition Protocol; no handler calls it

    async def offset_for_timestamp(self, timestamp, committed=False):
        self.calls.append(("timestamp", timestamp))
        self.committed_reads.append(committed)
        found = self.timestamps.get(timestamp)
        if isinstance(found, KafkaError):
            raise found
        return found


class FakeBroker(BrokerStub):
    node_id = 1
    cluster_id = "cluster"
    auto_create_topics = True
    fetch_max_bytes = 57671680

    def __init__(self):
        self._topics: dict[str, TopicInfo] = {}
        self.partitions: dict[tuple[str, int], FakePartition] = {}
        self.created: list = []
        self.deleted: list = []
        self.altered: list = []  # (resource name, changes, incremental, validate_only)
        self.group_errors: dict[str, tuple[ErrorCode, str]] = {}  # what altering a group answers
        # what the transaction coordinator says of a partition; asked: what it was asked
        self.in_transaction: dict[tuple[str, int], ErrorCode] = {}
        self.verified: list[tuple] = []

    async def verify_transaction(self, transactional_id, producer_id, epoch, topic, index):
        self.verified.append((transactional_id, producer_id, epoch, topic, index))
        return self.in_transaction.get((topic, index), E.invalid_txn_state)

    def add_topic(self, name, count=1, leader=1, **partition_args):
        infos = tuple(PartitionInfo(name, i, (1, 2), leader, 5, (1, 2)) for i in range(count))
        self._topics[name] = TopicInfo(name, uuid.uuid4(), infos)
        for i in range(count):
            self.partitions[name, i] = FakePartition(name, i, **partition_args)
        return self._topics[name]

    def controller_id(self):
        return 1

    def live_brokers(self):
        return [BrokerInfo(1, "h1", 9091), BrokerInfo(2, "h2", 9092, "r2")]

    def client_brokers(self):
        return self.live_brokers()

    def topics(self):
        return dict(self._topics)

    def topic(self, name):
        return self._topics.get(name)

    def topic_by_id(self, topic_id):
        return next((t for t in self._topics.values() if t.topic_id == topic_id), None)

    def local_partition(self, topic, index):
        return self.partitions.get((topic, index))

    async def create_topics(self, specs, validate_only, timeout_ms):
        self.created.extend(specs)
        return [TopicResult(spec.name) for spec in specs]

    async def delete_topics(self, names, timeout_ms):
        self.deleted.extend(names)
        return [TopicResult(name) for name in names]

    def topic_configs(self, name):
        if name not in self._topics:
            return None
        return [
            ConfigEntry("retention.ms", "1000", 1, config_type=5, documentation="keep"),
            ConfigEntry("cleanup.policy", "delete", 5, config_type=2, documentation="how"),
        ]

    def broker_configs(self, node_id):
        return [ConfigEntry("broker.id", str(node_id), 4, read_only=True)] if node_id < 3 else None

    async def alter_topic_configs(self, name, changes, incremental, validate_only):
        self.altered.append((name, changes, incremental, validate_only))
        return TopicResult(name)

    async def alter_group_configs(self, group_id, changes, incremental, validate_only):
        self.altered.append((group_id, changes, incremental, validate_only))
        return TopicResult(group_id, *self.group_errors.get(group_id, (E.none, None)))

    def group_configs(self, group_id):
        return [
            ConfigEntry("share.auto.offset.reset", "earliest", 8, config_type=2, documentation="d"),
            ConfigEntry("share.delivery.count.limit", "5", 5, config_type=3, documentation="n"),
        ]


# mypy checks the fakes against the Protocols they stand for (tests/unit/test_types.py).
def _broker_conforms(broker: FakeBroker) -> Broker:
    return broker


def _partition_conforms(partition: FakePartition) -> Partition:
    return partition


def ctx(broker, version):
    return RequestContext(broker=broker, api_version=version, client_id="c", client_host="h")


def request_module(api_key, version):
    return load_payload_module(api_key, version, EntityType.request)


# --------------------------------------------------------------------------- Produce


def produce_request(version, partitions, acks=-1, transactional_id=None, by_id=None):
    """partitions: [(topic name, index, records)], grouped by topic in order."""
    m = request_module(produce.API_KEY, version)
    topics: dict[str, list] = {}
    for name, index, records in partitions:
        topics.setdefault(name, []).append(m.PartitionProduceData(index=index, records=records))
    return build(
        m.ProduceRequest,
        transactional_id=transactional_id,
        acks=acks,
        timeout=timedelta(seconds=3),
        topic_data=tuple(
            build(
                m.TopicProduceData,
                name=name,
                topic_id=(by_id or {}).get(name),
                partition_data=tuple(data),
            )
            for name, data in topics.items()
        ),
    )


def partition_results(response, version=9):
    return [
        (p.index, p.error_code, p.base_offset)
        for topic in client_reads(response, produce.API_KEY, version).responses
        for p in topic.partition_responses
    ]


async def test_produce_proposes_every_partition_before_awaiting_any():
    broker = FakeBroker()
    broker.add_topic("a", 2)
    broker.add_topic("b", 1)
    request = produce_request(9, [("a", 1, b"a1"), ("a", 0, b"a0"), ("b", 0, b"b0")])
    task = asyncio.create_task(produce.handle(ctx(broker, 9), request))
    await asyncio.sleep(0)
    proposed = [broker.partitions[key].calls for key in (("a", 1), ("a", 0), ("b", 0))]
    assert proposed == [[("produce", r, -1, 3000)] for r in (b"a1", b"a0", b"b0")]
    # commits complete in another order; answers keep the request's order
    for key, offset in ((("b", 0), 30), (("a", 0), 20), (("a", 1), 10)):
        broker.partitions[key].results[0].set_result(ProduceResult(base_offset=offset))
    response = await task
    assert partition_results(response) == [(1, E.none, 10), (0, E.none, 20), (0, E.none, 30)]


TXN_BATCH = make_batch([(None, b"v")], producer=(42, 3, 0), transactional=True)


@pytest.mark.parametrize(
    ("acks", "transactional_id", "partitions", "error"),
    [
        (2, None, [("a", 0, b"x")], E.invalid_required_acks),
        (-1, "txn", [("a", 0, TXN_BATCH)], E.invalid_txn_state),
        (-1, None, [("nope", 0, b"x")], E.unknown_topic_or_partition),
        (-1, None, [("a", 9, b"x")], E.unknown_topic_or_partition),
        (-1, None, [("a", 0, b"")], E.invalid_record),
        (-1, None, [("a", 0, None)], E.invalid_record),
    ],
)
async def test_produce_rejections_never_reach_the_log(acks, transactional_id, partitions, error):
    broker = FakeBroker()
    broker.add_topic("a")
    request = produce_request(9, partitions, acks, transactional_id)
    response = await produce.handle(ctx(broker, 9), request)
    assert [e for _, e, _ in partition_results(response)] == [error]
    assert broker.partitions["a", 0].calls == []


@pytest.mark.parametrize(
    ("coordinator_says", "answer"),
    [
        (E.concurrent_transactions, E.not_enough_replicas),  # retriable: the coordinator is busy
        (E.not_coordinator, E.not_enough_replicas),
        (E.producer_fenced, E.invalid_producer_epoch),
        (E.invalid_txn_state, E.invalid_txn_state),
    ],
)
async def test_a_transactional_batch_is_written_only_where_its_coordinator_says_so(
    coordinator_says, answer
):
    """KIP-890: the coordinator is asked about each partition before anything is proposed;
    a batch it does not vouch for never reaches the log."""
    broker = FakeBroker()
    broker.add_topic("a", 2)
    broker.in_transaction = {("a", 0): E.none, ("a", 1): coordinator_says}
    request = produce_request(9, [("a", 0, TXN_BATCH), ("a", 1, TXN_BATCH)], -1, "txn")
    task = asyncio.ensure_future(produce.handle(ctx(broker, 9), request))
    await asyncio.sleep(0)
    assert broker.verified == [("txn", 42, 3, "a", 0), ("txn", 42, 3, "a", 1)]
    assert [c[0] for c in broker.partitions["a", 0].calls] == ["produce"]
    assert broker.partitions["a", 1].calls == []
    broker.partitions["a", 0].results[0].set_result(ProduceResult(base_offset=7))
    assert [(i, e) for i, e, _ in partition_results(await task)] == [(0, E.none), (1, answer)]


async def test_produce_to_a_follower_names_the_leader_from_v10():
    broker = FakeBroker()
    broker.add_topic("a", leader=2)
    broker.partitions["a", 0].is_leader = False
    request = produce_request(10, [("a", 0, b"x")])
    response = client_reads(await produce.handle(ctx(broker, 10), request), produce.API_KEY, 10)
    partition = response.responses[0].partition_responses[0]
    assert partition.error_code == E.not_leader_or_follower
    assert (partition.current_leader.leader_id, partition.current_leader.leader_epoch) == (2, 5)
    assert [(b.node_id, b.host, b.port, b.rack) for b in response.node_endpoints] == [
        (2, "h2", 9092, "r2")
    ]


async def test_produce_v13_by_topic_id():
    broker = FakeBroker()
    topic_id = broker.add_topic("a").topic_id
    unknown = uuid.uuid4()
    request = produce_request(
        13, [("a", 0, b"x"), ("b", 0, b"y")], by_id={"a": topic_id, "b": unknown}
    )
    task = asyncio.create_task(produce.handle(ctx(broker, 13), request))
    await asyncio.sleep(0)
    broker.partitions["a", 0].results[0].set_result(ProduceResult(base_offset=4))
    response = await task
    answer = client_reads(response, produce.API_KEY, 13)
    assert [t.topic_id for t in answer.responses] == [topic_id, unknown]
    assert partition_results(response, 13) == [(0, E.none, 4), (0, E.unknown_topic_id, -1)]


async def test_produce_acks0_is_silent_unless_it_fails():
    broker = FakeBroker()
    broker.add_topic("a")
    request = produce_request(9, [("a", 0, b"x")], acks=0)
    task = asyncio.create_task(produce.handle(ctx(broker, 9), request))
    await asyncio.sleep(0)
    broker.partitions["a", 0].results[0].set_result(ProduceResult(base_offset=0))
    assert await task is None
    with pytest.raises(CloseConnection):
        await produce.handle(ctx(broker, 9), produce_request(9, [("b", 0, b"x")], acks=0))


# --------------------------------------------------------------------------- Fetch


def fetch_request(
    version, partitions, *, max_bytes=1 << 20, min_bytes=0, max_wait=0, topic_ids=None, **top
):
    """partitions: [(topic, index, fetch_offset, partition_max_bytes, current_epoch, last_epoch)]"""
    m = request_module(fetch.API_KEY, version)
    topics: dict[str, list] = {}
    for name, index, offset, limit, current, last in partitions:
        topics.setdefault(name, []).append(
            build(
                m.FetchPartition,
                partition=index,
                current_leader_epoch=current,
                fetch_offset=offset,
                last_fetched_epoch=last,
                log_start_offset=-1,
                partition_max_bytes=limit,
            )
        )
    values = dict(
        replica_id=-1,
        max_wait=timedelta(milliseconds=max_wait),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=tuple(
            build(
                m.FetchTopic,
                topic=name,
                topic_id=(topic_ids or {}).get(name),
                partitions=tuple(parts),
            )
            for name, parts in topics.items()
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    values.update(top)
    return build(m.FetchRequest, **values)


def fetched(response):
    return [
        (p.partition_index, p.error_code, p.high_watermark, p.records)
        for topic in response.responses
        for p in topic.partitions
    ]


@pytest.mark.parametrize(
    ("client_epoch", "leader", "error"),
    [
        (4, False, E.fenced_leader_epoch),
        (6, False, E.unknown_leader_epoch),
        (5, False, E.not_leader_or_follower),
        (-1, False, E.not_leader_or_follower),
        (4, True, E.fenced_leader_epoch),
        (6, True, E.unknown_leader_epoch),
        (5, True, E.none),
    ],
)
async def test_fetch_checks_the_epoch_before_leadership(client_epoch, leader, error):
    broker = FakeBroker()
    broker.add_topic("a", leader=1 if leader else 2)
    broker.partitions["a", 0].is_leader = leader
    response = await fetch.handle(
        ctx(broker, 12), fetch_request(12, [("a", 0, 0, 100, client_epoch, -1)])
    )
    assert fetched(response)[0][1] == error


async def test_fetch_only_the_first_partition_with_data_may_exceed_limits():
    broker = FakeBroker()
    broker.add_topic("a", 3)
    for i in range(3):
        broker.partitions["a", i].append(0, bytes(100))
    request = fetch_request(
        11, [("a", i, 0, 60, -1, -1) for i in range(3)], max_bytes=150, min_bytes=1
    )
    response = await fetch.handle(ctx(broker, 11), request)
    reads = [broker.partitions["a", i].calls for i in range(3)]
    assert reads == [[("read", 0, 60, True)], [("read", 0, 50, False)], [("read", 0, 50, False)]]
    assert [len(records) for *_, records in fetched(response)] == [100, 0, 0]


async def test_fetch_reads_a_partition_named_twice_once_and_caps_the_response():
    """1,500 copies of one partition with a 2 GiB max_bytes built a 1.8 GB response; Kafka
    keeps one entry per partition and caps the response at fetch.max.bytes."""
    broker = FakeBroker()
    broker.fetch_max_bytes = 150
    broker.add_topic("a", 2)
    for i in range(2):
        broker.partitions["a", i].append(0, bytes(100))
    named = [("a", 0, 0, 1000, -1, -1)] * 3 + [("a", 1, 0, 1000, -1, -1)]
    request = fetch_request(11, named, max_bytes=2**31 - 1, min_bytes=1)
    response = await fetch.handle(ctx(broker, 11), request)
    assert [index for index, *_ in fetched(response)] == [0, 1]
    assert broker.partitions["a", 0].calls == [("read", 0, 150, True)]
    assert broker.partitions["a", 1].calls == [("read", 0, 50, False)]


async def test_fetch_read_committed_stops_at_the_last_stable_offset_and_lists_aborts():
    """read_committed (isolation 1): the read ends at the last stable offset, the answer says
    where that is and lists the aborted transactions its records may hold; read_uncommitted
    reads to the high watermark and lists none (null), as Kafka answers."""
    broker = FakeBroker()
    broker.add_topic("a", 1)
    part = broker.partitions["a", 0]
    part.append(0, bytes(100))
    part.append(1, bytes(100))
    part.open_from = 1
    part.aborted = [AbortedTxn(9, 0, 0)]
    committed = await fetch.handle(
        ctx(broker, 11), fetch_request(11, [("a", 0, 1, 1000, -1, -1)], isolation_level=1)
    )
    (answer,) = committed.responses[0].partitions
    assert (answer.high_watermark, answer.last_stable_offset, answer.records) == (2, 1, b"")
    from_start = await fetch.handle(
        ctx(broker, 11), fetch_request(11, [("a", 0, 0, 1000, -1, -1)], isolation_level=1)
    )
    (answer,) = from_start.responses[0].partitions
    assert answer.records == bytes(100)
    assert [(t.producer_id, t.first_offset) for t in answer.aborted_transactions] == [(9, 0)]
    uncommitted = await fetch.handle(
        ctx(broker, 11), fetch_request(11, [("a", 0, 1, 1000, -1, -1)])
    )
    (answer,) = uncommitted.responses[0].partitions
    assert answer.records == bytes(100) and answer.aborted_transactions is None
    assert part.committed_reads == [True, True, False]


async def test_fetch_long_poll_wakes_on_new_data():
    broker = FakeBroker()
    broker.add_topic("a", 2)
    request = fetch_request(
        11, [("a", 0, 0, 100, -1, -1), ("a", 1, 0, 100, -1, -1)], min_bytes=1, max_wait=10_000
    )
    task = asyncio.create_task(fetch.handle(ctx(broker, 11), request))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done() and len(broker.partitions["a", 1].waits) == 1
    broker.partitions["a", 1].append(0, b"batch")
    response = await asyncio.wait_for(task, 1)
    assert fetched(response) == [(0, E.none, 0, b""), (1, E.none, 1, b"batch")]


async def test_fetch_counts_the_answered_read_as_sent_once():
    """A long poll below min_bytes reads again when data comes; only what it answers is
    counted as out (bytes, and records from the batch headers)."""
    broker = FakeBroker()
    broker.add_topic("a")
    partition = broker.partitions["a", 0]
    first = make_batch([(None, b"x")])
    partition.append(0, first)
    request = fetch_request(
        11, [("a", 0, 0, 1 << 20, -1, -1)], min_bytes=len(first) + 1, max_wait=10_000
    )
    task = asyncio.create_task(fetch.handle(ctx(broker, 11), request))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done() and partition.out == [0, 0]
    both = first + make_batch([(None, b"y"), (None, b"z")])
    partition.append(0, both)
    response = await asyncio.wait_for(task, 1)
    assert fetched(response)[0][3] == both
    assert partition.out == [len(both), 3]


async def test_fetch_long_poll_gives_up_after_max_wait():
    broker = FakeBroker()
    broker.add_topic("a")
    request = fetch_request(11, [("a", 0, 0, 100, -1, -1)], min_bytes=1, max_wait=100)
    response = await fetch.handle(ctx(broker, 11), request)
    # one wait, bounded by max_wait (less what the first read took), then the empty answer
    [waited] = broker.partitions["a", 0].waits
    assert 0.05 < waited <= 0.1
    assert fetched(response) == [(0, E.none, 0, b"")]


async def test_fetch_reports_divergence_instead_of_records():
    broker = FakeBroker()
    broker.add_topic("a")
    partition = broker.partitions["a", 0]
    partition.append(50, b"batch")
    partition.epoch_ends[3] = (3, 40)  # epoch 3 ended at 40, the follower fetches from 50
    response = await fetch.handle(ctx(broker, 12), fetch_request(12, [("a", 0, 50, 100, 5, 3)]))
    data = response.responses[0].partitions[0]
    assert (data.error_code, data.records, data.high_watermark) == (E.none, b"", 51)
    assert (data.diverging_epoch.epoch, data.diverging_epoch.end_offset) == (3, 40)
    assert ("read", 50, 100, True) not in partition.calls


async def test_fetch_in_the_current_epoch_needs_no_epoch_lookup():
    broker = FakeBroker()
    broker.add_topic("a")
    partition = broker.partitions["a", 0]
    partition.append(50, b"batch")
    response = await fetch.handle(ctx(broker, 12), fetch_request(12, [("a", 0, 50, 100, 5, 5)]))
    assert fetched(response) == [(0, E.none, 51, b"batch")]
    assert [call[0] for call in partition.calls] == ["read"]


async def test_fetch_out_of_range_reports_the_log_bounds():
    broker = FakeBroker()
    broker.add_topic("a")
    partition = broker.partitions["a", 0]
    partition.append(9, b"x")
    partition.log_start_offset = 5
    response = await fetch.handle(ctx(broker, 11), fetch_request(11, [("a", 0, 2, 100, -1, -1)]))
    data = response.responses[0].partitions[0]
    assert (data.error_code, data.high_watermark, data.log_start_offset) == (
        E.offset_out_of_range,
        10,
        5,
    )


async def test_fetch_sessions_are_never_created():
    broker = FakeBroker()
    broker.add_topic("a")
    incremental = fetch_request(11, [], session_id=7, session_epoch=3)
    response = await fetch.handle(ctx(broker, 11), incremental)
    assert (response.error_code, response.session_id) == (E.fetch_session_id_not_found, 0)
    opening = fetch_request(11, [("a", 0, 0, 100, -1, -1)], session_epoch=0)
    response = await fetch.handle(ctx(broker, 11), opening)
    assert (response.error_code, response.session_id) == (E.none, 0)


async def test_fetch_v13_by_topic_id():
    broker = FakeBroker()
    topic_id = broker.add_topic("a").topic_id
    broker.partitions["a", 0].append(0, b"x")
    request = fetch_request(
        13,
        [("a", 0, 0, 100, -1, -1), ("b", 0, 0, 100, -1, -1)],
        topic_ids={"a": topic_id, "b": uuid.uuid4()},
    )
    response = await fetch.handle(ctx(broker, 13), request)
    assert [t.topic_id == topic_id for t in response.responses] == [True, False]
    assert [(i, e, r) for i, e, _, r in fetched(response)] == [
        (0, E.none, b"x"),
        (0, E.unknown_topic_id, b""),
    ]


async def test_fetch_from_a_follower_names_the_leader():
    broker = FakeBroker()
    topic_id = broker.add_topic("a", leader=2).topic_id
    broker.partitions["a", 0].is_leader = False
    for version, endpoints in ((12, []), (16, [(2, "h2", 9092)])):
        request = fetch_request(version, [("a", 0, 0, 100, 5, -1)], topic_ids={"a": topic_id})
        response = await fetch.handle(ctx(broker, version), request)
        leader = response.responses[0].partitions[0].current_leader
        assert (leader.leader_id, leader.leader_epoch) == (2, 5)
        assert [(b.node_id, b.host, b.port) for b in getattr(response, "node_endpoints", ())] == (
            endpoints
        )


# --------------------------------------------------------------------------- ListOffsets


def list_offsets_request(partitions, isolation_level=0):
    """ListOffsets v7 for topic "a": partitions [(index, current leader epoch, timestamp)]."""
    m = request_module(list_offsets.API_KEY, 7)
    return m.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=(
            m.ListOffsetsTopic(
                name="a",
                partitions=tuple(
                    m.ListOffsetsPartition(
                        partition_index=i, current_leader_epoch=epoch, timestamp=timestamp
                    )
                    for i, epoch, timestamp in partitions
                ),
            ),
        ),
    )


@pytest.mark.parametrize(
    ("timestamp", "asked", "answer"),
    [
        (-1, -1, (E.none, 7, 10, 5)),
        (-2, -2, (E.none, 7, 10, 5)),
        (-4, -2, (E.none, 7, 10, 5)),  # earliest local = earliest without tiered storage
        (-5, None, (E.none, -1, -1, -1)),  # nothing is tiered
        (123, 123, (E.none, -1, -1, -1)),  # no record that late
        (-3, -3, (E.offset_not_available, -1, -1, -1)),
    ],
)
async def test_list_offsets(timestamp, asked, answer):
    broker = FakeBroker()
    broker.add_topic("a")
    partition = broker.partitions["a", 0]
    partition.timestamps = {
        -1: TimestampOffset(7, 10, 5),
        -2: TimestampOffset(7, 10, 5),
        -3: KafkaError(E.offset_not_available),
    }
    request = list_offsets_request([(0, 5, timestamp)])
    response = await list_offsets.handle(ctx(broker, 7), request)
    p = response.topics[0].partitions[0]
    assert (p.error_code, p.timestamp, p.offset, p.leader_epoch) == answer
    assert partition.calls == ([("timestamp", asked)] if asked is not None else [])


@pytest.mark.parametrize("isolation_level", [0, 1])
async def test_list_offsets_looks_below_the_last_stable_offset_for_read_committed(isolation_level):
    broker = FakeBroker()
    broker.add_topic("a")
    partition = broker.partitions["a", 0]
    partition.timestamps = {-1: TimestampOffset(-1, 10, 5)}
    request = list_offsets_request([(0, 5, -1)], isolation_level)
    await list_offsets.handle(ctx(broker, 7), request)
    assert partition.committed_reads == [isolation_level == 1]


async def test_list_offsets_answers_a_partition_named_twice_invalid_request_unread():
    """Kafka's rule; 5,000 copies of one partition by timestamp froze a node for 7 s."""
    broker = FakeBroker()
    broker.add_topic("a", 2)
    for i in range(2):
        broker.partitions["a", i].timestamps = {-1: TimestampOffset(7, 10, 5)}
    request = list_offsets_request([(i, -1, -1) for i in (0, 1, 0)])
    response = await list_offsets.handle(ctx(broker, 7), request)
    answers = [(p.partition_index, p.error_code, p.offset) for p in response.topics[0].partitions]
    assert answers == [(0, E.invalid_request, -1), (1, E.none, 10), (0, E.invalid_request, -1)]
    assert broker.partitions["a", 0].calls == []


# --------------------------------------------------------------------------- Metadata


async def test_metadata_auto_creates_valid_unknown_names_only():
    """A topic named again is answered once, as Kafka reads the names into a set."""
    broker = FakeBroker()
    broker.add_topic("known", 2, leader=-1)
    m = request_module(metadata.API_KEY, 9)
    names = ("known", "new", "bad/name", "new", "known")
    request = m.MetadataRequest(
        topics=tuple(m.MetadataRequestTopic(name=n) for n in names),
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    response = await metadata.handle(ctx(broker, 9), request)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("known", E.none),
        ("new", E.leader_not_available),
        ("bad/name", E.invalid_topic_exception),
    ]
    assert [spec.name for spec in broker.created] == ["new"]
    partitions = response.topics[0].partitions
    assert [(p.error_code, p.leader_id, p.leader_epoch) for p in partitions] == [
        (E.leader_not_available, -1, 5)
    ] * 2
    assert [b.node_id for b in response.brokers] == [1, 2]
    assert (response.cluster_id, response.controller_id) == ("cluster", 1)


async def test_metadata_without_auto_creation_and_all_topics():
    broker = FakeBroker()
    broker.add_topic("known")
    m = request_module(metadata.API_KEY, 4)
    request = m.MetadataRequest(
        topics=(m.MetadataRequestTopic(name="new"),), allow_auto_topic_creation=False
    )
    response = await metadata.handle(ctx(broker, 4), request)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("new", E.unknown_topic_or_partition)
    ]
    assert broker.created == []
    for version, topics in ((0, ()), (1, None)):
        m = request_module(metadata.API_KEY, version)
        response = await metadata.handle(ctx(broker, version), m.MetadataRequest(topics=topics))
        assert [t.name for t in response.topics] == ["known"]


# --------------------------------------------------------------------------- admin


async def test_create_topics_validates_before_the_controller():
    broker = FakeBroker()
    m = request_module(create_topics.API_KEY, 7)

    def topic(name, partitions=-1, rf=-1, assignments=()):
        return m.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=rf,
            assignments=tuple(
                m.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
                for i, b in assignments
            ),
            configs=(m.CreatableTopicConfig(name="retention.ms", value="5"),),
        )

    topics = (
        topic("ok", 3, 1),
        topic("dup"),
        topic("dup"),
        topic("a" * 250),
        topic(".."),
        topic("zero", 0),
        topic("neg", -2),
        topic("norf", 1, 0),
        topic("both", 2, -1, [(0, (1,))]),
        topic("gap", assignments=[(0, (1,)), (2, (1,))]),
        topic("manual", assignments=[(1, (2,)), (0, (1,))]),
    )
    request = m.CreateTopicsRequest(
        topics=topics, timeout=timedelta(seconds=5), validate_only=False
    )
    response = await create_topics.handle(ctx(broker, 7), request)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("ok", E.none),
        ("dup", E.invalid_request),
        ("dup", E.invalid_request),
        ("a" * 250, E.invalid_topic_exception),
        ("..", E.invalid_topic_exception),
        ("zero", E.invalid_partitions),
        ("neg", E.invalid_partitions),
        ("norf", E.invalid_replication_factor),
        ("both", E.invalid_request),
        ("gap", E.invalid_replica_assignment),
        ("manual", E.none),
    ]
    assert [(s.name, s.num_partitions, s.assignments, s.configs) for s in broker.created] == [
        ("ok", 3, None, {"retention.ms": "5"}),
        ("manual", -1, {0: (1,), 1: (2,)}, {"retention.ms": "5"}),
    ]


async def test_delete_topics_by_name_and_id():
    broker = FakeBroker()
    topic_id = broker.add_topic("a").topic_id
    broker.add_topic("b")
    m = request_module(delete_topics.API_KEY, 6)
    unknown = uuid.uuid4()
    request = m.DeleteTopicsRequest(
        topics=(
            m.DeleteTopicState(name=None, topic_id=topic_id),
            m.DeleteTopicState(name="b", topic_id=None),
            m.DeleteTopicState(name=None, topic_id=unknown),
            m.DeleteTopicState(name="b", topic_id=None),
        ),
        timeout=timedelta(seconds=1),
    )
    response = await delete_topics.handle(ctx(broker, 6), request)
    assert [(r.name, r.topic_id, r.error_code) for r in response.responses] == [
        ("a", topic_id, E.none),
        ("b", None, E.invalid_request),
        (None, unknown, E.unknown_topic_id),
        ("b", None, E.invalid_request),
    ]
    assert broker.deleted == ["a"]


@pytest.mark.parametrize("version", [1, 4, 5])
async def test_delete_topics_by_name_answers_an_empty_name_as_given(version):
    """Before v6 the answer's name is not nullable: an empty name refused (named twice) was
    answered None, and the response failed to encode (an ERROR, the connection closed)."""
    broker = FakeBroker()
    m = request_module(delete_topics.API_KEY, version)
    request = m.DeleteTopicsRequest(topic_names=("", ""), timeout=timedelta(seconds=1))
    response = await delete_topics.handle(ctx(broker, version), request)
    assert [(r.name, r.error_code) for r in response.responses] == [("", E.invalid_request)] * 2
    assert encode_response(1, response)
    assert broker.deleted == []


LIMIT = 10_000  # Kafka's QuorumController.MAX_RECORDS_PER_USER_OP


async def test_control_plane_requests_over_kafkas_bound_are_refused_whole():
    """More records than Kafka's controller writes for one user operation: every entry gets
    POLICY_VIOLATION and nothing reaches the broker, validate_only or not."""
    broker = FakeBroker()
    broker.add_topic("a", count=2)
    created: list[str] = []

    async def create_partitions_(name, count, assignments, validate_only, timeout_ms):
        created.append(name)
        return TopicResult(name)

    broker.create_partitions = create_partitions_  # type: ignore[method-assign]
    m = request_module(create_partitions.API_KEY, 3)

    def grow(count, assignments=None):
        return m.CreatePartitionsRequest(
            topics=(m.CreatePartitionsTopic(name="a", count=count, assignments=assignments),),
            timeout=timedelta(seconds=1),
            validate_only=True,
        )

    response = await create_partitions.handle(ctx(broker, 3), grow(2 + LIMIT + 1))
    assert [(r.error_code, r.error_message) for r in response.results] == [
        (
            E.policy_violation,
            "Unable to perform excessively large batch operation: 10001 new partitions in one "
            "request, at most 10000.",
        )
    ]
    response = await create_partitions.handle(ctx(broker, 3), grow(2**31 - 1))
    assert response.results[0].error_code == E.policy_violation
    assert created == []
    response = await create_partitions.handle(ctx(broker, 3), grow(2 + LIMIT))
    assert response.results[0].error_code == E.none and created == ["a"]

    m = request_module(delete_topics.API_KEY, 5)
    names = tuple(f"t{i}" for i in range(LIMIT + 1))
    response = await delete_topics.handle(
        ctx(broker, 5), m.DeleteTopicsRequest(topic_names=names, timeout=timedelta(seconds=1))
    )
    assert {(r.error_code, r.error_message) for r in response.responses} == {
        (
            E.policy_violation,
            "Unable to perform excessively large batch operation: 10001 topics in one "
            "request, at most 10000.",
        )
    }
    assert [r.name for r in response.responses] == list(names) and broker.deleted == []

    for module in (alter_configs, incremental_alter_configs):
        version = 1
        m = request_module(module.API_KEY, version)
        config = (
            m.AlterableConfig(name="retention.ms", config_operation=0, value="1")
            if module is incremental_alter_configs
            else m.AlterableConfig(name="retention.ms", value="1")
        )
        many_configs = tuple(
            m.AlterableConfig(name=f"c{i}", config_operation=0, value="1")
            if module is incremental_alter_configs
            else m.AlterableConfig(name=f"c{i}", value="1")
            for i in range(LIMIT + 1)
        )
        many_resources = tuple(
            m.AlterConfigsResource(resource_type=2, resource_name=f"t{i}", configs=(config,))
            for i in range(LIMIT + 1)
        )
        one_big = (
            m.AlterConfigsResource(resource_type=2, resource_name="a", configs=many_configs),
        )
        request_type = (
            m.IncrementalAlterConfigsRequest
            if module is incremental_alter_configs
            else m.AlterConfigsRequest
        )
        for resources, what in ((many_resources, "resources"), (one_big, "configs")):
            response = await module.handle(
                ctx(broker, version), request_type(resources=resources, validate_only=False)
            )
            assert len(response.responses) == len(resources)
            assert {(r.error_code, r.error_message) for r in response.responses} == {
                (
                    E.policy_violation,
                    f"Unable to perform excessively large batch operation: 10001 {what} in "
                    "one request, at most 10000.",
                )
            }
    assert broker.altered == []


async def test_describe_configs():
    broker = FakeBroker()
    broker.add_topic("a")
    broker.add_topic("b")
    m = request_module(describe_configs.API_KEY, 3)
    request = m.DescribeConfigsRequest(
        resources=(
            m.DescribeConfigsResource(
                resource_type=2, resource_name="a", configuration_keys=("retention.ms",)
            ),
            m.DescribeConfigsResource(resource_type=2, resource_name="b", configuration_keys=()),
            m.DescribeConfigsResource(
                resource_type=2, resource_name="nope", configuration_keys=None
            ),
            m.DescribeConfigsResource(resource_type=4, resource_name="", configuration_keys=None),
            m.DescribeConfigsResource(resource_type=4, resource_name="x", configuration_keys=None),
            m.DescribeConfigsResource(resource_type=8, resource_name="1", configuration_keys=None),
        ),
        include_synonyms=True,
        include_documentation=True,
    )
    response = client_reads(
        await describe_configs.handle(ctx(broker, 3), request),
        describe_configs.API_KEY,
        3,
    )
    results = response.results
    assert [r.error_code for r in results] == [
        E.none,
        E.none,
        E.unknown_topic_or_partition,
        E.none,
        E.invalid_request,
        E.invalid_request,
    ]
    only = results[0].configs
    assert [(c.name, c.value, c.config_source, c.config_type, c.documentation) for c in only] == [
        ("retention.ms", "1000", 1, 5, "keep")
    ]
    assert [(s.name, s.value, s.source) for s in only[0].synonyms] == [("retention.ms", "1000", 1)]
    assert [c.name for c in results[1].configs] == ["retention.ms", "cleanup.policy"]
    assert [(c.name, c.value) for c in results[3].configs] == [("broker.id", "1")]


async def test_describe_configs_v0_says_is_default_and_has_no_synonyms():
    """sarama 1.22's ListTopics and DescribeConfig: v0 (our model, Kafka 3.9's) says only
    whether each config is the default, from its source; a topic's own value is not."""
    broker = FakeBroker()
    broker.add_topic("a")
    m = describe_configs_v0
    request = m.DescribeConfigsRequest(
        resources=(
            m.DescribeConfigsResource(
                resource_type=i8(2), resource_name="a", configuration_keys=None
            ),
            m.DescribeConfigsResource(
                resource_type=i8(4), resource_name="1", configuration_keys=None
            ),
            m.DescribeConfigsResource(
                resource_type=i8(2), resource_name="b", configuration_keys=None
            ),
        )
    )
    response = client_reads(
        await describe_configs.handle(ctx(broker, 0), request), describe_configs.API_KEY, 0
    )
    assert [(r.resource_name, r.error_code) for r in response.results] == [
        ("a", E.none),
        ("1", E.none),
        ("b", E.unknown_topic_or_partition),
    ]
    topic, node, _ = response.results
    assert [(c.name, c.value, c.is_default, c.read_only) for c in topic.configs] == [
        ("retention.ms", "1000", False, False),
        ("cleanup.policy", "delete", True, False),
    ]
    assert [(c.name, c.is_default, c.read_only) for c in node.configs] == [
        ("broker.id", False, True)
    ]


async def test_describe_configs_answers_no_resource_twice_and_at_most_a_thousand():
    """Every copy of a resource named twice is INVALID_REQUEST without configs (a broker by
    any of its names: "", "1", "01" on node 1); more than 1,000 resources, all of them."""
    broker = FakeBroker()
    broker.add_topic("a")
    m = request_module(describe_configs.API_KEY, 4)

    def request(*resources: tuple[int, str]) -> object:
        return m.DescribeConfigsRequest(
            resources=tuple(
                m.DescribeConfigsResource(
                    resource_type=kind, resource_name=name, configuration_keys=None
                )
                for kind, name in resources
            ),
            include_synonyms=False,
            include_documentation=True,
        )

    named = [(2, "a"), (32, "g"), (2, "a"), (4, ""), (4, "01"), (32, "h"), (32, "g"), (4, "2")]
    response = client_reads(
        await describe_configs.handle(ctx(broker, 4), request(*named)),
        describe_configs.API_KEY,
        4,
    )
    assert [(r.resource_name, r.error_code, len(r.configs)) for r in response.results] == [
        ("a", E.invalid_request, 0),
        ("g", E.invalid_request, 0),
        ("a", E.invalid_request, 0),
        ("", E.invalid_request, 0),
        ("01", E.invalid_request, 0),
        ("h", E.none, 2),
        ("g", E.invalid_request, 0),
        ("2", E.none, 1),
    ]
    assert response.results[0].error_message == "The request names this resource more than once"
    distinct = [(32, f"g{i}") for i in range(describe_configs.MAX_RESOURCES)]
    response = client_reads(
        await describe_configs.handle(ctx(broker, 4), request(*distinct)),
        describe_configs.API_KEY,
        4,
    )
    assert {(r.error_code, len(r.configs)) for r in response.results} == {(E.none, 2)}
    response = client_reads(
        await describe_configs.handle(ctx(broker, 4), request(*distinct, (2, "a"))),
        describe_configs.API_KEY,
        4,
    )
    assert len(response.results) == 1001
    assert {(r.error_code, r.error_message, r.configs) for r in response.results} == {
        (E.invalid_request, "DescribeConfigs names 1001 resources, at most 1000 per request", ())
    }


# --------------------------------------------------------------------------- group configs

GROUP = 32  # on the wire; librdkafka's ResourceType.GROUP is 3


async def test_incremental_alter_configs_on_groups():
    broker = FakeBroker()
    broker.group_errors["bad"] = (E.invalid_config, "Unknown group config name: x")
    m = request_module(incremental_alter_configs.API_KEY, 1)
    SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

    def resource(kind, name, *configs):
        return m.AlterConfigsResource(
            resource_type=kind,
            resource_name=name,
            configs=tuple(
                m.AlterableConfig(name=n, config_operation=o, value=v) for n, o, v in configs
            ),
        )

    request = m.IncrementalAlterConfigsRequest(
        resources=(
            resource(
                GROUP,
                "g",
                ("share.auto.offset.reset", SET, "earliest"),
                ("share.delivery.count.limit", DELETE, None),
            ),
            resource(GROUP, "list", ("share.isolation.level", APPEND, "read_committed")),
            resource(GROUP, "minus", ("share.isolation.level", SUBTRACT, "read_committed")),
            resource(GROUP, "null", ("share.isolation.level", SET, None)),
            resource(GROUP, "twice", ("a", SET, "1"), ("a", DELETE, None)),
            resource(GROUP, "bad", ("x", SET, "1")),
            resource(GROUP, "dup", ("share.auto.offset.reset", SET, "latest")),
            resource(GROUP, "dup"),
            resource(GROUP, "op", ("share.auto.offset.reset", 9, "latest")),
            resource(3, "g", ("share.auto.offset.reset", SET, "earliest")),
            resource(2, "t", ("retention.ms", SET, "5")),
        ),
        validate_only=False,
    )
    response = await incremental_alter_configs.handle(ctx(broker, 1), request)
    assert [(r.resource_type, r.resource_name, r.error_code) for r in response.responses] == [
        (GROUP, "g", E.none),
        (GROUP, "list", E.invalid_config),
        (GROUP, "minus", E.invalid_config),
        (GROUP, "null", E.invalid_request),
        (GROUP, "twice", E.invalid_request),
        (GROUP, "bad", E.invalid_config),
        (GROUP, "dup", E.invalid_request),
        (GROUP, "dup", E.invalid_request),
        (GROUP, "op", E.invalid_request),
        (3, "g", E.invalid_request),
        (2, "t", E.none),
    ]
    messages = {r.resource_name: r.error_message for r in response.responses}
    assert messages["list"] == (
        "Can't APPEND to key share.isolation.level because its type is not LIST."
    )
    assert messages["null"] == "Null value not supported for : share.isolation.level"
    assert messages["bad"] == "Unknown group config name: x"
    assert broker.altered == [
        (
            "g",
            {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": None},
            True,
            False,
        ),
        ("bad", {"x": "1"}, True, False),
        ("t", {"retention.ms": "5"}, True, False),
    ]


async def test_alter_configs_replaces_a_groups_configs():
    broker = FakeBroker()
    m = request_module(alter_configs.API_KEY, 2)

    def resource(kind, name, **configs):
        return m.AlterConfigsResource(
            resource_type=kind,
            resource_name=name,
            configs=tuple(m.AlterableConfig(name=n, value=v) for n, v in configs.items()),
        )

    request = m.AlterConfigsRequest(
        resources=(
            resource(GROUP, "g", **{"share.record.lock.duration.ms": "20000"}),
            resource(GROUP, "null", **{"share.record.lock.duration.ms": None}),
            resource(GROUP, "none"),
        ),
        validate_only=True,
    )
    response = await alter_configs.handle(ctx(broker, 2), request)
    assert [(r.resource_name, r.error_code) for r in response.responses] == [
        ("g", E.none),
        ("null", E.invalid_request),
        ("none", E.none),
    ]
    assert broker.altered == [
        ("g", {"share.record.lock.duration.ms": "20000"}, False, True),
        ("none", {}, False, True),
    ]


async def test_describe_configs_of_a_group():
    """Any group id answers, configured or not (as in Kafka); the empty one is refused."""
    broker = FakeBroker()
    m = request_module(describe_configs.API_KEY, 4)
    request = m.DescribeConfigsRequest(
        resources=(
            m.DescribeConfigsResource(
                resource_type=GROUP, resource_name="g", configuration_keys=None
            ),
            m.DescribeConfigsResource(
                resource_type=GROUP,
                resource_name="never-seen",
                configuration_keys=("share.delivery.count.limit",),
            ),
            m.DescribeConfigsResource(
                resource_type=GROUP, resource_name="", configuration_keys=None
            ),
        ),
        include_synonyms=False,
        include_documentation=True,
    )
    response = client_reads(
        await describe_configs.handle(ctx(broker, 4), request),
        describe_configs.API_KEY,
        4,
    )
    results = response.results
    assert [(r.resource_type, r.error_code) for r in results] == [
        (GROUP, E.none),
        (GROUP, E.none),
        (GROUP, E.invalid_request),
    ]
    assert [
        (c.name, c.value, c.config_source, c.config_type, c.documentation, c.synonyms)
        for c in results[0].configs
    ] == [
        ("share.auto.offset.reset", "earliest", 8, 2, "d", ()),
        ("share.delivery.count.limit", "5", 5, 3, "n", ()),
    ]
    assert [c.name for c in results[1].configs] == ["share.delivery.count.limit"]
    assert results[2].error_message == "Group name must not be empty"


# --------------------------------------------------------------------------- ShareFetch


def share_fetch_request(
    version: int, topic_id: uuid.UUID, epoch: int, partitions: dict[int, tuple]
) -> object:
    """A ShareFetch of `topic_id`'s partitions, each with its acknowledgement batches."""
    m = request_module(share_fetch.API_KEY, version)
    return build(
        m.ShareFetchRequest,
        group_id="g",
        member_id="m",
        share_session_epoch=epoch,
        max_wait=timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        max_records=500,
        batch_size=500,
        topics=(
            m.FetchTopic(
                topic_id=topic_id,
                partitions=tuple(
                    m.FetchPartition(partition_index=i, acknowledgement_batches=acks)
                    for i, acks in partitions.items()
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


async def test_a_share_session_holds_only_partitions_that_exist() -> None:
    """A share session outlives the request that opened it: an index the topic does not have
    is answered UNKNOWN_TOPIC_OR_PARTITION and kept out of it, so no client can grow it."""
    broker = FakeBroker()
    topic = broker.add_topic("a", 1)
    broker.share = ShareManager(lambda _g: group_config.values({}), every_member)
    indexes = dict.fromkeys((0, 7, -1, 2**31 - 1), ())
    request = share_fetch_request(1, topic.topic_id, 0, indexes)
    response = await share_fetch.handle(ctx(broker, 1), request)
    assert response.error_code == E.none
    answered = {p.partition_index: p.error_code for p in response.responses[0].partitions}
    unknown = E.unknown_topic_or_partition
    assert answered == {7: unknown, -1: unknown, 2**31 - 1: unknown}
    session = broker.share.sessions.get("g", "m")
    assert session is not None and session.partitions == {("a", 0)}


@pytest.mark.parametrize("version", [1, 2])
async def test_renew_is_an_acknowledgement_type_of_v2_only(version: int) -> None:
    """A v1 request naming RENEW (4) gets INVALID_REQUEST for that partition's
    acknowledgements; in v2 it keeps the member's lock."""
    broker = FakeBroker()
    topic = broker.add_topic("a", 1)
    broker.share = ShareManager(
        lambda _g: group_config.values({"share.auto.offset.reset": "earliest"}), every_member
    )
    partition = broker.partitions[("a", 0)]
    partition.append(0, make_batch([(None, b"v")]))
    m = request_module(share_fetch.API_KEY, version)

    def fetch(epoch: int, acks: tuple = ()) -> object:
        return share_fetch_request(version, topic.topic_id, epoch, {0: acks})

    first = await share_fetch.handle(ctx(broker, version), fetch(0))
    assert [a.first_offset for a in first.responses[0].partitions[0].acquired_records] == [0]
    renew = (m.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=(4,)),)
    second = await share_fetch.handle(ctx(broker, version), fetch(1, renew))
    expected = E.none if version == 2 else E.invalid_request
    assert second.responses[0].partitions[0].acknowledge_error_code == expected


async def test_only_a_member_its_coordinator_knows_opens_a_share_session() -> None:
    """2,000 made-up member ids used to fill the node's 2,000 share sessions and lock every
    real consumer out: now each gets UNKNOWN_MEMBER_ID and leaves nothing behind."""
    broker = FakeBroker()
    topic = broker.add_topic("a", 1)
    groups = ShareGroups(lambda _t: 1)
    mesh = Mesh("1", ("127.0.0.1", 0), {}, b"secret")  # the coordinator is this node
    known = ShareMembers(
        1,
        mesh,
        lambda _g: 1,
        lambda g, m: ErrorCode.none if groups.is_member(g, m) else ErrorCode.unknown_member_id,
        lambda _g, _m: None,
    )
    broker.share = ShareManager(lambda _g: group_config.values({}), known.check)
    for _ in range(2000):
        request = share_fetch_request(1, topic.topic_id, 0, {0: ()})
        response = await share_fetch.handle(ctx(broker, 1), request)
        assert (response.error_code, response.responses) == (E.unknown_member_id, ())
    assert len(broker.share.sessions) == 0
    groups.heartbeat("g", "m", 0, None, ["a"], "c", "h")  # m joins
    response = await share_fetch.handle(
        ctx(broker, 1), share_fetch_request(1, topic.topic_id, 0, {0: ()})
    )
    assert response.error_code == E.none and broker.share.sessions.get("g", "m") is not None
    groups.close()


async def test_an_internal_topic_is_not_shared() -> None:
    """A share-partition's state is written into that partition's own Raft log: none for
    __consumer_offsets, whatever partition a client names."""
    broker = FakeBroker()
    offsets = broker.add_topic("__consumer_offsets", 2)
    broker.share = ShareManager(lambda _g: group_config.values({}), every_member)
    request = share_fetch_request(1, offsets.topic_id, 0, {0: (), 1: ()})
    response = await share_fetch.handle(ctx(broker, 1), request)
    assert response.error_code == E.none
    assert [(p.partition_index, p.error_code) for p in response.responses[0].partitions] == [
        (0, E.invalid_topic_exception),
        (1, E.invalid_topic_exception),
    ]
    session = broker.share.sessions.get("g", "m")
    assert session is not None and session.partitions == set()
    assert broker.share.held() == []


# --------------------------------------------------------------------------- Authorization
# Kafka's rules per API (KafkaApis, ControllerApis, AuthHelper): which operation on which
# resource, which error, and where in the order of checks. The principal is ANONYMOUS from
# host "h" (ctx); the broker's authorizer judges it by the bindings given.

ANON = "User:ANONYMOUS"


def secure(broker: FakeBroker, *grants: tuple, allow_if_no_acl: bool = False) -> None:
    """grants: (resource type, name, operation[, permission[, pattern]]) for ANONYMOUS."""
    bindings: dict[tuple, None] = {}
    for grant in grants:
        kind, name, op = grant[:3]
        permission = grant[3] if len(grant) > 3 else Perm.ALLOW
        pattern = grant[4] if len(grant) > 4 else Pat.LITERAL
        bindings[(kind, name, pattern, ANON, "*", op, permission)] = None
    broker.authorizer = Authorizer((), allow_if_no_acl, AclIndex(lambda: bindings).synced)


async def test_produce_needs_write_on_each_topic_before_any_other_check():
    broker = FakeBroker()
    broker.add_topic("a")
    broker.add_topic("b")
    secure(broker, (Res.TOPIC, "b", Op.WRITE))
    request = produce_request(9, [("a", 0, b"x"), ("b", 0, b"y"), ("nope", 0, b"z")], acks=2)
    response = await produce.handle(ctx(broker, 9), request)
    assert [e for _, e, _ in partition_results(response)] == [
        E.topic_authorization_failed,
        E.invalid_required_acks,  # authorized: the next check answers
        E.topic_authorization_failed,  # whether it exists is not told
    ]
    assert broker.partitions["a", 0].calls == []
    # with the no-ACL default, a topic nobody has ACLs for is open (and "nope" is unknown)
    secure(broker, (Res.TOPIC, "a", Op.WRITE, Perm.DENY), allow_if_no_acl=True)
    request = produce_request(9, [("a", 0, b"x"), ("nope", 0, b"z")])
    response = await produce.handle(ctx(broker, 9), request)
    assert [e for _, e, _ in partition_results(response)] == [
        E.topic_authorization_failed,
        E.unknown_topic_or_partition,
    ]
    with pytest.raises(CloseConnection):  # acks=0: the connection is Kafka's only answer
        await produce.handle(ctx(broker, 9), produce_request(9, [("a", 0, b"x")], acks=0))


async def test_produce_transactional_and_by_id():
    broker = FakeBroker()
    topic_id = broker.add_topic("a").topic_id
    secure(broker, (Res.TOPIC, "a", Op.WRITE))
    request = produce_request(9, [("a", 0, TXN_BATCH)], transactional_id="tx")
    response = await produce.handle(ctx(broker, 9), request)
    assert partition_results(response) == [(0, E.transactional_id_authorization_failed, -1)]
    secure(broker, (Res.TOPIC, "a", Op.WRITE), (Res.TRANSACTIONAL_ID, "tx", Op.WRITE))
    response = await produce.handle(ctx(broker, 9), request)
    assert partition_results(response) == [(0, E.invalid_txn_state, -1)]
    # by id (v13): an unknown id has no name to authorize; a known one is judged by its name
    secure(broker)
    unknown = uuid.uuid4()
    request = produce_request(
        13, [("a", 0, b"x"), ("b", 0, b"y")], by_id={"a": topic_id, "b": unknown}
    )
    response = await produce.handle(ctx(broker, 13), request)
    assert partition_results(response, 13) == [
        (0, E.topic_authorization_failed, -1),
        (0, E.unknown_topic_id, -1),
    ]


async def test_fetch_needs_read_on_each_topic():
    broker = FakeBroker()
    for name in ("a", "b"):
        broker.add_topic(name)
        broker.partitions[name, 0].append(0, b"data")
    secure(broker, (Res.TOPIC, "a", Op.READ), (Res.TOPIC, "b", Op.DESCRIBE))
    request = fetch_request(12, [(n, 0, 0, 100, -1, -1) for n in ("a", "b", "nope")])
    response = await fetch.handle(ctx(broker, 12), request)
    assert fetched(response) == [
        (0, E.none, 1, b"data"),
        (0, E.topic_authorization_failed, -1, b""),
        (0, E.topic_authorization_failed, -1, b""),
    ]
    assert [c[0] for c in broker.partitions["b", 0].calls] == []


async def test_list_offsets_and_offset_for_leader_epoch_need_describe():
    broker = FakeBroker()
    broker.add_topic("a")
    broker.partitions["a", 0].timestamps = {-1: TimestampOffset(7, 10, 5)}
    broker.partitions["a", 0].epoch_ends = {5: (5, 10)}
    secure(broker)
    response = await list_offsets.handle(ctx(broker, 7), list_offsets_request([(0, -1, -1)]))
    assert response.topics[0].partitions[0].error_code == E.topic_authorization_failed
    m = request_module(offset_for_leader_epoch.API_KEY, 4)
    request = m.OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=(
            m.OffsetForLeaderTopic(
                topic="a",
                partitions=(
                    m.OffsetForLeaderPartition(
                        partition=0, current_leader_epoch=-1, leader_epoch=5
                    ),
                ),
            ),
        ),
    )

    async def end_offset():
        response = await offset_for_leader_epoch.handle(ctx(broker, 4), request)
        p = response.topics[0].partitions[0]
        return p.error_code, p.end_offset

    assert await end_offset() == (E.topic_authorization_failed, -1)
    secure(broker, (Res.CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION))  # a replica's right
    assert await end_offset() == (E.none, 10)
    secure(broker, (Res.TOPIC, "a", Op.READ))  # READ implies DESCRIBE
    assert await end_offset() == (E.none, 10)
    response = await list_offsets.handle(ctx(broker, 7), list_offsets_request([(0, -1, -1)]))
    assert response.topics[0].partitions[0].offset == 10


def metadata_request(version, names=None, ids=None, create=True, operations=False):
    m = request_module(metadata.API_KEY, version)
    topics = None
    if names is not None or ids is not None:
        topics = tuple(build(m.MetadataRequestTopic, name=n, topic_id=None) for n in names or ())
        topics += tuple(build(m.MetadataRequestTopic, name=None, topic_id=i) for i in ids or ())
    return build(
        m.MetadataRequest,
        topics=topics,
        allow_auto_topic_creation=create,
        include_cluster_authorized_operations=operations,
        include_topic_authorized_operations=operations,
    )


async def test_metadata_hides_what_may_not_be_described():
    broker = FakeBroker()
    broker.add_topic("seen")
    hidden_id = broker.add_topic("hidden").topic_id
    secure(broker, (Res.TOPIC, "seen", Op.DESCRIBE))
    response = await metadata.handle(ctx(broker, 12), metadata_request(12))
    assert [t.name for t in response.topics] == ["seen"]
    response = await metadata.handle(
        ctx(broker, 12), metadata_request(12, ["hidden", "seen", "absent"], [hidden_id])
    )
    assert [(t.name, t.topic_id, t.error_code, len(t.partitions)) for t in response.topics] == [
        ("hidden", None, E.topic_authorization_failed, 0),  # not even whether it exists
        ("seen", broker.topic("seen").topic_id, E.none, 1),
        ("absent", None, E.topic_authorization_failed, 0),
        (None, hidden_id, E.topic_authorization_failed, 0),  # the id, never the name
    ]
    assert broker.created == []


async def test_metadata_auto_creation_needs_create_on_the_cluster_or_the_topic():
    broker = FakeBroker()
    secure(
        broker,
        (Res.TOPIC, "*", Op.DESCRIBE),
        (Res.TOPIC, "mine-", Op.CREATE, Perm.ALLOW, Pat.PREFIXED),
    )
    request = metadata_request(9, ["mine-1", "other", "bad/name"])
    response = await metadata.handle(ctx(broker, 9), request)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("mine-1", E.leader_not_available),
        ("other", E.topic_authorization_failed),
        ("bad/name", E.topic_authorization_failed),  # CREATE is asked before the name
    ]
    assert [s.name for s in broker.created] == ["mine-1"]
    # without auto-creation nothing needs CREATE
    response = await metadata.handle(ctx(broker, 9), metadata_request(9, ["other"], create=False))
    assert [t.error_code for t in response.topics] == [E.unknown_topic_or_partition]
    secure(broker, (Res.TOPIC, "*", Op.DESCRIBE), (Res.CLUSTER, "kafka-cluster", Op.CREATE))
    response = await metadata.handle(ctx(broker, 9), metadata_request(9, ["other", "bad/name"]))
    assert [t.error_code for t in response.topics] == [
        E.leader_not_available,
        E.invalid_topic_exception,
    ]


async def test_authorized_operations_are_reported_when_asked():
    broker = FakeBroker()
    broker.add_topic("a")
    every_topic_operation = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
    response = await metadata.handle(ctx(broker, 10), metadata_request(10, operations=True))
    assert response.topics[0].topic_authorized_operations == every_topic_operation
    assert response.cluster_authorized_operations == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
    secure(broker, (Res.TOPIC, "a", Op.READ))
    response = await metadata.handle(ctx(broker, 10), metadata_request(10, operations=True))
    assert response.topics[0].topic_authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert response.cluster_authorized_operations == 0  # may not DESCRIBE the cluster
    response = await metadata.handle(ctx(broker, 10), metadata_request(10))
    assert response.topics[0].topic_authorized_operations == -(2**31)  # not asked


async def test_create_topics_needs_create_and_shows_configs_to_who_may_describe_them():
    broker = FakeBroker()
    broker.add_topic("mine")  # what the controller creates, as it answers
    broker.add_topic("theirs")

    async def create(specs, validate_only, timeout_ms):
        broker.created.extend(specs)
        return [TopicResult(spec.name, topic=broker.topic(spec.name)) for spec in specs]

    broker.create_topics = create  # type: ignore[method-assign]
    secure(broker, (Res.TOPIC, "mine", Op.CREATE))
    m = request_module(create_topics.API_KEY, 7)

    def request(*names):
        return m.CreateTopicsRequest(
            topics=tuple(
                m.CreatableTopic(
                    name=n, num_partitions=1, replication_factor=1, assignments=(), configs=()
                )
                for n in names
            ),
            timeout=timedelta(seconds=5),
            validate_only=False,
        )

    response = await create_topics.handle(ctx(broker, 7), request("mine", "theirs", "d", "d", ".."))
    assert [(t.name, t.error_code, t.error_message) for t in response.topics] == [
        ("mine", E.none, None),
        ("theirs", E.topic_authorization_failed, "Authorization failed."),
        ("d", E.invalid_request, "Create topics request contains topic d more than once"),
        ("d", E.invalid_request, "Create topics request contains topic d more than once"),
        ("..", E.topic_authorization_failed, "Authorization failed."),  # before the name
    ]
    assert [s.name for s in broker.created] == ["mine"]
    mine = response.topics[0]
    assert (mine.topic_config_error_code, mine.configs) == (E.topic_authorization_failed, ())
    secure(broker, (Res.CLUSTER, "kafka-cluster", Op.CREATE), (Res.TOPIC, "mine", Op.ALTER_CONFIGS))
    response = await create_topics.handle(ctx(broker, 7), request("mine", "theirs"))
    assert [t.error_code for t in response.topics] == [E.none, E.none]
    assert response.topics[0].topic_config_error_code == E.none and response.topics[0].configs
    assert response.topics[1].topic_config_error_code == E.topic_authorization_failed
    assert response.topics[1].num_partitions == 1  # what was created is told all the same


async def test_delete_topics_needs_delete_and_hides_what_may_not_be_described():
    broker = FakeBroker()
    ids = {name: broker.add_topic(name).topic_id for name in ("gone", "seen", "hidden")}
    secure(
        broker,
        (Res.TOPIC, "gone", Op.DELETE),
        (Res.TOPIC, "seen", Op.DESCRIBE),
        (Res.TOPIC, "absent", Op.DESCRIBE),
    )
    m = request_module(delete_topics.API_KEY, 6)
    request = m.DeleteTopicsRequest(
        topics=(
            m.DeleteTopicState(name=None, topic_id=ids["gone"]),
            m.DeleteTopicState(name="seen", topic_id=None),
            m.DeleteTopicState(name=None, topic_id=ids["seen"]),
            m.DeleteTopicState(name=None, topic_id=ids["hidden"]),
            m.DeleteTopicState(name="hidden", topic_id=None),
            m.DeleteTopicState(name="absent", topic_id=None),
            m.DeleteTopicState(name="nowhere", topic_id=None),
        ),
        timeout=timedelta(seconds=1),
    )
    response = await delete_topics.handle(ctx(broker, 6), request)
    assert [(r.name, r.topic_id, r.error_code) for r in response.responses] == [
        ("gone", ids["gone"], E.none),
        # named by name and by id: not said to be the same topic to who may not delete it
        ("seen", None, E.topic_authorization_failed),
        ("seen", ids["seen"], E.topic_authorization_failed),
        (None, ids["hidden"], E.topic_authorization_failed),  # the name is kept back
        ("hidden", None, E.topic_authorization_failed),
        ("absent", None, E.none),  # describable: its fate is told (FakeBroker deletes anything)
        ("nowhere", None, E.topic_authorization_failed),
    ]
    assert broker.deleted == ["gone", "absent"]
    broker.deleted.clear()
    secure(broker, (Res.CLUSTER, "kafka-cluster", Op.DELETE))
    response = await delete_topics.handle(ctx(broker, 6), request)
    assert [r.error_code for r in response.responses][1:3] == [E.invalid_request] * 2
    assert E.topic_authorization_failed not in [r.error_code for r in response.responses]


async def test_create_partitions_needs_alter():
    broker = FakeBroker()
    secure(broker, (Res.TOPIC, "a", Op.ALTER))
    m = request_module(create_partitions.API_KEY, 3)
    request = m.CreatePartitionsRequest(
        topics=tuple(
            m.CreatePartitionsTopic(name=n, count=3, assignments=None) for n in ("a", "b", "b")
        ),
        timeout=timedelta(seconds=1),
        validate_only=True,
    )
    broker.create_partitions = _created_partitions  # type: ignore[method-assign]
    response = await create_partitions.handle(ctx(broker, 3), request)
    assert [(r.name, r.error_code) for r in response.results] == [
        ("a", E.none),
        ("b", E.invalid_request),  # duplicates first
        ("b", E.invalid_request),
    ]
    secure(broker)
    response = await create_partitions.handle(ctx(broker, 3), request)
    assert [r.error_code for r in response.results][0] == E.topic_authorization_failed


async def _created_partitions(name, count, assignments, validate_only, timeout_ms):
    return TopicResult(name)


async def test_configs_need_describe_configs_and_alter_configs():
    broker = FakeBroker()
    broker.add_topic("a")
    secure(broker, (Res.TOPIC, "a", Op.ALTER_CONFIGS))  # implies DESCRIBE_CONFIGS
    m = request_module(describe_configs.API_KEY, 4)
    request = m.DescribeConfigsRequest(
        resources=tuple(
            m.DescribeConfigsResource(
                resource_type=kind, resource_name=name, configuration_keys=None
            )
            for kind, name in ((2, "a"), (2, "b"), (4, "1"), (32, "g"))
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    response = client_reads(
        await describe_configs.handle(ctx(broker, 4), request),
        describe_configs.API_KEY,
        4,
    )
    assert [(r.error_code, r.error_message, len(r.configs)) for r in response.results] == [
        (E.none, None, 2),
        (E.topic_authorization_failed, "Topic authorization failed.", 0),
        (E.cluster_authorization_failed, "Cluster authorization failed.", 0),
        (E.group_authorization_failed, "Group authorization failed.", 0),
    ]

    def alter_request(module, *resources):
        am = request_module(module.API_KEY, 1)
        if module is incremental_alter_configs:
            config = am.AlterableConfig(name="retention.ms", config_operation=0, value="1")
        else:
            config = am.AlterableConfig(name="retention.ms", value="1")
        return build(
            am.AlterConfigsRequest
            if module is alter_configs
            else am.IncrementalAlterConfigsRequest,
            resources=tuple(
                am.AlterConfigsResource(resource_type=k, resource_name=n, configs=(config,))
                for k, n in resources
            ),
            validate_only=False,
        )

    for module in (alter_configs, incremental_alter_configs):
        broker.altered.clear()
        request = alter_request(
            module, (2, "a"), (2, "b"), (32, "g"), (2, "a/b"), (4, "1"), (2, "b")
        )
        response = await module.handle(ctx(broker, 1), request)
        assert [r.error_code for r in response.responses] == [
            E.none,
            E.invalid_request,  # named twice: refused before anyone is asked
            E.group_authorization_failed,
            E.topic_authorization_failed,  # asked before its name is checked
            E.invalid_request,  # broker configs are static
            E.invalid_request,
        ], module
        assert [name for name, *_ in broker.altered] == ["a"]


async def test_init_producer_id_needs_idempotent_write_or_write_on_some_topic():
    broker = FakeBroker()
    broker.init_producer_id = _producer_id  # type: ignore[method-assign]
    m = request_module(init_producer_id.API_KEY, 4)

    async def error(transactional_id=None):
        request = m.InitProducerIdRequest(
            transactional_id=transactional_id,
            transaction_timeout=timedelta(seconds=1),
            producer_id=-1,
            producer_epoch=-1,
        )
        response = await init_producer_id.handle(ctx(broker, 4), request)
        return response.error_code, response.producer_id

    secure(broker)
    assert await error() == (E.cluster_authorization_failed, -1)
    assert await error("tx") == (E.transactional_id_authorization_failed, -1)
    secure(broker, (Res.TOPIC, "some-", Op.WRITE, Perm.ALLOW, Pat.PREFIXED))
    assert await error() == (E.none, 42)
    secure(broker, (Res.CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE))
    assert await error() == (E.none, 42)


async def _producer_id(transactional_id, timeout_ms, producer_id, producer_epoch):
    return E.none, 42, 0


async def test_describe_log_dirs_needs_describe_on_the_cluster_and_describe_cluster_is_open():
    broker = FakeBroker()
    broker.log_dirs = lambda: []  # type: ignore[method-assign]
    secure(broker)
    m = request_module(describe_log_dirs.API_KEY, 4)
    response = await describe_log_dirs.handle(ctx(broker, 4), m.DescribeLogDirsRequest(topics=None))
    assert response.error_code == E.cluster_authorization_failed
    m = request_module(describe_cluster.API_KEY, 1)
    request = m.DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1)
    response = await describe_cluster.handle(ctx(broker, 1), request)
    assert (response.error_code, response.cluster_authorized_operations) == (E.none, 0)
    secure(broker, (Res.CLUSTER, "kafka-cluster", Op.ALTER))
    response = await describe_cluster.handle(ctx(broker, 1), request)
    assert response.cluster_authorized_operations == (1 << Op.ALTER) | (1 << Op.DESCRIBE)


async def test_share_fetch_needs_read_on_the_group_and_each_topic() -> None:
    broker = FakeBroker()
    readable, other = broker.add_topic("a"), broker.add_topic("b")
    broker.share = ShareManager(lambda _g: group_config.values({}), every_member)
    secure(broker, (Res.TOPIC, "a", Op.READ))
    request = share_fetch_request(1, readable.topic_id, 0, {0: ()})
    response = await share_fetch.handle(ctx(broker, 1), request)
    assert (response.error_code, response.responses) == (E.group_authorization_failed, ())
    assert broker.share.sessions.get("g", "m") is None
    secure(broker, (Res.TOPIC, "a", Op.READ), (Res.GROUP, "g", Op.READ))
    response = await share_fetch.handle(
        ctx(broker, 1), share_fetch_request(1, other.topic_id, 0, {0: ()})
    )
    assert response.error_code == E.none
    assert [(p.partition_index, p.error_code) for p in response.responses[0].partitions] == [
        (0, E.topic_authorization_failed)
    ]
