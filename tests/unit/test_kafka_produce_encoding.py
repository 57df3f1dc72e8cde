"""The hand-written Produce encoder must match kio's writer byte for byte in every version
served, errors, record errors, KIP-951's leader hints and append times included."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from support.answers import kio_frame

from kafka_api.codec import build, encode_response, response_module
from kafka_api.handlers import produce
from kafka_api.produce_encoding import PRODUCE_API_KEY
from raftlog.common.errors import ErrorCode

VERSIONS = range(produce.MIN_VERSION, produce.MAX_VERSION + 1)
TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")


def _partition(m, version, index, **extra):
    values = dict(
        index=index,
        error_code=ErrorCode.none,
        base_offset=1234567890123,
        log_append_time=None,
        log_start_offset=7,
        record_errors=(),
        error_message=None,
    )
    values.update(extra)
    return build(m.PartitionProduceResponse, **values)


def _response(version):
    m = response_module(PRODUCE_API_KEY, version)
    partitions = [
        _partition(m, version, 0),
        _partition(m, version, 1, base_offset=-1, error_code=ErrorCode.not_leader_or_follower),
        _partition(
            m, version, 2, log_append_time=datetime(2026, 11, 28, 14, 0, 0, 123000, tzinfo=UTC)
        ),
    ]
    if version >= 8:
        errors = (
            build(m.BatchIndexAndErrorMessage, batch_index=0, batch_index_error_message=None),
            build(m.BatchIndexAndErrorMessage, batch_index=4, batch_index_error_message="ü"),
        )
        partitions.append(
            _partition(
                m,
                version,
                3,
                error_code=ErrorCode.invalid_record,
                error_message="bad récord",
                record_errors=errors,
            )
        )
    endpoints = ()
    if version >= 10:
        partitions.append(
            _partition(
                m,
                version,
                4,
                error_code=ErrorCode.not_leader_or_follower,
                current_leader=m.LeaderIdAndEpoch(leader_id=2, leader_epoch=5),
            )
        )
        endpoints = (
            m.NodeEndpoint(node_id=2, host="10.0.0.2", port=9092, rack=None),
            m.NodeEndpoint(node_id=3, host="host-ß", port=19092, rack="r1"),
        )
    topics = (
        build(
            m.TopicProduceResponse,
            name="tôpic-ü",
            topic_id=TOPIC_ID,
            partition_responses=tuple(partitions),
        ),
        build(m.TopicProduceResponse, name="empty", topic_id=None, partition_responses=()),
    )
    return build(
        m.ProduceResponse,
        responses=topics,
        throttle_time=timedelta(milliseconds=17),
        node_endpoints=endpoints,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_produce_encoder_matches_kio(version):
    response = _response(version)
    assert b"".join(encode_response(77, response)) == kio_frame(77, response)


@pytest.mark.parametrize("version", VERSIONS)
def test_produce_encoder_matches_kio_for_an_empty_answer(version):
    m = response_module(PRODUCE_API_KEY, version)
    response = build(m.ProduceResponse, responses=(), throttle_time=timedelta(0))
    assert b"".join(encode_response(-5, response)) == kio_frame(-5, response)
