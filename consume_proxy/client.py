"""The proxy's Kafka client: one asyncio connection per broker (requests pipelined, answers
matched by correlation id) and the cluster view it needs (brokers, topic ids, partition
leaders, group coordinators). It speaks Kafka's protocol through kio, so the proxy runs the
same against the node it lives in and, standalone (`raftlog proxy`), against any raftlog
cluster."""

from __future__ import annotations

import asyncio
import io
import itertools
import logging
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kio.index import load_response_from_request
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.serial import entity_reader, entity_writer

log = logging.getLogger(__name__)

_E = TypeVar("_E")
CLIENT_ID = "raftlog-proxy"
REQUEST_TIMEOUT_S = 30.0
# A response larger than this closes the connection: a ShareFetch answer is bounded by the
# max_bytes the proxy asks for (FETCH_MAX_BYTES) plus its framing.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
GROUP_KEY = 0  # FindCoordinator key type of a group
# A name not in the last Metadata asks for a new one at most this often: every HTTP request
# naming a made-up topic used to fetch and decode the whole cluster's metadata.
UNKNOWN_TOPIC_REFRESH_S = 0.5


def make(entity: type[_E], **fields: Any) -> _E:
    """A kio entity from plain values: kio types its fields with NewTypes (i32, GroupId...)
    that are plain ints and strings at run time."""
    return entity(**fields)


class KafkaUnavailable(Exception):
    """A broker could not be reached or answered nothing in time."""


class Connection:
    def __init__(self, host: str, port: int) -> None:
        self.address = (host, port)
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future[Any], type]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None

    @property
    def closed(self) -> bool:
        return self._writer is None or self._writer.is_closing()

    async def open(self) -> None:
        try:
            reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(*self.address), REQUEST_TIMEOUT_S
            )
        except (OSError, TimeoutError) as e:
            raise KafkaUnavailable(f"{self.address}: {e}") from e
        self._reader_task = asyncio.create_task(self._read(reader))

    async def request(self, payload: Any, timeout: float = REQUEST_TIMEOUT_S) -> Any:
        if self._writer is None or self._writer.is_closing():
            raise KafkaUnavailable(f"{self.address}: not connected")
        correlation_id = next(self._ids)
        header_cls: Any = payload.__header_schema__
        buf = io.BytesIO()
        entity_writer(header_cls)(
            buf,
            header_cls(
                request_api_key=payload.__api_key__,
                request_api_version=payload.__version__,
                correlation_id=correlation_id,
                client_id=CLIENT_ID,
            ),
        )
        entity_writer(type(payload))(buf, payload)
        body = buf.getvalue()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (future, load_response_from_request(payload))
        self._writer.write(struct.pack(">i", len(body)) + body)
        try:
            await self._writer.drain()
            return await asyncio.wait_for(future, timeout)
        except (OSError, TimeoutError) as e:
            self.close()
            raise KafkaUnavailable(f"{self.address}: {e or 'timed out'}") from e
        finally:
            self._pending.pop(correlation_id, None)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        error: Exception = KafkaUnavailable(f"{self.address}: connection closed")
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                if not 4 <= size <= MAX_RESPONSE_BYTES:
                    raise KafkaUnavailable(f"{self.address}: a {size}-byte response")
                frame = await reader.readexactly(size)
                (correlation_id,) = struct.unpack_from(">i", frame, 0)
                waiting = self._pending.get(correlation_id)
                if waiting is None:
                    continue  # its request timed out
                future, response_cls = waiting
                header_cls: Any = response_cls.__header_schema__  # type: ignore[attr-defined]
                _, offset = entity_reader(header_cls)(frame, 0)
                body: Any
                body, _ = entity_reader(response_cls)(frame, offset)
                if not future.done():
                    future.set_result(body)
        except (OSError, asyncio.IncompleteReadError, KafkaUnavailable) as e:
            error = e if isinstance(e, KafkaUnavailable) else KafkaUnavailable(str(e))
        except Exception as e:  # a response kio cannot read: the connection is unusable
            log.warning("%s: unreadable response: %s", self.address, e)
            error = KafkaUnavailable(f"{self.address}: unreadable response")
        finally:
            for future, _ in self._pending.values():
                if not future.done():
                    future.set_exception(error)
            self.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None and self._reader_task is not asyncio.current_task():
            self._reader_task.cancel()


