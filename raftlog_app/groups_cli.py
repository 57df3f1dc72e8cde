"""`raftlog groups list|describe` and `raftlog offsets-topic dump`.

Everything goes through the Kafka protocol, as any client's tools would: kafka-python's
KafkaAdminClient for ListGroups / DescribeGroups / OffsetFetch, its consumer for log end
offsets and for reading `__consumer_offsets`. Records of `__consumer_offsets` are decoded
with the server's own decoder (raftlog.groups.records), so the dump shows exactly what the
coordinator would rebuild its state from.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import struct
import sys
import time
from collections.abc import Iterable
from typing import Any, TextIO

from raftlog.groups import records
from raftlog.groups.offsets_log import TOPIC as OFFSETS_TOPIC
from raftlog_app import client_config
from raftlog_app.kafka_command import admin_call, table

CLIENT_ID = "raftlog-cli"
DUMP_TIMEOUT_S = 60.0


# --------------------------------------------------------------------------- clients


def _admin(bootstrap: str) -> Any:
    return client_config.admin(bootstrap, CLIENT_ID)


def _consumer(bootstrap: str) -> Any:
    from kafka import KafkaConsumer

    return KafkaConsumer(
        bootstrap_servers=bootstrap.split(","),
        group_id=None,
        enable_auto_commit=False,
        client_id=CLIENT_ID,
        request_timeout_ms=30000,
        **client_config.kafka_python(),
    )


# --------------------------------------------------------------------------- groups list


def groups_list(bootstrap: str, out: TextIO = sys.stdout) -> int:
    """Every group the brokers know: id, state and protocol type (ListGroups on each)."""
    groups = admin_call(lambda: _admin(bootstrap), lambda a: a.list_groups(), "cannot list groups")
    if groups is None:
        return 1
    seen: dict[str, dict[str, Any]] = {}
    for g in groups:
        seen.setdefault(str(g["group_id"]), g)
    rows = [["GROUP", "STATE", "PROTOCOL-TYPE"]]
    for gid in sorted(seen):
        g = seen[gid]
        rows.append([gid, str(g.get("group_state") or "-"), str(g.get("protocol_type") or "-")])
    table(rows, out)
    return 0


# --------------------------------------------------------------------------- groups describe


def _assigned(member: dict[str, Any]) -> list[tuple[str, int]]:
    """(topic, partition) pairs of a DescribeGroups member's assignment, whatever shape
    kafka-python left it in (decoded dict, object, or raw consumer-protocol bytes)."""
    a = member.get("member_assignment")
    if a is None or a == b"" or a == "":
        return []
    if hasattr(a, "partitions") and callable(a.partitions):
        return sorted((tp.topic, tp.partition) for tp in a.partitions())
    if isinstance(a, str):
        try:
            a = base64.b64decode(a, validate=True)
        except ValueError:
            return []
    if isinstance(a, bytes | bytearray):
        return _partitions(bytes(a))
    if isinstance(a, dict):
        out: list[tuple[str, int]] = []
        for entry in a.get("assigned_partitions") or a.get("assignment") or []:
            if isinstance(entry, dict):
                topic, parts = entry.get("topic"), entry.get("partitions") or []
            else:
                topic, parts = entry[0], entry[1]
            out.extend((str(topic), int(p)) for p in parts)
        return sorted(out)
    return []


def _partitions(data: bytes) -> list[tuple[str, int]]:
    try:
        return records.assigned_partitions(data)
    except records.RecordError:
        return []


def _end_offsets(bootstrap: str, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    from kafka import TopicPartition

    wanted = [TopicPartition(t, p) for t, p in tps]
    if not wanted:
        return {}
    consumer = _consumer(bootstrap)
    try:
        ends = consumer.end_offsets(wanted, timeout_ms=30000)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): int(off) for tp, off in ends.items()}


def groups_describe(bootstrap: str, group: str, out: TextIO = sys.stdout) -> int:
    """A group's state and members (client id, host, assigned partitions), and per
    partition its committed offset, log end offset and lag (like
    kafka-consumer-groups.sh --describe). Returns 1 if the group does not exist."""
    from kafka.errors import KafkaError

    asked = admin_call(
        lambda: _admin(bootstrap),
        lambda a: (
            a.describe_groups([group]).get(group) or {},
            a.list_group_offsets(group).get(group) or {},
        ),
        f"cannot describe group {group}",
    )
    if asked is None:
        return 1
    described, offsets = asked
    if described.get("error"):
        print(f"raftlog: group {group}: {described['error']}", file=sys.stderr)
        return 1
    state = str(described.get("group_state") or "")
    members = described.get("members") or []
    if state in ("", "Dead") and not members and not offsets:
        print(f"raftlog: group {group} does not exist", file=sys.stderr)
        return 1

    owner: dict[tuple[str, int], dict[str, Any]] = {}
    for m in members:
        for tp in _assigned(m):
            owner[tp] = m
    committed = {(tp.topic, tp.partition): meta for tp, meta in offsets.items() if meta is not None}
    partitions = sorted(set(owner) | set(committed))
    try:
        ends = _end_offsets(bootstrap, partitions)
    except KafkaError as exc:
        print(f"raftlog: no log end offsets ({exc!r}): lag unknown", file=sys.stderr)
        ends = {}

    print(
        f"group {group}  state {state or '-'}  protocol-type "
        f"{described.get('protocol_type') or '-'}  protocol "
        f"{described.get('protocol_data') or '-'}  members {len(members)}",
        file=out,
    )
    print(file=out)
    rows = [["MEMBER-ID", "CLIENT-ID", "HOST", "PARTITIONS"]]
    for m in sorted(members, key=lambda m: str(m.get("member_id"))):
        assigned = ",".join(f"{t}-{p}" for t, p in _assigned(m)) or "-"
        rows.append(
            [
                str(m.get("member_id") or "-"),
                str(m.get("client_id") or "-"),
                str(m.get("client_host") or "-"),
                assigned,
            ]
        )
    table(rows, out)
    print(file=out)
    rows = [["TOPIC", "PARTITION", "COMMITTED-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER-ID"]]
    for tp in partitions:
        meta = committed.get(tp)
        off = int(meta.offset) if meta is not None and int(meta.offset) >= 0 else None
        end = ends.get(tp)
        lag = end - off if end is not None and off is not None else None
        m = owner.get(tp)
        rows.append(
            [
                tp[0],
                str(tp[1]),
                "-" if off is None else str(off),
                "-" if end is None else str(end),
                "-" if lag is None else str(lag),
                str(m.get("member_id")) if m is not None else "-",
            ]
        )
    table(rows, out)
    return 0


# --------------------------------------------------------------------------- offsets-topic dump


def _jsonable(value: Any, field: str = "") -> Any:
    """Decoded records as JSON: dataclasses/objects to dicts, enums to names, bytes to the
    consumer protocol's topics/partitions when they are a member's subscription or
    assignment, otherwise base64."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return value.name.lower()
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        if field == "assignment":
            parts: dict[str, list[int]] = {}
            for t, p in _partitions(raw):
                parts.setdefault(t, []).append(p)
            return {"partitions": parts} if raw else {}
        if field == "subscription":
            topics = _subscription_topics(raw)
            if topics is not None:
                return {"topics": topics}
        return {"base64": base64.b64encode(raw).decode()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _jsonable(getattr(value, f.name), f.name) for f in dataclasses.fields(value)
        }
    if isinstance(value, dict):
        return {str(k): _jsonable(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v, field) for v in value]
    if hasattr(value, "_asdict"):
        return _jsonable(value._asdict(), field)
    if hasattr(value, "__dict__"):
        return {k: _jsonable(v, k) for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)


