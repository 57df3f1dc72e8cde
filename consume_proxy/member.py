"""One proxy's membership of one share group, spoken in Kafka's protocol: heartbeats to the
group's coordinator (the broker assigns partitions), a share session with each node leading
an assigned partition, ShareFetch to acquire records and ShareAcknowledge to settle them.

Its member id starts with PROXY_MEMBER_PREFIX: a partition leader lets any proxy member of a
group acknowledge what another proxy member holds, which is what lets an HTTP client
acknowledge a record at any node, not only at the one that handed it out
(docs/consume_proxy.md). A member opens share sessions only once its group's coordinator
knows it, so every member joins first, the one that only acknowledges too (ACKS_ONLY)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.share_acknowledge.v2 import request as ack_req
from kio.schema.share_fetch.v2 import request as fetch_req
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest

from consume_proxy.client import ClusterClient, KafkaUnavailable, make
from raftlog.share.partition_state import PROXY_MEMBER_PREFIX
from raftlog.storage.batch import records_in_range
from raftlog.storage.records import fields

log = logging.getLogger(__name__)

FETCH_MAX_BYTES = 8 * 1024 * 1024
MAX_EPOCH = 2**31 - 1
RETRY_S = 0.5
LEAVE = -1

# Kafka error codes the member acts on
NONE = 0
NOT_LEADER_OR_FOLLOWER = 6
NOT_COORDINATOR = 16
COORDINATOR_NOT_AVAILABLE = 15
COORDINATOR_LOAD_IN_PROGRESS = 14
UNKNOWN_MEMBER_ID = 25
FENCED_MEMBER_EPOCH = 110
UNKNOWN_TOPIC_ID = 100
SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123
INVALID_RECORD_STATE = 121
INVALID_REQUEST = 42

# What a member that only acknowledges subscribes to: a name no topic can have (':' is not a
# topic name character), so it joins, which lets it open share sessions, and the assignor
# gives it no partition, taking none from the members that read.
ACKS_ONLY = "raftlog-proxy:acknowledges-only"
JOIN_WAIT_S = 10.0  # how long an acknowledgement waits for its member to join

ACCEPT, RELEASE = 1, 2
RECORD_LIMIT = 1  # ShareFetch v2's share_acquire_mode: max_records exactly
Key = tuple[str, int]  # (topic, partition)


@dataclass(slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int
    delivery_count: int


@dataclass(slots=True)
class _Ack:
    offset: int
    kind: int
    answer: asyncio.Future[int] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class ShareMember:
    def __init__(
        self, cluster: ClusterClient, group_id: str, subscription: str | None = None
    ) -> None:
        """subscription: a fixed one (ACKS_ONLY); else the topics read, as subscribe() adds
        them."""
        self.cluster = cluster
        self.group_id = group_id
        self.member_id = PROXY_MEMBER_PREFIX + uuid.uuid4().hex
        self.lock_timeout_ms = 30_000  # the group's record lock duration, as ShareFetch says
        self._epoch = 0
        self.joined = asyncio.Event()  # the coordinator knows this member
        self._topics: set[str] = {subscription} if subscription is not None else set()
        self._subscription_sent: frozenset[str] | None = None
        self.assignment: dict[str, tuple[int, ...]] = {}
        self.assigned = asyncio.Event()
        self._sessions: dict[int, int] = {}  # node -> the next share session epoch
        self._node_locks: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._acks: defaultdict[int, dict[Key, list[_Ack]]] = defaultdict(dict)
        self._ack_flush: dict[int, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._closed = False
        self._heartbeats: asyncio.Task[None] | None = None  # from the first read or acknowledgement

    def subscribe(self, topic: str) -> None:
        if topic not in self._topics:
            self._topics.add(topic)
            self._wake.set()
        if self._heartbeats is None:
            self._heartbeats = asyncio.create_task(self._heartbeat_loop())

    # --- membership ------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        interval = 0.0
        while not self._closed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval)
            self._wake.clear()
            try:
                interval = await self._heartbeat()
            except KafkaUnavailable as e:
                log.info("share group %s: heartbeat failed: %s", self.group_id, e)
                interval = RETRY_S

    async def _heartbeat(self, leaving: bool = False) -> float:
        topics = frozenset(self._topics)
        names = None  # unchanged since the coordinator last heard them
        if not leaving and (topics != self._subscription_sent or not self._epoch):
            names = tuple(sorted(topics))
        coordinator = await self.cluster.coordinator(self.group_id)
        conn = await self.cluster.connection(coordinator)
        answer = await conn.request(
            make(
                ShareGroupHeartbeatRequest,
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=LEAVE if leaving else self._epoch,
                subscribed_topic_names=names,
            )
        )
        if answer.error_code in (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH):
            self._epoch, self._subscription_sent = 0, None  # join again
            self.joined.clear()
            return 0.0
        if answer.error_code != NONE:
            return RETRY_S  # coordinator moving or loading: ask again soon
        self._epoch = answer.member_epoch
        self._subscription_sent = topics
        if not leaving:
            self.joined.set()
        if answer.assignment is not None:
            await self._assign(answer.assignment.topic_partitions)
        return float(answer.heartbeat_interval.total_seconds())

    async def _assign(self, topic_partitions: Iterable[object]) -> None:
        assignment: dict[str, tuple[int, ...]] = {}
        for tp in topic_partitions:
            topic_id = tp.topic_id  # type: ignore[attr-defined]
            if topic_id not in self.cluster.topic_names:
                await self.cluster.refresh()
            name = self.cluster.topic_names.get(topic_id)
            if name is not None:
                assignment[name] = tuple(tp.partitions)  # type: ignore[attr-defined]
        self.assignment = assignment
        self.assigned.set()

    # --- fetching --------------------------------------------------------------------------

    async def fetch(self, max_records: int, wait_ms: int) -> list[Record]:
        """Acquires up to about max_records records (whole batches) from every node leading an
        assigned partition, waiting up to wait_ms for some."""
        if not self.assignment:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.assigned.wait(), wait_ms / 1000)
        by_node: defaultdict[int, list[Key]] = defaultdict(list)
        for topic, partitions in self.assignment.items():
            meta = self.cluster.topics.get(topic)
            for p in partitions:
                leader = meta.leaders.get(p, -1) if meta is not None else -1
                if leader >= 0:
                    by_node[leader].append((topic, p))
        if not by_node:
            if self.assignment:
                await self.cluster.refresh()
            await asyncio.sleep(min(wait_ms / 1000, RETRY_S))
            return []
        answers = await asyncio.gather(
            *(self._fetch_node(n, keys, max_records, wait_ms) for n, keys in by_node.items()),
            return_exceptions=True,
        )
        records: list[Record] = []
        for answer in answers:
            if isinstance(answer, BaseException):
                if not isinstance(answer, KafkaUnavailable):
                    raise answer
                await self.cluster.refresh()  # a node gone: its partitions move
                continue
            records.extend(answer)
        return records

    async def _fetch_node(
        self, node: int, keys: list[Key], max_records: int, wait_ms: int
    ) -> list[Record]:
        topics: defaultdict[str, list[int]] = defaultdict(list)
        for topic, p in keys:
            topics[topic].append(p)
        async with self._node_locks[node]:
            conn = await self.cluster.connection(node)
            epoch = self._sessions.get(node, 0)
            topics_wanted = tuple(
                make(
                    fetch_req.FetchTopic,
                    topic_id=self.cluster.topics[t].topic_id,
                    partitions=tuple(
                        make(
                            fetch_req.FetchPartition, partition_index=p, acknowledgement_batches=()
                        )
                        for p in ps
                    ),
                )
                for t, ps in topics.items()
                if t in self.cluster.topics
            )
            answer = await conn.request(
                self._fetch_request(epoch, wait_ms, max_records, topics_wanted),
                timeout=wait_ms / 1000 + 30,
            )
            if not self._session_step(node, epoch, answer.error_code):
                return []
        if answer.acquisition_lock_timeout:
            self.lock_timeout_ms = int(answer.acquisition_lock_timeout.total_seconds() * 1000)
        acquired: list[tuple[str, int, bytes, Iterable[object]]] = []
        stale = False
        for topic in answer.responses:
            name = self.cluster.topic_names.get(topic.topic_id)
            for p in topic.partitions:
                if p.error_code != NONE:
                    stale = stale or p.error_code in (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_ID)
                    continue
                if name is not None and p.acquired_records:
                    acquired.append((name, p.partition_index, p.records, p.acquired_records))
        if stale:
            await self.cluster.refresh()
        if not acquired:
            return []
        # up to FETCH_MAX_BYTES of batches, parsed in Python: not on the event loop
        return await asyncio.to_thread(_all_records, acquired)

    def _fetch_request(
        self, epoch: int, wait_ms: int, max_records: int, topics: tuple[object, ...]
    ) -> fetch_req.ShareFetchRequest:
        return make(
            fetch_req.ShareFetchRequest,
            group_id=self.group_id,
            member_id=self.member_id,
            share_session_epoch=epoch,
            max_wait=datetime.timedelta(milliseconds=wait_ms),
            min_bytes=1,
            max_bytes=FETCH_MAX_BYTES,
            max_records=max_records,
            batch_size=max_records,
            # exactly what the waiting reads want: a record fetched for nobody would be given
            # back with its delivery counted
            share_acquire_mode=RECORD_LIMIT,
            is_renew_ack=False,
            topics=topics,
            forgotten_topics_data=(),
        )

    def _session_step(self, node: int, epoch: int, error: int) -> bool:
        """Moves the node's session epoch on after an answer; a lost session starts over,
        and one the leader would not open for a member it does not know waits for a
        heartbeat (sent at once) to join it again."""
        if error in (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH):
            self._sessions.pop(node, None)
            return False
        if error == UNKNOWN_MEMBER_ID:
            self.joined.clear()
            self._wake.set()
            return False
        if error != NONE:
            return False
        self._sessions[node] = 1 if epoch >= MAX_EPOCH else epoch + 1
        return True

    # --- acknowledging ---------------------------------------------------------------------

    async def acknowledge(self, topic: str, partition: int, offset: int, kind: int) -> int:
        """ACCEPT or RELEASE one record at its partition's leader; the Kafka error code. What
        arrives while a node's acknowledgement is in flight goes in its next one."""
        meta = await self.cluster.topic(topic)
        if meta is None:
            return UNKNOWN_TOPIC_ID
        leader = meta.leaders.get(partition, -1)
        if leader < 0:
            return NOT_LEADER_OR_FOLLOWER
        ack = _Ack(offset, kind)
        self._acks[leader].setdefault((topic, partition), []).append(ack)
        flushing = self._ack_flush.get(leader)
        if flushing is None or flushing.done():
            self._ack_flush[leader] = asyncio.create_task(self._flush_acks(leader))
        return await ack.answer

    async def _flush_acks(self, node: int) -> None:
        while self._acks[node]:
            pending, self._acks[node] = self._acks[node], {}
            try:
                errors = await self._send_acks(node, pending)
            except KafkaUnavailable:
                await self.cluster.refresh()
                errors = dict.fromkeys(pending, NOT_LEADER_OR_FOLLOWER)
            retry: list[tuple[Key, _Ack]] = []
            for key, acks in pending.items():
                error = errors.get(key, NONE)
                if error in (INVALID_RECORD_STATE, INVALID_REQUEST) and len(acks) > 1:
                    # all or nothing per partition: one stale offset must not fail the others
                    retry.extend((key, ack) for ack in acks)
                    continue
                for ack in acks:
                    if not ack.answer.done():
                        ack.answer.set_result(error)
            for key, ack in retry:
                try:
                    answer = await self._send_acks(node, {key: [ack]})
                except KafkaUnavailable:
                    answer = {key: NOT_LEADER_OR_FOLLOWER}
                if not ack.answer.done():
                    ack.answer.set_result(answer.get(key, NONE))

    async def _send_acks(self, node: int, pending: dict[Key, list[_Ack]]) -> dict[Key, int]:
        """Sent again once, in a new session, if the node lost this member's session (its
        connection dropped, or evicted): what a lost session held went back to the group, so
        a record this member held answers INVALID_RECORD_STATE then, and one another proxy
        member holds (what the acknowledging member settles) is acknowledged."""
        errors = await self._send_acks_once(node, pending)
        lost = (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH)
        if any(e in lost for e in errors.values()):
            errors = await self._send_acks_once(node, pending)
        return errors

    async def _send_acks_once(self, node: int, pending: dict[Key, list[_Ack]]) -> dict[Key, int]:
        async with self._node_locks[node]:
            conn = await self.cluster.connection(node)
            if self._sessions.get(node, 0) == 0:  # a session to acknowledge in, fetching nothing
                await self._join()
                opened = await conn.request(self._fetch_request(0, 0, 1, ()))
                if not self._session_step(node, 0, opened.error_code):
                    return dict.fromkeys(pending, opened.error_code or SHARE_SESSION_NOT_FOUND)
            epoch = self._sessions[node]
            by_topic: defaultdict[str, list[ack_req.AcknowledgePartition]] = defaultdict(list)
            for (topic, partition), acks in pending.items():
                by_topic[topic].append(
                    make(
                        ack_req.AcknowledgePartition,
                        partition_index=partition,
                        acknowledgement_batches=_batches(acks),
                    )
                )
            answer = await conn.request(
                make(
                    ack_req.ShareAcknowledgeRequest,
                    group_id=self.group_id,
                    member_id=self.member_id,
                    share_session_epoch=epoch,
                    is_renew_ack=False,
                    topics=tuple(
                        make(
                            ack_req.AcknowledgeTopic,
                            topic_id=self.cluster.topics[t].topic_id,
                            partitions=tuple(ps),
                        )
                        for t, ps in by_topic.items()
                    ),
                )
            )
            self._session_step(node, epoch, answer.error_code)
        if answer.error_code != NONE:
            return dict.fromkeys(pending, int(answer.error_code))
        errors: dict[Key, int] = {}
        for topic in answer.responses:
            name = self.cluster.topic_names.get(topic.topic_id, "")
            for p in topic.partitions:
                errors[(name, p.partition_index)] = int(p.error_code)
        return errors

    async def _join(self) -> None:
        """Until the group's coordinator knows this member: a partition leader opens a share
        session for no other."""
        if self._heartbeats is None:
            self._heartbeats = asyncio.create_task(self._heartbeat_loop())
        try:
            await asyncio.wait_for(self.joined.wait(), JOIN_WAIT_S)
        except TimeoutError as e:
            raise KafkaUnavailable(f"{self.group_id}: not joined within {JOIN_WAIT_S:.0f} s") from e

    async def close(self) -> None:
        """Leaves the group; what this member still holds comes back when its sessions close
        or, at the latest, when its locks expire."""
        self._closed = True
        if self._heartbeats is None:
            return
        self._heartbeats.cancel()
        with contextlib.suppress(KafkaUnavailable, TimeoutError):
            await asyncio.wait_for(self._heartbeat(leaving=True), 5)


