"""`raftlog share list|describe`: share groups (KIP-932) as an operator sees them.

Membership comes through the Kafka protocol, as Kafka's own tools get it: ListGroups (type
"share") from every broker, ShareGroupDescribe from the group's coordinator. The state of
each partition (start offset, records in flight, acknowledged, archived, lag) lives with the
partition's leader, so it comes from each node's admin port (`/v1/share-groups/{group}`);
Kafka has no API that carries it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, TextIO

from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest

from consume_proxy.client import ClusterClient, KafkaUnavailable, make
from raftlog.config.node_config import parse_address
from raftlog_app.kafka_command import table
from raftlog_app.local_nodes import ADMIN_OFFSET

ADMIN_TIMEOUT_S = 10.0


def admin_addresses(bootstrap: str, admin: str | None) -> list[str]:
    """--admin as given, else each bootstrap broker's port + 2000 (`raftlog cluster`'s)."""
    if admin:
        return admin.split(",")
    found = []
    for address in bootstrap.split(","):
        host, port = parse_address(address, "--bootstrap")
        found.append(f"{host}:{port + ADMIN_OFFSET}")
    return found


def _client(bootstrap: str) -> ClusterClient:
    return ClusterClient([parse_address(a, "--bootstrap") for a in bootstrap.split(",")])


async def _list(bootstrap: str) -> list[tuple[str, str]]:
    cluster = _client(bootstrap)
    try:
        await cluster.refresh()
        found: dict[str, str] = {}
        for node in sorted(cluster.brokers):
            conn = await cluster.connection(node)
            answer = await conn.request(
                make(ListGroupsRequest, states_filter=(), types_filter=("share",))
            )
            for g in answer.groups:
                found[g.group_id] = g.group_state
        return sorted(found.items())
    finally:
        cluster.close()


async def _describe(bootstrap: str, group: str) -> Any:
    cluster = _client(bootstrap)
    try:
        coordinator = await cluster.coordinator(group)
        conn = await cluster.connection(coordinator)
        answer = await conn.request(
            make(ShareGroupDescribeRequest, group_ids=(group,), include_authorized_operations=False)
        )
        return answer.groups[0]
    finally:
        cluster.close()


def _partitions(addresses: list[str], group: str) -> list[dict[str, Any]]:
    """Every node's view of the partitions it leads; the newest leader's wins a duplicate."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for address in addresses:
        quoted = urllib.parse.quote(group, safe="")
        url = f"http://{address}/v1/share-groups/{quoted}"
        try:
            with urllib.request.urlopen(url, timeout=ADMIN_TIMEOUT_S) as answer:
                for p in json.load(answer)["partitions"]:
                    found[(p["topic"], p["partition"])] = p
        except (urllib.error.URLError, OSError) as e:
            print(f"warning: admin {address}: {e}", file=sys.stderr)
    return [found[k] for k in sorted(found)]


def share_list(bootstrap: str, out: TextIO = sys.stdout) -> int:
    try:
        groups = asyncio.run(_list(bootstrap))
    except KafkaUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    rows = [["GROUP", "STATE"], *([g, s] for g, s in groups)]
    table(rows, out)
    return 0


def share_describe(
    bootstrap: str, group: str, admin: str | None, as_json: bool, out: TextIO = sys.stdout
) -> int:
    try:
        described = asyncio.run(_describe(bootstrap, group))
    except KafkaUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if described.error_code != 0:
        print(f"error: {described.error_message or described.error_code}", file=sys.stderr)
        return 1
    members = [
        {
            "member_id": m.member_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "member_epoch": m.member_epoch,
            "subscribed": list(m.subscribed_topic_names),
            "assignment": {t.topic_name: list(t.partitions) for t in m.assignment.topic_partitions},
        }
        for m in described.members
    ]
    partitions = _partitions(admin_addresses(bootstrap, admin), group)
    if as_json:
        doc = {
            "group": group,
            "state": described.group_state,
            "group_epoch": described.group_epoch,
            "assignor": described.assignor_name,
            "members": members,
            "partitions": partitions,
        }
        print(json.dumps(doc, indent=2), file=out)
        return 0
    print(
        f"group {group}: {described.group_state}, epoch {described.group_epoch}, "
        f"assignor {described.assignor_name}, {len(members)} members",
        file=out,
    )
    rows = [["MEMBER", "CLIENT", "HOST", "EPOCH", "PARTITIONS"]]
    for m in members:
        assigned = ",".join(f"{t}-{p}" for t, ps in sorted(m["assignment"].items()) for p in ps)
        rows.append(
            [m["member_id"], m["client_id"], m["client_host"], str(m["member_epoch"]), assigned]
        )
    table(rows, out)
    print(file=out)
    rows = [
        [
            "TOPIC",
            "PARTITION",
            "START-OFFSET",
            "HIGH-WATERMARK",
            "IN-FLIGHT",
            "ACKED",
            "ARCHIVED",
            "LAG",
        ]
    ]
    for p in partitions:
        counts = p["in_flight"]
        rows.append(
            [
                p["topic"],
                str(p["partition"]),
                str(p["start_offset"]),
                str(p["high_watermark"]),
                str(counts.get("ACQUIRED", 0) + counts.get("AVAILABLE", 0)),
                str(counts.get("ACKNOWLEDGED", 0)),
                str(counts.get("ARCHIVED", 0)),
                str(p["lag"]),
            ]
        )
    table(rows, out)
    return 0
