"""KafkaServer framing, ordering and limits over real sockets on 127.0.0.1. Fake handlers are
swapped into the registry where a test needs control over timing, so only the server is under
test here; handler semantics are tested in test_kafka_handlers.py."""

import asyncio
import gc
import io
import logging
import struct
import threading
import types
from datetime import timedelta

import pytest
from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from support.aio import until
from support.compiled import pure_only

from kafka_api import auth_failures
from kafka_api import connection as connection_module
from kafka_api.codec import build, response_module
from kafka_api.errors import CloseConnection
from kafka_api.handlers import HANDLERS, supported_versions
from kafka_api.request_memory import RequestMemory
from kafka_api.server import KafkaServer
from raftlog.common.errors import ErrorCode

PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18


def frame(api_key, version, correlation_id, request=None, body=b"", flexible=False):
    """A request frame: size, header v1 or v2 (client id "t"), body."""
    flexible = flexible or (request is not None and type(request).__flexible__)
    header = struct.pack(">hhih", api_key, version, correlation_id, 1) + b"t"
    if flexible:
        header += b"\x00"
    if request is not None:
        buffer = io.BytesIO()
        entity_writer(type(request))(buffer, request)
        body = buffer.getvalue()
    return struct.pack(">i", len(header) + len(body)) + header + body


def metadata_request(*names):
    m = load_payload_module(METADATA, 1, EntityType.request)
    return m.MetadataRequest(topics=tuple(m.MetadataRequestTopic(name=n) for n in names))


def produce_request(acks, records=b"r"):
    m = load_payload_module(PRODUCE, 3, EntityType.request)
    data = m.PartitionProduceData(index=0, records=records)
    return m.ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=timedelta(seconds=1),
        topic_data=(m.TopicProduceData(name="t", partition_data=(data,)),),
    )


def metadata_response(names):
    m = response_module(METADATA, 1)
    topics = tuple(
        build(m.MetadataResponseTopic, error_code=ErrorCode.none, name=n, partitions=())
        for n in names
    )
    return build(m.MetadataResponse, brokers=(), controller_id=-1, topics=topics)


def produce_response(base_offset):
    m = response_module(PRODUCE, 3)
    partition = build(
        m.PartitionProduceResponse, index=0, error_code=ErrorCode.none, base_offset=base_offset
    )
    topic = build(m.TopicProduceResponse, name="t", partition_responses=(partition,))
    return build(m.ProduceResponse, responses=(topic,), throttle_time=timedelta(0))


def fake_handler(api_key, handle):
    return types.SimpleNamespace(API_KEY=api_key, MIN_VERSION=0, MAX_VERSION=13, handle=handle)


async def read_response(reader, api_key, version, timeout=5.0):
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), timeout))[0]
    payload = await asyncio.wait_for(reader.readexactly(size), timeout)
    correlation_id = struct.unpack_from(">i", payload)[0]
    return correlation_id, entity_reader(load_response_schema(api_key, version))(payload, 4)[0]


async def is_closed(reader, timeout=5.0):
    try:
        return await asyncio.wait_for(reader.read(65536), timeout) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
async def kafka():
    server = KafkaServer(broker=None, host="127.0.0.1", port=0, max_request_bytes=8 * 1024 * 1024)
    await server.start()
    yield server
    await server.close()


async def connect(server):
    return await asyncio.open_connection("127.0.0.1", server.port)


async def assert_serving(server):
    reader, writer = await connect(server)
    writer.write(frame(API_VERSIONS, 0, 5))
    correlation_id, response = await read_response(reader, API_VERSIONS, 0)
    assert (correlation_id, response.error_code) == (5, ErrorCode.none)
    writer.close()


async def test_responses_follow_request_order_while_handlers_overlap(kafka, monkeypatch):
    """Handlers of one connection run at once and finish in any order; their responses
    still go in request order. Each handler here waits for one sent after it (0 for 2,
    2 for 3): run one after another they could never finish, and the reads time out."""
    gates = {name: asyncio.Event() for name in "0123"}
    waits_for = {"0": "2", "2": "3"}
    finished = []

    async def handle(ctx, request):
        name = request.topics[0].name
        if name in waits_for:
            await gates[waits_for[name]].wait()
        finished.append(name)
        gates[name].set()
        return metadata_response([name])

    monkeypatch.setitem(HANDLERS, METADATA, fake_handler(METADATA, handle))
    reader, writer = await connect(kafka)
    names = list(gates)
    writer.write(b"".join(frame(METADATA, 1, i, metadata_request(n)) for i, n in enumerate(names)))
    answers = [await read_response(reader, METADATA, 1) for _ in names]
    assert [(cid, r.topics[0].name) for cid, r in answers] == list(enumerate(names))
    assert finished == ["1", "3", "2", "0"]
    writer.close()


