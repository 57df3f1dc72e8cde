"""Kafka's error codes, and the exception that carries one from the log up to the handler
that answers. They live below the protocol package because the log, the groups and the
epoch checks answer in Kafka's codes too; kafka_api imports them from here. Beside them,
ConfigError: a configuration refused, by the config files, the [broker] settings' checks and
the authorizer's settings alike."""

from kio.schema.errors import ErrorCode

__all__ = ["ConfigError", "ErrorCode", "KafkaError"]


class KafkaError(Exception):
    """Raised below the handlers; the handler turns it into the error field of its answer."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class ConfigError(ValueError):
    """A configuration that cannot be used: a node's file, or a [broker] setting in it."""
