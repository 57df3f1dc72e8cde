"""Kafka's ACLs: bindings, the filters DescribeAcls and DeleteAcls take, and the authorizer
that judges a request by them (Kafka's StandardAuthorizer). Codes are Kafka's wire codes
(org.apache.kafka.common.acl and .resource), so bindings cross the ACL APIs unchanged.

The bindings are controller state (raftlog.controller: `acls`, replaced on every change, never
changed in place); the authorizer caches its decisions and drops them when it sees another
mapping there, so a produce or fetch pays one dictionary lookup per topic."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from enum import IntEnum
from typing import Any, NamedTuple

from raftlog.config import ConfigError

log = logging.getLogger(__name__)


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
# Kafka's authorizer.class.name values that mean "Kafka's ACL authorizer"; "" is none.
AUTHORIZER_CLASSES = frozenset(
    {
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
    }
)

# An ALLOW of these implies DESCRIBE (resp. DESCRIBE_CONFIGS); a DENY implies nothing.
_IMPLY_DESCRIBE = frozenset(
    {
        AclOperation.DESCRIBE,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    }
)
_IMPLY_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

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

# Decisions kept before the cache starts over: bounded whatever the mix of principals, hosts
# and resource names.
CACHE_ENTRIES = 20_000


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


class _Section:
    """One resource type's bindings, by how they name resources."""

    __slots__ = ("literal", "prefixed")

    def __init__(self) -> None:
        self.literal: dict[str, list[AclBinding]] = {}
        self.prefixed: dict[str, list[AclBinding]] = {}

    def applying_to(self, name: str) -> Iterable[list[AclBinding]]:
        """The bindings whose pattern covers `name`: its literal ones, the wildcard ones and
        those of every prefix of it."""
        found = self.literal.get(name)
        if found:
            yield found
        if name != WILDCARD:
            found = self.literal.get(WILDCARD)
            if found:
                yield found
        if self.prefixed:
            for end in range(1, len(name) + 1):
                found = self.prefixed.get(name[:end])
                if found:
                    yield found


