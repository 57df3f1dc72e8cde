"""What the three ACL APIs share: their wire fields read into raftlog's bindings and filters,
what refuses a change whole, and the bound on entries per request, with the answer to a request
over it made from its entry count alone (the server asks before decoding such a request:
`refusal_unread` in create_acls and delete_acls)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from kafka_api import codec
from kafka_api.authz import DENIED_MESSAGES, Op, authorize_cluster
from kafka_api.codec import Encoded
from kafka_api.context import RequestContext
from kafka_api.errors import CloseConnection
from raftlog.common.errors import ErrorCode
from raftlog.common.limits import excessive
from raftlog.security.acl import (
    MAX_PER_REQUEST,
    AclBinding,
    AclBindingFilter,
    PatternType,
    unknown_codes,
)

NO_AUTHORIZER = "No Authorizer is configured."


def binding(creation: Any) -> AclBinding:
    """A CreateAcls entry; one with a code Kafka does not know cannot be parsed. v0 has no
    pattern type: Kafka reads it as LITERAL."""
    pattern_type = getattr(creation, "resource_pattern_type", PatternType.LITERAL)
    _check_codes(
        creation.resource_type,
        pattern_type,
        creation.operation,
        creation.permission_type,
    )
    return AclBinding(
        int(creation.resource_type),
        creation.resource_name,
        int(pattern_type),
        creation.principal,
        creation.host,
        int(creation.operation),
        int(creation.permission_type),
    )


def binding_filter(entry: Any) -> AclBindingFilter:
    """A DescribeAcls request's or a DeleteAcls entry's filter (their fields are named alike).
    v0 has no pattern type: Kafka reads it as LITERAL, so a v0 filter matches LITERAL ACLs only
    (and the v0 answer, which cannot say a pattern type, names no other)."""
    pattern_type = getattr(entry, "pattern_type_filter", PatternType.LITERAL)
    _check_codes(
        entry.resource_type_filter,
        pattern_type,
        entry.operation,
        entry.permission_type,
    )
    return AclBindingFilter(
        int(entry.resource_type_filter),
        entry.resource_name_filter,
        int(pattern_type),
        entry.principal_filter,
        entry.host_filter,
        int(entry.operation),
        int(entry.permission_type),
    )


def too_many(count: int, what: str) -> str | None:
    """Why a request is refused whole before its entries are read (POLICY_VIOLATION): more
    than Kafka's controller writes for one operation."""
    return excessive(count, what, MAX_PER_REQUEST)


def refusal(ctx: RequestContext, oversized: str | None) -> tuple[ErrorCode, str | None] | None:
    """What a change of ACLs is refused for as a whole, in Kafka's order: who asks, then no
    authorizer, then its size; None if nothing refuses it whole."""
    if not authorize_cluster(ctx, Op.ALTER):
        error = ErrorCode.cluster_authorization_failed
        return error, DENIED_MESSAGES[error]
    if ctx.broker.authorizer is None:
        return ErrorCode.security_disabled, NO_AUTHORIZER
    if oversized is not None:
        return ErrorCode.policy_violation, oversized
    return None


RefuseWhole = Callable[[Any, int, ErrorCode, str | None], Encoded]
RefusalUnread = Callable[[RequestContext, int], Coroutine[Any, Any, Encoded] | None]


def unread_refusal(api_key: int, what: str, refused: RefuseWhole) -> RefusalUnread:
    """A handler's `refusal_unread`: the answer to a request of `count` entries that is
    refused whole for its size, made by refused(response module, count, error, message)
    without reading them; None when the request must be read."""

    async def answer(ctx: RequestContext, count: int, oversized: str) -> Encoded:
        why = refusal(ctx, oversized)
        assert why is not None
        return refused(codec.response_module(api_key, ctx.api_version), count, *why)

    def refusal_unread(ctx: RequestContext, count: int) -> Coroutine[Any, Any, Encoded] | None:
        oversized = too_many(count, what)
        return None if oversized is None else answer(ctx, count, oversized)

    return refusal_unread


def refused_alike(
    response_type: type, count: int, message: str | None, make: Callable[[str | None], Any]
) -> Encoded:
    """The answer to `count` entries refused alike, make(message) each: the message on every
    one, as Kafka answers; past MAX_PER_REQUEST entries (a request refused for its size) on
    the first only, so the answer stays a few bytes per entry whatever the request's size."""
    first = make(message)
    return codec.encode_alike(
        response_type, first, first if count <= MAX_PER_REQUEST else make(None), count
    )


def _check_codes(resource_type: int, pattern_type: int, operation: int, permission: int) -> None:
    """Kafka fails to parse an ACL request with an UNKNOWN code, and closes the connection."""
    unknown = unknown_codes(resource_type, pattern_type, operation, permission)
    if unknown:
        raise CloseConnection(f"ACL request with unknown {', '.join(unknown)}")
