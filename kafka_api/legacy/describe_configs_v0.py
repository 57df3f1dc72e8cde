"""DescribeConfigs v0 in kio's form: Kafka 3.9 still serves it (Kafka 4 dropped it, KIP-896)
and so does Redpanda, but kio (generated from Kafka 4's schemas) has no model of it. sarama
1.22 (Debian's) sends it from ClusterAdmin's ListTopics (every topic's configs) and
DescribeConfig, whatever its config.Version. The request has no include_synonyms; each config
in the answer says `is_default` where later versions give its source, and carries no
synonyms. Fields as in Kafka's DescribeConfigsRequest.json / DescribeConfigsResponse.json at
version 0; kafka_api.codec answers from this module where kio has none."""

# No `from __future__ import annotations`: kio reads these fields' types at run time.
from dataclasses import field

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32Timedelta

from kafka_api.legacy.entity import Part, entity

API_KEY = 32
VERSION = 0


@entity(API_KEY, VERSION, Part.REQUEST_PART)
class DescribeConfigsResource:
    resource_type: i8 = field(metadata={"kafka_type": "int8"})
    resource_name: str = field(metadata={"kafka_type": "string"})
    configuration_keys: tuple[str, ...] | None = field(
        metadata={"kafka_type": "string"}, default=()
    )


@entity(API_KEY, VERSION, Part.REQUEST)
class DescribeConfigsRequest:
    resources: tuple[DescribeConfigsResource, ...]


@entity(API_KEY, VERSION, Part.RESPONSE_PART)
class DescribeConfigsResourceResult:
    name: str = field(metadata={"kafka_type": "string"})
    value: str | None = field(metadata={"kafka_type": "string"})
    read_only: bool = field(metadata={"kafka_type": "bool"})
    is_default: bool = field(metadata={"kafka_type": "bool"})
    is_sensitive: bool = field(metadata={"kafka_type": "bool"})


@entity(API_KEY, VERSION, Part.RESPONSE_PART)
class DescribeConfigsResult:
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"})
    resource_type: i8 = field(metadata={"kafka_type": "int8"})
    resource_name: str = field(metadata={"kafka_type": "string"})
    configs: tuple[DescribeConfigsResourceResult, ...]


@entity(API_KEY, VERSION, Part.RESPONSE)
class DescribeConfigsResponse:
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    results: tuple[DescribeConfigsResult, ...]


# what kafka_api.codec decodes a v0 request body into, and what it answers with
REQUEST, RESPONSE = DescribeConfigsRequest, DescribeConfigsResponse
