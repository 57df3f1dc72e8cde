"""Share groups for end-to-end tests: a group that starts at the earliest offset (set as
Kafka's users set it, a group config through IncrementalAlterConfigs), confluent-kafka's
ShareConsumer, a topic to read, and raw share requests."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from confluent_kafka import ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from kio.index import load_request_schema, load_response_schema

from support import records as R
from support import wire as W


def share_group(cluster, earliest: bool = True, name: str | None = None, **configs: str) -> str:
    """A new group's name, with its group configs set (`configs`: more of them, dots
    written as underscores: share_isolation_level="read_committed")."""
    group = name or f"share-{uuid.uuid4().hex[:8]}"
    settings = {k.replace("_", "."): v for k, v in configs.items()}
    if earliest:
        settings["share.auto.offset.reset"] = "earliest"
    if settings:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in settings.items()
        ]
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(30)
    return group


def share_consumer(cluster, group: str, explicit: bool = False, **conf: object) -> ShareConsumer:
    return ShareConsumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit" if explicit else "implicit",
            **conf,
        }
    )


def share_topic(
    cluster, name: str, partitions: int, count: int, per_batch: int = 10_000
) -> list[bytes]:
    """`count` records; batches of at most `per_batch` (a share fetch takes whole batches)."""
    cluster.create_topic(name, partitions=partitions, replication_factor=3)
    recs = R.make_records(name, count, partitions)
    extra = {"batch.num.messages": per_batch}
    out = R.produce_confluent(cluster.bootstrap, name, recs, timeout=60, extra=extra)
    assert len(out.acked) == len(recs), out.failed[:3]
    return sorted(r.value for r in recs)


# --------------------------------------------------------------------------- raw requests
# What no real client sends: share requests from member ids that never joined, and
# subscriptions to internal topics.

SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 78, 79
UNKNOWN_MEMBER_ID = 25
INVALID_REQUEST = 42
SHARE_SESSION_NOT_FOUND = 122


def topic_id(w: W.KafkaWire, topic: str) -> uuid.UUID:
    request = W.build(
        load_request_schema(W.METADATA, 12),
        {
            "topics": [{"name": topic, "topic_id": W._ZERO_UUID}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    (found,) = w.request(request).topics
    return found.topic_id


def share_fetch(group: str, member: str, epoch: int, topic: uuid.UUID, partition: int) -> Any:
    """A ShareFetch v1 opening (epoch 0) or continuing a session on one partition."""
    return W.build(
        load_request_schema(SHARE_FETCH, 1),
        {
            "group_id": group,
            "member_id": member,
            "share_session_epoch": epoch,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "max_records": 500,
            "batch_size": 500,
            "topics": [
                {
                    "topic_id": topic,
                    "partitions": [{"partition_index": partition, "acknowledgement_batches": []}],
                }
            ],
            "forgotten_topics_data": [],
        },
    )


def pipelined(w: W.KafkaWire, requests: Sequence[Any], window: int = 200) -> list[Any]:
    """The answers to `requests`, sent `window` at a time on one connection (the broker takes
    512 in flight per connection; more would stall both sides' buffers)."""
    answers: list[Any] = []
    for start in range(0, len(requests), window):
        chunk = requests[start : start + window]
        ids = [w.next_correlation_id() for _ in chunk]
        w.send_bytes(
            b"".join(W.encode_request(r, i, w.client_id) for r, i in zip(chunk, ids, strict=True))
        )
        for request, expected in zip(chunk, ids, strict=True):
            response = load_response_schema(request.__api_key__, request.__version__)
            got, body = W.decode_response(w.recv_frame(), response)
            assert got == expected, (got, expected)
            answers.append(body)
    return answers


def share_acknowledge(group: str, member: str, epoch: int) -> Any:
    return W.build(
        load_request_schema(SHARE_ACKNOWLEDGE, 1),
        {"group_id": group, "member_id": member, "share_session_epoch": epoch, "topics": []},
    )


def share_heartbeat(group: str, member: str, epoch: int, topics: Sequence[str] | None) -> Any:
    return W.build(
        load_request_schema(SHARE_GROUP_HEARTBEAT, 1),
        {
            "group_id": group,
            "member_id": member,
            "member_epoch": epoch,
            "rack_id": None,
            "subscribed_topic_names": None if topics is None else list(topics),
        },
    )
