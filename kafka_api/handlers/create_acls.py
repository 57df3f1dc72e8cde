"""CreateAcls (30): new ACL bindings, stored by the controller. Needs ALTER on the cluster;
answers SECURITY_DISABLED while no authorizer is configured; each binding Kafka would refuse
gets INVALID_REQUEST and the others are created. A request of more than MAX_PER_REQUEST
creations is refused whole (POLICY_VIOLATION) before any is read, and the controller refuses
the whole command (POLICY_VIOLATION) if the cluster would hold more than MAX_ACLS. Reading,
checking and answering are proportional to the request: they run in a thread. v0 (sarama
1.22's CreateACL; kafka_api/legacy/create_acls_v0.py) has no pattern type: its ACLs are LITERAL, as
Kafka 3.9 reads it."""

from __future__ import annotations

import asyncio
from typing import Any

from kafka_api.codec import Encoded, build, encode_off_loop, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from kafka_api.handlers.acl_wire import binding, refusal, refused_alike, too_many, unread_refusal
from raftlog.api.values import AclChange
from raftlog.common.errors import ErrorCode
from raftlog.security.acl import AclBinding, creation_error

API_KEY = 30
MIN_VERSION = 0  # sarama 1.22 sends v0 (Kafka 3.9 and Redpanda serve it; Kafka 4 does not)
MAX_VERSION = 3
WHAT = "ACL creations"


async def handle(ctx: RequestContext, request: Any) -> Encoded:
    m = response_module(API_KEY, ctx.api_version)
    creations = request.creations
    oversized = too_many(len(creations), WHAT)
    checked = None if oversized else await asyncio.to_thread(_checked, creations)
    refused = refusal(ctx, oversized)
    if refused is not None:
        return _refused(m, len(creations), *refused)
    assert checked is not None
    valid = [b for b, problem in checked if problem is None]
    change = await ctx.broker.create_acls(valid) if valid else AclChange()
    results = [
        (change.error, change.message) if problem is None else (ErrorCode.invalid_request, problem)
        for _, problem in checked
    ]
    return await encode_off_loop(_answer, m, results)


def _checked(creations: Any) -> list[tuple[AclBinding, str | None]]:
    """Each creation as a binding, with why Kafka refuses it (None if it may be created)."""
    return [(b, creation_error(b)) for b in map(binding, creations)]


def _refused(m: Any, count: int, error: ErrorCode, message: str | None) -> Encoded:
    return refused_alike(
        m.CreateAclsResponse,
        count,
        message,
        lambda text: build(m.AclCreationResult, error_code=error, error_message=text),
    )


refusal_unread = unread_refusal(API_KEY, WHAT, _refused)


def _answer(m: Any, results: list[tuple[ErrorCode, str | None]]) -> Any:
    return build(
        m.CreateAclsResponse,
        throttle_time=NO_THROTTLE,
        results=tuple(
            build(m.AclCreationResult, error_code=error, error_message=message)
            for error, message in results
        ),
    )
