"""The Broker the Kafka handlers are given, built over this node: the facade itself (facade)
and the administration it answers through, topics and partitions (topic_admin) and group
configs (group_admin)."""
