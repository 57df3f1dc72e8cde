"""Share groups for end-to-end tests: a group that starts at the earliest offset (set as
Kafka's users set it, a group config through IncrementalAlterConfigs), confluent-kafka's
ShareConsumer, and a topic to read."""

from __future__ import annotations

import uuid

from confluent_kafka import ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from support import records as R


def share_group(cluster, earliest: bool = True) -> str:
    group = f"share-{uuid.uuid4().hex[:8]}"
    if earliest:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        resource = ConfigResource(
            ResourceType.GROUP,
            group,
            incremental_configs=[
                ConfigEntry(
                    "share.auto.offset.reset",
                    "earliest",
                    incremental_operation=AlterConfigOpType.SET,
                )
            ],
        )
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
