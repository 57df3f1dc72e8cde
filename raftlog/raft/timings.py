"""How fast a node's Raft groups beat, elect and compact, in seconds: one set for the node's
partitions (the core, raft/replica.py) and its controller group (pysyncobj)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RaftTimings:
    """A Kafka client needs acks in milliseconds and failover in seconds (pysyncobj's own
    defaults wait up to 100 ms to batch appends and hold a leader that lost its majority for
    30 s). A leader that hears from no majority for an election timeout steps down
    (CheckQuorum): by then the others may have elected a new one. The core counts the
    heartbeat and election_min in ticks (raft/replica.py); the fields marked below serve only
    the controller's pysyncobj group."""

    heartbeat: float = 0.1
    # Controller: a leader whose followers hold everything for this long lets its group go
    # quiet: no heartbeats, no timers, until something happens to it (FORK.md, 9).
    quiesce_after: float | None = 0.2
    election_min: float = 0.5
    election_max: float = 1.0  # controller (the core draws from [min, 2 * min))
    leader_fallback: float = 1.0  # controller's CheckQuorum
    compaction_entries: int = 5000  # controller
    # A snapshot is also taken this long after the last, if anything was applied since: it
    # moves the floor below which retention and compaction may work. Each group waits 1-1.5
    # times it, drawn at random. A partition's snapshot is its Raft window cut and its
    # producer state saved, three fsyncs: with the same 60 s for all, every partition of a new
    # 1,000-partition topic took its snapshot in the same second, every minute, and the burst
    # held each node's loop for seconds (half of a 20 s profile).
    compaction_seconds: float = 60.0  # [broker] raft.snapshot.interval.ms
    # What one Raft entry may not reach; produce enforces it. A frame to a peer carries every
    # group's messages of a loop turn, and one huge entry holds up the others' heartbeats
    # behind it. (pysyncobj, which runs the controller, also mis-detects the last chunk of a
    # transfer above this: DESIGN.md section 2.)
    max_message_bytes: int = 4 * 1024 * 1024
    # What a leader sends a learner (a replica a move adds) per second while it catches up,
    # so the copy leaves room for the partition's writes; 0: unthrottled. The broker setting
    # leader.replication.throttled.rate (raftlog/node/node.py).
    learner_bytes_per_second: int = 0


# Election timeouts a replica other than a new group's first waits for the first to win.
FIRST_ELECTION_ROUNDS = 2