@dataclass(frozen=True, slots=True)
class TopicMeta:
    name: str
    topic_id: uuid.UUID
    leaders: dict[int, int] = field(default_factory=dict)  # partition -> leader node (-1 none)
    internal: bool = False  # Metadata's is_internal: the cluster's own state, not data


class ClusterClient:
    """Brokers, topics and connections, refreshed from Metadata when something moved."""

    def __init__(self, bootstrap: list[tuple[str, int]]) -> None:
        self._bootstrap = bootstrap
        self._brokers: dict[int, tuple[str, int]] = {}
        self._connections: dict[int | tuple[str, int], Connection] = {}
        self._opening: dict[int | tuple[str, int], asyncio.Task[Connection]] = {}
        self.topics: dict[str, TopicMeta] = {}
        self.topic_names: dict[uuid.UUID, str] = {}
        self._refreshing: asyncio.Task[None] | None = None
        self._refreshed_at = -UNKNOWN_TOPIC_REFRESH_S  # loop time of the last refresh started

    @property
    def brokers(self) -> list[int]:
        """The node ids the last Metadata named."""
        return sorted(self._brokers)

    async def connection(self, node: int | tuple[str, int]) -> Connection:
        """The node's one connection, opened if it has none. Concurrent callers share one
        opening: before, each opened its own and the last replaced the others in the table,
        so a share session opened on a replaced one ended when that connection was dropped
        (a broker ties a session to its connection): SHARE_SESSION_NOT_FOUND next."""
        conn = self._connections.get(node)
        if conn is not None and not conn.closed:
            return conn
        opening = self._opening.get(node)
        if opening is None or opening.done():
            opening = self._opening[node] = asyncio.create_task(self._open(node))
        return await asyncio.shield(opening)

    async def _open(self, node: int | tuple[str, int]) -> Connection:
        try:
            address = node if isinstance(node, tuple) else self._brokers.get(node)
            if address is None:
                await self.refresh()
                address = self._brokers.get(node) if isinstance(node, int) else None
                if address is None:
                    raise KafkaUnavailable(f"broker {node} is not in the cluster")
            conn = Connection(*address)
            await conn.open()
            self._connections[node] = conn
            return conn
        finally:
            self._opening.pop(node, None)

    async def request_any(self, payload: Any) -> Any:
        """To a known broker, else a bootstrap one: whichever answers first in turn."""
        nodes: list[int | tuple[str, int]] = [*self._brokers, *self._bootstrap]
        last: Exception = KafkaUnavailable("no broker to ask")
        for node in nodes:
            try:
                return await (await self.connection(node)).request(payload)
            except KafkaUnavailable as e:
                last = e
        raise last

    async def refresh(self) -> None:
        """Metadata for every topic; concurrent callers share one request."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshed_at = asyncio.get_running_loop().time()
            self._refreshing = asyncio.create_task(self._refresh())
        await asyncio.shield(self._refreshing)

    async def _refresh(self) -> None:
        answer = await self.request_any(
            MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
        self._brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
        topics: dict[str, TopicMeta] = {}
        for t in answer.topics:
            if t.error_code != 0 or t.name is None or t.topic_id is None:
                continue
            leaders = {p.partition_index: p.leader_id for p in t.partitions}
            topics[t.name] = TopicMeta(t.name, t.topic_id, leaders, bool(t.is_internal))
        self.topics = topics
        self.topic_names = {t.topic_id: t.name for t in topics.values()}

    async def topic(self, name: str) -> TopicMeta | None:
        """The topic as the last Metadata saw it; one it did not name is looked for again
        (a topic created since), in a refresh under way or at most every
        UNKNOWN_TOPIC_REFRESH_S."""
        if name not in self.topics:
            since = asyncio.get_running_loop().time() - self._refreshed_at
            refreshing = self._refreshing is not None and not self._refreshing.done()
            if refreshing or since >= UNKNOWN_TOPIC_REFRESH_S:
                await self.refresh()
        return self.topics.get(name)

    async def coordinator(self, group_id: str) -> int:
        answer = await self.request_any(
            make(FindCoordinatorRequest, key_type=GROUP_KEY, coordinator_keys=(group_id,))
        )
        found = answer.coordinators[0]
        if found.error_code != 0:
            raise KafkaUnavailable(f"no coordinator for {group_id}: error {found.error_code}")
        self._brokers[found.node_id] = (found.host, found.port)
        return int(found.node_id)

    def close(self) -> None:
        for opening in self._opening.values():
            opening.cancel()
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
