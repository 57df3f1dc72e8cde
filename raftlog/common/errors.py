"""Kafka's error codes, and the exception that carries one from the log up to the handler
that answers. They live below the protocol package because the log, the groups and the
epoch checks answer in Kafka's codes too; kafka_api imports them from here. Beside them,
ConfigError: a configuration refused, by the config files, the [broker] settings' checks and
the authorizer's settings alike."""

from kio.schema.errors import ErrorCode

__all__ = ["ConfigError", "ErrorCode", "KafkaError", "RecordErrors"]


class KafkaError(Exception):
    """Raised below the handlers; the handler turns it into the error field of its answer."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class RecordErrors(KafkaError):
    """A batch refused for some of its records (Kafka's RecordValidationException):
    `record_errors` names each by its index in the batch, with why (Produce v8+ answers
    them)."""

    def __init__(
        self, code: ErrorCode, message: str, record_errors: tuple[tuple[int, str], ...]
    ) -> None:
        super().__init__(code, message)
        self.record_errors = record_errors


class ConfigError(ValueError):
    """A configuration that cannot be used: a node's file, or a [broker] setting in it."""
