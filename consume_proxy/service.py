"""The consume proxy (kafka-consume-srv's contract, on KIP-932 share groups): Read hands a
record out and makes it pending; Acknowledge settles it, Cancel gives it back at once, and a
pending record nobody settles within its pending timeout is given back by the proxy (or, if
the proxy dies, by the broker when its lock runs out). Records are served at least once;
the group's start offset only passes records that are done.

One share member per group a client names (member.py); its fetches run only while reads
wait, and records it fetched beyond what the waiting reads want are kept briefly for the
next ones, then given back.

Any HTTP client may name any group, so a group's entry lasts only while it is busy (reads
waiting, records pending or kept for the next read) and GROUP_IDLE_S after: a full table
makes room by leaving its least recently used idle group, and only a table of busy groups
answers 429. Before, naming 100 groups filled a proxy for 5 minutes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from consume_proxy.client import ClusterClient, KafkaUnavailable, TopicMeta
from consume_proxy.member import (
    ACCEPT,
    ACKS_ONLY,
    INVALID_RECORD_STATE,
    INVALID_REQUEST,
    NONE,
    RELEASE,
    UNKNOWN_TOPIC_ID,
    Record,
    ShareMember,
)
from raftlog.config.internal_topics import is_internal

log = logging.getLogger(__name__)

MAX_GROUPS = 100  # share groups one proxy serves at once; more answer 429 if all are busy
MAX_WAITING_READS = 10_000  # reads waiting at once, over all groups
MAX_RECORDS_PER_READ = 500
MAX_READ_TIMEOUT_MS = 60_000
MIN_PENDING_TIMEOUT_MS = 100
FETCH_WAIT_MS = 500  # one ShareFetch's long poll while reads wait
BUFFER_HOLD_S = 2.0  # fetched records no read took by then go back to the group
GROUP_IDLE_S = 60.0  # a group with nothing waiting or pending is left after this long


class ProxyError(Exception):
    """An answer the client gets as an HTTP error: `status` and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class _Read:
    topic: str
    want: int
    got: list[Record] = field(default_factory=list)
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


@dataclass(slots=True)
class _Group:
    member: ShareMember  # reads: its fetches long-poll
    acker: ShareMember  # settles, on connections and a session of its own, so an
    # acknowledgement never waits behind a fetch's long poll (answers on a Kafka
    # connection come back in request order)
    used: float
    reads: deque[_Read] = field(default_factory=deque)
    buffer: deque[tuple[float, Record]] = field(default_factory=deque)
    fetching: asyncio.Task[None] | None = None
    # (topic, partition, offset) handed out by this proxy -> the timer that gives it back
    pending: dict[tuple[str, int, int], asyncio.TimerHandle] = field(default_factory=dict)
    settling: int = 0  # acknowledgements and cancels on their way to the cluster

    @property
    def busy(self) -> bool:
        """Leaving it now would cost a client something: a read (or its fetch), records it
        holds, or an acknowledgement under way."""
        fetching = self.fetching is not None and not self.fetching.done()
        return bool(self.reads or self.buffer or self.pending or self.settling or fetching)


