"""The admin HTTP listener of a node whose config has no admin_token: every change is
refused before it reaches a handler (served over real HTTP on loopback)."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

from raftlog.admin import AdminServer


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
