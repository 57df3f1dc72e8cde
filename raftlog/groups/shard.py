"""One `__consumer_offsets` partition this node coordinates: its log, the groups hashed to it
and the appends in flight.

Every write of the coordinator goes through `Shard.append`: memory changes only once the
append resolved, so memory never claims more than the log holds, and appends start in call
order, so the log's order is the order in which the coordinator decided.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.groups.group import Group
from raftlog.groups.offsets_log import OffsetsLog
from raftlog.groups.records import group_metadata_key, group_metadata_value
from raftlog.groups.results import answer

log = logging.getLogger(__name__)

E = ErrorCode

Records = list[tuple[bytes, bytes | None]]


class Shard:
    def __init__(self, index: int, offsets_log: OffsetsLog) -> None:
        self.index = index
        self.log = offsets_log
        self.groups: dict[str, Group] = {}
        self.loading = True
        self.attached = True
        self.tasks: set[asyncio.Task[None]] = set()
        self.writes: set[asyncio.Future[ErrorCode]] = set()  # answers awaiting an append

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Runs work that belongs to this partition's leadership: `close` cancels it."""
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "group coordinator task for partition %d failed",
                self.index,
                exc_info=task.exception(),
            )

    def close(self) -> None:
        """Leadership is gone: stop the partition's work and tell every request still waiting
        for an append NOT_COORDINATOR, so its client looks for the new coordinator."""
        self.attached = False
        for task in list(self.tasks):
            task.cancel()
        for write in self.writes:
            answer(write, E.not_coordinator)

    def append(
        self,
        records: Records,
        effect: Callable[[ErrorCode], None],
        *,
        commit: bool = False,
        producer: tuple[int, int] | None = None,
    ) -> asyncio.Future[ErrorCode]:
        """Starts the append now, so the log's order is the order of these calls. `effect`
        applies the outcome to memory when the append resolves, even if nobody awaits the
        answer any more (a client that disconnected must not leave memory behind the log)."""
        reply: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        self.writes.add(reply)

        def resolved(write: asyncio.Future[int]) -> None:
            self.writes.discard(reply)
            if write.cancelled():
                error = E.coordinator_not_available
            else:
                exc = write.exception()
                error = E.none if exc is None else append_error(exc, commit)
            try:
                if self.attached:
                    effect(error)
                else:
                    error = E.not_coordinator
            finally:
                answer(reply, error)

        asyncio.ensure_future(self.log.append(records, producer)).add_done_callback(resolved)
        return reply

    def store_group(
        self, group: Group, assignments: Mapping[str, bytes], effect: Callable[[ErrorCode], None]
    ) -> asyncio.Future[ErrorCode]:
        """Writes the group's current generation with these assignments."""
        record = group_metadata_key(group.group_id), group_metadata_value(group.record(assignments))
        return self.append([record], effect)

    def forget(self, group: Group) -> None:
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
        group.cancel_timers()

    def discard_if_unused(self, group: Group) -> None:
        """Failed joins and commits must not leave empty groups behind."""
        if self.groups.get(group.group_id) is group and group.is_unused():
            self.forget(group)


def append_error(exc: BaseException | None, commit: bool) -> ErrorCode:
    """Kafka's mapping of a failed coordinator append to what the client is told."""
    code = exc.code if isinstance(exc, KafkaError) else E.unknown_server_error
    if code in (
        E.unknown_topic_or_partition,
        E.not_enough_replicas,
        E.not_enough_replicas_after_append,
        E.request_timed_out,
    ):
        return E.coordinator_not_available
    if code in (E.not_leader_or_follower, E.kafka_storage_error):
        return E.not_coordinator
    if code in (E.message_too_large, E.record_list_too_large, E.invalid_fetch_size):
        return E.invalid_commit_offset_size if commit else E.unknown_server_error
    return code
