"""Kafka's ACLs: bindings, the filters DescribeAcls and DeleteAcls take, and the authorizer
that judges a request by them (Kafka's StandardAuthorizer). Codes are Kafka's wire codes
(org.apache.kafka.common.acl and .resource), so bindings cross the ACL APIs unchanged.

The bindings are controller state (raftlog.controller: `acls`, changed in place). Beside them
each node keeps an AclIndex, the same bindings by resource type and name, changed with them:
a change costs what it adds or removes, not what the cluster holds; DeleteAcls finds its
matches through it, and the authorizer judges by it and caches its decisions, dropping them on
every change, so a produce or fetch pays one dictionary lookup per topic."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from enum import IntEnum
from typing import Any, NamedTuple

from raftlog.common.errors import ErrorCode
from raftlog.config.limits import MAX_RECORDS_PER_USER_OP
from raftlog.config.node_config import ConfigError

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

# Kafka's controller writes at most 10,000 records for one user operation (QuorumController's
# MAX_RECORDS_PER_USER_OP): the most creations one CreateAcls holds, filters one DeleteAcls
# holds, and ACLs one DeleteAcls removes.
MAX_PER_REQUEST = MAX_RECORDS_PER_USER_OP
# The ACLs a cluster holds (Kafka sets none). Every node keeps them all in memory, with their
# index, and in the controller's snapshot: 100,000 take about 65 MB per node with names of
# typical length, about 300 MB with every string at its bound below. That is ten full
# CreateAcls, far more than per-principal, per-resource ACLs need (prefixes and wildcards
# cover the rest); at 1.1 million, nodes stalled for seconds on every change and listing.
MAX_ACLS = 100_000
# The stored ACLs one DeleteAcls's filters may look at together, when the controller applies
# it on every node: a filter naming its resource looks only at the ACLs of that name (and, for
# MATCH, of its prefixes and "*", each prefix length looked up counting as one), one without a
# name at every ACL of its resource type.
MAX_EXAMINED = MAX_ACLS
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


Acls = dict[tuple[Any, ...], None]  # the controller's state: plain tuples, in creation order


class _Section:
    """One resource type's bindings, by how they name resources. Each name's bindings are a
    dict (in creation order) so one leaves in O(1); prefix_lengths counts the PREFIXED names
    of each length, so a name is looked up only at the prefix lengths some binding has."""

    __slots__ = ("literal", "prefix_lengths", "prefixed")

    def __init__(self) -> None:
        self.literal: dict[str, dict[AclBinding, None]] = {}
        self.prefixed: dict[str, dict[AclBinding, None]] = {}
        self.prefix_lengths: dict[int, int] = {}

    def add(self, binding: AclBinding) -> None:
        if binding.pattern_type == PatternType.PREFIXED:
            size = len(binding.name)
            self.prefix_lengths[size] = self.prefix_lengths.get(size, 0) + 1
            self.prefixed.setdefault(binding.name, {})[binding] = None
        else:
            self.literal.setdefault(binding.name, {})[binding] = None

    def remove(self, binding: AclBinding) -> None:
        by_name = self.prefixed if binding.pattern_type == PatternType.PREFIXED else self.literal
        named = by_name[binding.name]
        del named[binding]
        if not named:
            del by_name[binding.name]
        if by_name is self.prefixed:
            size = len(binding.name)
            self.prefix_lengths[size] -= 1
            if not self.prefix_lengths[size]:
                del self.prefix_lengths[size]

    def all(self, literal: bool = True, prefixed: bool = True) -> Iterator[dict[AclBinding, None]]:
        if literal:
            yield from self.literal.values()
        if prefixed:
            yield from self.prefixed.values()

    def applying_to(self, name: str) -> Iterator[dict[AclBinding, None]]:
        """The bindings whose pattern covers `name`: its literal ones, the wildcard ones and
        those of every prefix of it."""
        found = self.literal.get(name)
        if found:
            yield found
        if name != WILDCARD:
            found = self.literal.get(WILDCARD)
            if found:
                yield found
        for size in self.prefix_lengths:
            if size <= len(name):
                found = self.prefixed.get(name[:size])
                if found:
                    yield found

    def selected_by(self, selected: AclBindingFilter) -> Iterator[dict[AclBinding, None]]:
        """The bindings the filter's resource pattern may match (a superset of them)."""
        pattern, name = selected.pattern_type, selected.name
        if name is None:
            yield from self.all(
                literal=pattern != PatternType.PREFIXED, prefixed=pattern != PatternType.LITERAL
            )
        elif pattern == PatternType.MATCH:
            yield from self.applying_to(name)
        else:
            for by_name, kind in (
                (self.literal, PatternType.LITERAL),
                (self.prefixed, PatternType.PREFIXED),
            ):
                found = by_name.get(name) if pattern in (PatternType.ANY, kind) else None
                if found:
                    yield found


