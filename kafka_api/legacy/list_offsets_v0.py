"""ListOffsets v0 in kio's form: Kafka 3.9 still serves it, but kio (generated from Kafka 4's
schemas, which dropped it) has no model of it. Clients pinned to an old broker send it
(kafka-python with api_version=(0, 10, 0) does, for beginning_offsets and end_offsets). A
partition asks for up to max_num_offsets offsets and gets them in old_style_offsets. Fields
as in Kafka's ListOffsetsRequest.json / ListOffsetsResponse.json at version 0;
kafka_api.codec answers from this module where kio has none."""

# No `from __future__ import annotations`: kio reads these fields' types at run time.
from dataclasses import field

from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i64

from kafka_api.legacy.entity import Part, entity

API_KEY = 2
VERSION = 0


@entity(API_KEY, VERSION, Part.REQUEST_PART)
class ListOffsetsPartition:
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    timestamp: i64 = field(metadata={"kafka_type": "int64"})
    max_num_offsets: i32 = field(metadata={"kafka_type": "int32"}, default=i32(1))


@entity(API_KEY, VERSION, Part.REQUEST_PART)
class ListOffsetsTopic:
    name: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[ListOffsetsPartition, ...]


@entity(API_KEY, VERSION, Part.REQUEST)
class ListOffsetsRequest:
    replica_id: BrokerId = field(metadata={"kafka_type": "int32"})
    topics: tuple[ListOffsetsTopic, ...]


@entity(API_KEY, VERSION, Part.RESPONSE_PART)
class ListOffsetsPartitionResponse:
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    old_style_offsets: tuple[i64, ...] = field(metadata={"kafka_type": "int64"}, default=())


@entity(API_KEY, VERSION, Part.RESPONSE_PART)
class ListOffsetsTopicResponse:
    name: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[ListOffsetsPartitionResponse, ...]


@entity(API_KEY, VERSION, Part.RESPONSE)
class ListOffsetsResponse:
    topics: tuple[ListOffsetsTopicResponse, ...]


# what kafka_api.codec decodes a v0 request body into, and what it answers with
REQUEST, RESPONSE = ListOffsetsRequest, ListOffsetsResponse
