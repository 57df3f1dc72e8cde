"""The consume proxy's HTTP face (aiohttp): read, acknowledge and cancel, one record or a
batch, as JSON. openapi.json beside this module describes it and is served at
/v1/openapi.json. Every body is bounded and checked before use; a bad one gets a 4xx and
never reaches the cluster. Bodies and answers past INLINE_JSON_BYTES are parsed and
serialized in a worker thread: a megabyte of JSON (or 500 records to encode) would hold the
event loop for milliseconds. Smaller ones stay on the loop, where they take microseconds and
the hand-off to a thread would cost more than the work."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from importlib import resources
from typing import Any

from aiohttp import web

from consume_proxy.member import ACCEPT, RELEASE, Record
from consume_proxy.service import (
    MAX_READ_TIMEOUT_MS,
    MAX_RECORDS_PER_READ,
    ConsumeProxy,
    ProxyError,
)
from raftlog.common.http_listener import DEFAULT_LIMITS, HttpLimits, HttpListener, HttpStats

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024
INLINE_JSON_BYTES = 16 * 1024  # bodies and answers up to this size are (de)serialized inline
MAX_SETTLE_RECORDS = 1000
MAX_NAME = 255
DEFAULT_READ_TIMEOUT_MS = 1000


def app(proxy: ConsumeProxy) -> web.Application:
    application = web.Application(client_max_size=MAX_BODY_BYTES)
    handlers = _Handlers(proxy)
    application.router.add_post("/v1/share/{group}/read", handlers.read)
    application.router.add_post("/v1/share/{group}/acknowledge", handlers.acknowledge)
    application.router.add_post("/v1/share/{group}/cancel", handlers.cancel)
    application.router.add_get("/v1/openapi.json", handlers.openapi)
    return application


class ProxyServer:
    """The proxy on its own port: every node runs one, and `raftlog proxy` runs one alone."""

    def __init__(
        self,
        proxy: ConsumeProxy,
        host: str,
        port: int,
        limits: HttpLimits = DEFAULT_LIMITS,
        stats: HttpStats | None = None,
    ) -> None:
        """`limits`: the node's http.* settings (`raftlog proxy`: their defaults)."""
        self.proxy = proxy
        self._listener = HttpListener("consume proxy", app(proxy), host, port, limits, stats=stats)

    async def start(self) -> None:
        await self._listener.start()

    async def close(self) -> None:
        await self._listener.close()
        await self.proxy.close()


class _Handlers:
    def __init__(self, proxy: ConsumeProxy) -> None:
        self._proxy = proxy
        self._openapi = resources.files("consume_proxy").joinpath("openapi.json").read_bytes()

    async def openapi(self, _request: web.Request) -> web.Response:
        return web.Response(body=self._openapi, content_type="application/json")

    async def read(self, request: web.Request) -> web.Response:
        try:
            group = _group(request)
            body = await _body(request)
            topic = _name(body, "topic")
            max_records = _int(body, "max_records", 1, 1, MAX_RECORDS_PER_READ)
            timeout_ms = _int(body, "timeout_ms", DEFAULT_READ_TIMEOUT_MS, 0, MAX_READ_TIMEOUT_MS)
            pending = body.get("pending_timeout_ms")
            if pending is not None and (not isinstance(pending, int) or isinstance(pending, bool)):
                raise ProxyError(400, "pending_timeout_ms must be an integer")
            text = body.get("text", False)
            if not isinstance(text, bool):
                raise ProxyError(400, "text must be true or false")
            records = await self._proxy.read(group, topic, max_records, timeout_ms, pending)
        except ProxyError as e:
            return _error(e)
        if sum(_size(r) for r in records) <= INLINE_JSON_BYTES:
            answer = _records_json(records, text)
        else:
            answer = await asyncio.to_thread(_records_json, records, text)
        return web.Response(body=answer, content_type="application/json")

    async def acknowledge(self, request: web.Request) -> web.Response:
        return await self._settle(request, ACCEPT)

    async def cancel(self, request: web.Request) -> web.Response:
        return await self._settle(request, RELEASE)

    async def _settle_one(
        self, group: str, target: tuple[str, int, int], kind: int
    ) -> ProxyError | None:
        try:
            await self._proxy.settle(group, *target, kind)
        except ProxyError as e:
            return e
        return None

    async def _settle(self, request: web.Request, kind: int) -> web.Response:
        """One record ({topic, partition, offset}) or a batch ({records: [...]}): 200 when
        every one was settled, else the first failure's status, with each record's."""
        try:
            group = _group(request)
            body = await _body(request)
            items = body.get("records", [body]) if "records" in body else [body]
            if not isinstance(items, list) or not 1 <= len(items) <= MAX_SETTLE_RECORDS:
                raise ProxyError(400, f"records must be a list of 1..{MAX_SETTLE_RECORDS}")
            targets = [_target(item) for item in items]
        except ProxyError as e:
            return _error(e)
        # all at once: a node's acknowledgements of one turn go in one ShareAcknowledge
        outcomes = await asyncio.gather(*(self._settle_one(group, t, kind) for t in targets))
        results: list[dict[str, Any]] = []
        status = 200
        for (topic, partition, offset), error in zip(targets, outcomes, strict=True):
            result: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset}
            if error is None:
                result["status"] = 200
            else:
                result.update(status=error.status, error=error.message)
                status = error.status if status == 200 else status
            results.append(result)
        if "records" not in body:
            if status != 200:
                return web.json_response({"error": results[0]["error"]}, status=status)
            return web.json_response({})
        return web.json_response({"results": results}, status=status)