class Authorizer:
    """Kafka's StandardAuthorizer over the controller's bindings. A DENY that applies wins over
    any ALLOW; an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, one of
    ALTER_CONFIGS also DESCRIBE_CONFIGS, and ALL allows (or denies) everything. Super users are
    allowed everything; a resource no binding applies to (whoever it names) is allowed to
    everyone only with allow.everyone.if.no.acl.found."""

    def __init__(
        self,
        super_users: Iterable[str],
        allow_if_no_acl: bool,
        bindings: Callable[[], Mapping[tuple[int, str, int, str, str, int, int], object]],
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._source = bindings
        self._seen: object = None  # the mapping the index and the cache were made from
        self._sections: dict[int, _Section] = {}
        self._bindings: list[AclBinding] = []
        self._cache: dict[tuple[str, str, int, int, str | None], bool] = {}

    def authorize(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        """May `principal`, connected from `host`, do `operation` on the resource?"""
        self._refresh()
        key = (principal, host, operation, resource_type, name)
        allowed = self._cache.get(key)
        if allowed is None:
            allowed = self._decide(principal, host, operation, resource_type, name)
            self._remember(key, allowed)
        return allowed

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: int, resource_type: int
    ) -> bool:
        """May the principal do `operation` on at least one resource of the type (Kafka's
        Authorizer.authorizeByResourceType, KIP-679: what InitProducerId asks of WRITE on
        topics)? Super users and the no-ACL default are judged on a made-up name first."""
        self._refresh()
        key = (principal, host, operation, resource_type, None)
        allowed = self._cache.get(key)
        if allowed is None:
            allowed = self._decide(
                principal, host, operation, resource_type, "hardcode"
            ) or self._any_allowed(principal, host, operation, resource_type)
            self._remember(key, allowed)
        return allowed

    def bindings(self, selected: AclBindingFilter | None = None) -> list[AclBinding]:
        """Every binding, or those the filter matches, in the order they were created."""
        self._refresh()
        if selected is None:
            return list(self._bindings)
        return [b for b in self._bindings if selected.matches(b)]

    def _refresh(self) -> None:
        current = self._source()
        if current is self._seen:
            return
        self._seen = current
        self._cache.clear()
        self._bindings = [AclBinding(*entry) for entry in current]
        self._sections = {}
        for binding in self._bindings:
            section = self._sections.get(binding.resource_type)
            if section is None:
                section = self._sections[binding.resource_type] = _Section()
            by_name = (
                section.prefixed
                if binding.pattern_type == PatternType.PREFIXED
                else section.literal
            )
            by_name.setdefault(binding.name, []).append(binding)

    def _remember(self, key: tuple[str, str, int, int, str | None], allowed: bool) -> None:
        if len(self._cache) >= CACHE_ENTRIES:
            self._cache.clear()
        self._cache[key] = allowed

    def _decide(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        section = self._sections.get(resource_type)
        found_any = allowed = False
        if section is not None:
            for bindings in section.applying_to(name):
                found_any = True
                for binding in bindings:
                    verdict = _verdict(binding, principal, host, operation)
                    if verdict is PermissionType.DENY:
                        self._log_denied(principal, host, operation, resource_type, name, binding)
                        return False
                    if verdict is PermissionType.ALLOW:
                        allowed = True
        if not found_any:
            allowed = self.allow_if_no_acl
        if not allowed:
            self._log_denied(principal, host, operation, resource_type, name, None)
        return allowed

    def _any_allowed(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """The rest of Kafka's authorizeByResourceType: an ALLOW of the operation on some
        pattern that no DENY covers whole (a DENY on a literal name covers that name; one on a
        prefix covers every name and prefix that starts with it; one on "*" covers all)."""
        denied: dict[int, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allowed: list[AclBinding] = []
        wildcard_allowed = False
        for binding in self._bindings:
            if (
                binding.resource_type != resource_type
                or binding.host not in (host, WILDCARD)
                or binding.principal not in (principal, WILDCARD_PRINCIPAL)
                or binding.operation not in (operation, AclOperation.ALL)
            ):
                continue
            wildcard = binding.pattern_type == PatternType.LITERAL and binding.name == WILDCARD
            if binding.permission == PermissionType.DENY:
                if wildcard:
                    return False
                denied[binding.pattern_type].add(binding.name)
            elif wildcard:
                wildcard_allowed = True
            else:
                allowed.append(binding)
        if wildcard_allowed:
            return True
        for binding in allowed:
            if (
                binding.pattern_type == PatternType.LITERAL
                and binding.name in denied[PatternType.LITERAL]
            ):
                continue
            name = binding.name
            if not any(
                name[:end] in denied[PatternType.PREFIXED] for end in range(1, len(name) + 1)
            ):
                return True
        return False

    @staticmethod
    def _log_denied(
        principal: str,
        host: str,
        operation: int,
        resource_type: int,
        name: str,
        binding: AclBinding | None,
    ) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "Principal = %s is Denied operation = %s from host = %s on resource = %s:%s "
                "based on %s",
                principal,
                AclOperation(operation).name,
                host,
                ResourceType(resource_type).name,
                name,
                binding or "no ALLOW",
            )


def _verdict(
    binding: AclBinding, principal: str, host: str, operation: int
) -> PermissionType | None:
    """What the binding says about the action (its resource pattern already matched): None
    when it does not speak to this principal, host or operation (Kafka's findResult)."""
    if binding.principal != principal and binding.principal != WILDCARD_PRINCIPAL:
        return None
    if binding.host != WILDCARD and binding.host != host:
        return None
    permission = PermissionType(binding.permission)
    if binding.operation != AclOperation.ALL and binding.operation != operation:
        if permission is not PermissionType.ALLOW:
            return None
        if operation == AclOperation.DESCRIBE:
            if binding.operation not in _IMPLY_DESCRIBE:
                return None
        elif operation == AclOperation.DESCRIBE_CONFIGS:
            if binding.operation not in _IMPLY_DESCRIBE_CONFIGS:
                return None
        else:
            return None
    return permission


def authorizer_for(
    setting: Callable[[str], Any],
    bindings: Callable[[], Mapping[tuple[int, str, int, str, str, int, int], object]],
) -> Authorizer | None:
    """The node's authorizer from its [broker] settings (`setting`: NodeConfig.broker_setting),
    as Kafka configures it; None (every request allowed) while authorizer.class.name is empty."""
    class_name = str(setting("authorizer.class.name")).strip()
    if not class_name:
        return None
    if class_name not in AUTHORIZER_CLASSES:
        raise ConfigError(
            f"[broker] authorizer.class.name: {class_name!r} is not one raftlog has; "
            f"use {' or '.join(sorted(AUTHORIZER_CLASSES))}, or leave it empty"
        )
    super_users = [user.strip() for user in str(setting("super.users")).split(";") if user.strip()]
    return Authorizer(super_users, bool(setting("allow.everyone.if.no.acl.found")), bindings)
