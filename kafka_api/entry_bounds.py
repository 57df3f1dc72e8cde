"""One bound for every API: how many entries one request may hold, and its refusal.

An entry is an element of any array in the request, at any depth: a topic, a partition, an
id, a name, a directory, a filter, a marker. The bounds walk (kafka_api/bounds.py) counts
them before the request is decoded and stops at the first array that takes the count past
the API's bound, so an oversized request costs the node one length read, whatever it claims.
Without it one DescribeTopicPartitions of 100,000 names held a node's loop 533 s, and
DescribeTransactions, DescribeQuorum, DeleteRecords, AlterReplicaLogDirs, TxnOffsetCommit
and AddPartitionsToTxn of 100,000 entries each held it past an election timeout.

The bound is Kafka's controller bound for one user operation (MAX_RECORDS_PER_USER_OP,
10,000 records), the most any request here can act on: a node holds at most
limits.CAPACITY_REPLICAS partition replicas, a cluster at most scram.MAX_USERS users, so no
client has a reason to name more partitions, topics, groups or ids in one request. The
APIs that create partitions carry each partition's replica list, so they may hold a few
entries per partition.

Over the bound a request is answered with INVALID_REQUEST where its response has a
top-level error code (Kafka's answer to a request it will not serve as sent), and its
connection is closed otherwise, as Kafka closes a connection whose request it cannot take:
those responses only carry errors per entry, which would mean decoding the entries. CreateAcls
and DeleteAcls answer every entry POLICY_VIOLATION from the count alone
(kafka_api.handlers.REFUSAL_UNREAD), as they did before this bound.
"""

from __future__ import annotations

import functools
from dataclasses import MISSING, fields
from datetime import timedelta
from typing import Any
from uuid import UUID

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

from raftlog.common.errors import ErrorCode
from raftlog.common.limits import MAX_RECORDS_PER_USER_OP

MAX_ENTRIES = MAX_RECORDS_PER_USER_OP
# CreateTopics (19) and CreatePartitions (37): up to MAX_RECORDS_PER_USER_OP partitions, each
# with an explicit assignment of a few replicas.
_ASSIGNING = 4 * MAX_RECORDS_PER_USER_OP
_BY_API = {19: _ASSIGNING, 37: _ASSIGNING}


def max_entries(api_key: int) -> int:
    """The entries one request of this API may hold."""
    return _BY_API.get(api_key, MAX_ENTRIES)


def refusal(response_type: type, message: str) -> Any | None:
    """The answer to a request over its bound: the response with INVALID_REQUEST as its
    top-level error (and `message` where it has an error message) and nothing else; None if
    the response has no top-level error code, and the connection is closed instead."""
    if "error_code" not in _names(response_type):
        return None
    return _empty(
        response_type, {"error_code": ErrorCode.invalid_request, "error_message": message}
    )


@functools.cache
def _names(entity_type: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(entity_type))


def _empty(entity_type: type, values: dict[str, Any]) -> Any:
    """An entity of `entity_type` holding `values` where it has those fields, every other
    field empty: no entries, zero, an empty or null string."""
    given: dict[str, Any] = {}
    for f in fields(entity_type):
        if f.name in values:
            given[f.name] = values[f.name]
        elif f.default is MISSING and f.default_factory is MISSING:
            given[f.name] = _nothing(f)
    return entity_type(**given)


def _nothing(f: Any) -> Any:
    kind = classify_field(f)
    if isinstance(kind, EntityTupleField | PrimitiveTupleField):
        return None if is_optional(f) else ()
    if isinstance(kind, EntityField):
        return None if is_optional(f) else _empty(kind.type_, {})
    assert isinstance(kind, PrimitiveField)
    if is_optional(f):
        return None
    kafka_type = get_schema_field_type(f)
    if kafka_type in ("string", "bytes", "records"):
        return "" if kafka_type == "string" else b""
    if kafka_type.startswith("timedelta"):
        return timedelta(0)
    if kafka_type == "bool":
        return False
    if kafka_type == "uuid":
        return UUID(int=0)
    return 0
