"""The hand-written Fetch encoder must match kio's writer byte for byte in every version served."""

import uuid
from datetime import timedelta

import pytest
from support.answers import kio_frame

from kafka_api.codec import build, encode_response, response_module
from kafka_api.fetch_encoding import FETCH_API_KEY, INLINE_RECORDS_LIMIT
from kafka_api.handlers import fetch
from raftlog.common.errors import ErrorCode

VERSIONS = range(fetch.MIN_VERSION, fetch.MAX_VERSION + 1)
TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")


def _partition(m, index, records, **extra):
    values = dict(
        partition_index=index,
        error_code=ErrorCode.none,
        high_watermark=1234567890123,
        last_stable_offset=1234567890123,
        log_start_offset=7,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=records,
    )
    values.update(extra)
    return build(m.PartitionData, **values)


def _response(version):
    m = response_module(FETCH_API_KEY, version)
    partitions = [
        _partition(m, 0, b"small records"),
        _partition(m, 1, bytes(range(256)) * (INLINE_RECORDS_LIMIT // 256 + 3)),
        _partition(m, 2, None, error_code=ErrorCode.offset_out_of_range, high_watermark=-1),
        _partition(m, 3, b"", aborted_transactions=()),
        _partition(m, 4, b"x" * 300),
    ]
    aborted_cls = m.AbortedTransaction
    partitions.append(
        _partition(
            m,
            5,
            b"",
            aborted_transactions=(
                build(aborted_cls, producer_id=42, first_offset=9),
                build(aborted_cls, producer_id=43, first_offset=10),
            ),
        )
    )
    if version >= 12:
        partitions.append(
            _partition(
                m,
                6,
                b"",
                diverging_epoch=m.EpochEndOffset(epoch=3, end_offset=99),
                current_leader=m.LeaderIdAndEpoch(leader_id=2, leader_epoch=5),
                snapshot_id=m.SnapshotId(end_offset=100, epoch=4),
            )
        )
        partitions.append(
            _partition(m, 7, b"", current_leader=m.LeaderIdAndEpoch(leader_id=1, leader_epoch=-1))
        )
    topics = (
        build(
            m.FetchableTopicResponse,
            topic="tôpic-ü",
            topic_id=TOPIC_ID,
            partitions=tuple(partitions),
        ),
        build(m.FetchableTopicResponse, topic="empty", topic_id=None, partitions=()),
    )
    endpoints = ()
    if version >= 16:
        endpoints = (
            m.NodeEndpoint(node_id=2, host="10.0.0.2", port=9092, rack=None),
            m.NodeEndpoint(node_id=3, host="host-ß", port=19092, rack="r1"),
        )
    return build(
        m.FetchResponse,
        throttle_time=timedelta(milliseconds=17),
        error_code=ErrorCode.none,
        session_id=0,
        responses=topics,
        node_endpoints=endpoints,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_fetch_encoder_matches_kio(version):
    response = _response(version)
    parts = encode_response(77, response)
    assert b"".join(parts) == kio_frame(77, response)
    assert any(len(part) >= INLINE_RECORDS_LIMIT for part in parts[1:]), "large records not split"


@pytest.mark.parametrize("version", VERSIONS)
def test_fetch_encoder_matches_kio_for_top_level_error(version):
    m = response_module(FETCH_API_KEY, version)
    response = build(
        m.FetchResponse,
        throttle_time=timedelta(0),
        error_code=ErrorCode.fetch_session_id_not_found,
        session_id=0,
        responses=(),
    )
    assert b"".join(encode_response(-5, response)) == kio_frame(-5, response)