def _error(e: ProxyError) -> web.Response:
    return web.json_response({"error": e.message}, status=e.status)


def _group(request: web.Request) -> str:
    group = request.match_info["group"]
    if not group or len(group) > MAX_NAME:
        raise ProxyError(400, f"a group id is 1..{MAX_NAME} characters")
    return group


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        raw = await request.read()  # at most MAX_BODY_BYTES (client_max_size)
    except web.HTTPRequestEntityTooLarge as e:
        raise ProxyError(413, f"a body is at most {MAX_BODY_BYTES} bytes") from e
    try:
        body = (
            json.loads(raw)
            if len(raw) <= INLINE_JSON_BYTES
            else await asyncio.to_thread(json.loads, raw)
        )
    except (ValueError, RecursionError) as e:
        # ValueError: not JSON or not UTF-8; RecursionError: nested deeper than the
        # interpreter's recursion limit (100,000 "[" used to escape as a 500 and a traceback)
        problem = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        log.info(
            "consume proxy: %s %s from %s: 400, the body is not JSON (%s)",
            request.method,
            request.rel_url.raw_path,
            request.remote,
            problem,
        )
        raise ProxyError(400, f"the body is not JSON: {problem}") from e
    if not isinstance(body, dict):
        raise ProxyError(400, "the body must be a JSON object")
    return body


def _name(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        raise ProxyError(400, f"{key} must be a string of 1..{MAX_NAME} characters")
    return value


def _int(body: dict[str, Any], key: str, default: int | None, low: int, high: int) -> int:
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ProxyError(400, f"{key} must be an integer in {low}..{high}")
    return value


def _target(item: object) -> tuple[str, int, int]:
    if not isinstance(item, dict):
        raise ProxyError(400, "a record is an object {topic, partition, offset}")
    return (
        _name(item, "topic"),
        _int(item, "partition", None, 0, 2**31 - 1),
        _int(item, "offset", None, 0, 2**63 - 1),
    )


def _size(r: Record) -> int:
    """About what a record adds to an answer, before base64."""
    fields = (r.key, r.value, *(v for _, v in r.headers))
    return 200 + sum(len(f) for f in fields if f is not None) + sum(len(k) for k, _ in r.headers)


def _records_json(records: list[Record], text: bool) -> bytes:
    return json.dumps({"records": [_record(r, text) for r in records]}).encode()


def _record(r: Record, text: bool) -> dict[str, Any]:
    """Bytes as base64, or as text when asked for and every field is UTF-8."""
    fields = [r.key, r.value, *(v for _, v in r.headers)]
    as_text = text and all(_utf8(b) for b in fields)

    def encode(data: bytes | None) -> str | None:
        if data is None:
            return None
        return data.decode() if as_text else base64.b64encode(data).decode()

    return {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "key": encode(r.key),
        "value": encode(r.value),
        "headers": [{"key": k, "value": encode(v)} for k, v in r.headers],
        "timestamp": r.timestamp,
        "delivery_count": r.delivery_count,
        "encoding": "text" if as_text else "base64",
    }


def _utf8(data: bytes | None) -> bool:
    if data is None:
        return True
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True
