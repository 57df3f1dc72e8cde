"""The bounds walk (kafka_api/bounds.py) over a nullable struct (KIP-893: an int8 marker, -1
for null, then the struct), as DescribeTopicPartitions' cursor is: a request without a cursor
was refused as out of bounds and its connection closed."""

from __future__ import annotations

import io

import pytest
from kio.schema.describe_topic_partitions.v0.request import (
    Cursor,
    DescribeTopicPartitionsRequest,
    TopicRequest,
)
from kio.serial import entity_writer

from kafka_api.bounds import OutOfBounds, check_body


def _body(cursor: Cursor | None) -> bytes:
    request = DescribeTopicPartitionsRequest(
        topics=(TopicRequest(name="t"),), response_partition_limit=10, cursor=cursor
    )
    out = io.BytesIO()
    entity_writer(DescribeTopicPartitionsRequest)(out, request)
    return out.getvalue()


@pytest.mark.parametrize("cursor", [None, Cursor(topic_name="t", partition_index=3)])
def test_a_nullable_struct_is_walked_by_its_marker(cursor: Cursor | None) -> None:
    body = _body(cursor)
    assert check_body(DescribeTopicPartitionsRequest, body, 0, 10) is None
    with pytest.raises(OutOfBounds):
        check_body(DescribeTopicPartitionsRequest, body[:-2], 0, 10)
