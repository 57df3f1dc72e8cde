"""A tiny raw Kafka client over a plain socket, built on `kio`.

For what the real clients cannot be made to send: a chosen current_leader_epoch on Fetch,
ListOffsets and OffsetForLeaderEpoch, Metadata read with its leader epochs, a Produce with
a broken CRC, and outright garbage. Versions are negotiated with ApiVersions and capped
to the ranges this helper builds requests for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import socket
import struct
import time
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import zstandard
from crc32c import crc32c
from kio.index import load_response_schema
from kio.records.schema import NewRecordBatch, Record, RecordHeader
from kio.records.writers import write_new_batch
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.serial import entity_reader, entity_writer

from kafka_api.codec import request_schema, response_schema
from kafka_api.fetch_encoding import uvarint

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
API_VERSIONS = 18
INIT_PRODUCER_ID = 22
OFFSET_FOR_LEADER_EPOCH = 23

# Versions this helper builds requests for (field layouts checked against kio 0.6.5):
# epochs need Fetch v9+, ListOffsets v4+, OffsetForLeaderEpoch v2+, Metadata v7+.
# Fetch v13+ and Produce v13+ name topics by id, so they are left out.
HELPER_RANGES: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 12),
    FETCH: (9, 12),
    LIST_OFFSETS: (4, 9),
    METADATA: (7, 12),
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
    API_VERSIONS: (0, 3),
}

# Kafka error codes used by the tests
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
NOT_ENOUGH_REPLICAS = 19
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
OFFSET_NOT_AVAILABLE = 78

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3


class WireError(Exception):
    pass


class ConnectionClosed(WireError):
    pass


def code(value: Any) -> int:
    """An ErrorCode member (or int) as a plain int."""
    return int(getattr(value, "value", value))


# --------------------------------------------------------------------------- encoding


def build(cls: type, data: dict[str, Any]) -> Any:
    """Construct a kio entity from plain dicts/lists, recursively.

    Keys that the entity (at this version) does not have are dropped, so one description
    serves several versions; nested entity tuples take lists of dicts."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        inner = _entity_of(hints[f.name])
        if inner is not None and value is not None:
            value = tuple(build(inner, v) if isinstance(v, dict) else v for v in value)
        elif _is_timedelta(hints[f.name]) and isinstance(value, int | float):
            value = datetime.timedelta(milliseconds=value)
        kwargs[f.name] = value
    return cls(**kwargs)


def _entity_of(tp: Any) -> type | None:
    """The entity class of a `tuple[Entity, ...]` (or Optional of it) annotation."""
    for cand in (tp, *typing.get_args(tp)):
        if typing.get_origin(cand) is tuple:
            args = typing.get_args(cand)
            if args and dataclasses.is_dataclass(args[0]):
                return args[0]
    return None


def _is_timedelta(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, datetime.timedelta)


def encode_request(
    payload: Any, correlation_id: int, client_id: str | None = "raftlog-tests"
) -> bytes:
    """Header (v1 or v2, as the payload's schema says) + body, with the 4-byte size prefix."""
    header_cls = payload.__header_schema__
    header = header_cls(
        request_api_key=payload.__api_key__,
        request_api_version=payload.__version__,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header)
    entity_writer(type(payload))(buf, payload)
    body = buf.getvalue()
    return struct.pack(">i", len(body)) + body


def encode_body(payload: Any) -> bytes:
    """Just the body of a request (no header, no size prefix)."""
    buf = io.BytesIO()
    entity_writer(type(payload))(buf, payload)
    return buf.getvalue()


def encode_raw_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    body: bytes = b"",
    flexible_header: bool = False,
    client_id: str | None = "raftlog-tests",
) -> bytes:
    """A framed request with an arbitrary (possibly unknown) api key/version and body."""
    header_cls = RequestHeaderV2 if flexible_header else RequestHeaderV1
    buf = io.BytesIO()
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=api_key,
            request_api_version=api_version,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    buf.write(body)
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def decode_response(frame: bytes, response_cls: type) -> tuple[int, Any]:
    """(correlation_id, response entity) from a response frame without its size prefix."""
    frame = bytes(frame)
    header, size = entity_reader(response_cls.__header_schema__)(frame, 0)
    body, _ = entity_reader(response_cls)(frame, size)
    return int(header.correlation_id), body


