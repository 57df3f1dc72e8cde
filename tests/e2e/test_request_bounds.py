"""Every API at every version raftlog serves, sent the largest request its entry bound admits
and one entry more, against a 3-node cluster (generated from the request schemas by
tests/support/big_requests.py, so a new API is covered the day it is served).

Before the bound, one DescribeTopicPartitions of 100,000 names held a node's loop 533 s and
every leadership left it; DescribeTransactions, DescribeQuorum, DeleteRecords,
AlterReplicaLogDirs, TxnOffsetCommit and AddPartitionsToTxn of 100,000 entries each cost
elections. Now a request at the bound is answered with no node's loop held 0.5 s (the
election timeout is 0.5-1 s) and no leadership moved; one past it gets INVALID_REQUEST
where its response has a top-level error code and a closed connection where it has none,
without being decoded; and no node logs an ERROR.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from support import records as R
from support import wire as W
from support.big_requests import BigRequest, largest
from support.cluster import Cluster
from support.loop_stalls import node_figures, stalls_over, worst_seconds, worst_stall

from kafka_api import entry_bounds
from kafka_api.codec import response_schema
from kafka_api.handlers import HANDLERS, REFUSAL_UNREAD, api_versions
from raftlog.common.errors import ErrorCode

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

# A stall past this may cost leaderships; the detector's buckets are 0.25, 0.5, 1, ...
STALL_LIMIT = "0.5"
ASKED, PROBE = 7, 8  # correlation ids: the big request, and an ApiVersions behind it


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Without auto-creation: Metadata v0-3 naming 10,000 unknown topics would create them, new
    # leaderships by the thousand that this test would count as moved (creating many topics
    # at once is tested on its own: test_many_topics.py).
    c = Cluster(
        tmp_path_factory.mktemp("bounds"),
        nodes=3,
        name="bounds",
        broker={"auto.create.topics.enable": False},
    )
    try:
        c.start()
        c.create_topic("t", partitions=6, replication_factor=3)
        yield c
    finally:
        c.stop()


def _epochs(cluster: Cluster) -> dict[tuple[str, int], tuple[int, int]]:
    """Every partition's (leader epoch, leader), the newest any node knows."""
    epochs: dict[tuple[str, int], tuple[int, int]] = {}
    for n in cluster.node_ids:
        with W.KafkaWire(cluster.node(n).kafka_addr, timeout=30) as wire:
            for name, partitions in wire.metadata(None).topics.items():
                for p in partitions.values():
                    key = (name, p.partition)
                    epochs[key] = max(epochs.get(key, (-1, -1)), (p.leader_epoch, p.leader))
    return epochs


@dataclass
class Exchange:
    answer: bytes | None  # the big request's response, if one came
    closed: bool  # the node closed the connection
    seconds: float


def _exchange(address: tuple[str, int], big: BigRequest) -> Exchange:
    """Sends the request and an ApiVersions behind it on one connection; reads until the
    ApiVersions answer (a request with acks=0 gets none of its own) or the close."""
    frame = W.encode_raw_request(
        big.api_key, big.version, ASKED, big.body, flexible_header=big.flexible_header
    )
    probe = W.encode_raw_request(api_versions.API_KEY, 0, PROBE)
    answer = None
    started = time.monotonic()
    with W.KafkaWire(address, timeout=120) as wire:
        try:
            wire.send_bytes(frame + probe)
            while True:
                got = wire.recv_frame()
                if W.response_correlation_id(got) == PROBE:
                    return Exchange(answer, False, time.monotonic() - started)
                answer = got
        except W.ConnectionClosed:
            return Exchange(answer, True, time.monotonic() - started)


def _top_error(big: BigRequest, answer: bytes) -> int:
    _, response = W.decode_response(answer, response_schema(big.api_key, big.version))
    return int(response.error_code)


