"""SaslHandshake (17): the client names its SASL mechanism. After v1, SaslAuthenticate frames
carry the SASL tokens; after v0 (which older librdkafka needs advertised before it does SASL
at all) the tokens come as bare size-prefixed frames (kafka_api/connection.py)."""

from __future__ import annotations

from typing import Any

from kafka_api.codec import build, response_module
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode
from raftlog.security.sasl import Stage

API_KEY = 17
MIN_VERSION = 0
MAX_VERSION = 1


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    session = ctx.sasl
    if session is None or session.stage is not Stage.HANDSHAKE:
        # Not a SASL listener, or already past the handshake (no re-authentication).
        error = ErrorCode.illegal_sasl_state
        mechanisms: tuple[str, ...] = ()
    elif session.handshake(request.mechanism, raw=ctx.api_version == 0):
        error, mechanisms = ErrorCode.none, session.mechanisms
    else:
        session.stage = Stage.FAILED  # Kafka closes the connection after this answer
        error, mechanisms = ErrorCode.unsupported_sasl_mechanism, session.mechanisms
    return build(m.SaslHandshakeResponse, error_code=error, mechanisms=mechanisms)
