"""Leader epochs: the cache read off the segment list, the one fencing check, each node's
history."""

# Kafka's "no leader epoch" (RecordBatch.NO_PARTITION_LEADER_EPOCH): what a client sends to
# skip fencing, what a log with no batch yet has, what an old request version cannot carry.
NO_EPOCH = -1