async def test_answers_ready_together_leave_in_one_write(kafka, monkeypatch):
    """The first of three pipelined requests finishes last: its answer and the two waiting
    behind it go to the transport in one call (one system call on uvloop), not one each."""
    last_done = asyncio.Event()

    async def handle(ctx, request):
        name = request.topics[0].name
        if name == "0":
            await last_done.wait()
        elif name == "2":
            last_done.set()
        return metadata_response([name])

    monkeypatch.setitem(HANDLERS, METADATA, fake_handler(METADATA, handle))
    reader, writer = await connect(kafka)
    await until(lambda: len(kafka._connections) == 1, "the connection")
    transport = next(iter(kafka._connections))._transport
    calls, inside = [], []

    def counted(method, real):
        def call(data):  # (asyncio's writelines calls its write: counted once)
            if not inside:
                calls.append(method)
            inside.append(method)
            try:
                return real(data)
            finally:
                inside.pop()

        return call

    for method in ("write", "writelines"):
        monkeypatch.setattr(transport, method, counted(method, getattr(transport, method)))
    writer.write(b"".join(frame(METADATA, 1, i, metadata_request(str(i))) for i in range(3)))
    answers = [await read_response(reader, METADATA, 1) for _ in range(3)]
    assert [(cid, r.topics[0].name) for cid, r in answers] == [(0, "0"), (1, "1"), (2, "2")]
    assert calls == ["writelines"]
    writer.close()


@pytest.mark.parametrize("limit", [512, 3])
async def test_requests_start_in_arrival_order(kafka, monkeypatch, limit):
    """Also with reading paused and resumed every few requests by the in-flight limit."""
    monkeypatch.setattr(connection_module, "MAX_PENDING_REQUESTS", limit)
    started = []

    async def handle(ctx, request):
        started.append(request.topics[0].name)  # before any await, as Produce proposes
        await asyncio.sleep(0)
        return metadata_response([])

    monkeypatch.setitem(HANDLERS, METADATA, fake_handler(METADATA, handle))
    reader, writer = await connect(kafka)
    names = [str(i) for i in range(200)]
    writer.write(b"".join(frame(METADATA, 1, i, metadata_request(n)) for i, n in enumerate(names)))
    for i in range(len(names)):
        assert (await read_response(reader, METADATA, 1))[0] == i
    assert started == names
    writer.close()


async def test_acks0_produce_is_not_answered_and_blocks_nothing(kafka, monkeypatch):
    """An acks=0 produce has no response, so nothing after it waits for it: its handler
    here finishes only once the test has read the response to the Metadata request sent
    after it (held behind the produce, that response would never come)."""
    metadata_read = asyncio.Event()

    async def produce(ctx, request):
        if request.acks == 0:
            await metadata_read.wait()
            return None
        return produce_response(7)

    async def metadata(ctx, request):
        return metadata_response(["m"])

    monkeypatch.setitem(HANDLERS, PRODUCE, fake_handler(PRODUCE, produce))
    monkeypatch.setitem(HANDLERS, METADATA, fake_handler(METADATA, metadata))
    reader, writer = await connect(kafka)
    writer.write(
        frame(PRODUCE, 3, 1, produce_request(0)) + frame(METADATA, 1, 2, metadata_request())
    )
    assert (await read_response(reader, METADATA, 1))[0] == 2
    metadata_read.set()
    writer.write(frame(PRODUCE, 3, 3, produce_request(1)))
    correlation_id, response = await read_response(reader, PRODUCE, 3)
    assert correlation_id == 3 and response.responses[0].partition_responses[0].base_offset == 7
    writer.close()


def _fetch_v4_body():
    m = load_payload_module(FETCH, 4, EntityType.request)
    request = m.FetchRequest(max_wait=timedelta(0), min_bytes=0, topics=())
    buffer = io.BytesIO()
    entity_writer(m.FetchRequest)(buffer, request)
    return buffer.getvalue()


