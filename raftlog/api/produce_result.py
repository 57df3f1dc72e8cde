"""A produce's answer for one partition, apart from api/values.py to be compiled: one is built
per acknowledged produce, and the `__init__` dataclasses generates for a frozen class stays
interpreted (docs/architecture.md, "Compiled modules"). api/values.py names it with the
other values."""

from __future__ import annotations

from dataclasses import dataclass

from raftlog.common.errors import ErrorCode, KafkaError, RecordErrors


@dataclass(frozen=True, slots=True, init=False)
class ProduceResult:
    error: ErrorCode
    base_offset: int
    log_append_time: int
    log_start_offset: int
    message: str | None
    # (index in its batch, why) of each record that got the batch refused (RecordErrors)
    record_errors: tuple[tuple[int, str], ...]

    def __init__(
        self,
        error: ErrorCode = ErrorCode.none,
        base_offset: int = -1,
        log_append_time: int = -1,
        log_start_offset: int = -1,
        message: str | None = None,
        record_errors: tuple[tuple[int, str], ...] = (),
    ) -> None:
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "base_offset", base_offset)
        object.__setattr__(self, "log_append_time", log_append_time)
        object.__setattr__(self, "log_start_offset", log_start_offset)
        object.__setattr__(self, "message", message)
        object.__setattr__(self, "record_errors", record_errors)

    @classmethod
    def refused(cls, error: KafkaError) -> ProduceResult:
        """The answer to records the leader refused with `error`."""
        errors = error.record_errors if isinstance(error, RecordErrors) else ()
        return cls(error.code, message=error.message, record_errors=errors)
