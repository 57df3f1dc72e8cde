"""What the three ACL APIs share: their wire fields read into raftlog's bindings and filters,
and Kafka's answer while no authorizer is configured."""

from __future__ import annotations

from typing import Any

from kafka_api.errors import CloseConnection
from raftlog.security.acl import AclBinding, AclBindingFilter, unknown_codes

NO_AUTHORIZER = "No Authorizer is configured."


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


def _check_codes(resource_type: int, pattern_type: int, operation: int, permission: int) -> None:
    """Kafka fails to parse an ACL request with an UNKNOWN code, and closes the connection."""
    unknown = unknown_codes(resource_type, pattern_type, operation, permission)
    if unknown:
        raise CloseConnection(f"ACL request with unknown {', '.join(unknown)}")