BAD_INPUT = {
    "random bytes": bytes(range(7, 250, 3)),
    "frame over the limit": struct.pack(">i", 8 * 1024 * 1024 + 1) + b"\x00" * 16,
    "negative frame size": struct.pack(">i", -1),
    "empty frame": struct.pack(">i", 0),
    "unknown api key": frame(31999, 0, 1, body=b"\x00" * 8),
    "fetch v3 (unsupported)": frame(FETCH, 3, 1, body=_fetch_v4_body()),
    "fetch v99": frame(FETCH, 99, 1, body=_fetch_v4_body()),
    "truncated body": frame(METADATA, 1, 1, body=b"\x00\x00"),
    # Metadata v12 whose topics claim 2^32-2 entries: kio's native decoder aborted the process.
    "array beyond the frame": bytes.fromhex("000000110003000c0000000100017800ffffffff0f"),
}


@pytest.mark.parametrize("data", BAD_INPUT.values(), ids=BAD_INPUT.keys())
async def test_bad_input_closes_that_connection_only(kafka, data, caplog):
    bystander_reader, bystander = await connect(kafka)
    reader, writer = await connect(kafka)
    with caplog.at_level(logging.WARNING, logger="kafka_api.connection"):
        writer.write(data)
        assert await is_closed(reader)
    assert any("closing Kafka connection from 127.0.0.1" in r.getMessage() for r in caplog.records)
    writer.close()
    bystander.write(frame(API_VERSIONS, 0, 8))
    assert (await read_response(bystander_reader, API_VERSIONS, 0))[0] == 8
    await assert_serving(kafka)
    bystander.close()


async def test_unknown_tagged_field_in_a_body_is_ignored(kafka):
    """ApiVersions v3 ("a", "1") plus a tagged field v3 does not define: Kafka skips it."""
    reader, writer = await connect(kafka)
    writer.write(frame(API_VERSIONS, 3, 7, body=b"\x02a\x021" + b"\x01\x09\x01\x00", flexible=True))
    correlation_id, response = await read_response(reader, API_VERSIONS, 3)
    assert (correlation_id, response.error_code) == (7, ErrorCode.none)
    writer.close()


async def test_unknown_api_versions_version_gets_v0_answer(kafka):
    reader, writer = await connect(kafka)
    writer.write(frame(API_VERSIONS, 99, 42, body=b"\x07future-body\x00"))
    correlation_id, response = await read_response(reader, API_VERSIONS, 0)
    assert correlation_id == 42 and response.error_code == ErrorCode.unsupported_version
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == (
        supported_versions()
    )
    request = load_request_schema(API_VERSIONS, 3)(
        client_software_name="t", client_software_version="1"
    )
    writer.write(frame(API_VERSIONS, 3, 43, request))
    correlation_id, response = await read_response(reader, API_VERSIONS, 3)
    assert (correlation_id, response.error_code) == (43, ErrorCode.none)
    writer.close()


async def test_failing_handler_closes_its_connection_and_is_logged(kafka, monkeypatch, caplog):
    async def handle(ctx, request):
        raise RuntimeError("boom")

    monkeypatch.setitem(HANDLERS, METADATA, fake_handler(METADATA, handle))
    reader, writer = await connect(kafka)
    with caplog.at_level(logging.ERROR, logger="kafka_api.connection"):
        writer.write(frame(METADATA, 1, 1, metadata_request()))
        assert await is_closed(reader)
    assert any(r.exc_info and "boom" in str(r.exc_info[1]) for r in caplog.records)
    writer.close()
    await assert_serving(kafka)


@pytest.mark.parametrize("reusable_limit", [16 * 1024 * 1024, 512 * 1024])
async def test_large_frames_in_small_pieces(kafka, monkeypatch, reusable_limit):
    """Frames larger than the read buffer: the buffer grows, or past the limit the frame gets
    a buffer of its own; small frames before and after are unaffected."""
    monkeypatch.setattr(connection_module, "MAX_READ_BUFFER_BYTES", reusable_limit)

    async def produce(ctx, request):
        return produce_response(len(request.topic_data[0].partition_data[0].records))

    monkeypatch.setitem(HANDLERS, PRODUCE, fake_handler(PRODUCE, produce))
    reader, writer = await connect(kafka)
    sizes = [10, 3 * 1024 * 1024, 100, 700 * 1024, 5]
    data = b"".join(
        frame(PRODUCE, 3, i, produce_request(1, bytes([i]) * size)) for i, size in enumerate(sizes)
    )
    for start in range(0, len(data), 100_003):
        writer.write(data[start : start + 100_003])
        await writer.drain()
    for i, size in enumerate(sizes):
        correlation_id, response = await read_response(reader, PRODUCE, 3)
        assert (correlation_id, response.responses[0].partition_responses[0].base_offset) == (
            i,
            size,
        )
    writer.close()


