"""CreateAcls v0 in kio's form: Kafka 3.9 still serves it (Kafka 4 dropped it, KIP-896) and
so does Redpanda, but kio (generated from Kafka 4's schemas) has no model of it. sarama 1.22
(Debian's) sends it from ClusterAdmin's CreateACL, whatever its config.Version. v0 has no
pattern type: every ACL it creates is LITERAL (Kafka's default for the missing field). Fields
as in Kafka's CreateAclsRequest.json / CreateAclsResponse.json at version 0;
kafka_api.codec answers from this module where kio has none."""

# No `from __future__ import annotations`: kio reads these fields' types at run time.
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32Timedelta

API_KEY = 30
VERSION = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class AclCreation:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(VERSION)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    resource_type: i8 = field(metadata={"kafka_type": "int8"})
    resource_name: str = field(metadata={"kafka_type": "string"})
    principal: str = field(metadata={"kafka_type": "string"})
    host: str = field(metadata={"kafka_type": "string"})
    operation: i8 = field(metadata={"kafka_type": "int8"})
    permission_type: i8 = field(metadata={"kafka_type": "int8"})


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateAclsRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(VERSION)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    creations: tuple[AclCreation, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AclCreationResult:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(VERSION)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"})


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateAclsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(VERSION)
    __flexible__: ClassVar[bool] = False
    __api_key__: ClassVar[i16] = i16(API_KEY)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    results: tuple[AclCreationResult, ...]


# what kafka_api.codec decodes a v0 request body into, and what it answers with
REQUEST, RESPONSE = CreateAclsRequest, CreateAclsResponse
