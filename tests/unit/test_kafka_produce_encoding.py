"""The Produce answer written straight from the partitions' results must be, byte for byte,
what kio's writer writes for the response the handler built from them before, in every
version served: errors, record errors, KIP-951's leader hints and append times included."""

import uuid
from datetime import timedelta

import pytest
from kio.serial.readers import tz_aware_from_i64
from support.answers import kio_frame

from kafka_api.codec import Encoded, build, encode_response, response_module
from kafka_api.handlers import produce
from kafka_api.produce_encoding import encode_produce_response
from raftlog.api.values import BrokerInfo, ProduceResult
from raftlog.common.errors import ErrorCode

VERSIONS = range(produce.MIN_VERSION, produce.MAX_VERSION + 1)
TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")
OK = ProduceResult(base_offset=1234567890123, log_start_offset=7)


def _answers(version):
    """(topics, leaders) as the handler passes them: every kind of partition answer."""
    partitions = [
        (0, OK, None),
        (1, ProduceResult(ErrorCode.not_leader_or_follower), None),
        (2, ProduceResult(base_offset=5, log_append_time=1795874400123, log_start_offset=0), None),
        (
            3,
            ProduceResult(
                ErrorCode.invalid_record,
                message="bad récord",
                record_errors=((0, "a"), (4, "ü")),
            ),
            None,
        ),
    ]
    leaders = []
    if version >= 10:
        partitions.append((4, ProduceResult(ErrorCode.not_leader_or_follower), (2, 5)))
        leaders = [BrokerInfo(2, "10.0.0.2", 9092), BrokerInfo(3, "host-ß", 19092, "r1")]
    first, empty = (TOPIC_ID, uuid.UUID(int=1)) if version >= 13 else ("tôpic-ü", "empty")
    return [(first, partitions), (empty, [])], leaders


def _kio_response(version, topics, leaders):
    """The kio response the handler built from the same results before it wrote them."""
    m = response_module(produce.API_KEY, version)

    def partition(index, result, leader):
        extra = {}
        if leader is not None:
            extra["current_leader"] = m.LeaderIdAndEpoch(
                leader_id=leader[0], leader_epoch=leader[1]
            )
        return build(
            m.PartitionProduceResponse,
            index=index,
            error_code=result.error,
            base_offset=result.base_offset,
            log_append_time=(
                tz_aware_from_i64(result.log_append_time) if result.log_append_time >= 0 else None
            ),
            log_start_offset=result.log_start_offset,
            record_errors=tuple(
                m.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=why)
                for i, why in result.record_errors
            )
            if version >= 8
            else (),
            error_message=result.message,
            **extra,
        )

    return build(
        m.ProduceResponse,
        responses=tuple(
            build(
                m.TopicProduceResponse,
                name=key if isinstance(key, str) else None,
                topic_id=None if isinstance(key, str) else key,
                partition_responses=tuple(partition(*p) for p in partitions),
            )
            for key, partitions in topics
        ),
        throttle_time=timedelta(0),
        node_endpoints=tuple(
            m.NodeEndpoint(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in leaders
        ),
    )


def _frame(version, topics, leaders):
    body = encode_produce_response(version, topics, leaders)
    return b"".join(encode_response(77, Encoded(body, version >= produce.FIRST_FLEXIBLE, 0)))


@pytest.mark.parametrize("version", VERSIONS)
def test_produce_encoder_matches_kio(version):
    topics, leaders = _answers(version)
    assert _frame(version, topics, leaders) == kio_frame(
        77, _kio_response(version, topics, leaders)
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_produce_encoder_matches_kio_for_an_empty_answer(version):
    assert _frame(version, [], []) == kio_frame(77, _kio_response(version, [], []))
