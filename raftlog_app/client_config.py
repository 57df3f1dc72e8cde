"""`--command-config FILE`: how the CLI's Kafka clients reach a secured cluster, as Kafka's
tools take it. The file holds client properties, one `key=value` per line, in librdkafka's
names (what kcat and confluent-kafka users already write):

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.username=admin
    sasl.password=...
    ssl.ca.location=/etc/raftlog/ca.pem

The CLI runs one command per process, so the file is read once into this module and every
kafka-python client the command makes takes it from here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raftlog.common.errors import ConfigError

# librdkafka name -> kafka-python keyword
_KAFKA_PYTHON = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
}
_settings: dict[str, Any] = {}


def use(path: Path | None) -> None:
    """Reads --command-config (nothing to read: PLAINTEXT, as before)."""
    _settings.clear()
    if path is None:
        return
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise ConfigError(f"--command-config {path}: {e.strerror or e}") from None
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or key.strip() not in _KAFKA_PYTHON:
            raise ConfigError(
                f"--command-config {path}:{number}: expected one of "
                f"{', '.join(sorted(_KAFKA_PYTHON))} as key=value"
            )
        _settings[_KAFKA_PYTHON[key.strip()]] = value.strip()


def kafka_python() -> dict[str, Any]:
    """Keyword arguments for a kafka-python client."""
    return dict(_settings)


def admin(bootstrap: str, client_id: str, request_timeout_ms: int = 30_000) -> Any:
    """kafka-python's admin client for a command, with --command-config's settings."""
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(
        bootstrap_servers=bootstrap.split(","),
        client_id=client_id,
        request_timeout_ms=request_timeout_ms,
        bootstrap_timeout_ms=10_000,
        **kafka_python(),
    )
