"""The admin HTTP listener of a node whose config has no admin_token: every change is
refused before it reaches a handler (served over real HTTP on loopback)."""

from __future__ import annotations

import asyncio
import json
import ssl
import types
import urllib.error
import urllib.request

import pytest

from raftlog.node.admin import AdminServer
from raftlog.security.tls import TlsSettings
from raftlog_app.dev_certs import make_dev_certs


def post(url: str) -> tuple[int, str]:
    request = urllib.request.Request(
        url, method="POST", headers={"Authorization": "Bearer anything"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as r:  # noqa: S310 - loopback only
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def test_a_node_without_an_admin_token_refuses_every_change(unused_tcp_port) -> None:
    admin = AdminServer(None, None, "127.0.0.1", unused_tcp_port)  # type: ignore[arg-type]
    await admin.start()
    try:
        url = f"http://127.0.0.1:{unused_tcp_port}/v1/partitions/t/0/transfer-leadership"
        status, text = await asyncio.to_thread(post, url)
        assert status == 403 and "no admin_token" in text
    finally:
        await admin.close()


def get(url: str, token: str | None, context: ssl.SSLContext | None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as r:  # noqa: S310
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def test_admin_over_tls_and_users_need_the_token(unused_tcp_port, tmp_path) -> None:
    """admin_tls: HTTPS with the node's keystore; the user listing, unlike other reads,
    needs the token."""
    certs = make_dev_certs(tmp_path)
    settings = TlsSettings(keystore=str(certs["node"]))
    users = {"alice": {"SCRAM-SHA-512": ["SCRAM-SHA-512", b"s", b"k", b"k", 4096]}}
    node = types.SimpleNamespace(
        controller=types.SimpleNamespace(state=types.SimpleNamespace(scram_users=users))
    )
    admin = AdminServer(
        node,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        "127.0.0.1",
        unused_tcp_port,
        token="t0ken",
        tls=settings.server_context(),
    )
    await admin.start()
    try:
        base = f"127.0.0.1:{unused_tcp_port}/v1/users"
        trusted = ssl.create_default_context(cafile=str(certs["ca"]))
        status, text = await asyncio.to_thread(get, f"https://{base}", "t0ken", trusted)
        assert status == 200 and json.loads(text) == {"users": {"alice": {"SCRAM-SHA-512": 4096}}}
        status, _ = await asyncio.to_thread(get, f"https://{base}", None, trusted)
        assert status == 401
        status, _ = await asyncio.to_thread(get, f"https://{base}", "wrong", trusted)
        assert status == 401
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP: no answer
            await asyncio.to_thread(get, f"http://{base}", "t0ken", None)
        with pytest.raises(urllib.error.URLError):  # a client that does not trust the CA
            await asyncio.to_thread(get, f"https://{base}", "t0ken", ssl.create_default_context())
    finally:
        await admin.close()
