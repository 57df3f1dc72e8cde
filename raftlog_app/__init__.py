"""The top of the house: the `raftlog` command and the node process, which composes
raftlog's Node with its Kafka listener (kafka_api) and its admin listener. Nothing below
imports from here."""
