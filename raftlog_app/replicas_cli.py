"""Replicas moved by the operator (issue 44), through the same reassignments a Kafka tool sends
(AlterPartitionReassignments, raftlog/cluster/reassignment.py), with progress on the terminal.

`raftlog cluster decommission NODE`: every replica a live node holds moves to the other nodes,
and a node that is a controller voter is replaced in the controller quorum by a node that
observes it (raftlog/controller/voters.py: the observer is added first, then the node removed).
Each goes to the node holding the fewest replicas so far among those on a rack the
partition's other replicas do not use (any node if there is none); a replica that was its
partition's preferred leader hands that place to the next one. The node's leaderships leave
with its replicas (a leader being removed hands over first). The node itself is not removed:
it then holds nothing, and can be stopped. A node that is gone for good (its disk lost) is
replaced the same way: its replicas are made again on the live nodes, which copy them from
the partitions' leaders.

`raftlog cluster rebalance`: replicas move from the nodes holding the most to those holding
the fewest until no two differ by more than one (a node added later takes its share), onto
the move that leaves its partition on the most racks; then each partition's replicas are
reordered, which needs no copy, so every node is the preferred leader of as many partitions
as any other, give or take one.

Both print their progress until no move is left: the moves done, and the bytes the moves
still have to copy (raftlog's own figure, which Kafka's ListPartitionReassignments has no
field for: each move's leader gives it on its admin port, /v1/reassignments).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from raftlog.common.errors import ConfigError
from raftlog.config.node_config import parse_address
from raftlog_app.local_nodes import ADMIN_OFFSET

POLL_SECONDS = 1.0
SAY_SECONDS = 5.0  # the bytes still to copy are said again this often while they change
ADMIN_TIMEOUT_S = 5.0
RETIRE_TIMEOUT_S = 150.0  # two voter changes, each up to the node's 60 s
CHUNK = 1000  # partitions per AlterPartitionReassignments request

Key = tuple[str, int]


def plan(
    node: int, racks: Mapping[int, str | None], replicas: Mapping[Key, list[int]]
) -> dict[Key, list[int]]:
    """New replica lists for the partitions `node` holds, over the other brokers of `racks`."""
    others = sorted(b for b in racks if b != node)
    load = Counter(b for held in replicas.values() for b in held if b != node)
    moves: dict[Key, list[int]] = {}
    for key in sorted(replicas):
        held = replicas[key]
        if node not in held:
            continue
        staying = [b for b in held if b != node]
        used = {racks.get(b) for b in staying}
        free = [b for b in others if b not in staying]
        if not free:
            raise ConfigError(
                f"{key[0]}-{key[1]} has replicas on every other node: no node can take node "
                f"{node}'s; add a node first (`raftlog cluster add-node`)"
            )
        fresh = [b for b in free if racks.get(b) not in used] or free
        to = min(fresh, key=lambda b: (load[b], b))
        load[to] += 1
        moves[key] = staying + [to] if held[0] == node else [to if b == node else b for b in held]
    return moves


def balance(
    racks: Mapping[int, str | None], replicas: Mapping[Key, list[int]]
) -> dict[Key, list[int]]:
    """New replica lists that even out the replicas per node (within one), then the preferred
    leaders (first replicas) per node (within one where the replica sets allow it)."""
    lists = {key: list(held) for key, held in replicas.items()}
    nodes = sorted(racks)
    load = Counter({n: 0 for n in nodes})
    load.update(b for held in lists.values() for b in held if b in racks)
    while True:
        most = max(nodes, key=lambda n: (load[n], n))
        least = min(nodes, key=lambda n: (load[n], n))
        if load[most] - load[least] <= 1:
            break
        choices = [k for k in sorted(lists) if most in lists[k] and least not in lists[k]]
        if not choices:
            break

        def spread(key: Key, most: int = most, least: int = least) -> int:
            """Racks the partition's replicas would be on after the move."""
            return len({racks.get(least if b == most else b) for b in lists[key]})

        key = max(choices, key=spread)
        lists[key] = [least if b == most else b for b in lists[key]]
        load[most] -= 1
        load[least] += 1
    leads = Counter({n: 0 for n in nodes})
    leads.update(held[0] for held in lists.values())
    for _ in range(len(lists)):  # each pass hands one leadership from the most to the fewest
        most = max(nodes, key=lambda n: (leads[n], n))
        fewest = min(nodes, key=lambda n: (leads[n], n))
        if leads[most] - leads[fewest] <= 1:
            break
        found = next((k for k in sorted(lists) if lists[k][0] == most and fewest in lists[k]), None)
        if found is None:
            break
        lists[found] = [fewest, *(b for b in lists[found] if b != fewest)]
        leads[most] -= 1
        leads[fewest] += 1
    return {key: held for key, held in lists.items() if held != replicas[key]}


