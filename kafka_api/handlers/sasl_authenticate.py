"""SaslAuthenticate (36): one SASL token each way. A failure is answered with
SASL_AUTHENTICATION_FAILED after Kafka's connection.failed.authentication.delay.ms, and the
connection is then closed (kafka_api/connection.py)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kafka_api.codec import build, response_module
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode
from raftlog.security.sasl import Stage

API_KEY = 36
MIN_VERSION = 0
MAX_VERSION = 2

FAILED_AUTHENTICATION_DELAY_S = 0.1  # Kafka's connection.failed.authentication.delay.ms
NO_SESSION_LIFETIME = datetime.timedelta(0)  # no re-authentication is asked for (KIP-368)


async def handle(ctx: RequestContext, request: Any) -> Any:
    m = response_module(API_KEY, ctx.api_version)
    session = ctx.sasl
    if session is None or session.stage is not Stage.AUTHENTICATE:
        if session is not None:
            session.stage = Stage.FAILED
        return _response(m, ErrorCode.illegal_sasl_state, "SaslAuthenticate out of turn", b"")
    step = await session.authenticate(request.auth_bytes)
    if step.error is not None:
        await asyncio.sleep(FAILED_AUTHENTICATION_DELAY_S)
        return _response(m, ErrorCode.sasl_authentication_failed, step.error, b"")
    return _response(m, ErrorCode.none, None, step.challenge)


def _response(m: Any, error: ErrorCode, message: str | None, token: bytes) -> Any:
    return build(
        m.SaslAuthenticateResponse,
        error_code=error,
        error_message=message,
        auth_bytes=token,
        session_lifetime=NO_SESSION_LIFETIME,
    )