def response_correlation_id(frame: bytes) -> int:
    return struct.unpack_from(">i", frame, 0)[0]


# --------------------------------------------------------------------------- record batches


def make_batch(
    records: Sequence[tuple[bytes | None, bytes | None]] | None = None,
    timestamp_ms: int | None = None,
    headers: Sequence[tuple[str, bytes | None]] = (),
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
) -> bytes:
    """One uncompressed magic-2 RecordBatch (base offset 0); `producer` is
    (producer id, epoch, base sequence), none by default."""
    records = records or [(b"k", b"v")]
    ts = datetime.datetime.fromtimestamp(
        (timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)) / 1000,
        tz=datetime.UTC,
    )
    hdrs = tuple(RecordHeader(key=k.encode(), value=v) for k, v in headers)
    batch = NewRecordBatch(
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        attributes=0x10 if transactional else 0,
        records=tuple(
            Record(attributes=0, timestamp=ts, offset=i, key=k, value=v, headers=hdrs)
            for i, (k, v) in enumerate(records)
        ),
    )
    buf = io.BytesIO()
    write_new_batch(buf, batch)
    return buf.getvalue()


def zigzag(n: int) -> bytes:
    """Kafka's signed varint (zigzag, then 7 bits a byte) of a record field."""
    return uvarint((n << 1) ^ (n >> 63))


def with_payload(batch: bytes, codec: int, payload: bytes) -> bytes:
    """`batch`'s header around another payload, marked as compressed with `codec`; batch
    length and CRC-32C made valid, so only what is inside can be wrong."""
    head = bytearray(batch[:61]) + payload
    struct.pack_into(">i", head, 8, len(head) - 12)
    struct.pack_into(">h", head, 21, codec)
    struct.pack_into(">I", head, 17, crc32c(bytes(head[21:])))
    return bytes(head)


def zstd_bomb(size: int) -> bytes:
    """zstd of `size` zero bytes (a multiple of 1 MiB), made without holding them: 1 GiB
    comes out at about 32 KB."""
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    chunk = bytes(1 << 20)
    return b"".join(compressor.compress(chunk) for _ in range(size >> 20)) + compressor.flush()


