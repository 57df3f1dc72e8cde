"""The contract between the Kafka handlers (kafka_api) and the node: the Broker facade they
call (broker) and the plain values it takes and gives, with a partition as the handlers see
it (values). Handlers never reach past it into Raft or storage."""
