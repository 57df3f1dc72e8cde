"""`raftlog topic create|list|describe`: topics through Kafka's admin API, as kafka-topics
does, with the progress of a large creation and the bytes a moving partition still has to copy."""

from __future__ import annotations

import argparse
import sys
import time

from kafka.errors import KafkaError as ClientError

from raftlog.common.errors import ConfigError
from raftlog_app import client_config

# How long `topic create` waits for every partition to have a leader, showing progress.
LEADER_WAIT = 120.0


def _admin(bootstrap: str):  # noqa: ANN202 - kafka-python has no stubs
    return client_config.admin(bootstrap, "raftlog-cli", request_timeout_ms=10_000)


def topic_create(bootstrap: str, args: argparse.Namespace) -> int:
    from kafka.admin import NewTopic

    if not 1 <= args.partitions < 2**31 or not 1 <= args.replication_factor < 2**15:
        raise ConfigError(
            "--partitions must be from 1 to 2147483647 and --replication-factor from 1 to 32767"
        )
    configs = {}
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--config expects KEY=VALUE, got {item!r}")
        configs[key] = value
    admin = _admin(bootstrap)
    try:
        # A 1 ms timeout (kafka-python reads 0 as "the default"): answered once the
        # controller has committed the topic, not after the broker's wait for leaders, which
        # a thousand partitions outlasted the request timeout in (the topic existed, and the
        # command said it had failed).
        admin.create_topics(
            [NewTopic(args.name, args.partitions, args.replication_factor, topic_configs=configs)],
            timeout_ms=1,
        )
        leaderless = _wait_for_leaders(admin, args.name, args.partitions)
    except Exception as e:  # kafka-python raises one class per Kafka error code
        print(f"raftlog: could not create {args.name}: {e}", file=sys.stderr)
        return 1
    finally:
        admin.close()
    print(
        f"created {args.name}: {args.partitions} partitions, replication factor "
        f"{args.replication_factor}"
    )
    if leaderless:
        print(
            f"raftlog: {leaderless} partitions of {args.name} have no leader yet after "
            f"{LEADER_WAIT:.0f} s; `raftlog topic describe {args.name}` shows them",
            file=sys.stderr,
        )
    return 0


def _wait_for_leaders(admin, name: str, partitions: int) -> int:  # noqa: ANN001 - kafka-python
    """Polls Metadata until every partition has a leader or LEADER_WAIT passes; says how far
    it got once a second on stderr. Returns how many partitions are still leaderless."""
    start = time.monotonic()
    shown = start
    while True:
        described = admin.describe_topics([name])
        led = sum(p["leader_id"] >= 0 for t in described for p in t["partitions"])
        now = time.monotonic()
        if led >= partitions or now - start > LEADER_WAIT:
            return partitions - led
        if now - shown >= 1.0:
            print(f"{name}: {led}/{partitions} partitions led", file=sys.stderr, flush=True)
            shown = now
        time.sleep(0.2)


def topic_list(bootstrap: str) -> int:
    admin = _admin(bootstrap)
    try:
        for name in sorted(admin.list_topics()):
            print(name)
    finally:
        admin.close()
    return 0


def topic_describe(bootstrap: str, args: argparse.Namespace) -> int:
    """Each partition's leader, replicas and ISR, and for a partition moving (KIP-455) the
    replicas its move adds and removes (ListPartitionReassignments; left out, with a line on
    stderr, when the principal may not describe the cluster) and the bytes it still has to
    copy (its leader's admin port: Kafka's API has no field for it)."""
    from raftlog_app import replicas_cli

    admin = _admin(bootstrap)
    moving: dict[int, dict[str, list[int]]] = {}
    copying: dict[tuple[str, int], int] | None = None
    try:
        (topic,) = admin.describe_topics([args.name])
        if not topic["error_code"]:
            indexes = [p["partition_index"] for p in topic["partitions"]]
            try:
                listed = admin.list_partition_reassignments({args.name: indexes})
                moving = {tp.partition: move for tp, move in listed.items()}
            except ClientError as e:
                print(f"raftlog: moves in progress not shown: {e}", file=sys.stderr)
        if moving:
            failed: list[str] = []
            try:
                addresses = replicas_cli.admin_addresses(admin, args.admin)
            except ClientError as e:
                failed, addresses = [str(e)], []
            copying = replicas_cli.to_copy(addresses, failed.append)
            if copying is None:
                print(f"raftlog: bytes still to copy not shown: {failed}", file=sys.stderr)
    finally:
        admin.close()
    if topic["error_code"]:
        print(f"raftlog: {args.name}: Kafka error {topic['error_code']}", file=sys.stderr)
        return 1
    line = f"topic {args.name}  partitions {len(topic['partitions'])}"
    print(line + (f"  moving {len(moving)}" if moving else ""))
    for p in sorted(topic["partitions"], key=lambda p: p["partition_index"]):
        move = moving.get(p["partition_index"])
        key = (args.name, p["partition_index"])
        print(
            f"  partition {p['partition_index']}  leader {p['leader_id']}  "
            f"epoch {p['leader_epoch']}  replicas {p['replica_nodes']}  isr {p['isr_nodes']}"
            + (
                f"  moving: adding {move['adding_replicas']} removing {move['removing_replicas']}"
                if move
                else ""
            )
            + (
                f"  to copy {replicas_cli.size_text(copying.get(key, 0))}"
                if move and copying is not None
                else ""
            )
        )
    return 0