class ConsumeProxy:
    def __init__(self, bootstrap: list[tuple[str, int]]) -> None:
        self._bootstrap = bootstrap
        self.cluster = ClusterClient(bootstrap)  # metadata for checking requests
        self._groups: OrderedDict[str, _Group] = OrderedDict()  # least recently used first
        self._waiting = 0
        self._sweeper: asyncio.Task[None] | None = None

    # --- read ------------------------------------------------------------------------------

    async def read(
        self,
        group_id: str,
        topic: str,
        max_records: int,
        timeout_ms: int,
        pending_timeout_ms: int | None,
    ) -> list[Record]:
        """Up to max_records records of `topic` for the group, as soon as any is there or
        after timeout_ms with none; each returned record is pending from then on."""
        await self._topic_meta(topic)
        group = self._group(group_id)
        member = group.member
        if pending_timeout_ms is not None and not (
            MIN_PENDING_TIMEOUT_MS <= pending_timeout_ms <= member.lock_timeout_ms
        ):
            raise ProxyError(
                400,
                f"pending_timeout_ms must be within {MIN_PENDING_TIMEOUT_MS}.."
                f"{member.lock_timeout_ms} (the group's record lock duration)",
            )
        member.subscribe(topic)
        read = _Read(topic, max_records)
        self._take_buffered(group, read)
        if not read.got and timeout_ms > 0:
            if self._waiting >= MAX_WAITING_READS:
                raise ProxyError(429, "too many reads waiting")
            group.reads.append(read)
            self._waiting += 1
            self._start_fetching(group_id, group)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(read.done), timeout_ms / 1000)
            finally:
                self._waiting -= 1
                with contextlib.suppress(ValueError):
                    group.reads.remove(read)
        timeout_s = (pending_timeout_ms or member.lock_timeout_ms) / 1000
        for record in read.got:
            self._make_pending(group_id, group, record, timeout_s)
        return read.got

    def _group(self, group_id: str) -> _Group:
        group = self._groups.get(group_id)
        if group is None:
            if len(self._groups) >= MAX_GROUPS:
                self._make_room()
            group = self._groups[group_id] = _Group(
                ShareMember(ClusterClient(self._bootstrap), group_id),
                ShareMember(ClusterClient(self._bootstrap), group_id, subscription=ACKS_ONLY),
                time.monotonic(),
            )
            if self._sweeper is None:
                self._sweeper = asyncio.create_task(self._sweep())
        self._groups.move_to_end(group_id)
        group.used = time.monotonic()
        return group

    def _make_room(self) -> None:
        """Leaves the least recently used group that is not busy; 429 if every one is."""
        idle = next((g for g, group in self._groups.items() if not group.busy), None)
        if idle is None:
            raise ProxyError(
                429, f"this proxy serves at most {MAX_GROUPS} share groups, all of them busy"
            )
        self._leave(idle)

    def _leave(self, group_id: str) -> None:
        group = self._groups.pop(group_id)
        asyncio.create_task(self._close_group(group))

    def _take_buffered(self, group: _Group, read: _Read) -> None:
        kept: deque[tuple[float, Record]] = deque()
        while group.buffer:
            fetched, record = group.buffer.popleft()
            if record.topic == read.topic and len(read.got) < read.want:
                read.got.append(record)
            else:
                kept.append((fetched, record))
        group.buffer = kept

    def _start_fetching(self, group_id: str, group: _Group) -> None:
        if group.fetching is None or group.fetching.done():
            group.fetching = asyncio.create_task(self._fetch_loop(group_id, group))

    async def _fetch_loop(self, group_id: str, group: _Group) -> None:
        while group.reads:
            want = sum(r.want - len(r.got) for r in group.reads)
            try:
                records = await group.member.fetch(min(want, MAX_RECORDS_PER_READ), FETCH_WAIT_MS)
            except KafkaUnavailable as e:
                log.info("share group %s: fetch failed: %s", group_id, e)
                await asyncio.sleep(FETCH_WAIT_MS / 1000)
                continue
            now = time.monotonic()
            for record in records:
                read = next((r for r in group.reads if r.topic == record.topic), None)
                if read is None:
                    group.buffer.append((now, record))
                    continue
                read.got.append(record)
                if len(read.got) >= read.want:
                    self._answer(group, read)
            for read in [r for r in group.reads if r.got]:
                self._answer(group, read)  # a read answers with what it has

    @staticmethod
    def _answer(group: _Group, read: _Read) -> None:
        group.reads.remove(read)
        if not read.done.done():
            read.done.set_result(None)

    # --- pending ---------------------------------------------------------------------------

    def _make_pending(self, group_id: str, group: _Group, record: Record, timeout_s: float) -> None:
        key = (record.topic, record.partition, record.offset)
        old = group.pending.pop(key, None)
        if old is not None:
            old.cancel()
        group.pending[key] = asyncio.get_running_loop().call_later(
            timeout_s, self._expired, group_id, group, key
        )

    def _expired(self, group_id: str, group: _Group, key: tuple[str, int, int]) -> None:
        """Not settled in time: given back, so the record is served again."""
        group.pending.pop(key, None)
        if self._groups.get(group_id) is group:
            asyncio.create_task(self._settle(group, *key, RELEASE))

    # --- acknowledge / cancel --------------------------------------------------------------

    async def settle(
        self, group_id: str, topic: str, partition: int, offset: int, kind: int
    ) -> None:
        """ACCEPT (acknowledge) or RELEASE (cancel) a pending record, whichever proxy handed
        it out; applied by the partition's leader."""
        meta = await self._topic_meta(topic)
        if partition not in meta.leaders:
            raise ProxyError(404, f"topic {topic!r} has no partition {partition}")
        group = self._group(group_id)
        timer = group.pending.pop((topic, partition, offset), None)
        if timer is not None:
            timer.cancel()
        error = await self._settle(group, topic, partition, offset, kind)
        if error in (INVALID_RECORD_STATE, INVALID_REQUEST):  # past what was ever read
            raise ProxyError(
                409,
                f"{topic}-{partition}@{offset} is not pending in group {group_id!r}: never "
                "read, already settled, or its pending timeout ran out",
            )
        if error == UNKNOWN_TOPIC_ID:
            raise ProxyError(404, f"topic {topic!r} does not exist")
        if error != NONE:
            raise ProxyError(503, f"the partition's leader answered Kafka error {error}")

    async def _topic_meta(self, topic: str) -> TopicMeta:
        """The topic's metadata; 403 for an internal one (by its name, existing or not, or as
        the cluster marks it), 404 for none."""
        internal = ProxyError(
            403, f"topic {topic!r} is internal: the proxy serves no internal topic"
        )
        if is_internal(topic):
            raise internal
        try:
            meta = await self.cluster.topic(topic)
        except KafkaUnavailable as e:
            raise ProxyError(503, f"the cluster is not reachable: {e}") from e
        if meta is None:
            raise ProxyError(404, f"topic {topic!r} does not exist")
        if meta.internal:
            raise internal
        return meta

    async def _settle(
        self, group: _Group, topic: str, partition: int, offset: int, kind: int
    ) -> int:
        group.settling += 1
        try:
            return await group.acker.acknowledge(topic, partition, offset, kind)
        except KafkaUnavailable as e:
            log.info("share group %s: acknowledge failed: %s", group.acker.group_id, e)
            return -1
        finally:
            group.settling -= 1

    # --- housekeeping ----------------------------------------------------------------------

    async def _sweep(self) -> None:
        """Gives back fetched records no read took, and leaves groups nobody uses."""
        while True:
            await asyncio.sleep(BUFFER_HOLD_S / 2)
            now = time.monotonic()
            for group_id, group in list(self._groups.items()):
                while group.buffer and now - group.buffer[0][0] >= BUFFER_HOLD_S:
                    _, record = group.buffer.popleft()
                    asyncio.create_task(
                        self._settle(group, record.topic, record.partition, record.offset, RELEASE)
                    )
                if not group.busy and now - group.used > GROUP_IDLE_S:
                    self._leave(group_id)

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        groups, self._groups = list(self._groups.values()), OrderedDict()
        for group in groups:
            for timer in group.pending.values():
                timer.cancel()
            group.pending.clear()
            for _, record in group.buffer:
                await self._settle(group, record.topic, record.partition, record.offset, RELEASE)
            await self._close_group(group)
        self.cluster.close()

    @staticmethod
    async def _close_group(group: _Group) -> None:
        for member in (group.member, group.acker):
            await member.close()
            member.cluster.close()


__all__ = ["ACCEPT", "RELEASE", "ConsumeProxy", "ProxyError"]
