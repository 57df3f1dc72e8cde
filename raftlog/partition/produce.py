"""A leader's produce path: a request checked (its size, batches, timestamps), its
compressed batches opened off the event loop against the node's request memory, and queued
for Raft in the partition's ProduceQueue; transaction markers go the same way."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from epoch import history
from raftlog.api.values import (
    ProduceResult,
)
from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.common.memory_budget import run_opened
from raftlog.partition.base import ReplicaBase, done
from raftlog.partition.produce_queue import ProduceRequest, answer_within
from raftlog.storage import codecs
from raftlog.storage.batch import (
    BatchHeader,
    check_bytes,
    check_inline,
    check_records,
    decompressed_bytes,
    iter_batches,
    needs_record_walk,
    recompress,
    stamp_log_append_time,
    timestamp_error,
    validate_produce,
)
from raftlog.storage.control import marker_batch

_T = TypeVar("_T")

# What a produce's check on the event loop (check_inline) may hold, check_bytes of its
# batches: lz4 and snappy batches of small blocks (librdkafka's lz4: 64 KiB blocks, 320 KiB).
# It is held for one synchronous call, one at a time, so it is not admitted against the
# node's request memory as a thread's walk is; a batch that holds more is checked in one.
INLINE_HELD = 1024 * 1024

# Produce opens compressed batches (to check or recompress them) here, each admitted against
# the node's request memory by its decompressed size first (raftlog.common.memory_budget); a pool of
# its own, so a flood of them does not hold up other threads' work (large requests decoded).
_OPENING = ThreadPoolExecutor(
    max_workers=min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="batch-open"
)


class ProduceSide(ReplicaBase):
    def produce(
        self, records: bytes, acks: int, timeout_ms: int, transactional: bool = False
    ) -> Awaitable[ProduceResult]:
        if not self.is_leader:
            return done(self._refusal(records))
        if len(records) >= self._ctx.timings.max_message_bytes:
            return done(
                ProduceResult(
                    ErrorCode.record_list_too_large,
                    message=f"{len(records)} bytes for one partition in one request",
                )
            )
        # a compacted topic's records must have keys (Kafka's LogValidator): walked here for
        # the small plain batches validate_produce walks anyway, in a thread for the others
        compacted = f"{self.topic}-{self.index}" if self.compacted else None
        try:
            headers = validate_produce(records, self.max_message_bytes, transactional, compacted)
        except KafkaError as e:
            return done(ProduceResult.refused(e))
        now = history.now_ms()
        appended_at = -1
        if self.log_append_time:  # Kafka ignores the timestamp bounds then
            # (a rewrite and CRC of what validate_produce has just checked the CRC of)
            appended_at, records = now, stamp_log_append_time(records, headers, now)
        else:
            refused = timestamp_error(headers, now, *self.timestamp_bounds)
            if refused is not None:
                return done(ProduceResult(refused.code, message=refused.message))
        target = self.compression
        limit = codecs.MAX_DECOMPRESSED_BYTES
        recompressed = target is not None and any(h.compression != target[0] for h in headers)
        walked = not recompressed and any(needs_record_walk(h) for h in headers)
        held = check_bytes(records, headers, limit) if walked else 0
        try:
            if walked and held <= INLINE_HELD and check_inline(records, headers, limit, compacted):
                walked = False  # checked here: a short check costs less than a thread's hand-off
        except KafkaError as e:
            return done(ProduceResult.refused(e))
        future = self.group.loop.create_future() if acks != 0 else None
        offsets = sum(h.last_offset_delta + 1 for h in headers)
        request = ProduceRequest(records, len(headers), offsets, acks, future)
        request.log_append_time = appended_at
        if target is not None and recompressed:
            # compression.type: Kafka's broker-side recompression, in a thread
            request.checked = asyncio.ensure_future(
                self._recompressed(request, headers, timeout_ms, *target, compacted)
            )
        elif walked:
            # Off the event loop: a bomb stops at MAX_DECOMPRESSED_BYTES, and a real batch
            # does not hold up every other partition while it is opened. The queue keeps
            # the request's place, so a connection's writes still land in order.
            request.checked = asyncio.ensure_future(
                self._opened(
                    headers, held, records, timeout_ms, check_records, records, limit, compacted
                )
            )
        self.produce_queue.submit(request)
        if future is None:
            return done(ProduceResult(base_offset=-1, log_start_offset=self.log_start_offset))
        return answer_within(request, timeout_ms)

    async def _recompressed(
        self,
        request: ProduceRequest,
        headers: list[BatchHeader],
        timeout_ms: int,
        codec: int,
        level: int | None,
        compacted: str | None,
    ) -> None:
        """The request's batches rebuilt in `codec`, which replace its own before this ends:
        the queue proposes a request once its check is done, and a done callback that set
        them ran too late when another request's callback, run first in the same turn,
        proposed this one (its batches went into the log as the producer sent them). A
        failure (MESSAGE_TOO_LARGE, a corrupt batch) is the queue's to answer."""
        request.records = await self._opened(
            headers,
            None,
            request.records,
            timeout_ms,
            recompress,
            request.records,
            codec,
            level,
            codecs.MAX_DECOMPRESSED_BYTES,
            self.max_message_bytes,
            compacted,
        )

    async def _opened(
        self,
        headers: list[BatchHeader],
        held: int | None,
        records: bytes,
        timeout_ms: int,
        fn: Callable[..., _T],
        *args: object,
    ) -> _T:
        """`fn(*args)` in a thread once the node's request memory admits what it holds of
        `records` opened: `held` bytes (check_bytes reads it from the codecs' headers for
        the check, which walks each batch a piece at a time), or (None: recompression,
        which holds each batch whole) what they decompress to, counted in a thread first. Past the budget a produce
        waits up to its timeout (REQUEST_TIMED_OUT), as Kafka's and Redpanda's stop reading
        requests while their memory is taken; a request larger than the whole budget is
        MESSAGE_TOO_LARGE. Either way nothing is stored."""
        size = held or 0
        if held is None and any(h.compression for h in headers):
            size = await asyncio.get_running_loop().run_in_executor(
                _OPENING, decompressed_bytes, records, codecs.MAX_DECOMPRESSED_BYTES
            )
        return await run_opened(self._ctx.memory, size, timeout_ms / 1000, _OPENING, fn, *args)

    def write_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> Awaitable[ProduceResult]:
        """Ends the producer's transaction on this partition (the coordinator's
        WriteTxnMarkers); answered once committed, like an acks=all produce."""
        if not self.is_leader:
            return done(ProduceResult(ErrorCode.not_leader_or_follower))
        batch = marker_batch(
            producer_id, producer_epoch, commit, coordinator_epoch, history.now_ms()
        )
        future = self.group.loop.create_future()
        self.produce_queue.submit(ProduceRequest(batch, 1, 1, -1, future))
        return future

    def _refusal(self, records: bytes) -> ProduceResult:
        """What a produce request this replica will not propose is answered (it is not the
        leader, or lost leadership while the request waited in its queue):
        NOT_LEADER_OR_FOLLOWER, unless this replica's log already holds one of the request's
        idempotent batches (an earlier attempt that a leader wrote, committed or not): then
        REQUEST_TIMED_OUT, "possibly persisted". librdkafka takes NOT_LEADER for "not written",
        and when its next batch then succeeded at the new leader, which held the first, it saw
        skipped sequence numbers, bumped its producer epoch and wrote its batches again
        (fault suite on the core engine: 3 bumps in 155 cycles)."""
        refused = ProduceResult(ErrorCode.not_leader_or_follower)
        try:
            headers = [h for _, h in iter_batches(memoryview(records))]
        except Exception:  # malformed: the leader would refuse it anyway
            return refused
        for header in headers:
            verdict = self._producers.check(header)
            if verdict is not None and verdict.error == ErrorCode.none:
                return ProduceResult(
                    ErrorCode.request_timed_out,
                    message="not the leader, but this batch is in the log: it may be committed",
                )
        return refused
