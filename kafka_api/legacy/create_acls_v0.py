"""CreateAcls v0 in kio's form: Kafka 3.9 still serves it (Kafka 4 dropped it, KIP-896) and
so does Redpanda, but kio (generated from Kafka 4's schemas) has no model of it. sarama 1.22
(Debian's) sends it from ClusterAdmin's CreateACL, whatever its config.Version. v0 has no
pattern type: every ACL it creates is LITERAL (Kafka's default for the missing field). Fields
as in Kafka's CreateAclsRequest.json / CreateAclsResponse.json at version 0;
kafka_api.codec answers from this module where kio has none."""

# No `from __future__ import annotations`: kio reads these fields' types at run time.
from dataclasses import field

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32Timedelta

from kafka_api.legacy.entity import Part, entity

API_KEY = 30
VERSION = 0


@entity(API_KEY, VERSION, Part.REQUEST_PART)
class AclCreation:
    resource_type: i8 = field(metadata={"kafka_type": "int8"})
    resource_name: str = field(metadata={"kafka_type": "string"})
    principal: str = field(metadata={"kafka_type": "string"})
    host: str = field(metadata={"kafka_type": "string"})
    operation: i8 = field(metadata={"kafka_type": "int8"})
    permission_type: i8 = field(metadata={"kafka_type": "int8"})


@entity(API_KEY, VERSION, Part.REQUEST)
class CreateAclsRequest:
    creations: tuple[AclCreation, ...]


@entity(API_KEY, VERSION, Part.RESPONSE_PART)
class AclCreationResult:
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"})


@entity(API_KEY, VERSION, Part.RESPONSE)
class CreateAclsResponse:
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    results: tuple[AclCreationResult, ...]


# what kafka_api.codec decodes a v0 request body into, and what it answers with
REQUEST, RESPONSE = CreateAclsRequest, CreateAclsResponse
