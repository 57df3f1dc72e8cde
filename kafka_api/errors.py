"""Kafka error codes and the exception that carries one up to the handler that answers."""

from kio.schema.errors import ErrorCode

__all__ = ["CloseConnection", "ErrorCode", "KafkaError"]


class KafkaError(Exception):
    """Raised below the handlers; the handler turns it into the error field of its answer."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class CloseConnection(Exception):
    """Raised by a handler when Kafka's answer is to drop the connection (e.g. a failed acks=0
    produce); the server logs the message and closes that connection only."""
