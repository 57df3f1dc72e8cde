"""Kafka's StandardAuthorizer over the node's ACL index (acl_index.py): a request judged by
the bindings, its decisions cached and dropped on every change, so a produce or fetch pays one
dictionary lookup per topic; and the node's authorizer as its [broker] settings configure it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from raftlog.common.errors import ConfigError
from raftlog.security.acl import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)
from raftlog.security.acl_index import AclIndex

log = logging.getLogger(__name__)

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

# Decisions kept before the cache starts over: bounded whatever the mix of principals, hosts
# and resource names.
CACHE_ENTRIES = 20_000


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
