"""kafka_api.codec: request header/body decoding, response framing, and the ApiVersions answer
that lets any client downgrade."""

import io
import struct
import uuid
from datetime import timedelta

import pytest
from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from kafka_api import codec
from kafka_api.context import RequestContext
from kafka_api.handlers import HANDLERS, api_versions, supported_versions
from raftlog.common.errors import ErrorCode

TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def encode_request(api_key, version, correlation_id, request, client_id="tester", header_tags=b""):
    """A request frame as a client writes it: size, header v1 or v2, body."""
    header = struct.pack(">hhi", api_key, version, correlation_id)
    if client_id is None:
        header += struct.pack(">h", -1)
    else:
        header += struct.pack(">h", len(client_id.encode())) + client_id.encode()
    if type(request).__flexible__:
        header += header_tags or b"\x00"
    body = io.BytesIO()
    entity_writer(type(request))(body, request)
    payload = header + body.getvalue()
    return struct.pack(">i", len(payload)) + payload


def decode(frame):
    payload = frame[4:]
    header = codec.decode_header(payload)
    return header, codec.decode_request(header, payload)


def fetch_request(version):
    module = load_payload_module(1, version, EntityType.request)
    partition = codec.build(
        module.FetchPartition,
        partition=3,
        current_leader_epoch=7,
        fetch_offset=12345,
        last_fetched_epoch=6,
        log_start_offset=-1,
        partition_max_bytes=1048576,
    )
    topic = codec.build(module.FetchTopic, topic="t1", topic_id=TOPIC_ID, partitions=(partition,))
    return codec.build(
        module.FetchRequest,
        replica_id=-1,
        max_wait=timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=(topic,),
        forgotten_topics_data=(),
        rack_id="",
    )


def produce_request(version):
    module = load_payload_module(0, version, EntityType.request)
    data = codec.build(module.PartitionProduceData, index=1, records=b"\x00" * 300_000)
    topic = codec.build(
        module.TopicProduceData, name="t1", topic_id=TOPIC_ID, partition_data=(data,)
    )
    return codec.build(
        module.ProduceRequest,
        transactional_id=None,
        acks=-1,
        timeout=timedelta(seconds=30),
        topic_data=(topic,),
    )


def metadata_request(version):
    module = load_payload_module(3, version, EntityType.request)
    topic = codec.build(module.MetadataRequestTopic, name="t1", topic_id=None)
    return codec.build(
        module.MetadataRequest,
        topics=(topic,),
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


REQUESTS = [
    (1, 4, fetch_request(4)),
    (1, 12, fetch_request(12)),
    (1, 13, fetch_request(13)),
    (1, 18, fetch_request(18)),
    (0, 3, produce_request(3)),
    (0, 9, produce_request(9)),
    (0, 13, produce_request(13)),
    (3, 0, metadata_request(0)),
    (3, 12, metadata_request(12)),
]


def test_every_advertised_version_has_models():
    """kio's, or ours in kio's form for the versions kio dropped (ListOffsets v0)."""
    assert [key for key, _, _ in supported_versions()] == sorted(HANDLERS)
    for key, low, high in supported_versions():
        assert low <= high
        for version in range(low, high + 1):
            for model in (codec.request_schema(key, version), codec.response_schema(key, version)):
                assert (model.__api_key__, model.__version__) == (key, version)
            response = codec.response_schema(key, version)
            assert getattr(codec.response_module(key, version), response.__name__) is response


def test_list_offsets_v0_round_trip():
    """Kafka's own bytes for a v0 request (replica -1, topic "t", partition 0, LATEST, at most
    3 offsets) decode into our model, and its answer encodes as Kafka's v0 response."""
    body = bytes.fromhex("ffffffff 00000001 0001 74 00000001 00000000")
    body += bytes.fromhex("ffffffffffffffff 00000003")
    header, decoded = decode(
        struct.pack(">i", 16 + len(body)) + struct.pack(">hhih", 2, 0, 7, 6) + b"tester" + body
    )
    assert (header.api_key, header.api_version, header.correlation_id) == (2, 0, 7)
    ((topic,),) = [decoded.topics]
    assert (decoded.replica_id, topic.name) == (-1, "t")
    assert [(p.partition_index, p.timestamp, p.max_num_offsets) for p in topic.partitions] == [
        (0, -1, 3)
    ]
    m = codec.response_module(2, 0)
    response = m.ListOffsetsResponse(
        topics=(
            m.ListOffsetsTopicResponse(
                name="t",
                partitions=(
                    m.ListOffsetsPartitionResponse(
                        partition_index=0, error_code=ErrorCode.none, old_style_offsets=(42, 0)
                    ),
                ),
            ),
        )
    )
    frame = b"".join(codec.encode_response(7, response))
    expected = bytes.fromhex("00000007 00000001 0001 74 00000001 00000000 0000")
    expected += bytes.fromhex("00000002 000000000000002a 0000000000000000")
    assert frame == struct.pack(">i", len(expected)) + expected


@pytest.mark.parametrize(("api_key", "version", "request_"), REQUESTS)
def test_request_round_trip(api_key, version, request_):
    header, decoded = decode(encode_request(api_key, version, 991, request_))
    assert (header.api_key, header.api_version, header.correlation_id) == (api_key, version, 991)
    assert header.client_id == "tester"
    assert decoded == request_


def test_read_only_view_of_a_reused_buffer_decodes():
    """The server decodes frames in place from a bytearray it reuses; kio copies out."""
    frame = encode_request(0, 9, 1, produce_request(9))
    buffer = bytearray(frame[4:])
    view = memoryview(buffer).toreadonly()
    header = codec.decode_header(view)
    decoded = codec.decode_request(header, view)
    buffer[:] = bytes(len(buffer))
    assert decoded == produce_request(9)


def test_unknown_header_tagged_fields_are_ignored_and_null_client_id_accepted():
    tags = b"\x02" + b"\x05\x02ab" + b"\x09\x00"  # two tagged fields nobody defines
    frame = encode_request(1, 12, 5, fetch_request(12), client_id=None, header_tags=tags)
    header, decoded = decode(frame)
    assert header.client_id is None
    assert decoded == fetch_request(12)


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00\x03\x00",  # shorter than a header
        struct.pack(">hhih", 3, 1, 1, 50) + b"short",  # client id past the end
        struct.pack(">hhih", 3, 1, 1, 2) + b"\xff\xfe",  # client id not UTF-8
    ],
)
def test_malformed_headers(payload):
    with pytest.raises(codec.MalformedRequest):
        codec.decode_header(payload)


