"""Kafka error codes and the exception that carries one up to the handler that answers."""

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError"]


class KafkaError(Exception):
    """Raised below the handlers; the handler turns it into the error field of its answer."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
