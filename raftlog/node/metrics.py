"""A node's Prometheus metrics, served as `GET /metrics` on its admin port.

Events are counted where they happen, in plain ints (raftlog/common/counters.py for the
partition's and the loop's; listener_metrics.py for the Kafka API's and the HTTP listeners');
everything else is read from the node's state when Prometheus scrapes, by NodeCollector. Each
node has its own CollectorRegistry (tests run several nodes in one process). The metric list and the
cardinality budget (SERIES_PER_REPLICA and the others below) are in docs/metrics.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    Metric,
)
from prometheus_client.exposition import choose_encoder

from raftlog.common.counters import COMMIT_BUCKETS, STALL_BUCKETS
from raftlog.common.http_listener import (
    BAD_REQUEST_STATUSES,
)
from raftlog.node.listener_metrics import (
    COUNTER,
    ERROR_CODES_PER_API,
    GAUGE,
    HISTOGRAM,
    REQUEST_BUCKETS,
    Family,
    KafkaMetrics,
    http_families,
)
from raftlog.raft.driver import FAILURE_SERIES
from raftlog.share.partition_state import RecordState

if TYPE_CHECKING:
    from raftlog.common.http_listener import HttpStats
    from raftlog.node.node import Node
    from raftlog.partition.partition import Partition

# Consumer group lag series per partition (group, topic, partition) a node exports; past it a
# group's lag shows only in its sum. Groups and topics are created by clients.
GROUP_LAG_SERIES = 2000
SHARE_STATES = tuple(s.name for s in RecordState)

# The cardinality budget (docs/metrics.md): series of one node's /metrics.
PROCESS_SERIES = 6  # prometheus_client's ProcessCollector on Linux
# replicas, leaders; Raft counters, groups awake, histogram; loop stalls: histogram, longest
NODE_SERIES = 2 + 4 + 1 + len(COMMIT_BUCKETS) + 3 + len(STALL_BUCKETS) + 3 + 1
# Raft groups that raised and were restarted: none on a healthy node, at most this many.
GROUP_FAILURE_SERIES = FAILURE_SERIES + 1  # the first groups that failed, then OTHER
KAFKA_SERIES = 6  # connections open, total, refused by either cap, evicted; failed logins
# each HTTP listener (admin, consume proxy): connections open, accepted, refused by either cap,
# evicted; malformed requests by status
SERIES_PER_HTTP_LISTENER = 5 + len(BAD_REQUEST_STATUSES)
HTTP_LISTENERS = 2
SERIES_PER_API = 1 + len(REQUEST_BUCKETS) + 3 + ERROR_CODES_PER_API + 1
SERIES_PER_REPLICA = 11  # every hosted replica: offsets, size, epoch, roles, bytes and records
SERIES_PER_GROUP = 3  # members, rebalances, lag sum
SERIES_PER_SHARE_GROUP = 1  # members
SERIES_PER_SHARE_STATE = len(SHARE_STATES) + 1  # records by state, lag
SERIES_PER_MOVE_LED = 1  # bytes a move still has to copy, per moving partition led


def series_budget(
    apis: int,
    replicas: int,
    follower_replicas_led: int,
    groups: int = 0,
    share_groups: int = 0,
    share_states: int = 0,
    http_listeners: int = HTTP_LISTENERS,
    moves_led: int = 0,
) -> int:
    """The most series a node's /metrics holds: `apis` Kafka APIs served, `replicas` hosted,
    `follower_replicas_led` (followers of the partitions it leads, RF - 1 each), consumer
    and share groups it coordinates, share-partition states it leads, HTTP listeners,
    partitions it leads that move."""
    return (
        PROCESS_SERIES
        + NODE_SERIES
        + GROUP_FAILURE_SERIES
        + KAFKA_SERIES
        + SERIES_PER_HTTP_LISTENER * http_listeners
        + SERIES_PER_API * apis
        + SERIES_PER_REPLICA * replicas
        + follower_replicas_led
        + SERIES_PER_GROUP * groups
        + GROUP_LAG_SERIES
        + SERIES_PER_SHARE_GROUP * share_groups
        + SERIES_PER_SHARE_STATE * share_states
        + SERIES_PER_MOVE_LED * moves_led
    )


# --- replicas and Raft -------------------------------------------------------------------------


class NodeCollector:
    """The node's replicas, Raft events, groups and share states. read() copies them into
    plain rows on the event loop, REPLICAS_PER_TURN replicas a loop turn; collect() turns
    those into metric families, in the scrape's thread: building and formatting 12,000
    samples takes about a tenth of a second, too long to hold the loop every group shares."""

    def __init__(
        self, node: Node, kafka: KafkaMetrics, http: dict[str, HttpStats] | None = None
    ) -> None:
        self._node = node
        self._kafka = kafka
        self._http = http or {}
        self._read: list[Family] = []

    async def read(self) -> None:
        replicas = await self._replicas()
        self._read = [
            *self._kafka.read(),
            *(http_families(self._http) if self._http else []),
            *replicas,
            self._moves(),
            *self._raft(),
            *self._loop(),
            *self._groups(),
            *self._share(),
        ]

    def collect(self) -> Iterator[Metric]:
        for family in self._read:
            yield family.metric()

    async def _replicas(self) -> list[Family]:
        labels = ["topic", "partition"]
        end = Family(
            GAUGE,
            "raftlog_partition_log_end_offset",
            "Offset after the replica's last record.",
            labels,
        )
        start = Family(
            GAUGE, "raftlog_partition_log_start_offset", "The replica's first offset.", labels
        )
        hw = Family(
            GAUGE,
            "raftlog_partition_high_watermark",
            "Offset after the last committed record.",
            labels,
        )
        size = Family(
            GAUGE, "raftlog_partition_log_size_bytes", "Bytes of the replica's segments.", labels
        )
        epoch = Family(
            GAUGE,
            "raftlog_partition_leader_epoch",
            "The replica's Raft term (leader epoch).",
            labels,
        )
        leader = Family(
            GAUGE, "raftlog_partition_is_leader", "1 if this node leads the partition.", labels
        )
        under = Family(
            GAUGE,
            "raftlog_partition_under_replicated",
            "1 if this node leads the partition and a replica is not in sync (behind the commit "
            "index or not connected).",
            labels,
        )
        bytes_in = Family(
            COUNTER,
            "raftlog_partition_bytes_in_total",
            "Produced bytes appended while leading.",
            labels,
        )
        records_in = Family(
            COUNTER,
            "raftlog_partition_records_in_total",
            "Produced records appended while leading.",
            labels,
        )
        bytes_out = Family(
            COUNTER,
            "raftlog_partition_bytes_out_total",
            "Record bytes sent in Fetch and ShareFetch answers.",
            labels,
        )
        records_out = Family(
            COUNTER,
            "raftlog_partition_records_out_total",
            "Records sent in Fetch and ShareFetch answers (those of the batches sent).",
            labels,
        )
        lag = Family(
            GAUGE,
            "raftlog_raft_follower_lag_entries",
            "Raft entries the leader holds that a follower has not confirmed (on the leader).",
            [*labels, "follower"],
        )
        node = self._node
        leaders = 0
        for i, ((topic, index), p) in enumerate(list(node.partitions.items())):
            if i and i % REPLICAS_PER_TURN == 0:
                await asyncio.sleep(0)
            if node.partitions.get((topic, index)) is not p:
                continue  # closed meanwhile
            key = [topic, str(index)]
            end.add(key, p.log_end_offset)
            start.add(key, p.log_start_offset)
            hw.add(key, p.high_watermark)
            size.add(key, sum(s.size for s in p.log.segments()))
            epoch.add(key, p.leader_epoch)
            is_leader = p.is_leader
            leader.add(key, int(is_leader))
            under.add(key, int(is_leader and self._under_replicated(p, key, lag)))
            leaders += is_leader
            c = p.counters
            bytes_in.add(key, c.bytes_in)
            records_in.add(key, c.records_in)
            bytes_out.add(key, c.bytes_out)
            records_out.add(key, c.records_out)
        replicas = Family(
            GAUGE, "raftlog_node_partition_replicas", "Partition replicas this node hosts."
        )
        led = Family(GAUGE, "raftlog_node_partition_leaders", "Partitions this node leads.")
        return [
            *(end, start, hw, size, epoch, leader, under),
            *(bytes_in, records_in, bytes_out, records_out, lag),
            replicas.add([], len(node.partitions)),
            led.add([], leaders),
        ]

    def _under_replicated(self, p: Partition, key: list[str], lag: Family) -> bool:
        """Adds the leader's followers' lag; whether one of them is out of sync."""
        last = p.journal.entry(-1).idx
        for follower, matched in sorted(p.group.match_indexes().items()):
            lag.add([*key, follower], max(0, last - matched))
        return not set(self._node.expected_in_sync(p)) <= set(self._node.in_sync_replicas(p))

    def _moves(self) -> Family:
        """What each move this node leads has still to copy (raftlog/cluster/reassignment.py)."""
        remaining = Family(
            GAUGE,
            "raftlog_reassignment_bytes_remaining",
            "On a moving partition's leader: bytes of its log the replicas the move adds do "
            "not hold yet, summed over them.",
            ["topic", "partition"],
        )
        for (topic, index), lacking in sorted(self._node.mover.to_copy().items()):
            remaining.add([topic, str(index)], sum(lacking.values()))
        return remaining

    def _raft(self) -> list[Family]:
        raft = self._node.ctx.metrics
        driver = self._node.ctx.driver
        failures = Family(
            COUNTER,
            "raftlog_raft_group_failures_total",
            "Raft groups of this node stopped after raising and reopened from their files, by "
            f"group (<topic id>/<partition>, as the log names it; past {FAILURE_SERIES} "
            "groups: OTHER).",
            ["raft_group"],
        )
        for name, count in sorted(driver.failures.items()):
            failures.add([name], count)
        return [
            failures,
            Family(
                COUNTER,
                "raftlog_raft_leader_elections_total",
                "Elections won: a replica of this node became its partition's leader.",
            ).add([], raft.elections),
            Family(
                COUNTER,
                "raftlog_raft_leader_changes_total",
                "New (leader, term) pairs seen by this node's replicas.",
            ).add([], raft.leader_changes),
            Family(
                COUNTER,
                "raftlog_raft_truncations_total",
                "Raft truncations of an uncommitted log tail on this node's replicas.",
            ).add([], raft.truncations),
            Family(
                COUNTER,
                "raftlog_raft_truncated_entries_total",
                "Raft entries those truncations removed.",
            ).add([], raft.truncated_entries),
            Family(
                GAUGE,
                "raftlog_raft_groups_awake",
                "This node's Raft groups that are not quiet (idle groups go quiet and cost "
                "nothing until something wakes them).",
            ).add([], driver.awake),
            Family(
                HISTOGRAM,
                "raftlog_raft_commit_latency_seconds",
                "Time from proposing a produce entry to its Raft commit, on the leader.",
            ).add([], raft.commit_latency.read()),
        ]

    def _loop(self) -> list[Family]:
        stalls = self._node.loop_stalls
        return [
            Family(
                HISTOGRAM,
                "raftlog_event_loop_stall_seconds",
                "How much later than asked a 100 ms timer ran on the node's event loop, for "
                "stalls of 50 ms or more: the loop was held that long.",
            ).add([], stalls.stalls.read()),
            Family(
                GAUGE,
                "raftlog_event_loop_stall_longest_seconds",
                "The longest event-loop stall since the node started.",
            ).add([], stalls.longest),
        ]

    def _groups(self) -> list[Family]:
        members = Family(
            GAUGE,
            "raftlog_consumer_group_members",
            "Members of a consumer group this node coordinates.",
            ["group"],
        )
        rebalances = Family(
            COUNTER,
            "raftlog_consumer_group_rebalances_total",
            "Rebalances a group started since this node became its coordinator.",
            ["group"],
        )
        lag = Family(
            GAUGE,
            "raftlog_consumer_group_lag",
            "High watermark minus the committed offset, for committed partitions with a replica "
            f"on the coordinator (the first {GROUP_LAG_SERIES} of the node).",
            ["group", "topic", "partition"],
        )
        lag_sum = Family(
            GAUGE,
            "raftlog_consumer_group_lag_sum",
            "A group's lag over its committed partitions with a replica on the coordinator.",
            ["group"],
        )
        partitions = self._node.partitions
        series = 0
        for group in self._node.groups.loaded_groups():
            name = group.group_id
            members.add([name], len(group.members))
            rebalances.add([name], group.rebalances)
            total = 0
            for (topic, index), committed in group.offsets.items():
                replica = partitions.get((topic, index))
                if replica is None:
                    continue
                behind = max(0, replica.high_watermark - committed.offset)
                total += behind
                if series < GROUP_LAG_SERIES:
                    series += 1
                    lag.add([name, topic, str(index)], behind)
            lag_sum.add([name], total)
        return [members, rebalances, lag, lag_sum]

    def _share(self) -> list[Family]:
        node = self._node
        members = Family(
            GAUGE,
            "raftlog_share_group_members",
            "Members of a share group this node coordinates.",
            ["group"],
        )
        share_groups = node.groups.share_groups
        for group_id in share_groups.group_ids():
            described = share_groups.describe(group_id)
            if described is not None:
                members.add([group_id], len(described.members))
        labels = ["group", "topic", "partition"]
        records = Family(
            GAUGE,
            "raftlog_share_partition_records",
            "A share group's in-flight records of a partition this node leads, by state.",
            [*labels, "state"],
        )
        lag = Family(
            GAUGE,
            "raftlog_share_partition_lag",
            "Records of a partition this node leads that a share group has not yet settled.",
            labels,
        )
        for group_id, key in node.share.held():
            partition = node.partitions.get(key)
            view = node.share.view(group_id, key, partition) if partition is not None else None
            if partition is None or view is None:
                continue
            values = [group_id, key[0], str(key[1])]
            for state in SHARE_STATES:
                records.add([*values, state], view.counts.get(state, 0))
            done = view.counts.get("ACKNOWLEDGED", 0) + view.counts.get("ARCHIVED", 0)
            lag.add(values, max(0, partition.high_watermark - view.start_offset - done))
        return [members, records, lag]


# Replicas read per event-loop turn in a scrape: read at once, 3,000 held the loop for 0.24 s
# on an idle node (longer on a loaded one), and with the bench's scrape every 15 s a
# 3,000-partition spread produce fell into an election storm (74,000 of 200,000 records
# timed out; without the scrape all were acked in 20 s).
REPLICAS_PER_TURN = 100
# Scrapes are formatted here, one at a time, off the event loop.
_SCRAPES = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metrics")
# A listing is given again to scrapes within this many times its own making's duration after
# it was made: making them takes at most 1 / (1 + this) of the node's time.
SCRAPE_REUSE_FACTOR = 9


class NodeMetrics:
    """A node's registry (its own, not prometheus_client's global one) and its scrape."""

    def __init__(
        self,
        node: Node,
        kafka: KafkaMetrics,
        monotonic: Callable[[], float] = time.monotonic,
        http: dict[str, HttpStats] | None = None,
    ) -> None:
        """`http`: the node's HTTP listeners' counts, by the name their series are labelled
        with."""
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self._collector = NodeCollector(node, kafka, http)
        self.registry.register(self._collector)
        self._monotonic = monotonic
        self._formatting: dict[str, asyncio.Future[bytes]] = {}  # by content type
        self._kept: dict[str, tuple[bytes, float]] = {}  # by content type: listing, kept until

    async def exposition(self, accept: str) -> tuple[bytes, str]:
        """The listing in the format the Accept header asks for, and its content type. A
        scrape that comes while one is being formatted gets that one's listing: scrapes
        slower than their interval (0.2 s at 1,000 partitions, on a busy node more) would
        otherwise queue behind each other without end. One that comes within
        SCRAPE_REUSE_FACTOR times the last one's duration after it ended gets its listing too:
        however often /metrics is asked for, making it takes at most a tenth of the node's
        time (at 3,000 partitions, a 5 s interval slowed the loop enough to cost elections)."""
        encode, content_type = choose_encoder(accept)
        kept = self._kept.get(content_type)
        if kept is not None and self._monotonic() < kept[1]:
            return kept[0], content_type
        formatting = self._formatting.get(content_type)
        if formatting is None:
            formatting = asyncio.ensure_future(self._make(encode, content_type))
            self._formatting[content_type] = formatting
        return await asyncio.shield(formatting), content_type

    async def _make(self, encode: Callable[[CollectorRegistry], bytes], content_type: str) -> bytes:
        started = self._monotonic()
        try:
            await self._collector.read()
            loop = asyncio.get_running_loop()
            made = await loop.run_in_executor(_SCRAPES, encode, self.registry)
        finally:
            self._formatting.pop(content_type, None)
        ended = self._monotonic()
        self._kept[content_type] = (made, ended + SCRAPE_REUSE_FACTOR * (ended - started))
        return made