def test_every_api_at_its_bound_and_past_it(cluster: Cluster) -> None:
    address = cluster.node(1).kafka_addr
    rows = []
    before, epochs = node_figures(cluster), _epochs(cluster)
    for key, handler in sorted(HANDLERS.items()):
        slowest, widest, entries = 0.0, 0, 0
        for version in range(handler.MIN_VERSION, handler.MAX_VERSION + 1):
            admitted, past = largest(key, version)
            done = _exchange(address, admitted)
            what = f"api {key} v{version}, {admitted.entries} entries"
            assert not done.closed, f"{what}: connection closed\n{cluster.log_tails([1])}"
            slowest, widest = max(slowest, done.seconds), max(widest, len(admitted.body))
            entries = admitted.entries
            if past is None:
                continue
            refused = _exchange(address, past)
            why = f"api {key} v{version}, {past.entries} entries"
            if key in REFUSAL_UNREAD:  # answered per entry from the count alone
                assert refused.answer is not None and not refused.closed, why
            elif entry_bounds.refusal(response_schema(key, version), "") is not None:
                assert refused.answer is not None, why
                assert _top_error(past, refused.answer) == ErrorCode.invalid_request, why
            else:
                assert refused.closed and refused.answer is None, why
        after = node_figures(cluster)  # a stall that outlasts the answers counts for the next API
        worst = max((worst_stall(before[n], after[n]) for n in cluster.node_ids), key=worst_seconds)
        rows.append((key, handler.__name__.rsplit(".", 1)[-1], entries, widest, slowest, worst))
        for n in cluster.node_ids:
            assert stalls_over(before[n], after[n], STALL_LIMIT) == 0, (
                f"api {key}: node {n} stalled {STALL_LIMIT} s or more ({worst})"
            )
        now = _epochs(cluster)  # a partition created meanwhile (internal topics) is not a move
        moved = {p: (was, now.get(p)) for p, was in epochs.items() if now.get(p) != was}
        assert moved == {}, f"api {key}: leaderships moved (epoch, leader): {moved}"
        before, epochs = after, now
    print("\n| API | key | entries admitted | largest request | slowest answer | worst stall |")
    print("|---|---|---|---|---|---|")
    for key, name, entries, widest, slowest, worst in rows:
        print(
            f"| {name} | {key} | {entries:,} | {widest / 1e6:.2f} MB | {slowest:.2f} s | {worst} |"
        )
    for n in cluster.node_ids:
        assert cluster.is_alive(n)
        logged = cluster.nodes[n].log.read_text(errors="replace")
        errors = [line for line in logged.splitlines() if " ERROR " in line or "Traceback" in line]
        assert errors == [], f"node {n} logged:\n" + "\n".join(errors[:20])


# Nulls where the schema allows none (kafka_api/bounds.py): kio decoded them to None and the
# handler failed on it with an ERROR. Each body by hand: (api key, version, flexible, body).
TIMEOUT = (30_000).to_bytes(4, "big")
NULLS = [
    (19, 2, False, b"\xff\xff\xff\xff" + TIMEOUT + b"\x00"),  # CreateTopics: topics
    (19, 5, True, b"\x00" + TIMEOUT + b"\x00\x00"),  # the same, a compact array
    (  # CreateTopics: one topic, its name null
        19,
        4,
        False,
        b"\x00\x00\x00\x01\xff\xff\x00\x00\x00\x01\x00\x01" + b"\x00" * 8 + TIMEOUT + b"\x00",
    ),
    (30, 1, False, b"\xff\xff\xff\xff"),  # CreateAcls: creations
    (30, 3, True, b"\x00\x00"),
    (10, 1, False, b"\xff\xff\x00"),  # FindCoordinator: key
]


def test_a_null_where_none_is_allowed_closes_the_connection(cluster: Cluster) -> None:
    """As Kafka's parser refuses it; Metadata's null topics (every topic) is still answered,
    no node logs an ERROR, and a client still produces afterwards."""
    address = cluster.node(2).kafka_addr
    for key, version, flexible, body in NULLS:
        sent = BigRequest(key, version, 0, body, flexible, ())
        done = _exchange(address, sent)
        assert done.closed and done.answer is None, f"api {key} v{version}: {done}"
    every_topic = _exchange(address, BigRequest(3, 4, 0, b"\xff\xff\xff\xff\x00", False, ()))
    assert not every_topic.closed and every_topic.answer is not None
    produced = R.produce_confluent(cluster.bootstrap, "t", R.make_records("after-nulls", 20, 6))
    assert len(produced.acked) == 20, produced.failed[:3]
    for n in cluster.node_ids:
        logged = cluster.nodes[n].log.read_text(errors="replace")
        errors = [line for line in logged.splitlines() if " ERROR " in line or "Traceback" in line]
        assert errors == [], f"node {n} logged:\n" + "\n".join(errors[:20])