class AclIndex:
    """The controller's ACL mapping (`source`: plain tuples, in creation order) and the same
    bindings by resource type and name. CreateAcls and DeleteAcls change both in place, so a
    change costs what it adds or removes. pysyncobj replaces the mapping wholesale when it
    loads a snapshot (at start, or a follower far behind): `synced` notices another mapping
    and rebuilds from it, then only. `version` moves on every change (the authorizer's sign to
    drop its cached decisions)."""

    def __init__(self, source: Callable[[], Acls]) -> None:
        self._source = source
        self._indexed: Acls | None = None  # the mapping the sections were built from
        self._sections: dict[int, _Section] = {}
        self.version = 0

    def synced(self) -> AclIndex:
        source = self._source()
        if source is not self._indexed:
            self._indexed = source
            self._sections = {}
            for entry in source:
                self._add(AclBinding(*entry))
            self.version += 1
        return self

    def bindings(self) -> list[tuple[Any, ...]]:
        """Every binding, in the order they were created: a copy (about 1 ms per 100,000), to
        be filtered off the loop."""
        return list(self._mapping())

    def section(self, resource_type: int) -> _Section | None:
        return self.synced()._sections.get(resource_type)

    def create(self, bindings: Iterable[tuple[Any, ...]]) -> None:
        """Adds the bindings not there yet (CreateAcls); one that exists already stays as it
        is, as in Kafka. Raises AclRefused, changing nothing, if the cluster would then hold
        more than MAX_ACLS."""
        acls = self._mapping()
        new = {tuple(entry): None for entry in bindings if tuple(entry) not in acls}
        if len(acls) + len(new) > MAX_ACLS:
            raise AclRefused(
                ErrorCode.policy_violation,
                f"Excessively large number of ACLs: the cluster holds {len(acls)} and may hold "
                f"at most {MAX_ACLS}; these {len(new)} new ones would exceed it",
            )
        for entry in new:
            acls[entry] = None
            self._add(AclBinding(*entry))
        if new:
            self.version += 1

    def delete(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """Deletes the bindings any filter matches (DeleteAcls) and returns each filter's
        matches, all judged against the bindings before this command: a binding two filters
        match is reported by both, as in Kafka. Raises AclRefused, deleting nothing, when the
        filters match more than MAX_PER_REQUEST bindings (Kafka's INVALID_REQUEST) or would
        look at more than MAX_EXAMINED bindings and prefix lengths."""
        self.synced()
        matched: list[list[AclBinding]] = []
        gone: dict[AclBinding, None] = {}
        examined = 0
        for selected in filters:
            found = []
            for section in self._sections_for(selected.resource_type):
                if selected.name is not None and selected.pattern_type == PatternType.MATCH:
                    examined += len(section.prefix_lengths)
                for named in section.selected_by(selected):
                    examined += len(named)
                    if examined > MAX_EXAMINED:
                        raise AclRefused(
                            ErrorCode.policy_violation,
                            "Excessively broad DeleteAcls: its filters would look at more than "
                            f"{MAX_EXAMINED} ACLs; name the resources",
                        )
                    for binding in named:
                        if selected.matches(binding):
                            found.append(binding)
                            gone[binding] = None
                    if len(gone) > MAX_PER_REQUEST:
                        raise AclRefused(
                            ErrorCode.invalid_request,
                            f"Cannot remove more than {MAX_PER_REQUEST} acls in a single delete "
                            "operation.",
                        )
            matched.append(found)
        acls = self._mapping()
        for binding in gone:
            del acls[tuple(binding)]
            self._sections[binding.resource_type].remove(binding)
        if gone:
            self.version += 1
        return matched

    def _mapping(self) -> Acls:
        self.synced()
        assert self._indexed is not None
        return self._indexed

    def _sections_for(self, resource_type: int) -> list[_Section]:
        if resource_type == ResourceType.ANY:
            return list(self._sections.values())
        section = self._sections.get(resource_type)
        return [section] if section is not None else []

    def _add(self, binding: AclBinding) -> None:
        section = self._sections.get(binding.resource_type)
        if section is None:
            section = self._sections[binding.resource_type] = _Section()
        section.add(binding)


class Authorizer:
    """Kafka's StandardAuthorizer over the controller's bindings. A DENY that applies wins over
    any ALLOW; an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, one of
    ALTER_CONFIGS also DESCRIBE_CONFIGS, and ALL allows (or denies) everything. Super users are
    allowed everything; a resource no binding applies to (whoever it names) is allowed to
    everyone only with allow.everyone.if.no.acl.found."""

    def __init__(
        self, super_users: Iterable[str], allow_if_no_acl: bool, acls: Callable[[], AclIndex]
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._acls = acls
        self._index: AclIndex | None = None
        self._version = -1  # the index's version the cached decisions were made at
        self._cache: dict[tuple[str, str, int, int, str | None], bool] = {}

    def authorize(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        """May `principal`, connected from `host`, do `operation` on the resource?"""
        index = self._refresh()
        key = (principal, host, operation, resource_type, name)
        allowed = self._cache.get(key)
        if allowed is None:
            allowed = self._decide(index, principal, host, operation, resource_type, name)
            self._remember(key, allowed)
        return allowed

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: int, resource_type: int
    ) -> bool:
        """May the principal do `operation` on at least one resource of the type (Kafka's
        Authorizer.authorizeByResourceType, KIP-679: what InitProducerId asks of WRITE on
        topics)? Super users and the no-ACL default are judged on a made-up name first."""
        index = self._refresh()
        key = (principal, host, operation, resource_type, None)
        allowed = self._cache.get(key)
        if allowed is None:
            allowed = self._decide(
                index, principal, host, operation, resource_type, "hardcode"
            ) or self._any_allowed(index, principal, host, operation, resource_type)
            self._remember(key, allowed)
        return allowed

    def bindings(self) -> list[tuple[Any, ...]]:
        """Every binding, in the order they were created (AclIndex.bindings)."""
        return self._refresh().bindings()

    def _refresh(self) -> AclIndex:
        index = self._acls().synced()
        if index is not self._index or index.version != self._version:
            self._index, self._version = index, index.version
            self._cache.clear()
        return index

    def _remember(self, key: tuple[str, str, int, int, str | None], allowed: bool) -> None:
        if len(self._cache) >= CACHE_ENTRIES:
            self._cache.clear()
        self._cache[key] = allowed

    def _decide(
        self,
        index: AclIndex,
        principal: str,
        host: str,
        operation: int,
        resource_type: int,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        section = index.section(resource_type)
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

    def _any_allowed(
        self, index: AclIndex, principal: str, host: str, operation: int, resource_type: int
    ) -> bool:
        """The rest of Kafka's authorizeByResourceType: an ALLOW of the operation on some
        pattern that no DENY covers whole (a DENY on a literal name covers that name; one on a
        prefix covers every name and prefix that starts with it; one on "*" covers all). Looks
        at every binding of the type, once per principal, host and operation between changes."""
        denied: dict[int, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allowed: list[AclBinding] = []
        wildcard_allowed = False
        section = index.section(resource_type)
        named = section.all() if section is not None else iter(())
        for binding in (binding for bindings in named for binding in bindings):
            if (
                binding.host not in (host, WILDCARD)
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


def select(bindings: Iterable[tuple[Any, ...]], selected: AclBindingFilter) -> list[AclBinding]:
    """The bindings the filter matches, in the order given (DescribeAcls, off the loop)."""
    return [b for b in map(AclBinding._make, bindings) if selected.matches(b)]


def authorizer_for(
    setting: Callable[[str], Any], acls: Callable[[], AclIndex]
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
    return Authorizer(super_users, bool(setting("allow.everyone.if.no.acl.found")), acls)