def _batches(acks: list[_Ack]) -> tuple[ack_req.AcknowledgementBatch, ...]:
    """One batch per run of consecutive offsets with one type; an offset named twice (a
    duplicate HTTP request) once."""
    runs: list[list[int]] = []  # first, last, kind
    for ack in sorted({a.offset: a for a in acks}.values(), key=lambda a: a.offset):
        if runs and runs[-1][1] == ack.offset - 1 and runs[-1][2] == ack.kind:
            runs[-1][1] = ack.offset
        else:
            runs.append([ack.offset, ack.offset, ack.kind])
    return tuple(
        make(ack_req.AcknowledgementBatch, first_offset=f, last_offset=last, acknowledge_types=(k,))
        for f, last, k in runs
    )


def _all_records(acquired: list[tuple[str, int, bytes, Iterable[object]]]) -> list[Record]:
    return [
        r
        for topic, partition, data, ranges in acquired
        for r in _records(topic, partition, data, ranges)
    ]


def _records(topic: str, partition: int, data: bytes, acquired: Iterable[object]) -> list[Record]:
    """The acquired records of a ShareFetch answer. Its batches may hold many others (a
    producer's batch of 10,000 records for a read of 10): only the acquired ones are decoded."""
    counts: dict[int, int] = {}
    for a in acquired:
        for offset in range(a.first_offset, a.last_offset + 1):  # type: ignore[attr-defined]
            counts[offset] = int(a.delivery_count)  # type: ignore[attr-defined]
    if not counts:
        return []
    found: list[Record] = []
    for offset, stamp, section, start, end in records_in_range(data, min(counts), max(counts)):
        if (count := counts.get(offset)) is not None:
            key, value, headers = fields(section, start, end)
            found.append(Record(topic, partition, offset, key, value, headers, stamp, count))
    return found