@pure_only(connection_module, "spies on codec.decode_request, which it calls directly")
async def test_a_large_frame_is_decoded_off_the_loop_and_handlers_start_in_order(
    kafka, monkeypatch
):
    """Decoding a large request (a walk of every field, then kio's) held the loop in
    proportion to what the client sent; it now runs in a thread, and the frames behind it
    wait, so handlers still start in the order requests came."""
    started = []
    decoded_in = []
    real_decode = connection_module.codec.decode_request

    def decode(header, frame):
        decoded_in.append(threading.current_thread() is threading.main_thread())
        return real_decode(header, frame)

    async def produce(ctx, request):
        started.append(len(request.topic_data[0].partition_data[0].records))
        return produce_response(started[-1])

    monkeypatch.setattr(connection_module.codec, "decode_request", decode)
    monkeypatch.setitem(HANDLERS, PRODUCE, fake_handler(PRODUCE, produce))
    reader, writer = await connect(kafka)
    sizes = [connection_module.DECODE_OFF_LOOP_BYTES + 10, 5, 7, 2 * 1024 * 1024, 9]
    writer.write(
        b"".join(frame(PRODUCE, 3, i, produce_request(1, b"x" * n)) for i, n in enumerate(sizes))
    )
    for i, size in enumerate(sizes):
        correlation_id, response = await read_response(reader, PRODUCE, 3)
        assert (correlation_id, response.responses[0].partition_responses[0].base_offset) == (
            i,
            size,
        )
    assert started == sizes
    assert decoded_in == [False, True, True, False, True]
    writer.close()


