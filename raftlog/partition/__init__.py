"""A partition replica and its produce path: the replica (partition, with what every side of
it reads in base, its produce path in produce and what Raft tells it in replication), the
produce queue requests wait in, producers' sequences and open transactions (producer_state,
aborted_txns), a coordinator's own partition (offsets_partition) and the replica's directory
(replica_dir)."""
