"""DescribeConfigs v0 in kio's form: Kafka 3.9 still serves it (Kafka 4 dropped it, KIP-896)
and so does Redpanda, but kio (generated from Kafka 4's schemas) has no model of it. sarama
1.22 (Debian's) sends it from ClusterAdmin's ListTopics (every topic's configs) and
DescribeConfig, whatever its config.Version. The request has no include_synonyms; each config
in the answer says `is_default` where later versions give its source, and carries no
synonyms. Fields as in Kafka's DescribeConfigsRequest.json / DescribeConfigsResponse.json at
version 0; kafka_api.codec answers from this module where kio has none."""

# No `from __future__ import annotations`: kio reads these fields' types at run time.
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32Timedelta

API_KEY = 32
VERSION = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResource:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(VERSION)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    resource_type: i8 = field(metadata={"kafka_type": "int8"})
    resource_name: str = field(metadata={"kafka_type": "string"})
    configuration_keys: tuple[str, ...] | None = field(
        metadata={"kafka_type": "string"}, default=()
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(VERSION)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    resources: tuple[DescribeConfigsResource, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResourceResult:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(VERSION)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    name: str = field(metadata={"kafka_type": "string"})
    value: str | None = field(metadata={"kafka_type": "string"})
    read_only: bool = field(metadata={"kafka_type": "bool"})
    is_default: bool = field(metadata={"kafka_type": "bool"})
    is_sensitive: bool = field(metadata={"kafka_type": "bool"})


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResult:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(VERSION)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"})
    resource_type: i8 = field(metadata={"kafka_type": "int8"})
    resource_name: str = field(metadata={"kafka_type": "string"})
    configs: tuple[DescribeConfigsResourceResult, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(VERSION)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    results: tuple[DescribeConfigsResult, ...]


# what kafka_api.codec decodes a v0 request body into, and what it answers with
REQUEST, RESPONSE = DescribeConfigsRequest, DescribeConfigsResponse
