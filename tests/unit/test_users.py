"""SCRAM users against a real controller state machine (one node, its commands pickled into a
real journal and applied on commit): the bounds on one request, on names and salts, the
cluster's cap on users, Kafka's answers to AlterUserScramCredentials and
DescribeUserScramCredentials, and the admin API's POST /v1/users over real HTTP."""

from __future__ import annotations

import asyncio
import json
import threading
import types
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType
from support.answers import client_reads
from support.broker_stub import BrokerStub
from support.controller_machine import OneNodeController as Controller
from support.raftnet import Clock

import raftlog.controller.syncobj_fork as core
from kafka_api.codec import build
from kafka_api.context import RequestContext
from kafka_api.handlers import alter_user_scram_credentials, describe_user_scram_credentials
from raftlog.common.errors import ErrorCode
from raftlog.controller import compat
from raftlog.node.admin import AdminServer
from raftlog.security import scram
from raftlog.security.scram import MAX_CHANGES_PER_REQUEST, MAX_USERS
from raftlog.security.users import Removal, Upsertion, UserAdmin

DESCRIBE = describe_user_scram_credentials.API_KEY

compat.install()
E = ErrorCode
SHA256, SHA512 = scram.MECHANISMS["SCRAM-SHA-256"], scram.MECHANISMS["SCRAM-SHA-512"]


@pytest.fixture
def controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    clock = Clock()
    monkeypatch.setattr(core, "monotonicTime", clock)
    c = Controller(tmp_path, clock)
    yield c
    c.close()


@pytest.fixture
def users(controller: Controller) -> UserAdmin:
    return UserAdmin(types.SimpleNamespace(controller=controller))  # type: ignore[arg-type]


def upsertion(name: str, salt: bytes = b"salt", mechanism: int = SHA512) -> Upsertion:
    size = 64 if mechanism == SHA512 else 32
    return Upsertion(name, mechanism, 4096, salt, bytes(size))


def errors(results: list[Any]) -> dict[str, ErrorCode]:
    return {r.name: r.error for r in results}


async def test_a_request_over_the_bound_is_refused_whole_before_the_controller(
    users: UserAdmin, controller: Controller
) -> None:
    many = [upsertion(f"u{i}") for i in range(MAX_CHANGES_PER_REQUEST)]
    results = await users.alter([Removal("u0", SHA256)], many)
    assert len(results) == MAX_CHANGES_PER_REQUEST  # one per user, u0 once
    assert set(errors(results).values()) == {E.policy_violation}
    assert f"at most {MAX_CHANGES_PER_REQUEST}." in (results[0].message or "")
    assert controller.commands == [] and controller.state.scram_users == {}

    results = await users.alter([], many)  # exactly the bound
    assert set(errors(results).values()) == {E.none}
    assert len(controller.state.scram_users) == MAX_CHANGES_PER_REQUEST


@pytest.mark.parametrize(
    ("name", "salt", "accepted"),
    [
        ("é" * 127 + "a", b"s", True),  # 255 bytes of UTF-8
        ("é" * 128, b"s", False),  # 256
        ("", b"s", False),
        ("bob", b"s" * scram.MAX_SALT_BYTES, True),
        ("bob", b"s" * (scram.MAX_SALT_BYTES + 1), False),
        ("bob", b"", False),
    ],
)
async def test_names_and_salts_are_bounded(
    users: UserAdmin, controller: Controller, name: str, salt: bytes, accepted: bool
) -> None:
    """Refused with UNACCEPTABLE_CREDENTIAL, as Kafka refuses an empty name or salt; the
    user's other change in the request is not applied either."""
    [result] = await users.alter([], [upsertion(name, salt), upsertion(name, mechanism=SHA256)])
    assert result.error == (E.none if accepted else E.unacceptable_credential), result
    assert (name in controller.state.scram_users) is accepted


async def test_deleting_an_overlong_name_is_refused_before_the_controller(
    users: UserAdmin, controller: Controller
) -> None:
    [result] = await users.alter([Removal("x" * 100_000, SHA512)], [])
    assert result.error == E.unacceptable_credential and "255" in (result.message or "")
    assert controller.commands == []