def test_malformed_bodies():
    frame = encode_request(1, 12, 5, fetch_request(12))
    with pytest.raises(codec.MalformedRequest, match="cannot decode"):
        decode(frame[:-10])


def test_unknown_tagged_fields_in_a_body_are_ignored():
    """Kafka skips tagged fields it does not know (a newer client's); kio raised KeyError on
    them and the connection was closed."""
    request = fetch_request(12)
    frame = encode_request(1, 12, 5, request)
    # The request's own tagged section (its last byte, count 0) gets tag 9 with 2 bytes, and
    # a known one (cluster_id, tag 0) stays readable beside an unknown tag 7.
    assert frame.endswith(b"\x00")
    _, decoded = decode(_resized(frame[:-1] + b"\x01\x09\x02\xab\xcd"))
    assert decoded == request
    cluster_id = b"\x00\x04\x04abc"  # tag 0, size 4: compact string "abc"
    _, decoded = decode(_resized(frame[:-1] + b"\x02" + cluster_id + b"\x07\x01\x00"))
    assert decoded.cluster_id == "abc"


def _resized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame) - 4) + frame[4:]


def _frame_parts(parts):
    frame = b"".join(parts)
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    return frame[4:]


@pytest.mark.parametrize(
    ("api_key", "version", "header_size"),
    [(18, 3, 4), (18, 0, 4), (3, 12, 5), (3, 8, 4), (0, 3, 4), (0, 9, 5)],
)
def test_response_framing(api_key, version, header_size):
    """Flexible responses carry header v1 (tagged fields), except ApiVersions: always v0."""
    response_type = load_response_schema(api_key, version)
    m = codec.response_module(api_key, version)
    if api_key == 18:
        response = api_versions.response(version, ErrorCode.none)
    elif api_key == 3:
        response = codec.build(
            response_type,
            throttle_time=timedelta(0),
            brokers=(
                codec.build(m.MetadataResponseBroker, node_id=1, host="h", port=9, rack=None),
            ),
            cluster_id="c",
            controller_id=1,
            topics=(),
            error_code=ErrorCode.none,
        )
    else:
        response = codec.build(response_type, responses=(), throttle_time=timedelta(0))
    payload = _frame_parts(codec.encode_response(-17, response))
    assert struct.unpack_from(">i", payload)[0] == -17
    if header_size == 5:
        assert payload[4] == 0
    decoded, size = entity_reader(response_type)(payload, header_size)
    assert decoded == response and header_size + size == len(payload)


@pytest.mark.parametrize(("api_key", "version"), [(29, 1), (29, 3), (3, 12), (18, 3)])
async def test_a_response_encoded_off_the_loop_is_framed_as_any_other(api_key, version):
    """A handler may hand back its answer already encoded in a thread (codec.Encoded): the
    frame is byte for byte the one encode_response makes of the entity, and the request
    metrics read its error code."""
    m = codec.response_module(api_key, version)
    if api_key == 29:
        response = codec.build(
            m.DescribeAclsResponse,
            throttle_time=timedelta(0),
            error_code=ErrorCode.security_disabled,
            error_message="m",
            resources=(),
        )
    elif api_key == 3:
        response = codec.build(
            m.MetadataResponse,
            throttle_time=timedelta(0),
            brokers=(),
            cluster_id="c",
            controller_id=1,
            topics=(),
        )
    else:
        response = api_versions.response(version, ErrorCode.none)
    encoded = await codec.encode_off_loop(lambda: response)
    assert b"".join(codec.encode_response(9, encoded)) == b"".join(
        codec.encode_response(9, response)
    )
    assert encoded.error_code == (ErrorCode.security_disabled if api_key == 29 else 0)


