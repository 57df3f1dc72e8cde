"""What one node can hold: partition replicas against its file-descriptor budget; and what
one admin request and the cluster's metadata may hold.

A partition replica keeps a few files open (its active segment, the Raft window and commit
files, the producer-state and history writes in passing); without a budget, a 100,000
partition topic ran two nodes out of descriptors, the controller lost its majority and the
cluster could not be brought back. The node raises its soft RLIMIT_NOFILE to the hard limit
at start, as Kafka's and Redpanda's packaging do, and refuses (INVALID_PARTITIONS) a topic or
partition increase that would put more replicas on a node than the budget holds.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

# Redpanda's topic_fds_per_partition default; raftlog's replicas use about four.
FDS_PER_REPLICA = 5
# Descriptors kept for everything else: client and peer connections, the controller, logs, and
# the past segments open for reads (raftlog/storage/cache.py, 256 at most).
RESERVED_FDS = 1024
# What the multi-Raft layer holds well on a 2-core node: a 1,000-partition topic at RF 3
# (plus the internal topics' replicas) is led in 6-20 s, idles at about 2 % of a core, takes
# a produce spread over all of them (every record acknowledged, if slowly: 3-25 MB/s of 1 KiB
# records) and is re-led in about 3 s after a leader's kill -9 (issue 12; `make bench`,
# tests/e2e/test_many_partitions). 3,000 work with max.partition.replicas.per.node raised,
# but a leader's kill -9 then takes about 11 s to heal.
CAPACITY_REPLICAS = 1100

# Kept out of what Kafka client connections may take of a node's descriptors: the past segments
# open for reads (256), the peers, the controller, the log and the history journal.
OTHER_FDS = 512
# The share of a node's descriptors its Kafka client connections get at least, when its
# replicas' budget leaves them less (max.partition.replicas.per.node set past what its
# descriptors hold, as the bench's scale runs do).
MIN_CONNECTIONS_SHARE = 8  # an eighth

# Kafka's controller bounds one user operation at 10,000 metadata records
# (QuorumController.MAX_RECORDS_PER_USER_OP): partitions created, topics deleted, configs
# changed. A request over it is refused whole (POLICY_VIOLATION) before anything is proposed.
MAX_RECORDS_PER_USER_OP = 10_000
# Groups with configs of their own, per cluster; every node keeps them all in the controller's
# state. Share groups are what needs them, and a node coordinates at most 1,000
# (share.membership.MAX_GROUPS). At the bounds on names and values that is a few MB at most.
MAX_CONFIGURED_GROUPS = 10_000


def excessive(count: int, what: str, limit: int = MAX_RECORDS_PER_USER_OP) -> str | None:
    """The POLICY_VIOLATION message of a request over a per-request bound (Kafka's words for
    a controller operation over MAX_RECORDS_PER_USER_OP, and the numbers)."""
    if count <= limit:
        return None
    return (
        f"Unable to perform excessively large batch operation: {count} {what} in one "
        f"request, at most {limit}."
    )


@dataclass(frozen=True)
class ReplicaBudget:
    replicas: int  # partition replicas this node may hold
    open_files: int  # the soft RLIMIT_NOFILE it was derived from (0 if configured)

    def describe(self) -> str:
        if self.open_files:
            return (
                f"room for {self.replicas} partition replicas (at most {CAPACITY_REPLICAS}; "
                f"ulimit -n {self.open_files} at {FDS_PER_REPLICA} per replica, "
                f"{RESERVED_FDS} reserved)"
            )
        return f"room for {self.replicas} partition replicas (max.partition.replicas.per.node)"


def raise_open_files_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard one; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def replica_budget(configured: int, open_files: int) -> ReplicaBudget:
    if configured >= 0:
        return ReplicaBudget(configured, 0)
    by_files = max(0, (open_files - RESERVED_FDS) // FDS_PER_REPLICA)
    return ReplicaBudget(min(by_files, CAPACITY_REPLICAS), open_files)


def connection_cap(configured: int, open_files: int, replicas: int, http_connections: int) -> int:
    """max.connections (kafka_api/connection_caps.py): as configured (above 0), or what the
    node's descriptors leave after its partition replicas, its HTTP listeners' connections
    and OTHER_FDS, and at least an eighth of them (19,950 connections from one client once
    took every descriptor of a node)."""
    if configured > 0:
        return configured
    spare = open_files - replicas * FDS_PER_REPLICA - http_connections - OTHER_FDS
    return max(open_files // MIN_CONNECTIONS_SHARE, spare)