async def test_the_cluster_cap_is_judged_where_the_controller_applies(
    users: UserAdmin, controller: Controller
) -> None:
    """MAX_USERS users fit; a request that would add one more stores nothing and each of its
    users gets POLICY_VIOLATION. Two requests proposed together that each fit alone: the
    second applied is refused. Changing or replacing users at the cap still works."""
    for start in range(0, MAX_USERS - 1, MAX_CHANGES_PER_REQUEST):
        stop = min(start + MAX_CHANGES_PER_REQUEST, MAX_USERS - 1)
        results = await users.alter([], [upsertion(f"u{i}") for i in range(start, stop)])
        assert set(errors(results).values()) == {E.none}
    assert len(controller.state.scram_users) == MAX_USERS - 1

    answers = await asyncio.gather(
        users.alter([], [upsertion("late-1")]), users.alter([], [upsertion("late-2")])
    )
    [stored] = [r for [r] in answers if r.error == E.none]
    [refused] = [r for [r] in answers if r.error != E.none]
    assert refused.error == E.policy_violation
    assert f"at most {MAX_USERS} SCRAM users" in (refused.message or "")
    assert stored.name in controller.state.scram_users
    assert refused.name not in controller.state.scram_users

    results = await users.alter([], [upsertion("u1", mechanism=SHA256), upsertion("new")])
    assert errors(results) == {"u1": E.policy_violation, "new": E.policy_violation}
    assert set(controller.state.scram_users["u1"]) == {"SCRAM-SHA-512"}  # nothing applied

    results = await users.alter(
        [Removal("u2", SHA512)], [upsertion("u1", mechanism=SHA256), upsertion("new")]
    )
    assert set(errors(results).values()) == {E.none}  # one out, one in
    assert len(controller.state.scram_users) == MAX_USERS
    assert set(controller.state.scram_users["u1"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}


async def test_a_change_replaces_the_users_mapping_and_leaves_other_users_alone(
    users: UserAdmin, controller: Controller
) -> None:
    """What lets a listing read a shallow copy in a thread while commands apply."""
    await users.alter([], [upsertion("a"), upsertion("b")])
    before = dict(controller.state.scram_users)
    await users.alter([], [upsertion("a", mechanism=SHA256)])
    after = controller.state.scram_users
    assert after["b"] is before["b"] and after["a"] is not before["a"]
    assert set(before["a"]) == {"SCRAM-SHA-512"}
    [missing] = await users.alter([Removal("b", SHA256)], [])
    assert missing.error == E.resource_not_found
    await users.alter([Removal("b", SHA512)], [])
    assert "b" not in controller.state.scram_users and "b" in before


async def test_keys_are_derived_off_the_event_loop(
    users: UserAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[threading.Thread] = []
    derive = scram.from_salted_password

    def recording(*args: Any) -> scram.ScramCredential:
        threads.append(threading.current_thread())
        return derive(*args)

    monkeypatch.setattr(scram, "from_salted_password", recording)
    await users.alter([], [upsertion("a")])
    assert threads and threading.main_thread() not in threads


# --------------------------------------------------------------------------- Kafka's APIs


def ctx(users: UserAdmin) -> RequestContext:
    broker = BrokerStub()
    broker.users = users
    return RequestContext(broker, 0, "c", "10.0.0.1")  # type: ignore[arg-type]


def request(api_key: int, name: str, **values: Any) -> Any:
    m = load_payload_module(api_key, 0, EntityType.request)
    return build(getattr(m, name), **values)


def alter_request(names: list[str]) -> Any:
    m = load_payload_module(alter_user_scram_credentials.API_KEY, 0, EntityType.request)
    return m.AlterUserScramCredentialsRequest(
        deletions=(),
        upsertions=tuple(
            m.ScramCredentialUpsertion(
                name=n, mechanism=SHA512, iterations=4096, salt=b"s", salted_password=bytes(64)
            )
            for n in names
        ),
    )


def describe_request(names: list[str] | None) -> Any:
    m = load_payload_module(describe_user_scram_credentials.API_KEY, 0, EntityType.request)
    users = None if names is None else tuple(m.UserName(name=n) for n in names)
    return m.DescribeUserScramCredentialsRequest(users=users)


async def test_alter_answers_every_user_of_a_request_over_the_bound(
    users: UserAdmin, controller: Controller
) -> None:
    names = [f"u{i}" for i in range(MAX_CHANGES_PER_REQUEST + 1)]
    answer = client_reads(
        await alter_user_scram_credentials.handle(ctx(users), alter_request(names)),
        alter_user_scram_credentials.API_KEY,
        0,
    )
    assert [r.user for r in answer.results] == names
    assert {r.error_code for r in answer.results} == {E.policy_violation}
    assert controller.commands == []
    answer = client_reads(
        await alter_user_scram_credentials.handle(ctx(users), alter_request(["alice"])),
        alter_user_scram_credentials.API_KEY,
        0,
    )
    assert [(r.user, r.error_code) for r in answer.results] == [("alice", E.none)]


async def test_describe_answers_as_kafka(users: UserAdmin) -> None:
    await users.alter([], [upsertion("bob"), upsertion("alice"), upsertion("bob", mechanism=1)])
    handle = describe_user_scram_credentials.handle
    for everyone in (None, []):
        answer = client_reads(await handle(ctx(users), describe_request(everyone)), DESCRIBE, 0)
        assert [r.user for r in answer.results] == ["alice", "bob"]
        assert [(i.mechanism, i.iterations) for i in answer.results[1].credential_infos] == [
            (SHA256, 4096),
            (SHA512, 4096),
        ]
    answer = client_reads(
        await handle(ctx(users), describe_request(["nobody", "bob", "alice", "bob"])), DESCRIBE, 0
    )
    assert [(r.user, r.error_code) for r in answer.results] == [
        ("nobody", E.resource_not_found),
        ("bob", E.duplicate_resource),
        ("alice", E.none),
    ]
    assert answer.results[1].error_message == (
        "Cannot describe SCRAM credentials for the same user twice in a single request: bob"
    )
    answer = client_reads(
        await handle(ctx(users), describe_request([f"u{i}" for i in range(MAX_USERS + 1)])),
        DESCRIBE,
        0,
    )
    assert answer.error_code == E.policy_violation and answer.results == ()
    assert str(MAX_USERS) in (answer.error_message or "")


# --------------------------------------------------------------------------- the admin API


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
    request = urllib.request.Request(
        url,
        method="POST",
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer t0ken", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as r:  # noqa: S310 - loopback only
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        return e.code, json.loads(text) if text.startswith("{") else text


async def test_post_users_checks_kafkas_bounds_before_hashing_and_hashes_in_a_thread(
    users: UserAdmin, controller: Controller, unused_tcp_port: int, monkeypatch
) -> None:
    hashed: list[tuple[int, threading.Thread]] = []
    salt = scram.salted_password

    def recording(mechanism: str, password: str, salt_: bytes, iterations: int) -> bytes:
        hashed.append((iterations, threading.current_thread()))
        return salt(mechanism, password, salt_, iterations)

    monkeypatch.setattr(scram, "salted_password", recording)
    node = types.SimpleNamespace(controller=controller)
    admin = AdminServer(node, None, "127.0.0.1", unused_tcp_port, token="t0ken")  # type: ignore[arg-type]
    await admin.start()
    url = f"http://127.0.0.1:{unused_tcp_port}/v1/users"
    try:
        for body, needle in [
            ({"name": "eve", "password": "pw", "iterations": 10**9}, "between 4096 and 16384"),
            ({"name": "eve", "password": "pw", "iterations": 4095}, "between 4096 and 16384"),
            ({"name": "e" * 256, "password": "pw"}, "longer than the 255"),
        ]:
            status, answer = await asyncio.to_thread(post, url, body)
            assert status == 400 and isinstance(answer, dict), answer
            assert answer["error"] == "unacceptable_credential" and needle in answer["message"]
        assert hashed == [] and controller.commands == []

        status, answer = await asyncio.to_thread(
            post, url, {"name": "carol", "password": "pw", "iterations": 8192}
        )
        assert status == 200 and answer == {"name": "carol", "mechanism": "SCRAM-SHA-512"}
        [(iterations, thread)] = hashed
        assert iterations == 8192 and thread is not threading.main_thread()
        assert users.mechanisms("carol") == {"SCRAM-SHA-512": 8192}
    finally:
        await admin.close()