# The dump's field names are Kafka's schema names in snake_case; other spellings a
# decoder might use are mapped onto them.
_ALIASES = {
    "group_id": "group",
    "topic_name": "topic",
    "partition_index": "partition",
    "committed_offset": "offset",
    "committed_leader_epoch": "leader_epoch",
    "committed_metadata": "metadata",
    "generation_id": "generation",
    "protocol_name": "protocol",
    "leader_id": "leader",
}


def _snake(name: str) -> str:
    out = "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
    return _ALIASES.get(out, out)


def _normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {_snake(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    return value


def _subscription_topics(data: bytes) -> list[str] | None:
    try:
        return records.subscription_topics(data)
    except records.RecordError:
        return None


def _key_type(key: Any) -> str:
    if isinstance(key, records.OffsetCommitKey):
        return "offset_commit"
    if isinstance(key, records.GroupMetadataKey):
        return "group_metadata"
    return "unknown"


def _version(data: bytes | None) -> int | None:
    return struct.unpack_from(">h", data)[0] if data is not None and len(data) >= 2 else None


def decode_offsets_record(key: bytes, value: bytes | None) -> dict[str, Any]:
    """key_type (offset_commit | group_metadata | unknown: a newer protocol's key, which
    readers skip), key and value versions, key and value (None for a tombstone), decoded
    by the coordinator's own record module."""
    try:
        k = records.decode_key(key)
        v = records.decode_value(k, value)
    except records.RecordError as exc:
        return {
            "key_type": "undecodable",
            "error": str(exc),
            "key_version": _version(key),
            "key": {"base64": _b64(key)},
            "value_version": _version(value),
            "value": _b64(value),
        }
    return {
        "key_type": _key_type(k),
        "key_version": _version(key),
        "key": _normalize(_jsonable(k)) if k is not None else {"base64": _b64(key)},
        "value_version": _version(value),
        "value": _normalize(_jsonable(v)) if k is not None else _b64(value),
    }


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def read_offsets_topic(
    bootstrap: str, timeout: float = DUMP_TIMEOUT_S
) -> list[tuple[int, int, bytes, bytes | None]]:
    """(partition, offset, key, value) of every record of `__consumer_offsets` up to its
    current end offsets, in partition and offset order. LookupError if the topic does not
    exist, TimeoutError if it cannot be read to its end in `timeout` seconds."""
    from kafka import TopicPartition

    consumer = _consumer(bootstrap)
    try:
        parts = consumer.partitions_for_topic(OFFSETS_TOPIC)
        if not parts:
            raise LookupError(f"no {OFFSETS_TOPIC} topic (no group has been coordinated yet)")
        tps = [TopicPartition(OFFSETS_TOPIC, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = {tp: int(o) for tp, o in consumer.end_offsets(tps, timeout_ms=30000).items()}
        todo = {tp: end for tp, end in ends.items() if end > consumer.position(tp)}
        found = []
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500, max_records=10000).items():
                for m in msgs:
                    if m.offset < ends[tp]:
                        found.append((tp.partition, m.offset, m.key, m.value))
                if tp in todo and consumer.position(tp) >= todo[tp]:
                    del todo[tp]
        if todo:
            left = {tp.partition: end for tp, end in todo.items()}
            raise TimeoutError(f"{OFFSETS_TOPIC} not read to its end in {timeout:.0f}s: {left}")
    finally:
        consumer.close()
    found.sort(key=lambda r: (r[0], r[1]))
    return found


def offsets_topic_dump(bootstrap: str, out: TextIO = sys.stdout) -> int:
    """One JSON object per `__consumer_offsets` record: partition, offset, key_type
    (offset_commit | group_metadata | unknown), key_version, key, value_version, value
    (null for a tombstone)."""
    from kafka.errors import KafkaError

    try:
        found = read_offsets_topic(bootstrap)
    except (LookupError, TimeoutError, KafkaError) as exc:
        print(f"raftlog: {exc}", file=sys.stderr)
        return 1
    for partition, offset, key, value in found:
        doc = {"partition": partition, "offset": offset, **decode_offsets_record(key, value)}
        print(json.dumps(doc, sort_keys=False), file=out)
    return 0
