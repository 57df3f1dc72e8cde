"""The admin API's SCRAM users (`raftlog user`), as Redpanda's rpk manages them: how the first
user gets in before any Kafka listener lets an unauthenticated client change anything. Every
route needs the admin token, listing included: user names are not for anyone who can reach
the port. A password is salted here and dropped; only the derived keys go to the controller."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from raftlog.common.errors import ErrorCode
from raftlog.security import scram
from raftlog.security.scram import DEFAULT_MECHANISM, MECHANISMS, MIN_ITERATIONS
from raftlog.security.users import Removal, UserAdmin, upsertion_from_password

MAX_BODY_BYTES = 64 * 1024


def add_routes(
    app: web.Application, users: UserAdmin, check_token: Callable[[web.Request], None]
) -> None:
    async def listing(request: web.Request) -> web.Response:
        check_token(request)
        described = await users.describe()
        text = await asyncio.to_thread(
            lambda: json.dumps({"users": {d.name: d.mechanisms for d in described}})
        )
        return web.Response(text=text, content_type="application/json")

    async def upsert(request: web.Request) -> web.Response:
        """Checked as AlterUserScramCredentials checks (Kafka's bounds) before any hashing;
        the password is salted in a thread: PBKDF2 of up to 16384 rounds is milliseconds."""
        check_token(request)
        body = await _body(request)
        name, password = body.get("name"), body.get("password")
        mechanism = body.get("mechanism", DEFAULT_MECHANISM)
        iterations = body.get("iterations", MIN_ITERATIONS)
        if not isinstance(name, str) or not isinstance(password, str) or not password:
            raise web.HTTPBadRequest(text="name and password (strings) are required\n")
        if mechanism not in MECHANISMS:
            raise web.HTTPBadRequest(text=f"mechanism must be one of {', '.join(MECHANISMS)}\n")
        if isinstance(iterations, bool) or not isinstance(iterations, int):
            raise web.HTTPBadRequest(text="iterations must be a whole number\n")
        problem = scram.check_user_name(name) or scram.check_iterations(mechanism, iterations)
        if problem is not None:
            return _answer(ErrorCode.unacceptable_credential, problem, {})
        upsertion = await asyncio.to_thread(
            upsertion_from_password, name, mechanism, password, iterations
        )
        [result] = await users.alter([], [upsertion])
        return _answer(result.error, result.message, {"name": name, "mechanism": mechanism})

    async def delete(request: web.Request) -> web.Response:
        check_token(request)
        name = request.match_info["name"]
        have = users.mechanisms(name)
        if have is None:
            raise web.HTTPNotFound(text=f"no user {name}\n")
        wanted = request.query.getall("mechanism", list(have))
        unknown = [m for m in wanted if m not in MECHANISMS]
        if unknown:
            raise web.HTTPBadRequest(text=f"unknown mechanism {', '.join(unknown)}\n")
        [result] = await users.alter([Removal(name, MECHANISMS[m]) for m in wanted], [])
        return _answer(result.error, result.message, {"name": name, "deleted": wanted})

    app.router.add_get("/v1/users", listing)
    app.router.add_post("/v1/users", upsert)
    app.router.add_delete("/v1/users/{name}", delete)


async def _body(request: web.Request) -> dict[str, Any]:
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise web.HTTPRequestEntityTooLarge(MAX_BODY_BYTES, request.content_length)
    try:
        body = await request.json()
    except ValueError:
        raise web.HTTPBadRequest(text="the body must be a JSON object\n") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="the body must be a JSON object\n")
    return body


def _answer(error: ErrorCode, message: str | None, done: dict[str, Any]) -> web.Response:
    if error == ErrorCode.none:
        return web.json_response(done)
    status = {
        ErrorCode.resource_not_found: 404,
        ErrorCode.request_timed_out: 503,
    }.get(error, 400)
    return web.json_response({"error": error.name, "message": message}, status=status)
