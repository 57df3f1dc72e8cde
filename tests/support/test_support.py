"""Self-tests of the e2e helpers that need no raftlog node: port picking, process
handling, the loop-hold watch, the raw wire client (against an in-process fake broker), the segment reader
and the log checker. A checker that cannot fail is worse than none."""

from __future__ import annotations

import asyncio
import io
import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from support import cluster as C
from support import history as H
from support import loop_holds as LH
from support import node_logs as L
from support import records as R
from support import segments as S
from support import wire as W

# --------------------------------------------------------------------------- ports


def test_pick_base_port_avoids_busy_and_ephemeral_ports():
    eph_lo, eph_hi = C.ephemeral_port_range()
    busy = set(range(20000, 26000))
    base = C.pick_base_port(3, rng=random.Random(7), is_free=lambda p: p not in busy)
    ports = C.cluster_ports(base, 3)
    assert len(ports) == 12 and len(set(ports)) == 12
    assert not busy & set(ports)
    assert all(not (eph_lo <= p <= eph_hi) for p in ports)
    assert ports[:3] == [base, base + 1, base + 2]
    assert ports[3:6] == [base + 1000, base + 1001, base + 1002]
    assert ports[6:9] == [base + 2000, base + 2001, base + 2002]
    assert ports[9:] == [base + 3000, base + 3001, base + 3002]  # the consume proxies


def test_pick_base_port_gives_up():
    with pytest.raises(C.ClusterError):
        C.pick_base_port(3, attempts=5, is_free=lambda p: False)


def test_pick_base_port_really_free():
    base = C.pick_base_port(3)
    assert all(C.port_is_free(p) for p in C.cluster_ports(base, 3))


# --------------------------------------------------------------------------- processes


