"""ApiVersions (18): the version ranges of every registered handler."""

from __future__ import annotations

import functools
import re
from typing import Any

from kafka_api.codec import build, response_module
from kafka_api.common import NO_THROTTLE
from kafka_api.context import RequestContext
from raftlog.common.errors import ErrorCode

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4

# KIP-511: what Kafka accepts as ClientSoftwareName / ClientSoftwareVersion (v3+).
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")

# (api key, min version, max version) of every served API, handed down by the registry
# (kafka_api.handlers) that imports this module, rather than imported back from it.
_advertised: tuple[tuple[int, int, int], ...] = ()


def advertise(versions: list[tuple[int, int, int]]) -> None:
    global _advertised
    _advertised = tuple(versions)
    response.cache_clear()


async def handle(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version >= 3 and not (
        _SOFTWARE.fullmatch(request.client_software_name)
        and _SOFTWARE.fullmatch(request.client_software_version)
    ):
        return response(ctx.api_version, ErrorCode.invalid_request)
    return response(ctx.api_version, ErrorCode.none)


def unsupported_version_response() -> Any:
    """The answer to an ApiVersions version we do not serve: v0, which every client can read,
    with UNSUPPORTED_VERSION and our ranges, so the client retries with a version we have."""
    return response(0, ErrorCode.unsupported_version)


@functools.cache
def response(version: int, error: ErrorCode) -> Any:
    """Immutable and the same for every client, so built once per (version, error)."""
    m = response_module(API_KEY, version)
    api_keys = tuple(
        m.ApiVersion(api_key=key, min_version=low, max_version=high)
        for key, low, high in _advertised
    )
    return build(
        m.ApiVersionsResponse, error_code=error, api_keys=api_keys, throttle_time=NO_THROTTLE
    )
