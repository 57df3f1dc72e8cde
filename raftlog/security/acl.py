"""Kafka's ACLs: bindings, the filters DescribeAcls and DeleteAcls take, and their checks;
the node's index of them is acl_index.py's, the authorizer that judges a request by them
(Kafka's StandardAuthorizer) authorizer.py's. Codes are Kafka's wire codes
(org.apache.kafka.common.acl and .resource), so bindings cross the ACL APIs unchanged.

The bindings are controller state (raftlog.controller: `acls`, changed in place). Beside them
each node keeps an AclIndex, the same bindings by resource type and name, changed with them:
a change costs what it adds or removes, not what the cluster holds; DeleteAcls finds its
matches through it, and the authorizer judges by it and caches its decisions, dropping them on
every change, so a produce or fetch pays one dictionary lookup per topic."""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum
from typing import Any, NamedTuple

from raftlog.common.errors import ErrorCode
from raftlog.common.limits import MAX_RECORDS_PER_USER_OP


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, the name taken literally
    MATCH = 2  # filters only: every binding that would apply to the named resource
    LITERAL = 3
    PREFIXED = 4


class PermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
WILDCARD = "*"  # a LITERAL resource name matching every name; an ACL host matching every host
WILDCARD_PRINCIPAL = "User:*"
# The operations each resource type has (Kafka's AclEntry.supportedOperations): what
# authorized_operations reports on.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
}

# Kafka's controller writes at most 10,000 records for one user operation (QuorumController's
# MAX_RECORDS_PER_USER_OP): the most creations one CreateAcls holds, filters one DeleteAcls
# holds, and ACLs one DeleteAcls removes.
MAX_PER_REQUEST = MAX_RECORDS_PER_USER_OP
# String bounds. No topic name is longer than 249 characters in Kafka, so no longer TOPIC
# pattern could apply to one. Other resource names (groups, transactional ids, users) and
# principals (a certificate's whole distinguished name, "User:CN=...,OU=...,O=...") get 1,024,
# well past what Kafka's clients and tools derive; a host is an IP address or "*" (255 holds
# any address in text and any DNS name, which Kafka stores but never matches).
MAX_TOPIC_NAME_LENGTH = 249
MAX_NAME_LENGTH = 1_024
MAX_PRINCIPAL_LENGTH = 1_024
MAX_HOST_LENGTH = 255


class AclBinding(NamedTuple):
    """One ACL: a resource pattern and an access control entry. Plain ints and strings, so the
    controller's journal and dump hold plain tuples."""

    resource_type: int
    name: str
    pattern_type: int
    principal: str  # "User:alice", or "User:*" for every user
    host: str  # an IP address, or "*"
    operation: int
    permission: int


class AclBindingFilter(NamedTuple):
    """DescribeAcls and DeleteAcls select bindings with this (Kafka's AclBindingFilter): None
    and the ANY codes match anything; MATCH matches the bindings that apply to the name."""

    resource_type: int
    name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, binding: AclBinding) -> bool:
        return self._pattern_matches(binding) and (
            (self.principal is None or self.principal == binding.principal)
            and (self.host is None or self.host == binding.host)
            and self.operation in (AclOperation.ANY, binding.operation)
            and self.permission in (PermissionType.ANY, binding.permission)
        )

    def _pattern_matches(self, binding: AclBinding) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        if self.resource_type not in (ResourceType.ANY, binding.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, binding.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, binding.pattern_type):
            return self.name == binding.name
        if binding.pattern_type == PatternType.LITERAL:  # MATCH
            return binding.name in (self.name, WILDCARD)
        return self.name.startswith(binding.name)  # MATCH against a PREFIXED binding


def unknown_codes(
    resource_type: int, pattern_type: int, operation: int, permission: int
) -> list[str]:
    """Which codes Kafka reads as UNKNOWN (0, or none it knows): a request that carries one
    fails to parse, and Kafka closes its connection."""
    return [
        f"{kind} {code}"
        for kind, code, known in (
            ("resource type", resource_type, ResourceType),
            ("pattern type", pattern_type, PatternType),
            ("operation", operation, AclOperation),
            ("permission type", permission, PermissionType),
        )
        if code == 0 or code not in known._value2member_map_
    ]


def creation_error(binding: AclBinding) -> str | None:
    """Why Kafka refuses to create this binding (INVALID_REQUEST), None if it may be created:
    the broker's checks (AclApis), then the controller's (AclControlManager.validateNewAcl).
    A principal not written "Type:name" is refused too: Kafka takes it and then fails every
    authorization that reads it."""
    kind = binding.resource_type
    if kind == ResourceType.CLUSTER and binding.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not binding.name:
        return "Invalid empty resource name"
    if kind == ResourceType.ANY:
        return "Invalid resourceType ANY"
    limit = MAX_TOPIC_NAME_LENGTH if kind == ResourceType.TOPIC else MAX_NAME_LENGTH
    too_long = _too_long(f"{ResourceType(kind).name} resource name", binding.name, limit)
    if too_long:
        return too_long
    if not binding.host:
        return "Invalid empty host"
    too_long = _too_long("Principal", binding.principal, MAX_PRINCIPAL_LENGTH) or _too_long(
        "Host", binding.host, MAX_HOST_LENGTH
    )
    if too_long:
        return too_long
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {PatternType(binding.pattern_type).name}"
    if binding.operation == AclOperation.ANY:
        return "Invalid operation ANY"
    if binding.permission not in (PermissionType.ALLOW, PermissionType.DENY):
        return f"Invalid permissionType {PermissionType(binding.permission).name}"
    principal_type, colon, principal_name = binding.principal.partition(":")
    if not (principal_type and colon and principal_name):
        return (
            f"expected a string in format principalType:principalName but got {binding.principal}"
        )
    return None


def filter_error(selected: AclBindingFilter) -> str | None:
    """Why a DescribeAcls or DeleteAcls filter is refused (INVALID_REQUEST): a string longer
    than any binding may hold. A DeleteAcls's filters are journaled by the controller."""
    return (
        _too_long("Resource name filter", selected.name, MAX_NAME_LENGTH)
        or _too_long("Principal filter", selected.principal, MAX_PRINCIPAL_LENGTH)
        or _too_long("Host filter", selected.host, MAX_HOST_LENGTH)
    )


def _too_long(what: str, value: str | None, limit: int) -> str | None:
    if value is None or len(value) <= limit:
        return None
    return f"{what} of {len(value)} characters is longer than the maximum of {limit}"


class AclRefused(Exception):
    """The controller applied an ACL command and changed nothing: every creation or filter in
    it is answered with this error."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def select(bindings: Iterable[tuple[Any, ...]], selected: AclBindingFilter) -> list[AclBinding]:
    """The bindings the filter matches, in the order given (DescribeAcls, off the loop)."""
    return [b for b in map(AclBinding._make, bindings) if selected.matches(b)]
