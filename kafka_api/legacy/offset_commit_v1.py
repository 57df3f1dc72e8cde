"""OffsetCommit v1 in kio's form: Kafka 3.9 still serves it (Kafka 4 dropped v0-v1, KIP-896)
and so does Redpanda, but kio (generated from Kafka 4's schemas) has no model of it. sarama
before 1.40 sends it whenever `Consumer.Offsets.Retention` is left at its default of 0, so
every such consumer group commits with it. v1 has no retention time; each partition carries
a commit timestamp instead (-1: the broker's time), which raftlog ignores as it ignores
v2-v4's retention: offsets follow the group's retention, as since Kafka 2.1. Fields as in
Kafka's OffsetCommitRequest.json / OffsetCommitResponse.json at version 1;
kafka_api.codec answers from this module where kio has none."""

# No `from __future__ import annotations`: kio reads these fields' types at run time.
from dataclasses import field

from kio.schema.errors import ErrorCode
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i64

from kafka_api.legacy.entity import Part, entity

API_KEY = 8
VERSION = 1


@entity(API_KEY, VERSION, Part.REQUEST_PART)
class OffsetCommitRequestPartition:
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    committed_offset: i64 = field(metadata={"kafka_type": "int64"})
    commit_timestamp: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    committed_metadata: str | None = field(metadata={"kafka_type": "string"})


@entity(API_KEY, VERSION, Part.REQUEST_PART)
class OffsetCommitRequestTopic:
    name: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[OffsetCommitRequestPartition, ...]


@entity(API_KEY, VERSION, Part.REQUEST)
class OffsetCommitRequest:
    group_id: GroupId = field(metadata={"kafka_type": "string"})
    generation_id_or_member_epoch: i32 = field(metadata={"kafka_type": "int32"}, default=i32(-1))
    member_id: str = field(metadata={"kafka_type": "string"})
    topics: tuple[OffsetCommitRequestTopic, ...]


@entity(API_KEY, VERSION, Part.RESPONSE_PART)
class OffsetCommitResponsePartition:
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})


@entity(API_KEY, VERSION, Part.RESPONSE_PART)
class OffsetCommitResponseTopic:
    name: TopicName = field(metadata={"kafka_type": "string"})
    partitions: tuple[OffsetCommitResponsePartition, ...]


@entity(API_KEY, VERSION, Part.RESPONSE)
class OffsetCommitResponse:
    topics: tuple[OffsetCommitResponseTopic, ...]


# what kafka_api.codec decodes a v1 request body into, and what it answers with
REQUEST, RESPONSE = OffsetCommitRequest, OffsetCommitResponse
