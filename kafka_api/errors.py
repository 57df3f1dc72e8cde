"""The protocol's own failure: a request whose answer is to drop the connection. Error codes
and KafkaError live in raftlog.common.errors, where the log raises them."""

__all__ = ["CloseConnection"]


class CloseConnection(Exception):
    """Raised by a handler when Kafka's answer is to drop the connection (e.g. a failed acks=0
    produce); the server logs the message and closes that connection only."""
