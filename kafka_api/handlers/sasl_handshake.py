"""SaslHandshake (17): the client names its SASL mechanism; SaslAuthenticate frames follow.
Only v1 is served: v0 sent raw SASL tokens outside Kafka framing and is gone from Kafka 4."""

from __future__ import annotations

from typing import Any

from kafka_api.codec import build, response_module
from kafka_api.context import RequestContext
from raftlog.errors import ErrorCode
from raftlog.security.sasl import Stage

API_KEY = 17
MIN_VERSION = 1
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    session = ctx.sasl
    if session is None or session.stage is not Stage.HANDSHAKE:
        # Not a SASL listener, or already past the handshake (no re-authentication).
        error = ErrorCode.illegal_sasl_state
        mechanisms: tuple[str, ...] = ()
    elif session.handshake(request.mechanism):
        error, mechanisms = ErrorCode.none, session.mechanisms
    else:
        session.stage = Stage.FAILED  # Kafka closes the connection after this answer
        error, mechanisms = ErrorCode.unsupported_sasl_mechanism, session.mechanisms
    return build(m.SaslHandshakeResponse, error_code=error, mechanisms=mechanisms)
