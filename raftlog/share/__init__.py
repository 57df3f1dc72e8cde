"""Share groups (KIP-932): queues over Kafka partitions."""