async def test_large_response_is_written_whole_to_a_slow_reader(kafka, monkeypatch):
    big = bytes(range(256)) * (20 * 1024 * 1024 // 256)

    async def fetch(ctx, request):
        m = response_module(FETCH, 4)
        partition = build(
            m.PartitionData,
            partition_index=0,
            error_code=ErrorCode.none,
            high_watermark=1,
            aborted_transactions=None,
            records=big,
        )
        topic = build(m.FetchableTopicResponse, topic="t", partitions=(partition,))
        return build(m.FetchResponse, throttle_time=timedelta(0), responses=(topic,))

    monkeypatch.setitem(HANDLERS, FETCH, fake_handler(FETCH, fetch))
    reader, writer = await connect(kafka)
    writer.write(frame(FETCH, 4, 1, body=_fetch_v4_body()) * 2)
    await asyncio.sleep(0.3)  # let the server fill the socket and pause writing
    for correlation_id in (1, 1):
        got, response = await read_response(reader, FETCH, 4, timeout=30)
        assert got == correlation_id and response.responses[0].partitions[0].records == big
    writer.close()


async def test_close_disconnects_clients(kafka):
    reader, writer = await connect(kafka)
    await assert_serving(kafka)
    await kafka.close()
    assert await is_closed(reader)
    writer.close()


async def _received(server, count):
    """Waits until the server's one connection has read `count` bytes of its frame."""
    for _ in range(500):
        (conn,) = server._connections
        if conn._end >= count:
            return conn
        await asyncio.sleep(0.01)
    raise AssertionError(f"the server did not read {count} bytes")


async def test_a_size_prefix_reserves_nothing_until_the_bytes_come(kafka):
    """A client that sent a large size and nothing else held that much memory of the node;
    now the read buffer grows with what arrives, and back after the frame."""
    padded = frame(API_VERSIONS, 0, 11, body=b"\x00" * (6 * 1024 * 1024))
    reader, writer = await connect(kafka)
    writer.write(padded[:1000])
    conn = await _received(kafka, 1000)
    assert len(conn._view) == connection_module.READ_BUFFER_BYTES
    writer.write(padded[1000 : 1024 * 1024])
    conn = await _received(kafka, 1024 * 1024)
    assert len(conn._view) <= 2 * 1024 * 1024
    writer.write(padded[1024 * 1024 :])
    correlation_id, response = await read_response(reader, API_VERSIONS, 0)
    assert (correlation_id, response.error_code) == (11, ErrorCode.none)
    assert len(conn._view) <= connection_module.MAX_READ_BUFFER_BYTES
    writer.close()


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_quiet_connections_are_closed_after_connections_max_idle_ms():
    """A client that connects and says nothing, or stops half-way through a frame, held its
    socket and buffer forever; one that just got an answer is not idle yet."""
    clock = _Clock()
    server = KafkaServer(None, "127.0.0.1", 0, max_idle_seconds=600.0, clock=clock)
    await server.start()
    try:
        quiet_reader, quiet = await connect(server)
        half_reader, half = await connect(server)
        half.write(frame(API_VERSIONS, 0, 1)[:6])
        busy_reader, busy = await connect(server)
        await _connections(server, 3)
        for _ in range(500):  # the half frame has been read (at the clock's start)
            if any(c._end == 6 for c in server._connections):
                break
            await asyncio.sleep(0.01)
        clock.now += 500
        busy.write(frame(API_VERSIONS, 0, 2))
        assert (await read_response(busy_reader, API_VERSIONS, 0))[0] == 2
        clock.now += 101
        server.sweep_idle()
        assert await is_closed(quiet_reader)
        assert await is_closed(half_reader)
        busy.write(frame(API_VERSIONS, 0, 3))
        assert (await read_response(busy_reader, API_VERSIONS, 0))[0] == 3
        for writer in (quiet, half, busy):
            writer.close()
    finally:
        await server.close()


async def _connections(server, count):
    await until(lambda: len(server._connections) == count, f"{count} connections accepted")


async def test_every_connection_waits_while_the_node_holds_its_request_budget(monkeypatch):
    """Each connection was bounded (64 MiB), the node was not: a thousand clients could make
    it hold 64 GB. Past max_queued_bytes over all connections, none is read until requests
    finish."""
    release = asyncio.Event()

    async def handle(ctx, request):
        await release.wait()
        return build(
            response_module(METADATA, 1).MetadataResponse,
            brokers=(),
            controller_id=-1,
            topics=(),
        )

    monkeypatch.setitem(HANDLERS, METADATA, fake_handler(METADATA, handle))
    server = KafkaServer(None, "127.0.0.1", 0, memory=RequestMemory(64 * 1024))
    await server.start()
    try:
        big = frame(METADATA, 1, 1, metadata_request(*(f"t{i:05d}" for i in range(9000))))
        assert len(big) > 64 * 1024
        heavy_reader, heavy = await connect(server)
        heavy.write(big)
        await until(lambda: server.memory.queued, "the request to be queued")
        assert server.memory.queued == len(big) - 4
        other_reader, other = await connect(server)
        await _connections(server, 2)
        assert all(c._reading_paused for c in server._connections)
        other.write(frame(API_VERSIONS, 0, 2))
        release.set()
        assert (await read_response(heavy_reader, METADATA, 1))[0] == 1
        assert (await read_response(other_reader, API_VERSIONS, 0))[0] == 2
        assert server.memory.queued == 0
        # A client that leaves while the node is over its budget gives its share back.
        release.clear()
        heavy.write(big)
        await until(lambda: server.memory.queued, "the request to be queued")
        heavy.close()
        release.set()
        await until(lambda: not server.memory.queued, "the queued bytes to be given back")
        assert server.memory.queued == 0
        other.write(frame(API_VERSIONS, 0, 3))
        assert (await read_response(other_reader, API_VERSIONS, 0))[0] == 3
        other.close()
    finally:
        release.set()
        await server.close()


# --------------------------------------------------------------------------- SASL


SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class _Users:
    """The broker's users, as SASL reads them: alice's SCRAM-SHA-256 credential."""

    def __init__(self):
        from raftlog.security import scram
        from raftlog.security.users import upsertion_from_password

        u = upsertion_from_password("alice", "SCRAM-SHA-256", "pw", 4096)
        self._alice = scram.from_salted_password("SCRAM-SHA-256", u.salt, u.salted_password, 4096)

    def credential(self, name, mechanism):
        return self._alice if (name, mechanism) == ("alice", "SCRAM-SHA-256") else None


@pytest.fixture
async def sasl_kafka(monkeypatch):
    monkeypatch.setattr(connection_module.sasl_authenticate, "FAILED_AUTHENTICATION_DELAY_S", 0)
    broker = types.SimpleNamespace(users=_Users())
    server = KafkaServer(broker, "127.0.0.1", 0, sasl_mechanisms=("PLAIN", "SCRAM-SHA-256"))
    await server.start()
    yield server
    await server.close()


def _handshake(mechanism, version=1):
    m = load_payload_module(SASL_HANDSHAKE, version, EntityType.request)
    return frame(SASL_HANDSHAKE, version, 1, m.SaslHandshakeRequest(mechanism=mechanism))


def _authenticate(token, correlation_id=2):
    m = load_payload_module(SASL_AUTHENTICATE, 1, EntityType.request)
    return frame(SASL_AUTHENTICATE, 1, correlation_id, m.SaslAuthenticateRequest(auth_bytes=token))


async def _login(server, token):
    reader, writer = await connect(server)
    writer.write(_handshake("PLAIN"))
    _, shook = await read_response(reader, SASL_HANDSHAKE, 1)
    assert shook.error_code == ErrorCode.none and set(shook.mechanisms) >= {"PLAIN"}
    writer.write(_authenticate(token))
    _, answer = await read_response(reader, SASL_AUTHENTICATE, 1)
    return reader, writer, answer


async def test_sasl_login_then_requests_are_served(sasl_kafka):
    reader, writer, answer = await _login(sasl_kafka, b"\0alice\0pw")
    assert answer.error_code == ErrorCode.none
    writer.write(frame(API_VERSIONS, 0, 3))
    assert (await read_response(reader, API_VERSIONS, 0))[0] == 3
    writer.close()
    assert sasl_kafka.metrics.authentication_failures == 0


async def test_failed_sasl_is_answered_then_closed_and_counted(sasl_kafka, caplog):
    caplog.set_level(logging.WARNING)
    reader, writer, answer = await _login(sasl_kafka, b"\0alice\0wrong")
    assert answer.error_code == ErrorCode.sasl_authentication_failed
    assert await is_closed(reader)
    assert sasl_kafka.metrics.authentication_failures == 1
    assert "PLAIN authentication failed for user 'alice' from 127.0.0.1:" in caplog.text
    await assert_sasl_serving(sasl_kafka)


async def assert_sasl_serving(server):
    reader, writer = await connect(server)
    writer.write(frame(API_VERSIONS, 0, 5))
    assert (await read_response(reader, API_VERSIONS, 0))[0] == 5
    writer.close()


async def test_requests_before_authentication_close_the_connection(sasl_kafka):
    reader, writer = await connect(sasl_kafka)
    writer.write(frame(METADATA, 1, 1, metadata_request("t")))
    assert await is_closed(reader)
    reader, writer = await connect(sasl_kafka)
    writer.write(_authenticate(b"\0alice\0pw"))  # no handshake first
    _, answer = await read_response(reader, SASL_AUTHENTICATE, 1)
    assert answer.error_code == ErrorCode.illegal_sasl_state
    assert await is_closed(reader)
    reader, writer = await connect(sasl_kafka)
    writer.write(_handshake("GSSAPI"))
    _, shook = await read_response(reader, SASL_HANDSHAKE, 1)
    assert shook.error_code == ErrorCode.unsupported_sasl_mechanism
    assert set(shook.mechanisms) == {"PLAIN", "SCRAM-SHA-256"}
    assert await is_closed(reader)


async def test_a_second_handshake_after_login_is_refused(sasl_kafka):
    reader, writer, answer = await _login(sasl_kafka, b"\0alice\0pw")
    writer.write(_handshake("PLAIN"))
    _, shook = await read_response(reader, SASL_HANDSHAKE, 1)
    assert shook.error_code == ErrorCode.illegal_sasl_state
    writer.close()


async def test_sasl_apis_on_a_plaintext_listener_say_illegal_state(kafka):
    reader, writer = await connect(kafka)
    writer.write(_handshake("PLAIN"))
    _, shook = await read_response(reader, SASL_HANDSHAKE, 1)
    assert shook.error_code == ErrorCode.illegal_sasl_state
    writer.close()


async def test_before_authentication_a_frame_over_sasl_server_max_receive_size_closes(
    sasl_kafka, caplog
):
    """A SASL listener read frames of up to 100 MB from anyone: 29 strangers sending a 100 MB
    size and 95 MB of zeros took a node to 3 GB. Before authentication Kafka's 512 KiB bound
    applies, and the connection closes at the size, with one line."""
    caplog.set_level(logging.WARNING)
    limit = connection_module.SASL_MAX_RECEIVE_BYTES
    reader, writer = await connect(sasl_kafka)
    writer.write((limit + 1).to_bytes(4, "big") + b"\0" * 1000)
    assert await is_closed(reader)
    assert "larger than sasl.server.max.receive.size (524288)" in caplog.text
    assert sasl_kafka.memory.buffered == 0
    # At the bound itself the frame is read (and, being no request, closes the connection).
    reader, writer = await connect(sasl_kafka)
    writer.write(frame(API_VERSIONS, 0, 7, body=b"\0" * (limit - 100)))
    writer.write(frame(API_VERSIONS, 0, 8))
    await is_closed(reader)
    # After login the listener's own bound applies.
    reader, writer, answer = await _login(sasl_kafka, b"\0alice\0pw")
    assert answer.error_code == ErrorCode.none
    writer.write(frame(API_VERSIONS, 0, 9, body=b"\0" * (2 * limit)))
    assert (await read_response(reader, API_VERSIONS, 0))[0] == 9
    writer.close()
    await assert_sasl_serving(sasl_kafka)


async def test_strangers_hold_at_most_a_quarter_of_the_request_memory(monkeypatch):
    """Half-read frames were not counted anywhere; now the buffers they grow are, and
    connections that have not authenticated share a quarter of the budget: past it, the one
    asking for more is closed and everyone else is still served."""
    broker = types.SimpleNamespace(users=_Users())
    server = KafkaServer(
        broker,
        "127.0.0.1",
        0,
        sasl_mechanisms=("PLAIN",),
        memory=RequestMemory(4 * 1024 * 1024),
    )
    await server.start()
    try:
        strangers = []
        for _ in range(6):  # 6 x ~384 KiB of half frames: over the 1 MiB quarter
            reader, writer = await connect(server)
            writer.write((500 * 1024).to_bytes(4, "big") + b"\0" * (380 * 1024))
            strangers.append(reader)
            await asyncio.sleep(0.05)
        closed = [await _closed_within(reader, 0.5) for reader in strangers]
        assert any(closed) and not all(closed)
        assert server.memory.unauthenticated <= 1024 * 1024 + 512 * 1024
        await assert_sasl_serving(server)
        reader, writer, answer = await _login(server, b"\0alice\0pw")
        assert answer.error_code == ErrorCode.none
        writer.write(frame(API_VERSIONS, 0, 4, body=b"\0" * (2 * 1024 * 1024)))
        assert (await read_response(reader, API_VERSIONS, 0))[0] == 4
        writer.close()
    finally:
        await server.close()
    await until(lambda: server.memory.buffered == 0, "the buffers to be given back")
    assert server.memory.unauthenticated == 0


async def _closed_within(reader, seconds):
    try:
        return await is_closed(reader, seconds)
    except TimeoutError:
        return False


async def test_half_read_frames_count_against_the_node_budget(kafka):
    """A frame still arriving holds its buffer's growth in the node's request memory, given back
    when the frame is done or its client leaves."""
    reader, writer = await connect(kafka)
    padded = frame(API_VERSIONS, 0, 3, body=b"\0" * (3 * 1024 * 1024))
    writer.write(padded[: 2 * 1024 * 1024])
    await _received(kafka, 2 * 1024 * 1024)
    assert kafka.memory.buffered >= 2 * 1024 * 1024 - connection_module.READ_BUFFER_BYTES
    writer.write(padded[2 * 1024 * 1024 :])
    assert (await read_response(reader, API_VERSIONS, 0))[0] == 3
    writer.write(padded[: 1024 * 1024])
    await _received(kafka, 1024 * 1024)
    writer.close()
    await until(lambda: not kafka._connections, "the connection to close")
    assert kafka.memory.buffered == 0


async def test_half_read_frames_cannot_take_the_whole_budget(kafka):
    """When half-read frames alone fill the node's request memory, waiting would free nothing:
    the frame that asks for more is refused (its connection closed) and small requests on
    other connections are still served."""
    kafka.memory.limit = 2 * 1024 * 1024
    first_reader, first = await connect(kafka)
    first.write((3 * 1024 * 1024).to_bytes(4, "big") + b"\0" * (2 * 1024 * 1024 + 10))
    second_reader, second = await connect(kafka)
    await until(lambda: kafka.memory.buffered >= 2 * 1024 * 1024, "the first frame to grow")
    second.write((3 * 1024 * 1024).to_bytes(4, "big") + b"\0" * (100 * 1024))
    assert await is_closed(second_reader)
    await assert_serving(kafka)
    first.close()
    second.close()


def test_failed_logins_are_logged_at_most_once_per_host_per_interval(caplog):
    from raftlog.security.sasl import SaslSession

    caplog.set_level(logging.WARNING)
    clock = _Clock()
    failures = auth_failures.FailureLog(clock)
    session = SaslSession(("PLAIN",), lambda *_: None)
    for _ in range(5):
        failures.record("10.0.0.1", "10.0.0.1:5000", session)
    failures.record("10.0.0.2", "10.0.0.2:5000", session)
    clock.now += auth_failures.FAILURE_LOG_INTERVAL_SECONDS
    failures.record("10.0.0.1", "10.0.0.1:5001", session)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert "from 10.0.0.1:5000 (1 failure(s)" in lines[0]
    assert "from 10.0.0.2:5000 (1 failure(s)" in lines[1]
    assert "from 10.0.0.1:5001 (5 failure(s)" in lines[2]  # the 4 unlogged and this one


@pytest.mark.parametrize(("password", "ok"), [(b"pw", True), (b"wrong", False)])
async def test_sasl_handshake_v0_then_bare_tokens(sasl_kafka, password, ok):
    """After SaslHandshake v0 the token travels in a bare size-prefixed frame and so does the
    answer (empty for PLAIN); a failure is answered by closing."""
    reader, writer = await connect(sasl_kafka)
    writer.write(_handshake("PLAIN", version=0))
    _, shook = await read_response(reader, SASL_HANDSHAKE, 0)
    assert shook.error_code == ErrorCode.none
    token = b"\0alice\0" + password
    writer.write(struct.pack(">i", len(token)) + token)
    if not ok:
        assert await is_closed(reader)
        return
    assert await asyncio.wait_for(reader.readexactly(4), 5) == b"\0\0\0\0"
    writer.write(frame(API_VERSIONS, 0, 9))
    assert (await read_response(reader, API_VERSIONS, 0))[0] == 9
    writer.close()


async def test_a_create_acls_over_its_bound_is_answered_without_being_decoded(monkeypatch):
    """A million-entry CreateAcls was decoded (seconds, in a thread, against the loop) only to
    be refused for its size: the server reads the count first and the handler answers from
    it."""
    from kafka_api.handlers import create_acls
    from raftlog.security.acl import MAX_PER_REQUEST

    def never(header, frame):
        raise AssertionError("decoded")

    monkeypatch.setattr(connection_module.codec, "decode_request", never)
    server = KafkaServer(types.SimpleNamespace(authorizer=None), "127.0.0.1", 0)
    await server.start()
    try:
        m = load_payload_module(create_acls.API_KEY, 1, EntityType.request)
        creation = m.AclCreation(
            resource_type=2,
            resource_name="t",
            resource_pattern_type=3,
            principal="User:a",
            host="*",
            operation=3,
            permission_type=3,
        )
        count = MAX_PER_REQUEST + 1
        reader, writer = await connect(server)
        writer.write(
            frame(create_acls.API_KEY, 1, 9, m.CreateAclsRequest(creations=(creation,) * count))
        )
        correlation_id, answer = await read_response(reader, create_acls.API_KEY, 1)
        assert correlation_id == 9 and len(answer.results) == count
        assert {r.error_code for r in answer.results} == {ErrorCode.security_disabled}
        writer.close()
    finally:
        await server.close()


async def test_pipelined_acks0_produces_refused_close_once_and_log_one_line(
    kafka, monkeypatch, caplog
):
    """aiokafka's suite pipelined ten acks=0 produces to a follower: each is refused by closing
    the connection (Kafka's only way to tell such a producer), and the nine that ended after
    the first had closed it were left for asyncio to log as "Task exception was never
    retrieved", with a traceback each. Every handler's outcome is read: one line for the
    close, no ERROR."""
    started = []

    async def produce(ctx, request):
        started.append(request.acks)
        await asyncio.sleep(0.01)  # all ten are running when the first is refused
        raise CloseConnection("acks=0 produce failed for partitions t-0")

    monkeypatch.setitem(HANDLERS, PRODUCE, fake_handler(PRODUCE, produce))
    reader, writer = await connect(kafka)
    with caplog.at_level(logging.INFO):
        writer.write(b"".join(frame(PRODUCE, 3, i, produce_request(acks=0)) for i in range(10)))
        assert await is_closed(reader)
        writer.close()
        await until(lambda: not kafka._connections, "the server to let the connection go")
        for _ in range(3):  # the connection and its tasks are freed; an unread one logs then
            gc.collect()
            await asyncio.sleep(0.01)
    assert started == [0] * 10
    lines = [r for r in caplog.records if r.name in ("kafka_api.connection", "asyncio")]
    assert len(lines) == 1, [r.getMessage()[:200] for r in lines]
    message = lines[0].getMessage()
    assert message.startswith("closing Kafka connection from 127.0.0.1:")
    assert message.endswith(": acks=0 produce failed for partitions t-0")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    await assert_serving(kafka)