def admin_addresses(admin: Any, given: str | None) -> list[str]:
    """The nodes' admin listeners: `given` (host:port,...), else each live broker's Kafka
    port + 2000 (`raftlog cluster`'s layout)."""
    if given:
        return [
            f"{h}:{p}" for h, p in (parse_address(a.strip(), "--admin") for a in given.split(","))
        ]
    return [
        f"{b['host']}:{int(b['port']) + ADMIN_OFFSET}"
        for b in admin.describe_cluster()["brokers"]
        if not b.get("is_fenced")
    ]


def to_copy(addresses: Iterable[str], warn: Callable[[str], None]) -> dict[Key, int] | None:
    """The bytes each move still has to copy, as its leader says on its admin port; None
    if no node answered (`warn` is told why)."""
    found: dict[Key, int] = {}
    answered = False
    for address in addresses:
        try:
            url = f"http://{address}/v1/reassignments"
            with urllib.request.urlopen(url, timeout=ADMIN_TIMEOUT_S) as answer:  # noqa: S310
                moves = json.load(answer)["moves"]
        except (OSError, ValueError, KeyError) as e:
            warn(f"admin {address}: {e}")
            continue
        answered = True
        for move in moves:
            found[(str(move["topic"]), int(move["partition"]))] = int(move["bytes_remaining"])
    return found if answered else None


def size_text(nbytes: int) -> str:
    """Bytes for a person: 0 B, 512 B, 1.5 kB, 340.2 MB, 1.07 GB (powers of 1000)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.{2 if unit == 'GB' else 1}f} {unit}"
    return f"{nbytes} B"


class Copying:
    """The progress lines' bytes still to copy, from the nodes' admin ports; once no node
    answers it says so once and shows nothing more."""

    def __init__(self, addresses: list[str], say: Callable[[str], None]) -> None:
        self._addresses = addresses
        self._say = say
        self._failed: list[str] = []

    def text(self, keys: Iterable[Key]) -> str:
        if self._addresses and not self._failed:
            found = to_copy(self._addresses, self._failed.append)
            if found is not None:
                self._failed.clear()
                total = sum(found.get(k, 0) for k in keys)
                return f", {size_text(total)} still to copy"
            self._say(f"(bytes still to copy not shown: {'; '.join(self._failed)})")
        return ""


def decommission(
    admin: Any,
    node: int,
    timeout: float,
    say: Callable[[str], None] = print,
    admin_ports: str | None = None,
    admin_token: str | None = None,
) -> int:
    """Moves every replica off `node` and waits for the moves to end, then takes it out of
    the controller's voters if it is one (0), or says why not. `admin_ports`: the nodes'
    admin listeners (admin_addresses); `admin_token`: theirs, for the voter change."""
    brokers, replicas = _cluster(admin)
    addresses = admin_addresses(admin, admin_ports)
    gone = node not in brokers
    voter = node in controller_voters(addresses, say)
    if gone and not voter and not any(node in held for held in replicas.values()):
        raise ConfigError(
            f"node {node} is neither a live broker ({sorted(brokers)}), a replica nor a "
            f"controller voter"
        )
    if gone:
        say(
            f"node {node} is not live: its replicas are made again on the live nodes, copied from their leaders"
        )
    moves = plan(node, {**brokers, node: None}, replicas)
    if not moves:
        say(f"node {node} holds no replica")
    else:
        say(f"moving {len(moves)} replicas off node {node}")
        copying = Copying(addresses, say)
        if not _move(admin, moves, timeout, say, f"moved off node {node}", copying):
            return 1
    if voter and not retire_voter(addresses, node, admin_token, say):
        return 1
    say(f"node {node} holds no replica now; it can be stopped")
    return 0


def controller_voters(addresses: Iterable[str], say: Callable[[str], None]) -> set[int]:
    """The controller's voters, as the first node that answers on its admin port says."""
    for address in addresses:
        try:
            url = f"http://{address}/v1/status"
            with urllib.request.urlopen(url, timeout=ADMIN_TIMEOUT_S) as answer:  # noqa: S310
                return {int(v) for v in json.load(answer)["controller_voters"]}
        except (OSError, ValueError, KeyError, TypeError) as e:
            say(f"admin {address}: {e}")
    say("no node's admin port answered: the controller's voters are unknown")
    return set()