def zstd_record_bomb(size: int) -> bytes:
    """zstd of `size` bytes (a multiple of 1 MiB, roughly) of whole records, each a null key
    and a value of zeros: a walk of their lengths passes them all, so only the bound stops
    it. Made without holding them; 1 GiB comes out at about 100 KB."""
    value = bytes(65_000)
    body = b"\x00" + zigzag(0) + zigzag(0) + zigzag(-1) + zigzag(len(value)) + value + zigzag(0)
    record = zigzag(len(body)) + body
    chunk = record * ((1 << 20) // len(record))
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    return b"".join(compressor.compress(chunk) for _ in range(size >> 20)) + compressor.flush()


def corrupt_crc(batch: bytes) -> bytes:
    """The same batch with every bit of its CRC-32C field (bytes 17..20) flipped."""
    (crc,) = struct.unpack_from(">I", batch, 17)
    return batch[:17] + struct.pack(">I", crc ^ 0xFFFFFFFF) + batch[21:]


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class PartitionMeta:
    topic: str
    partition: int
    error: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass
class Metadata:
    brokers: dict[int, str]  # node id -> "host:port"
    controller_id: int
    topics: dict[str, dict[int, PartitionMeta]]
    topic_errors: dict[str, int]

    def partition(self, topic: str, partition: int) -> PartitionMeta:
        return self.topics[topic][partition]


@dataclass(frozen=True)
class EpochEndOffset:
    error: int
    leader_epoch: int
    end_offset: int


@dataclass(frozen=True)
class ListOffsetsResult:
    error: int
    offset: int
    timestamp: int
    leader_epoch: int


@dataclass(frozen=True)
class FetchResult:
    error: int
    high_watermark: int
    log_start_offset: int
    records: bytes


@dataclass(frozen=True)
class ProduceResult:
    error: int
    base_offset: int
    error_message: str | None


# --------------------------------------------------------------------------- client


def parse_address(address: str | tuple[str, int]) -> tuple[str, int]:
    if isinstance(address, tuple):
        return address
    host, port = address.rsplit(":", 1)
    return host, int(port)


class KafkaWire:
    """One blocking TCP connection to one broker. Every read is bounded by `timeout`."""

    def __init__(
        self,
        address: str | tuple[str, int],
        timeout: float = 15.0,
        client_id: str | None = "raftlog-tests",
    ) -> None:
        self.address = parse_address(address)
        self.timeout = timeout
        self.client_id = client_id
        self._sock: socket.socket | None = None
        self._buf = b""
        self._correlation = 0
        self._versions: dict[int, tuple[int, int]] | None = None

    # ----------------------------------------------------------------- socket

    def connect(self) -> KafkaWire:
        if self._sock is None:
            self._sock = socket.create_connection(self.address, timeout=self.timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
            self._buf = b""

    def __enter__(self) -> KafkaWire:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def sock(self) -> socket.socket:
        return self.connect()._sock  # type: ignore[return-value]

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def shutdown_write(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    def _recv_exact(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"no complete response from {self.address} within {self.timeout}s"
                )
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(max(65536, n - len(self._buf)))
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError) as exc:
                raise ConnectionClosed(f"connection reset by {self.address}") from exc
            if not chunk:
                raise ConnectionClosed(f"connection closed by {self.address}")
            self._buf += chunk
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def recv_frame(self, timeout: float | None = None) -> bytes:
        """The next response frame (without its size prefix)."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        (size,) = struct.unpack(">i", self._recv_exact(4, deadline))
        if size < 0 or size > 512 * 1024 * 1024:
            raise WireError(f"absurd response size {size}")
        return self._recv_exact(size, deadline)

    def wait_closed(self, timeout: float = 10.0) -> tuple[bool, list[bytes]]:
        """Read until the peer closes the connection (True) or `timeout` passes (False).
        Returns the complete frames received meanwhile."""
        frames = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                frames.append(self.recv_frame(timeout=max(0.01, deadline - time.monotonic())))
            except ConnectionClosed:
                return True, frames
            except TimeoutError:
                break
            except (WireError, OSError):
                return True, frames
        return False, frames

    # ----------------------------------------------------------------- requests

    def next_correlation_id(self) -> int:
        self._correlation += 1
        return self._correlation

    def request(self, payload: Any, timeout: float | None = None) -> Any:
        """Send one request and decode its response (checking the correlation id)."""
        cid = self.next_correlation_id()
        self.send_bytes(encode_request(payload, cid, self.client_id))
        frame = self.recv_frame(timeout)
        response_cls = response_schema(payload.__api_key__, payload.__version__)
        got, body = decode_response(frame, response_cls)
        if got != cid:
            raise WireError(f"correlation id {got} in response, expected {cid}")
        return body

    def call(
        self, api_key: int, version: int, data: dict[str, Any], timeout: float | None = None
    ) -> Any:
        return self.request(build(request_schema(api_key, version), data), timeout)

    def api_versions(self, version: int = 0) -> dict[int, tuple[int, int]]:
        """{api_key: (min, max)} as the broker advertises them (cached)."""
        if self._versions is None or version != 0:
            data = {"client_software_name": "raftlog-tests", "client_software_version": "0"}
            resp = self.call(API_VERSIONS, version, data)
            if code(resp.error_code) != NONE:
                raise WireError(f"ApiVersions v{version} answered error {code(resp.error_code)}")
            self._versions = {
                int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys
            }
        return self._versions

    def version(self, api_key: int, lo: int | None = None, hi: int | None = None) -> int:
        """The highest version both sides speak within [lo, hi] (default: HELPER_RANGES)."""
        h_lo, h_hi = HELPER_RANGES[api_key]
        lo = h_lo if lo is None else max(lo, h_lo)
        hi = h_hi if hi is None else min(hi, h_hi)
        versions = self.api_versions()
        if api_key not in versions:
            raise WireError(f"broker does not advertise api key {api_key}")
        b_lo, b_hi = versions[api_key]
        v = min(hi, b_hi)
        if v < max(lo, b_lo):
            raise WireError(
                f"api key {api_key}: broker speaks v{b_lo}-v{b_hi}, this helper needs v{lo}-v{hi}"
            )
        return v

    # ----------------------------------------------------------------- typed helpers

    def metadata(self, topics: Iterable[str] | None = None, version: int | None = None) -> Metadata:
        v = version if version is not None else self.version(METADATA)
        req_topics = (
            None if topics is None else [{"name": t, "topic_id": _ZERO_UUID} for t in topics]
        )
        resp = self.call(
            METADATA,
            v,
            {
                "topics": req_topics,
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )
        brokers = {int(b.node_id): f"{b.host}:{int(b.port)}" for b in resp.brokers}
        out: dict[str, dict[int, PartitionMeta]] = {}
        errors: dict[str, int] = {}
        for t in resp.topics:
            name = str(t.name)
            errors[name] = code(t.error_code)
            out[name] = {
                int(p.partition_index): PartitionMeta(
                    topic=name,
                    partition=int(p.partition_index),
                    error=code(p.error_code),
                    leader=int(p.leader_id),
                    leader_epoch=int(p.leader_epoch),
                    replicas=tuple(int(r) for r in p.replica_nodes),
                    isr=tuple(int(r) for r in p.isr_nodes),
                )
                for p in t.partitions
            }
        return Metadata(brokers, int(resp.controller_id), out, errors)

    def list_offsets(
        self,
        topic: str,
        partition: int,
        timestamp: int = LATEST,
        current_leader_epoch: int = -1,
        version: int | None = None,
    ) -> ListOffsetsResult:
        v = version if version is not None else self.version(LIST_OFFSETS)
        resp = self.call(
            LIST_OFFSETS,
            v,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": partition,
                                "current_leader_epoch": current_leader_epoch,
                                "timestamp": timestamp,
                            }
                        ],
                    }
                ],
                "timeout": 5000,
            },
        )
        p = _only_partition(resp.topics, "partitions")
        return ListOffsetsResult(
            error=code(p.error_code),
            offset=int(p.offset),
            timestamp=int(p.timestamp),
            leader_epoch=int(p.leader_epoch),
        )

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        current_leader_epoch: int = -1,
        max_wait_ms: int = 100,
        max_bytes: int = 1024 * 1024,
        version: int | None = None,
    ) -> FetchResult:
        v = version if version is not None else self.version(FETCH)
        resp = self.call(
            FETCH,
            v,
            {
                "replica_id": -1,
                "max_wait": max_wait_ms,
                "min_bytes": 1,
                "max_bytes": max_bytes,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": partition,
                                "current_leader_epoch": current_leader_epoch,
                                "fetch_offset": offset,
                                "last_fetched_epoch": -1,
                                "log_start_offset": -1,
                                "partition_max_bytes": max_bytes,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
            timeout=self.timeout + max_wait_ms / 1000,
        )
        if code(resp.error_code) != NONE:
            return FetchResult(code(resp.error_code), -1, -1, b"")
        p = _only_partition(resp.responses, "partitions")
        return FetchResult(
            error=code(p.error_code),
            high_watermark=int(p.high_watermark),
            log_start_offset=int(p.log_start_offset),
            records=bytes(p.records or b""),
        )

    def offset_for_leader_epoch(
        self,
        topic: str,
        partition: int,
        leader_epoch: int,
        current_leader_epoch: int = -1,
        version: int | None = None,
    ) -> EpochEndOffset:
        v = version if version is not None else self.version(OFFSET_FOR_LEADER_EPOCH)
        resp = self.call(
            OFFSET_FOR_LEADER_EPOCH,
            v,
            {
                "replica_id": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": partition,
                                "current_leader_epoch": current_leader_epoch,
                                "leader_epoch": leader_epoch,
                            }
                        ],
                    }
                ],
            },
        )
        p = _only_partition(resp.topics, "partitions")
        return EpochEndOffset(code(p.error_code), int(p.leader_epoch), int(p.end_offset))

    def produce(
        self,
        topic: str,
        partition: int,
        records: bytes,
        acks: int = -1,
        timeout_ms: int = 30000,
        version: int | None = None,
    ) -> ProduceResult:
        v = version if version is not None else self.version(PRODUCE)
        resp = self.call(
            PRODUCE,
            v,
            {
                "transactional_id": None,
                "acks": acks,
                "timeout": timeout_ms,
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": partition, "records": records}]}
                ],
            },
            timeout=self.timeout + timeout_ms / 1000,
        )
        p = _only_partition(resp.responses, "partition_responses")
        return ProduceResult(
            code(p.error_code), int(p.base_offset), getattr(p, "error_message", None)
        )

    def init_producer_id(self, version: int = 4) -> tuple[int, int, int]:
        """(error, producer id, epoch) for a new idempotent producer."""
        resp = self.call(
            INIT_PRODUCER_ID,
            version,
            {"transactional_id": None, "transaction_timeout": 60000},
        )
        return code(resp.error_code), int(resp.producer_id), int(resp.producer_epoch)


_ZERO_UUID = __import__("uuid").UUID(int=0)


def _only_partition(topics: Sequence[Any], field: str) -> Any:
    if len(topics) != 1 or len(getattr(topics[0], field)) != 1:
        raise WireError(f"expected exactly one topic/partition in the response, got {topics!r}")
    return getattr(topics[0], field)[0]


def decode_api_versions_v0(frame: bytes) -> tuple[int, Any]:
    """(correlation id, ApiVersionsResponse v0) — the answer to ApiVersions of any version."""
    cls = load_response_schema(API_VERSIONS, 0)
    assert cls.__header_schema__ is ResponseHeaderV0
    return decode_response(frame, cls)


# --------------------------------------------------------------------------- cluster-level


def find_partition_leader(
    bootstrap: str, topic: str, partition: int, timeout: float = 10.0
) -> tuple[PartitionMeta, str]:
    """(partition metadata, leader's "host:port") from the first broker that answers."""
    last: Exception | None = None
    for addr in bootstrap.split(","):
        try:
            with KafkaWire(addr, timeout=timeout) as w:
                md = w.metadata([topic])
            pm = md.partition(topic, partition)
            return pm, md.brokers[pm.leader]
        except (OSError, WireError, KeyError) as exc:
            last = exc
    raise WireError(f"no broker in {bootstrap} gave metadata for {topic}-{partition}: {last!r}")


def topic_metadata(bootstrap: str, topic: str, timeout: float = 30.0) -> Metadata:
    """Metadata for `topic` once every partition has a leader (bounded retry)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        for addr in bootstrap.split(","):
            try:
                with KafkaWire(addr, timeout=5) as w:
                    md = w.metadata([topic])
            except (OSError, WireError) as exc:
                last = exc
                continue
            parts = md.topics.get(topic, {})
            if (
                md.topic_errors.get(topic) == NONE
                and parts
                and all(
                    p.error == NONE and p.leader >= 0 and p.leader in md.brokers
                    for p in parts.values()
                )
            ):
                return md
            last = (md.topic_errors.get(topic), parts)
        if time.monotonic() >= deadline:
            raise WireError(f"no complete metadata for {topic} within {timeout}s: {last!r}")
        time.sleep(0.3)


def end_offsets(bootstrap: str, topic: str, timeout: float = 30.0) -> dict[int, int]:
    """{partition: log end offset (ListOffsets LATEST, i.e. the high watermark)} from each
    partition's leader, retrying through leader changes (bounded)."""
    deadline = time.monotonic() + timeout
    out: dict[int, int] = {}
    last: object = None
    while True:
        md = topic_metadata(bootstrap, topic, max(1.0, deadline - time.monotonic()))
        for p, pm in md.topics[topic].items():
            if p in out:
                continue
            try:
                with KafkaWire(md.brokers[pm.leader], timeout=5) as w:
                    r = w.list_offsets(topic, p, LATEST)
            except (OSError, WireError) as exc:
                last = exc
                continue
            if r.error == NONE:
                out[p] = r.offset
            else:
                last = (p, r)
        if len(out) == len(md.topics[topic]):
            return out
        if time.monotonic() >= deadline:
            raise WireError(f"no end offsets for {topic} within {timeout}s: {last!r}")
        time.sleep(0.3)
