"""Raw-protocol behaviour of a running node: bad input and leader-epoch fencing.

Bad input gets the right error or a closed connection, and the node keeps serving other
clients afterwards (checked with a real client). Fencing: Fetch, ListOffsets and
OffsetForLeaderEpoch with an older current_leader_epoch get FENCED_LEADER_EPOCH (74),
with a newer one UNKNOWN_LEADER_EPOCH (75).
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

import pytest
import zstandard
from kio.index import load_request_schema
from support import records as R
from support import wire as W

from raftlog_app.local_nodes import kafka_answers

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TOPIC = "protocol"
MAX_FRAME = 100 * 1024 * 1024  # the node's default request size limit


@pytest.fixture(scope="module")
def topic(module_cluster):
    module_cluster.create_topic(TOPIC, partitions=1, replication_factor=3)
    W.topic_metadata(module_cluster.bootstrap, TOPIC)
    out = R.produce_confluent(module_cluster.bootstrap, TOPIC, R.make_records("seed", 100, 1))
    assert len(out.acked) == 100, out.failed[:3]
    return TOPIC


def leader_of(cluster, topic: str = TOPIC) -> tuple[int, W.PartitionMeta]:
    md = W.topic_metadata(cluster.bootstrap, topic)
    pm = md.partition(topic, 0)
    return pm.leader, pm


def assert_still_serving(cluster, node_id: int, topic: str = TOPIC) -> None:
    """The node is alive, answers ApiVersions/Metadata on a fresh connection, and a real
    client can still produce (acks=all) and read back through the cluster."""
    assert cluster.is_alive(node_id), f"node {node_id} died\n{cluster.log_tails([node_id])}"
    with W.KafkaWire(cluster.node(node_id).kafka, timeout=10) as w:
        assert W.PRODUCE in w.api_versions()
        md = w.metadata([topic])
        assert md.topic_errors[topic] == W.NONE
    run = f"alive{time.monotonic_ns()}"
    out = R.produce_confluent(cluster.bootstrap, topic, R.make_records(run, 5, 1), timeout=60)
    assert len(out.acked) == 5, out.failed[:3]
    ends = W.end_offsets(cluster.bootstrap, topic)
    start = min(r.offset for r in out.acked)
    got = R.consume_confluent(cluster.bootstrap, topic, ends, starts={0: start}, timeout=60)
    R.check_log(out.acked, got, foreign_ok=True).raise_if_failed()


def expect_closed_or_answer(
    w: W.KafkaWire, correlation_id: int | None = None, timeout: float = 15
) -> str:
    """The node must close the connection or answer; returns which. Hanging fails."""
    w.shutdown_write()
    closed, frames = w.wait_closed(timeout)
    if frames and correlation_id is not None:
        cids = [W.response_correlation_id(f) for f in frames]
        assert correlation_id in cids, (
            f"answered with correlation ids {cids}, sent {correlation_id}"
        )
    assert closed or frames, f"node neither answered nor closed the connection within {timeout}s"
    return "answered" if frames else "closed"


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_bytes(module_cluster, topic, seed):
    node, _ = leader_of(module_cluster)
    rng = random.Random(seed)
    # unframed garbage (its first 4 bytes are some length, maybe huge or negative) ...
    with W.KafkaWire(module_cluster.node(node).kafka) as w:
        w.send_bytes(rng.randbytes(rng.randint(1, 4096)))
        expect_closed_or_answer(w)
    # ... and a correctly framed body of garbage (random api key, version, everything)
    with W.KafkaWire(module_cluster.node(node).kafka) as w:
        body = rng.randbytes(rng.randint(8, 2048))
        w.send_bytes(struct.pack(">i", len(body)) + body)
        expect_closed_or_answer(w)
    assert_still_serving(module_cluster, node)


@pytest.mark.parametrize("size", [MAX_FRAME + 1, 2**31 - 1, -1, -(2**31)])
def test_frame_size_over_limit_or_negative(module_cluster, topic, size):
    """Only the 4-byte size is sent: the node must not wait for (or allocate) the body."""
    node, _ = leader_of(module_cluster)
    with W.KafkaWire(module_cluster.node(node).kafka) as w:
        w.send_bytes(struct.pack(">i", size) + b"\x00" * 16)
        closed, frames = w.wait_closed(15)
        assert closed and not frames, f"size {size}: expected the connection closed, got {frames}"
    assert_still_serving(module_cluster, node)


def _raw(api_key: int, version: int, body: bytes, flexible: bool) -> bytes:
    header = struct.pack(">hhih", api_key, version, 9, 1) + b"x" + (b"\x00" if flexible else b"")
    return struct.pack(">i", len(header) + len(body)) + header + body


BEYOND_THE_FRAME = {
    # The 21 bytes that aborted a node: Metadata v12, topics claim 2^32-2 entries.
    "metadata v12": bytes.fromhex("000000110003000c0000000100017800ffffffff0f"),
    "produce v3": _raw(0, 3, struct.pack(">hhii", -1, -1, 30000, 2**31 - 1), False),
    "fetch v4": _raw(1, 4, struct.pack(">iiiibi", -1, 500, 1, 1 << 20, 0, 2**31 - 1), False),
    "produce v9 name": _raw(
        0, 9, b"\x00" + struct.pack(">hi", -1, 30000) + b"\x02\x81\x80\x80\x80\x01", True
    ),
    "find coordinator v4": _raw(10, 4, b"\x00\xff\xff\xff\xff\x0f", True),
}


@pytest.mark.parametrize("data", BEYOND_THE_FRAME.values(), ids=BEYOND_THE_FRAME.keys())
def test_a_length_beyond_the_frame_closes_the_connection(module_cluster, topic, data):
    """kio's native decoder reserved what an array length claimed, and a failed allocation
    aborted the process: one frame per node took the cluster down."""
    for n in module_cluster.node_ids:
        with W.KafkaWire(module_cluster.node(n).kafka) as w:
            w.send_bytes(data)
            closed, frames = w.wait_closed(15)
            assert closed and not frames, f"node {n} answered {frames}"
    for n in module_cluster.node_ids:
        assert_still_serving(module_cluster, n)


def test_an_unknown_tagged_field_is_ignored(module_cluster, topic):
    """ApiVersions v3 ("a", "1") with a tag v3 does not define: Kafka skips it."""
    node, _ = leader_of(module_cluster)
    with W.KafkaWire(module_cluster.node(node).kafka) as w:
        w.send_bytes(_raw(18, 3, b"\x02a\x021" + b"\x01\x09\x01\x00", True))
        assert W.response_correlation_id(w.recv_frame()) == 9


def test_corrupt_crc_produce_is_rejected(module_cluster, topic):
    node, _ = leader_of(module_cluster)
    addr = module_cluster.node(node).kafka
    with W.KafkaWire(addr) as w:
        before = w.list_offsets(TOPIC, 0)
        assert before.error == W.NONE
        good = W.make_batch([(b"k", b"corrupted-crc-test")])
        bad = W.corrupt_crc(good)
        assert bad != good
        r = w.produce(TOPIC, 0, bad, acks=-1)
        assert r.error == W.CORRUPT_MESSAGE, f"corrupt CRC answered {r}"
        after = w.list_offsets(TOPIC, 0)
        assert after.offset == before.offset, "a batch with a bad CRC changed the log end"
        # the same connection still works, and an intact batch goes in
        r = w.produce(TOPIC, 0, good, acks=-1)
        assert r.error == W.NONE and r.base_offset == before.offset, r
    assert_still_serving(module_cluster, node)


def test_a_compressed_bomb_or_garbage_is_refused_unopened(module_cluster, topic):
    """A 32 KB zstd batch holding 1 GiB froze a node for 6 s when ListOffsets by timestamp
    opened it; garbage under a valid CRC was stored and consumers looped on it. Produce now
    opens compressed batches under a bound, in a thread, and refuses both. The bomb is of
    whole records, so the bound stops it (zeros are refused as corrupt at the first piece)."""
    node, _ = leader_of(module_cluster)
    plain = W.make_batch([(b"k", b"v"), (b"k", b"w")])
    bomb = W.zstd_record_bomb(1 << 30)
    assert len(bomb) < 128 * 1024
    with W.KafkaWire(module_cluster.node(node).kafka) as w:
        before = w.list_offsets(TOPIC, 0)
        r = w.produce(TOPIC, 0, W.with_payload(plain, 4, bomb), acks=-1)
        assert r.error == W.MESSAGE_TOO_LARGE, r
        r = w.produce(TOPIC, 0, W.with_payload(plain, 4, W.zstd_bomb(1 << 30)), acks=-1)
        assert r.error == W.CORRUPT_MESSAGE, r
        r = w.produce(TOPIC, 0, W.with_payload(plain, 3, b"not lz4 at all" * 8), acks=-1)
        assert r.error == W.CORRUPT_MESSAGE, r
        assert w.list_offsets(TOPIC, 0).offset == before.offset
    assert_still_serving(module_cluster, node)


def _tiny_records(count: int, last_delta_ms: int) -> bytes:
    """`count` records with neither key nor value, all stamped at the batch's base timestamp
    except the last, `last_delta_ms` later."""
    records = []
    for i in range(count):
        body = (
            b"\x00"
            + W.zigzag(last_delta_ms if i == count - 1 else 0)
            + W.zigzag(i)
            + b"\x01\x01\x00"
        )
        records.append(W.zigzag(len(body)) + body)
    return b"".join(records)


def _claiming(batch: bytes, count: int, max_timestamp: int) -> bytes:
    """`batch` re-labelled to hold `count` records up to `max_timestamp` (CRC made valid)."""
    head = bytearray(batch)
    struct.pack_into(">i", head, 23, count - 1)
    struct.pack_into(">q", head, 35, max_timestamp)
    struct.pack_into(">i", head, 57, count)
    return W.with_payload(bytes(head), struct.unpack_from(">h", head, 21)[0], bytes(head[61:]))


def test_plain_records_that_do_not_fill_their_lengths_are_refused(module_cluster, topic):
    """A CRC-valid batch whose record lengths do not add up was stored, and consumers stopped
    at it with CorruptRecordError. Short batches are walked on the spot, long ones (5,000
    records here) in a thread; a long valid one goes in."""
    node, _ = leader_of(module_cluster)
    base = W.make_batch([(b"k", b"v")], timestamp_ms=1_000)
    with W.KafkaWire(module_cluster.node(node).kafka) as w:
        before = w.list_offsets(TOPIC, 0).offset
        for count in (3, 5_000):
            records = _tiny_records(count, 0)
            for bad in (records + b"\x00", records[:-1], b"\x14" + records[1:]):
                plain = W.with_payload(base, 0, bad)
                r = w.produce(TOPIC, 0, _claiming(plain, count, 1_000), acks=-1)
                assert r.error == W.CORRUPT_MESSAGE, (count, r)
        assert w.list_offsets(TOPIC, 0).offset == before
        good = _claiming(W.with_payload(base, 0, _tiny_records(5_000, 0)), 5_000, 1_000)
        r = w.produce(TOPIC, 0, good, acks=-1)
        assert (r.error, r.base_offset) == (W.NONE, before), r
        assert w.list_offsets(TOPIC, 0).offset == before + 5_000
    assert_still_serving(module_cluster, node)


def test_list_offsets_by_timestamp_reads_records_off_the_event_loop(module_cluster, topic):
    """ListOffsets by timestamp decoded a batch's records on the event loop: a million-record
    batch (760 KB of zstd) held every other request of the node for seconds. The records are
    now read in a thread, so another connection keeps getting answers meanwhile."""
    count, stamp = 1_000_000, 10**12
    records = _tiny_records(count, 1_000)
    payload = zstandard.ZstdCompressor(level=3).compress(records)
    base = W.make_batch([(b"k", b"v")], timestamp_ms=stamp)
    batch = _claiming(W.with_payload(base, 4, payload), count, stamp + 1_000)
    # A topic of its own (the records before it are stamped later), and a new one if the
    # leader the metadata named had lost its leadership by the produce or the lookup (seen
    # once at load 7): a refused acks=all batch may still be committed by the next leader,
    # so no retry into the same log, whose offsets the lookups check.
    for attempt in range(3):
        name = f"timestamps{attempt}"
        module_cluster.create_topic(name, partitions=1, replication_factor=3)
        W.topic_metadata(module_cluster.bootstrap, name)
        node, _ = leader_of(module_cluster, name)
        addr = module_cluster.node(node).kafka
        with W.KafkaWire(addr) as w, W.KafkaWire(addr) as other:
            r = w.produce(name, 0, batch, acks=-1)
            if r.error == W.NOT_LEADER_OR_FOLLOWER:
                continue
            assert r.error == W.NONE, r
            answer: list[W.ListOffsetsResult] = []
            lookup = threading.Thread(
                target=lambda out, wire, topic: out.append(
                    wire.list_offsets(topic, 0, timestamp=stamp + 1)
                ),
                args=(answer, w, name),
            )
            lookup.start()
            meanwhile = 0
            while lookup.is_alive():
                assert W.PRODUCE in other.api_versions()
                meanwhile += lookup.is_alive()
            lookup.join()
            if answer[0].error in (W.NOT_LEADER_OR_FOLLOWER, W.OFFSET_NOT_AVAILABLE):
                continue  # led anew meanwhile (OFFSET_NOT_AVAILABLE: its watermark catches up)
            assert (answer[0].error, answer[0].offset, answer[0].timestamp) == (
                W.NONE,
                r.base_offset + count - 1,
                stamp + 1_000,
            )
            assert meanwhile >= 5, "the node answered nothing else while it read the batch"
            newest = w.list_offsets(name, 0, timestamp=W.MAX_TIMESTAMP)
            assert (newest.offset, newest.timestamp) == (r.base_offset + count - 1, stamp + 1_000)
            return
    pytest.fail("the topic's leadership moved away in every attempt")


def test_cluster_up_probe_sees_every_listener(module_cluster, topic):
    """The probe `raftlog cluster up` waits on answers yes from each real node."""
    for n in module_cluster.node_ids:
        assert kafka_answers(module_cluster.node(n).kafka_addr[1])


def test_unknown_api_key(module_cluster, topic):
    node, _ = leader_of(module_cluster)
    with W.KafkaWire(module_cluster.node(node).kafka) as w:
        cid = 4242
        w.send_bytes(
            W.encode_raw_request(api_key=31999, api_version=0, correlation_id=cid, body=b"\x00" * 8)
        )
        expect_closed_or_answer(w, cid)
    assert_still_serving(module_cluster, node)


def test_unsupported_api_versions_version_gets_v0_answer(module_cluster, topic):
    """ApiVersions of a version the node does not know: a v0 answer with
    UNSUPPORTED_VERSION (35) and the supported ranges, so the client can downgrade."""
    node, _ = leader_of(module_cluster)
    with W.KafkaWire(module_cluster.node(node).kafka) as w:
        cid = 777
        v3 = load_request_schema(W.API_VERSIONS, 3)
        body = W.encode_body(
            W.build(v3, {"client_software_name": "raftlog-tests", "client_software_version": "0"})
        )
        w.send_bytes(W.encode_raw_request(W.API_VERSIONS, 999, cid, body, flexible_header=True))
        got_cid, resp = W.decode_api_versions_v0(w.recv_frame())
        assert got_cid == cid
        assert W.code(resp.error_code) == W.UNSUPPORTED_VERSION
        keys = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
        assert W.API_VERSIONS in keys and W.PRODUCE in keys and W.FETCH in keys, keys
    assert_still_serving(module_cluster, node)


def test_unsupported_version_of_other_api(module_cluster, topic):
    node, _ = leader_of(module_cluster)
    with W.KafkaWire(module_cluster.node(node).kafka) as w:
        hi = w.api_versions()[W.METADATA][1]
        cid = 99
        w.send_bytes(
            W.encode_raw_request(W.METADATA, hi + 50, cid, b"\x00" * 8, flexible_header=True)
        )
        expect_closed_or_answer(w, cid)
    assert_still_serving(module_cluster, node)


def test_half_frame_then_disconnect(module_cluster, topic):
    node, _ = leader_of(module_cluster)
    addr = module_cluster.node(node).kafka
    for _ in range(20):
        with socket.create_connection(W.parse_address(addr), timeout=5) as s:
            s.sendall(struct.pack(">i", 1000) + b"\x00\x03")
    assert_still_serving(module_cluster, node)


# --------------------------------------------------------------------------- fencing


def test_fencing_on_the_leader(module_cluster, topic):
    node, pm = leader_of(module_cluster)
    epoch = pm.leader_epoch
    assert epoch >= 1, (
        f"Metadata leader epoch {epoch}: expected a Raft term >= 1 (never -1 or 0 once led)"
    )
    with W.KafkaWire(module_cluster.node(node).kafka) as w:
        for current, want in (
            (epoch, W.NONE),
            (epoch - 1, W.FENCED_LEADER_EPOCH),
            (epoch + 1, W.UNKNOWN_LEADER_EPOCH),
            (-1, W.NONE),
        ):
            f = w.fetch(TOPIC, 0, 0, current_leader_epoch=current)
            assert f.error == want, (
                f"Fetch current_leader_epoch={current} (leader at {epoch}): {f.error}, want {want}"
            )
            lo = w.list_offsets(TOPIC, 0, W.LATEST, current_leader_epoch=current)
            assert lo.error == want, (
                f"ListOffsets current_leader_epoch={current} (leader at {epoch}): {lo.error}, want {want}"
            )
            oe = w.offset_for_leader_epoch(
                TOPIC, 0, leader_epoch=epoch, current_leader_epoch=current
            )
            assert oe.error == want, (
                f"OffsetForLeaderEpoch current_leader_epoch={current} (leader at {epoch}): {oe.error}, want {want}"
            )
        # with the right epoch, everything answers with it
        lo = w.list_offsets(TOPIC, 0, W.LATEST, current_leader_epoch=epoch)
        assert lo.leader_epoch == epoch, lo
        oe = w.offset_for_leader_epoch(TOPIC, 0, leader_epoch=epoch, current_leader_epoch=epoch)
        assert (oe.leader_epoch, oe.end_offset) == (epoch, lo.offset), (
            f"latest epoch -> (epoch, LEO): {oe}"
        )
        oe = w.offset_for_leader_epoch(TOPIC, 0, leader_epoch=-1)
        assert (oe.leader_epoch, oe.end_offset) == (-1, -1), oe
        oe = w.offset_for_leader_epoch(TOPIC, 0, leader_epoch=epoch + 5)
        assert (oe.error, oe.leader_epoch, oe.end_offset) == (W.NONE, -1, -1), oe


def test_fencing_on_a_follower(module_cluster, topic):
    """Kafka checks the epoch before leadership: a follower that knows the current epoch
    fences an older one (74) and answers NOT_LEADER_OR_FOLLOWER (6) to the current one."""
    leader, pm = leader_of(module_cluster)
    epoch = pm.leader_epoch
    follower = next(n for n in module_cluster.node_ids if n != leader)
    with W.KafkaWire(module_cluster.node(follower).kafka) as w:
        f = w.fetch(TOPIC, 0, 0, current_leader_epoch=epoch)
        assert f.error == W.NOT_LEADER_OR_FOLLOWER, f
        f = w.fetch(TOPIC, 0, 0, current_leader_epoch=epoch - 1)
        assert f.error == W.FENCED_LEADER_EPOCH, f
        lo = w.list_offsets(TOPIC, 0, W.LATEST, current_leader_epoch=epoch)
        assert lo.error == W.NOT_LEADER_OR_FOLLOWER, lo


def test_metadata_epoch_matches_status_term(module_cluster, topic):
    leader, pm = leader_of(module_cluster)
    node, term = module_cluster.leader(TOPIC, 0)
    assert (leader, pm.leader_epoch) == (node, term)


def _list_offsets_v0(w: W.KafkaWire, topic: str, timestamp: int, most: int) -> tuple[int, list]:
    answer = w.call(
        W.LIST_OFFSETS,
        0,
        {
            "replica_id": -1,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "timestamp": timestamp, "max_num_offsets": most}
                    ],
                }
            ],
        },
    )
    (partition,) = answer.topics[0].partitions
    return W.code(partition.error_code), [int(o) for o in partition.old_style_offsets]


def test_list_offsets_v0_as_kafka_3_9_serves_it(module_cluster, topic):
    """ListOffsets v0 (Kafka 3.9 serves it, Kafka 4 does not): up to max_num_offsets offsets,
    newest first, as for a log of one segment. kafka-python pinned to an old broker
    (api_version=(0, 10, 0)) sends it for beginning_offsets and end_offsets."""
    from kafka import KafkaConsumer, TopicPartition

    node, _ = leader_of(module_cluster)
    with W.KafkaWire(module_cluster.node(node).kafka) as w:
        start = w.list_offsets(topic, 0, timestamp=W.EARLIEST).offset
        end = w.list_offsets(topic, 0).offset
        assert end > start
        assert _list_offsets_v0(w, topic, W.LATEST, 1) == (W.NONE, [end])
        assert _list_offsets_v0(w, topic, W.LATEST, 10) == (W.NONE, [end, start])
        assert _list_offsets_v0(w, topic, W.LATEST, 0) == (W.NONE, [])
        assert _list_offsets_v0(w, topic, W.EARLIEST, 10) == (W.NONE, [start])
        # a timestamp: the first record at or after it; none that new: the end
        assert _list_offsets_v0(w, topic, 0, 1) == (W.NONE, [start])
        assert _list_offsets_v0(w, topic, 2**62, 10) == (W.NONE, [end, start])
        assert _list_offsets_v0(w, "no-such-topic", W.LATEST, 1) == (
            W.UNKNOWN_TOPIC_OR_PARTITION,
            [],
        )

    consumer = KafkaConsumer(bootstrap_servers=module_cluster.bootstrap, api_version=(0, 10, 0))
    tp = TopicPartition(topic, 0)
    try:
        assert (consumer.beginning_offsets([tp]), consumer.end_offsets([tp])) == (
            {tp: start},
            {tp: end},
        )
    finally:
        consumer.close()