def retire_voter(
    addresses: Iterable[str], node: int, token: str | None, say: Callable[[str], None]
) -> bool:
    """Asks a node (the first that answers) to take `node` out of the controller's voters, a
    live observer taking its place first; says what was done or why not."""
    say(f"node {node} is a controller voter: replacing it in the controller quorum")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    for address in addresses:
        url = f"http://{address}/v1/controller/voters/{node}/retire"
        request = urllib.request.Request(url, data=b"", headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=RETIRE_TIMEOUT_S) as answer:  # noqa: S310
                result = json.load(answer)
        except urllib.error.HTTPError as e:
            reason = e.read(1024).decode(errors="replace").strip()
            if e.code in (401, 403):
                reason += " (give the nodes' admin_token: --admin-token or RAFTLOG_ADMIN_TOKEN)"
            say(f"the controller's voters are unchanged: {reason}")
            return False
        except (OSError, ValueError) as e:
            say(f"admin {address}: {e}")
            continue
        for line in result.get("done", []):
            say(str(line))
        say("controller voters: " + ", ".join(str(v) for v in result.get("voters", [])))
        return True
    say("no node's admin port answered: the controller's voters are unchanged")
    return False


def rebalance(
    admin: Any, timeout: float, say: Callable[[str], None] = print, admin_ports: str | None = None
) -> int:
    """Evens out replicas and preferred leaders per node; waits for the moves to end (0)."""
    brokers, replicas = _cluster(admin)
    moves = balance(brokers, replicas)
    if not moves:
        say("balanced already")
        return 0
    say(f"moving or reordering the replicas of {len(moves)} partitions")
    copying = Copying(admin_addresses(admin, admin_ports), say)
    if not _move(admin, moves, timeout, say, "done", copying):
        return 1
    load = Counter(b for held in {**replicas, **moves}.values() for b in held)
    say("replicas per node now: " + ", ".join(f"{n}: {load[n]}" for n in sorted(brokers)))
    return 0


def _cluster(admin: Any) -> tuple[dict[int, str | None], dict[Key, list[int]]]:
    """The live brokers with their racks, and every partition's replicas."""
    brokers = {
        int(b["broker_id"]): b.get("rack")
        for b in admin.describe_cluster()["brokers"]
        if not b.get("is_fenced")
    }
    replicas = {
        (t["name"], int(p["partition_index"])): [int(r) for r in p["replica_nodes"]]
        for t in admin.describe_topics()
        for p in t["partitions"]
    }
    return brokers, replicas


def _move(
    admin: Any,
    moves: dict[Key, list[int]],
    timeout: float,
    say: Callable[[str], None],
    what: str,
    copying: Copying,
) -> bool:
    """Sends the moves and waits until none of them is in progress, saying how many are done
    and the bytes they still have to copy; False if `timeout` ran out first (the moves go
    on)."""
    from kafka import TopicPartition

    keys = sorted(moves)
    for i in range(0, len(keys), CHUNK):
        chunk = {TopicPartition(*k): moves[k] for k in keys[i : i + CHUNK]}
        refused = {tp: e for tp, e in admin.alter_partition_reassignments(chunk).items() if e}
        if refused:
            first = next(iter(refused.items()))
            raise ConfigError(f"{len(refused)} moves refused, e.g. {first[0]}: {first[1]}")
    deadline = time.monotonic() + timeout
    said, said_at, line = -1, 0.0, ""
    while True:
        listed = {(tp.topic, tp.partition) for tp in admin.list_partition_reassignments()}
        moving = listed & set(moves)
        done = len(moves) - len(moving)
        if not moving:
            say(f"  {done} of {len(moves)} {what}")
            return True
        now = time.monotonic()
        if done != said or now - said_at >= SAY_SECONDS:
            new = f"  {done} of {len(moves)} {what}" + copying.text(moving)
            if new != line:
                say(new)
            said, said_at, line = done, now, new
        if time.monotonic() >= deadline:
            say(f"{len(moving)} moves still under way after {timeout:.0f}s (they go on)")
            return False
        time.sleep(POLL_SECONDS)
