"""The admin HTTP port of running nodes: reads are open, changes need the node's admin_token.

A loop of unauthenticated transfer-leadership calls forced 54 leader changes in 20 s; now a
call without the token, or with a wrong one, changes nothing (a node whose config has no
admin_token refuses every change: tests/unit/test_admin_auth.py).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from raftlog.config.node_config import NodeConfig

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOPIC = "admin"


def post(url: str, token: str | None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(url, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as r:  # noqa: S310 - loopback only
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_changes_need_the_admin_token_and_reads_stay_open(module_cluster) -> None:
    cluster = module_cluster
    cluster.create_topic(TOPIC, partitions=1, replication_factor=3)
    leader, term = cluster.leader(TOPIC, 0)
    node = cluster.node(leader)
    url = f"http://{node.admin}/v1/partitions/{TOPIC}/0/transfer-leadership"
    token = NodeConfig.load(node.config).admin_token
    assert token
    for given in (None, "wrong", token + "x"):
        status, text = post(url, given)
        assert status == 401 and "admin_token" in text
    assert cluster.leader(TOPIC, 0) == (leader, term)
    with urllib.request.urlopen(node.status_url, timeout=10) as r:  # noqa: S310
        assert json.load(r)["node_id"] == leader
    status, text = post(url, token)
    assert status == 200, text
    assert json.loads(text)["leader"] != leader


def test_a_transfer_with_no_follower_to_take_over_is_refused(module_cluster) -> None:
    """It answered 200 with the leader unchanged: an operator read it as done."""
    cluster = module_cluster
    cluster.create_topic("alone", partitions=1, replication_factor=1)
    leader, term = cluster.leader("alone", 0)
    node = cluster.node(leader)
    url = f"http://{node.admin}/v1/partitions/alone/0/transfer-leadership"
    status, text = post(url, NodeConfig.load(node.config).admin_token)
    assert status == 409 and "no follower" in text, (status, text)
    assert cluster.leader("alone", 0) == (leader, term)
