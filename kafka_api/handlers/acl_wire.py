"""What the three ACL APIs share: their wire fields read into raftlog's bindings and filters,
Kafka's answer while no authorizer is configured, and the bound on entries per request."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kafka_api.errors import CloseConnection
from raftlog.security.acl import MAX_PER_REQUEST, AclBinding, AclBindingFilter, unknown_codes

NO_AUTHORIZER = "No Authorizer is configured."

T = TypeVar("T")


def binding(creation: Any) -> AclBinding:
    """A CreateAcls entry; one with a code Kafka does not know cannot be parsed."""
    _check_codes(
        creation.resource_type,
        creation.resource_pattern_type,
        creation.operation,
        creation.permission_type,
    )
    return AclBinding(
        int(creation.resource_type),
        creation.resource_name,
        int(creation.resource_pattern_type),
        creation.principal,
        creation.host,
        int(creation.operation),
        int(creation.permission_type),
    )


def binding_filter(entry: Any) -> AclBindingFilter:
    """A DescribeAcls request's or a DeleteAcls entry's filter (their fields are named alike)."""
    _check_codes(
        entry.resource_type_filter,
        entry.pattern_type_filter,
        entry.operation,
        entry.permission_type,
    )
    return AclBindingFilter(
        int(entry.resource_type_filter),
        entry.resource_name_filter,
        int(entry.pattern_type_filter),
        entry.principal_filter,
        entry.host_filter,
        int(entry.operation),
        int(entry.permission_type),
    )


def too_many(entries: Sequence[Any], what: str) -> str | None:
    """Why a request is refused whole before its entries are read (POLICY_VIOLATION): more
    than Kafka's controller writes for one operation."""
    if len(entries) <= MAX_PER_REQUEST:
        return None
    return (
        f"Unable to perform excessively large batch operation: {len(entries)} {what} in one "
        f"request, at most {MAX_PER_REQUEST}"
    )


def refused_alike(
    count: int, message: str | None, make: Callable[[str | None], T]
) -> tuple[T, ...]:
    """The results of `count` entries refused alike, make(message) each: the message on every
    one, as Kafka answers; past MAX_PER_REQUEST entries (a request refused for its size) on
    the first only, so the answer stays a few bytes per entry whatever the request's size."""
    first = make(message)
    if count <= MAX_PER_REQUEST:
        return (first,) * count
    return (first,) + (make(None),) * (count - 1)


def _check_codes(resource_type: int, pattern_type: int, operation: int, permission: int) -> None:
    """Kafka fails to parse an ACL request with an UNKNOWN code, and closes the connection."""
    unknown = unknown_codes(resource_type, pattern_type, operation, permission)
    if unknown:
        raise CloseConnection(f"ACL request with unknown {', '.join(unknown)}")
