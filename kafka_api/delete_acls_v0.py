"""DeleteAcls v0 in kio's form: Kafka 3.9 still serves it (Kafka 4 dropped it, KIP-896) and
so does Redpanda, but kio (generated from Kafka 4's schemas) has no model of it. sarama 1.22
(Debian's) sends it from ClusterAdmin's DeleteACL, whatever its config.Version. v0 has no
pattern type: each filter matches LITERAL ACLs only (Kafka's DeleteAclsRequest reads the
missing field as LITERAL), and the ACLs it names in the answer say none. Fields as in Kafka's
DeleteAclsRequest.json / DeleteAclsResponse.json at version 0; kafka_api.codec answers from
this module where kio has none."""

# No `from __future__ import annotations`: kio reads these fields' types at run time.
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32Timedelta

API_KEY = 31
VERSION = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteAclsFilter:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(VERSION)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    resource_type_filter: i8 = field(metadata={"kafka_type": "int8"})
    resource_name_filter: str | None = field(metadata={"kafka_type": "string"})
    principal_filter: str | None = field(metadata={"kafka_type": "string"})
    host_filter: str | None = field(metadata={"kafka_type": "string"})
    operation: i8 = field(metadata={"kafka_type": "int8"})
    permission_type: i8 = field(metadata={"kafka_type": "int8"})


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteAclsRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(VERSION)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    filters: tuple[DeleteAclsFilter, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteAclsMatchingAcl:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(VERSION)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"})
    resource_type: i8 = field(metadata={"kafka_type": "int8"})
    resource_name: str = field(metadata={"kafka_type": "string"})
    principal: str = field(metadata={"kafka_type": "string"})
    host: str = field(metadata={"kafka_type": "string"})
    operation: i8 = field(metadata={"kafka_type": "int8"})
    permission_type: i8 = field(metadata={"kafka_type": "int8"})


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteAclsFilterResult:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(VERSION)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"})
    matching_acls: tuple[DeleteAclsMatchingAcl, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteAclsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(VERSION)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    filter_results: tuple[DeleteAclsFilterResult, ...]


# what kafka_api.codec decodes a v0 request body into, and what it answers with
REQUEST, RESPONSE = DeleteAclsRequest, DeleteAclsResponse