def test_unsupported_api_versions_answer_is_v0_with_every_range():
    response = api_versions.unsupported_version_response()
    assert response.__version__ == 0
    assert response.error_code == ErrorCode.unsupported_version
    ranges = [(k.api_key, k.min_version, k.max_version) for k in response.api_keys]
    assert ranges == supported_versions()
    payload = _frame_parts(codec.encode_response(9, response))
    v0 = load_response_schema(18, 0)
    assert entity_reader(v0)(payload, 4)[0] == response


@pytest.mark.parametrize(
    ("name", "version", "error"),
    [("librdkafka", "2.16.1", ErrorCode.none), ("bad name", "1.0", ErrorCode.invalid_request)],
)
async def test_api_versions_checks_client_software_names(name, version, error):
    request = load_request_schema(18, 3)(client_software_name=name, client_software_version=version)
    ctx = RequestContext(broker=None, api_version=3, client_id="c", client_host="127.0.0.1")
    response = await api_versions.handle(ctx, request)
    assert response.error_code == error
    assert len(response.api_keys) == len(HANDLERS)


def raw_request(api_key, version, body, flexible):
    """A frame around a hand-made body (client id "x")."""
    header = struct.pack(">hhih", api_key, version, 1, 1) + b"x" + (b"\x00" if flexible else b"")
    return struct.pack(">i", len(header) + len(body)) + header + body


@pytest.mark.parametrize(
    ("frame", "claim"),
    [
        # The 21 bytes: Metadata v12 whose topics claim 2^32-2 entries. kio's native
        # decoder tried to reserve 32 GiB and the allocation failure aborted the node.
        (bytes.fromhex("000000110003000c0000000100017800ffffffff0f"), "4294967294 elements"),
        # Produce v3 (int32 lengths): no transactional id, acks -1, 30 s, 2^31-1 topics.
        (
            raw_request(0, 3, struct.pack(">hhii", -1, -1, 30000, 2**31 - 1), False),
            "2147483647 elements",
        ),
        # Fetch v4: 2^31-1 topics after the fixed fields.
        (
            raw_request(1, 4, struct.pack(">iiiibi", -1, 500, 1, 1 << 20, 0, 2**31 - 1), False),
            "2147483647 elements",
        ),
        # Produce v9 (flexible): one topic, whose name claims 2^28 bytes.
        (
            raw_request(
                0, 9, b"\x00" + struct.pack(">hi", -1, 30000) + b"\x02\x81\x80\x80\x80\x01", True
            ),
            "268435456 bytes needed",
        ),
    ],
)
def test_a_length_beyond_the_frame_is_refused_before_kio_decodes(frame, claim):
    with pytest.raises(codec.MalformedRequest, match=claim):
        decode(frame)


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize(
    ("api_key", "response", "result", "extra"),
    [
        (30, "CreateAclsResponse", "AclCreationResult", {}),
        (31, "DeleteAclsResponse", "DeleteAclsFilterResult", {"matching_acls": ()}),
    ],
)
@pytest.mark.parametrize("count", [1, 2, 5])
def test_an_answer_of_results_alike_is_the_one_kio_writes(
    api_key, response, result, extra, version, count
):
    """A request refused for its size is answered from repeated bytes, not one entity per
    entry; a client reads exactly what kio would have written for the same results."""
    m = codec.response_module(api_key, version)
    first = codec.build(
        getattr(m, result), error_code=ErrorCode.policy_violation, error_message="x", **extra
    )
    rest = codec.build(
        getattr(m, result), error_code=ErrorCode.policy_violation, error_message=None, **extra
    )
    whole = codec.build(
        getattr(m, response),
        throttle_time=timedelta(0),
        **{"results" if api_key == 30 else "filter_results": (first,) + (rest,) * (count - 1)},
    )
    alike = codec.encode_alike(getattr(m, response), first, rest, count)
    assert b"".join(codec.encode_response(5, alike)) == b"".join(codec.encode_response(5, whole))
    assert alike.error_code == ErrorCode.policy_violation


@pytest.mark.parametrize("version", [1, 2, 3])
def test_the_length_a_request_starts_with_is_read_before_it_is_decoded(version):
    m = load_payload_module(30, version, EntityType.request)
    creation = codec.build(
        m.AclCreation,
        resource_type=2,
        resource_name="t",
        resource_pattern_type=3,
        principal="User:a",
        host="*",
        operation=3,
        permission_type=3,
    )
    request = m.CreateAclsRequest(creations=(creation,) * 7)
    body = io.BytesIO()
    entity_writer(type(request))(body, request)
    header = request.__header_schema__
    head = io.BytesIO()
    entity_writer(header)(
        head,
        header(request_api_key=30, request_api_version=version, correlation_id=1, client_id="c"),
    )
    frame = head.getvalue() + body.getvalue()
    decoded = codec.decode_header(frame)
    assert codec.leading_count(decoded, frame) == 7
    assert codec.leading_count(decoded, frame[: decoded.size]) is None
