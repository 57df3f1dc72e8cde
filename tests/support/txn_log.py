"""A `__transaction_state` partition in memory, for the transaction coordinator's unit tests
(end to end it is a real replicated partition: tests/e2e/test_transactions*.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.groups.offsets_log import LogRecord
from raftlog.txn.log_records import decode_key, decode_value
from raftlog.txn.metadata import TxnState


class ListLog:
    """`held` set: appends wait for it; `failing` set: appends fail with it."""

    def __init__(
        self, records: list[tuple[bytes, bytes | None]] | None = None, leader_epoch: int = 7
    ) -> None:
        self.records = list(records or [])
        self.leader_epoch = leader_epoch
        self.failing: ErrorCode | None = None
        self.held: asyncio.Future[None] | None = None

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> int:
        if self.held is not None:
            await self.held
        if self.failing is not None:
            raise KafkaError(self.failing)
        base = len(self.records)
        self.records.extend(records)
        return base

    def read_committed(self) -> Iterator[LogRecord]:
        for i, (key, value) in enumerate(list(self.records)):
            yield LogRecord(i, key, value)

    def states(self) -> list[tuple[str, TxnState, int]]:
        """(transactional id, state, producer epoch) of each record, in log order; a
        tombstone (the id forgotten) is (transactional id, DEAD, -1)."""
        out = []
        for key, value in self.records:
            if value is None:
                out.append((decode_key(key) or "", TxnState.DEAD, -1))
                continue
            v = decode_value(value)
            out.append((decode_key(key) or "", TxnState(v.state), v.producer_epoch))
        return out