def _sleeper(*extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", *extra],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def test_pid_alive_and_kill_reaps():
    p = _sleeper()
    try:
        assert C.pid_alive(p.pid)
        assert C.rss_kb(p.pid) and C.rss_kb(p.pid) > 0
        os.kill(p.pid, 9)
        assert C.wait_pid_gone(p.pid, 10)
        assert not C.pid_alive(p.pid)
    finally:
        p.kill()
        p.wait(5)


def test_cluster_stop_kills_stray_processes_under_its_dir(tmp_path):
    """The teardown safety net: anything whose argv points into the cluster dir dies."""
    work = tmp_path / "c"
    other = tmp_path / "c2"  # a sibling whose path shares the prefix must survive
    work.mkdir()
    other.mkdir()
    mine = _sleeper(str(work / "node-1" / "raftlog.toml"))
    theirs = _sleeper(str(other / "node-1" / "raftlog.toml"))
    try:
        c = C.Cluster(work)
        c._started = True
        C.LIVE_CLUSTERS.append(c)
        c.stop()
        assert mine.wait(10) is not None
        assert theirs.poll() is None
        assert c not in C.LIVE_CLUSTERS
    finally:
        for p in (mine, theirs):
            p.kill()
            p.wait(5)


# --------------------------------------------------------------------------- node logs

_AT = "2026-12-06 20:00:01,250"
_LOG = [
    f"{_AT} INFO [node 1] raftlog.node.node: started; an ERROR word in a message is fine",
    f"{_AT} WARNING [node 1] raftlog.raft.mesh: peer 2 disconnected",
    f"{_AT} ERROR [node 1] asyncio: Task was destroyed but it is pending!\\ntask: <Task>",
    f"{_AT} WARNING [node 1] x: went on\\nTraceback (most recent call last):\\n  File",
    f"{_AT} CRITICAL [host h1] raftlog_app.host: broker 2 failing",
    '{"time": "t", "level": "ERROR", "node": 1, "logger": "x", "message": "json"}',
    '{"time": "t", "level": "INFO", "node": 1, "logger": "x", "message": "ERROR"}',
    "Exception ignored in: <function Transport.__del__ at 0x1>",
    "Traceback (most recent call last):",
    '  File "x.py", line 1, in __del__',
    "RuntimeError: Event loop is closed",
    "plain console output",
    "Traceback (most recent call last):",
    '  File "y.py", line 2, in <module>',
]


def test_node_logs_finds_errors_and_tracebacks_in_every_format():
    """ERROR/CRITICAL events (text, the host's text, JSON), a traceback at any level, a
    console's bare tracebacks (one event each, also one cut off at the end); nothing else."""
    found = L.bad_events("\n".join(_LOG))
    assert found == [
        _LOG[2],
        _LOG[3],
        _LOG[4],
        _LOG[5],
        "\n".join(_LOG[7:11]),
        "\n".join(_LOG[12:14]),
    ]
    allowed = L.bad_events("\n".join(_LOG), [re.compile(r"Event loop is closed|json")])
    assert len(allowed) == 4 and _LOG[5] not in allowed


def test_cluster_stop_reports_what_its_nodes_logged_once(tmp_path):
    """stop() reads each node's logs past what an earlier stop() read, less what the
    cluster's own expect_log_errors allows, into LOG_ERRORS (which conftest turns into a
    failure of the test that stopped it)."""
    node = tmp_path / "c" / "node-1"
    node.mkdir(parents=True)
    (node / "raftlog.log").write_text("\n".join(_LOG[:3]) + "\n")
    (node / "console.log").write_text("\n".join(_LOG[7:11]) + "\n")
    c = C.Cluster(tmp_path / "c", name="logs")
    c.expect_log_errors("Event loop is closed")
    saved = list(L.LOG_ERRORS)
    L.LOG_ERRORS.clear()
    try:
        c._started = True
        c.stop()
        assert len(L.LOG_ERRORS) == 1 and "Task was destroyed" in L.LOG_ERRORS[0]
        assert "Event loop is closed" not in L.LOG_ERRORS[0]
        assert list(c.logged_errors()) == [node / "raftlog.log"]
        L.LOG_ERRORS.clear()
        c._started = True  # started again: only what is new counts
        c.stop()
        assert L.LOG_ERRORS == []
        with open(node / "raftlog.log", "a") as log:
            log.write(_LOG[4] + "\n")
        c._started = True
        c.stop()
        assert len(L.LOG_ERRORS) == 1 and "broker 2 failing" in L.LOG_ERRORS[0]
        assert "Task was destroyed" not in L.LOG_ERRORS[0]
    finally:
        L.LOG_ERRORS[:] = saved


def test_wait_for_is_bounded():
    t = time.monotonic()
    with pytest.raises(TimeoutError, match="never"):
        C.wait_for(lambda: False, 0.3, interval=0.05, what="never")
    assert time.monotonic() - t < 5
    assert C.wait_for(lambda: 42, 1) == 42


def test_tail(tmp_path):
    f = tmp_path / "x.log"
    f.write_text("".join(f"line {i}\n" for i in range(1000)))
    assert C.tail(f, 3).splitlines() == ["line 997", "line 998", "line 999"]
    assert "cannot read" in C.tail(tmp_path / "missing.log")


# --------------------------------------------------------------------------- wire


class FakeBroker(threading.Thread):
    """Answers ApiVersions, Metadata and OffsetForLeaderEpoch with kio-encoded responses."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.seen: list[tuple[int, int]] = []

    def run(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            buf = b""
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
                while len(buf) >= 4:
                    (size,) = struct.unpack_from(">i", buf)
                    if len(buf) < 4 + size:
                        break
                    frame, buf = buf[4 : 4 + size], buf[4 + size :]
                    conn.sendall(self.answer(frame))

    def answer(self, frame: bytes) -> bytes:
        api_key, version, cid = struct.unpack_from(">hhi", frame)
        self.seen.append((api_key, version))
        req_cls = load_request_schema(api_key, version)
        header, n = entity_reader(req_cls.__header_schema__)(frame, 0)
        request, _ = entity_reader(req_cls)(frame, n)
        resp_cls = load_response_schema(api_key, version)
        if api_key == W.API_VERSIONS:
            body = {
                "error_code": ErrorCode.none,
                "api_keys": [
                    {"api_key": 3, "min_version": 0, "max_version": 13},
                    {"api_key": 18, "min_version": 0, "max_version": 4},
                    {"api_key": 23, "min_version": 2, "max_version": 4},
                ],
                "throttle_time": 0,
            }
        elif api_key == W.METADATA:
            body = {
                "throttle_time": 0,
                "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092}],
                "cluster_id": "x",
                "controller_id": 1,
                "topics": [
                    {
                        "error_code": ErrorCode.none,
                        "name": t.name,
                        "topic_id": W._ZERO_UUID,
                        "partitions": [
                            {
                                "error_code": ErrorCode.none,
                                "partition_index": 0,
                                "leader_id": 1,
                                "leader_epoch": 7,
                                "replica_nodes": [1],
                                "isr_nodes": [1],
                                "offline_replicas": [],
                            }
                        ],
                    }
                    for t in request.topics
                ],
            }
        else:
            p = request.topics[0].partitions[0]
            fenced = p.current_leader_epoch not in (-1, 7)
            body = {
                "throttle_time": 0,
                "topics": [
                    {
                        "topic": request.topics[0].topic,
                        "partitions": [
                            {
                                "error_code": ErrorCode.fenced_leader_epoch
                                if fenced
                                else ErrorCode.none,
                                "partition": p.partition,
                                "leader_epoch": p.leader_epoch,
                                "end_offset": 100,
                            }
                        ],
                    }
                ],
            }
        out = io.BytesIO()
        entity_writer(resp_cls.__header_schema__)(
            out, resp_cls.__header_schema__(correlation_id=header.correlation_id)
        )
        entity_writer(resp_cls)(out, W.build(resp_cls, body))
        data = out.getvalue()
        return struct.pack(">i", len(data)) + data


def test_wire_client_against_fake_broker():
    fake = FakeBroker()
    fake.start()
    with W.KafkaWire(("127.0.0.1", fake.port), timeout=5) as w:
        assert w.api_versions()[W.METADATA] == (0, 13)
        assert w.version(W.METADATA) == 12  # capped at what the helper builds
        md = w.metadata(["t"])
        assert md.brokers == {1: "127.0.0.1:9092"}
        assert md.partition("t", 0).leader_epoch == 7
        oe = w.offset_for_leader_epoch("t", 0, leader_epoch=5, current_leader_epoch=7)
        assert (oe.error, oe.leader_epoch, oe.end_offset) == (0, 5, 100)
        oe = w.offset_for_leader_epoch("t", 0, leader_epoch=5, current_leader_epoch=6)
        assert oe.error == W.FENCED_LEADER_EPOCH
        with pytest.raises(W.WireError, match="does not advertise"):
            w.version(W.FETCH)
    assert (
        (W.API_VERSIONS, 0) in fake.seen and (W.METADATA, 12) in fake.seen and (23, 4) in fake.seen
    )


def test_wire_requests_round_trip_through_kio():
    """Every version the helper may pick encodes and decodes back to the same request."""
    data = {
        "replica_id": -1, "isolation_level": 0, "topics": [], "forgotten_topics_data": [],
        "max_wait": 0, "min_bytes": 1, "acks": -1, "timeout": 1000, "topic_data": [],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False,
        "include_cluster_authorized_operations": False,
        "client_software_name": "a", "client_software_version": "b",
    }  # fmt: skip
    for api, (lo, hi) in W.HELPER_RANGES.items():
        for v in range(lo, hi + 1):
            payload = W.build(load_request_schema(api, v), data)
            frame = W.encode_request(payload, 5)
            assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
            header, n = entity_reader(payload.__header_schema__)(frame[4:], 0)
            assert (header.request_api_key, header.request_api_version, header.correlation_id) == (
                api,
                v,
                5,
            )
            assert entity_reader(type(payload))(frame[4:], n)[0] == payload


def test_wait_closed_sees_close_and_silence():
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    try:
        with W.KafkaWire(("127.0.0.1", port), timeout=2) as w:
            conn, _ = srv.accept()
            closed, frames = w.wait_closed(0.3)
            assert (closed, frames) == (False, [])
            conn.sendall(struct.pack(">i", 4) + b"\x00\x00\x00\x09")
            conn.close()
            closed, frames = w.wait_closed(2)
            assert closed and frames == [b"\x00\x00\x00\x09"]
            assert W.response_correlation_id(frames[0]) == 9
    finally:
        srv.close()


def test_batches_and_crc():
    from kio.records.readers import read_batch

    b = W.make_batch(
        [(b"k", b"v"), (None, b"w")], timestamp_ms=1_700_000_000_000, headers=[("h", b"1")]
    )
    batch, size = read_batch(b, 0)
    assert size == len(b) and len(batch.records) == 2 and batch.records[1].key is None
    bad = W.corrupt_crc(b)
    assert bad[:17] == b[:17] and bad[21:] == b[21:] and bad[17:21] != b[17:21]
    with pytest.raises(Exception, match="(?i)checksum"):
        read_batch(bad, 0)


# --------------------------------------------------------------------------- segments


def stored_batch(base_offset: int, epoch: int, n: int = 2) -> bytes:
    """A batch as a node stores it: base offset and leader epoch rewritten."""
    raw = W.make_batch([(b"k%d" % i, b"v" * 20) for i in range(n)], timestamp_ms=1_700_000_000_000)
    return struct.pack(">q", base_offset) + raw[8:12] + struct.pack(">i", epoch) + raw[16:]


def make_partition(d: Path, layout: list[tuple[int, list[int]]], torn: bool = False) -> int:
    """Segments per term: [(term, [records per batch, ...]), ...]; returns the end offset."""
    d.mkdir(parents=True)
    offset = 0
    ckpt = []
    for term, batches in layout:
        data = b""
        start = offset
        for n in batches:
            data += stored_batch(offset, term, n)
            offset += n
        if torn and term == layout[-1][0]:
            data += stored_batch(offset, term, 3)[:40]
        (d / f"{start:020d}-{term}.log").write_bytes(data)
        ckpt.append(f"{term} {start}")
    (d / "leader-epoch-checkpoint").write_text(f"0\n{len(ckpt)}\n" + "\n".join(ckpt) + "\n")
    return offset


def test_segment_reader_and_layout_check(tmp_path):
    end = make_partition(tmp_path / "a", [(1, [2, 3]), (2, []), (4, [1, 5])], torn=True)
    d = tmp_path / "a"
    batches = list(S.iter_batches(d))
    assert [(b.base_offset, b.last_offset, b.epoch) for b in batches] == [
        (0, 1, 1), (2, 4, 1), (5, 5, 4), (6, 10, 4),
    ]  # fmt: skip
    assert end == 11
    assert S.check_partition_dir(d) == []
    assert S.read_checkpoint(d) == [(1, 0), (2, 5), (4, 5)]
    assert S.epochs_on_disk(d) == [(1, 0), (2, 5), (4, 5)]
    assert [b.base_offset for b in S.iter_batches(d, below=6)] == [0, 2, 5]
    assert S.batch_count_below(d, 5)[0] == 2


def test_layout_check_finds_problems(tmp_path):
    d = tmp_path / "p"
    d.mkdir()
    (d / f"{0:020d}-3.log").write_bytes(stored_batch(0, 3) + stored_batch(5, 3))  # gap
    (d / f"{7:020d}-2.log").write_bytes(stored_batch(7, 9))  # term goes down, wrong epoch
    problems = "\n".join(S.check_partition_dir(d))
    assert "expected base offset 2" in problems
    assert "term 2 after term 3" in problems
    assert "partitionLeaderEpoch 9 in a term-2 segment" in problems


def test_compare_replicas(tmp_path):
    make_partition(tmp_path / "a", [(1, [2, 3]), (3, [4])])
    make_partition(tmp_path / "b", [(1, [2, 3]), (3, [4])], torn=True)
    assert S.compare_replicas(tmp_path / "a", tmp_path / "b", below=9) == []
    make_partition(tmp_path / "c", [(1, [2, 3]), (2, [4])])
    diff = S.compare_replicas(tmp_path / "a", tmp_path / "c", below=9)
    assert diff and "epoch 3" in diff[0]
    make_partition(tmp_path / "d", [(1, [2, 3])])
    assert (
        "has no batch at offset 5" in S.compare_replicas(tmp_path / "a", tmp_path / "d", below=9)[0]
    )


# --------------------------------------------------------------------------- checker


def _log(n: int = 6, partitions: int = 2) -> tuple[list[R.Rec], list[R.Rec]]:
    out = R.make_records("t", n, partitions)
    acked, consumed = [], []
    next_off = {p: 0 for p in range(partitions)}
    for o in out:
        off = next_off[o.partition]
        next_off[o.partition] += 1
        acked.append(R.Rec("x", o.partition, off, o.key, o.value, o.headers, o.timestamp))
        consumed.append(R.Rec("x", o.partition, off, o.key, o.value, o.headers, o.timestamp, 1))
    return acked, consumed


def _problems(acked, consumed, **kw) -> str:
    return "\n".join(R.check_log(acked, consumed, **kw).problems)


def test_checker_accepts_a_good_log():
    acked, consumed = _log()
    rep = R.check_log(acked, consumed, start_offsets={0: 0, 1: 0}, end_offsets={0: 3, 1: 3})
    assert rep.problems == []
    rep.raise_if_failed()
    assert R.check_send_order(consumed) == []


def test_checker_catches_loss_duplicates_and_moves():
    acked, consumed = _log()
    assert "lost" in _problems(acked, consumed[1:])
    dup = consumed + [R.Rec(**{**consumed[0].__dict__, "offset": 3})]
    assert "read back 2 times" in _problems(acked, dup)
    moved = [consumed[0].__class__(**{**consumed[0].__dict__, "offset": 9})] + consumed[1:]
    p = _problems(acked, moved)
    assert "jump" in p and "acknowledged at p0@0, read at p0@9" in p


def test_checker_catches_gaps_epochs_and_corruption():
    acked, consumed = _log()
    down = [R.Rec(**{**r.__dict__, "leader_epoch": 5 if r.offset == 0 else 1}) for r in consumed]
    assert "epoch goes down" in _problems(acked, down)
    bad = [R.Rec(**{**r.__dict__, "headers": ()}) if r.offset == 1 else r for r in consumed]
    assert "headers" in _problems(acked, bad)
    bad = [R.Rec(**{**r.__dict__, "timestamp": 0}) if r.offset == 1 else r for r in consumed]
    assert "timestamp" in _problems(acked, bad)
    bad = [R.Rec(**{**r.__dict__, "key": b"zz"}) if r.offset == 1 else r for r in consumed]
    assert "key" in _problems(acked, bad)
    assert "expected end offset 5" in _problems(acked, consumed, end_offsets={0: 5})
    twice = acked + [R.Rec(**{**acked[2].__dict__, "value": b"t:999:x"})]
    assert "acknowledged twice" in _problems(twice, consumed)


def test_checker_maybe_records():
    acked, consumed = _log()
    extra = R.Rec("x", 0, 3, None, b"t:100:x", (), 0, 1)
    assert "never sent or acknowledged" in _problems(acked, consumed + [extra])
    assert _problems(acked, consumed + [extra], maybe={b"t:100:x"}) == ""
    again = R.Rec("x", 0, 4, None, b"t:100:x", (), 0, 1)
    assert "unacknowledged" in _problems(acked, consumed + [extra, again], maybe={b"t:100:x"})
    with pytest.raises(R.LogCheckError):
        R.check_log(acked, consumed + [extra]).raise_if_failed()


def test_send_order():
    acked, _ = _log()
    swapped = [
        R.Rec(**{**r.__dict__, "offset": 2 - r.offset}) if r.partition == 0 else r for r in acked
    ]
    assert R.check_send_order(swapped)


def test_make_records_are_unique_and_parseable():
    recs = R.make_records("run", 100, [3, 5], value_size=64)
    assert len({r.value for r in recs}) == 100
    assert {r.partition for r in recs} == {3, 5}
    assert all(R.record_id(r.value) == ("run", r.seq) and len(r.value) == 64 for r in recs)
    assert any(r.key is None for r in recs)


# --------------------------------------------------------------------------- history


def test_history_reader_and_term_check(tmp_path):
    lines = [
        '{"kind": "election", "node": 1, "topic": "t", "partition": 0, "term": 2}',
        '{"kind": "election", "node": 2, "topic": "t", "partition": 0, "term": 3}',
        '{"kind": "election", "node": 3, "topic": "t", "partition": 0, "ter',  # torn by kill -9
    ]
    (tmp_path / "history.jsonl").write_text("\n".join(lines))
    hist = H.read_history(tmp_path)
    assert len(hist) == 2
    assert H.leaders_per_term(hist) == []
    clash = hist + [{"kind": "election", "node": 3, "topic": "t", "partition": 0, "term": 3}]
    assert H.leaders_per_term(clash) == ["t-0 term 3: elected [2, 3]"]


# --------------------------------------------------------------------------- loop holds

HOG = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
time.sleep(0.1)
end = time.perf_counter() + 0.3
while time.perf_counter() < end:
    pass
"""


def test_loop_holds_counts_work_and_blocking_on_the_loop():
    async def held(hold) -> float:
        async with LH.LoopHolds() as holds:
            await asyncio.sleep(0.01)
            hold()
            await asyncio.sleep(0.01)
        return holds.longest

    def spin() -> None:  # 0.2 s of the thread's own CPU, however busy the machine is
        end = time.thread_time() + 0.2
        while time.thread_time() < end:
            pass

    assert 0.19 < asyncio.run(held(spin)) < 0.3
    assert 0.19 < asyncio.run(held(lambda: time.sleep(0.2))) < 0.3
    assert asyncio.run(held(lambda: None)) < 0.05


def test_loop_holds_leaves_out_what_another_process_had_of_the_cpu():
    """A real-time process on the loop thread's only CPU takes it for 0.3 s: the thread waits
    that long, runnable, and that is not a hold."""
    core = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})  # this thread only: the loop's

    async def main() -> tuple[float, float]:
        async with LH.LoopHolds() as holds:
            waited = LH._cpu_wait()
            hog = subprocess.Popen([sys.executable, "-c", HOG, str(core)])
            await asyncio.sleep(0.6)
            hog.wait(timeout=10)
            return holds.longest, LH._cpu_wait() - waited

    try:
        longest, waited = asyncio.run(main())
    finally:
        os.sched_setaffinity(0, before)
    assert waited > 0.25  # the hog had the CPU
    assert longest < 0.05
