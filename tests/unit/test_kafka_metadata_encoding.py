"""The hand-written Metadata encoder must match kio's writer byte for byte in every version
served: brokers with and without racks, topics with errors, ids, internal flags, authorized
operations, and partitions with and without leaders, offline replicas and epochs."""

import uuid
from datetime import timedelta

import pytest
from support.answers import kio_frame

from kafka_api.codec import build, encode_response, response_module
from kafka_api.handlers import metadata
from kafka_api.metadata_encoding import METADATA_API_KEY
from raftlog.common.errors import ErrorCode

VERSIONS = range(metadata.MIN_VERSION, metadata.MAX_VERSION + 1)
TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")


def _partition(m, index, **extra):
    values = dict(
        error_code=ErrorCode.none,
        partition_index=index,
        leader_id=2,
        leader_epoch=17,
        replica_nodes=(1, 2, 3),
        isr_nodes=(2, 3),
        offline_replicas=(),
    )
    values.update(extra)
    return build(m.MetadataResponsePartition, **values)


def _response(version):
    m = response_module(METADATA_API_KEY, version)
    partitions = (
        _partition(m, 0),
        _partition(
            m,
            1,
            error_code=ErrorCode.leader_not_available,
            leader_id=-1,
            isr_nodes=(),
            offline_replicas=(1,),
        ),
        _partition(m, 2, replica_nodes=tuple(range(1, 40)), isr_nodes=tuple(range(1, 40))),
    )
    topics = (
        build(
            m.MetadataResponseTopic,
            error_code=ErrorCode.none,
            name="tôpic-ü",
            topic_id=TOPIC_ID,
            is_internal=False,
            partitions=partitions,
            topic_authorized_operations=0x0FF8,
        ),
        build(
            m.MetadataResponseTopic,
            error_code=ErrorCode.unknown_topic_or_partition,
            name="missing",
            topic_id=None,
            is_internal=True,
            partitions=(),
            topic_authorized_operations=-2147483648,
        ),
    )
    brokers = (
        build(m.MetadataResponseBroker, node_id=1, host="10.0.0.1", port=9092, rack=None),
        build(m.MetadataResponseBroker, node_id=2, host="host-ß", port=19092, rack="r1"),
    )
    return build(
        m.MetadataResponse,
        throttle_time=timedelta(milliseconds=3),
        brokers=brokers,
        cluster_id="cluster-id" if version != 4 else None,
        controller_id=2,
        topics=topics,
        cluster_authorized_operations=0x1234,
        error_code=ErrorCode.none,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_metadata_encoder_matches_kio(version):
    response = _response(version)
    assert b"".join(encode_response(9, response)) == kio_frame(9, response)


@pytest.mark.parametrize("version", VERSIONS)
def test_metadata_encoder_matches_kio_for_an_empty_cluster(version):
    m = response_module(METADATA_API_KEY, version)
    response = build(
        m.MetadataResponse,
        throttle_time=timedelta(0),
        brokers=(),
        cluster_id=None,
        controller_id=-1,
        topics=(),
        cluster_authorized_operations=-2147483648,
        error_code=ErrorCode.none,
    )
    assert b"".join(encode_response(-1, response)) == kio_frame(-1, response)
