"""Decode `__consumer_offsets` records with Kafka's own schemas, independently of raftlog.

Written from apache/kafka group-coordinator/src/main/resources/common/message/*.json
(the tests must not import raftlog.groups: a shared bug would cancel out):

- Key: int16 version, then the struct. Versions 0 and 1 are OffsetCommitKey
  {group string, topic string, partition int32}; version 2 is GroupMetadataKey
  {group string}. Versions 3+ belong to newer group protocols: readers skip them.
- OffsetCommitValue, versions 0-4 (4 is flexible):
  offset int64 (0+), leaderEpoch int32 (3+), metadata string (0+),
  commitTimestamp int64 (0+), expireTimestamp int64 (1 only).
- GroupMetadataValue, versions 0-4 (4 is flexible):
  protocolType string, generation int32, protocol string?, leader string?,
  currentStateTimestamp int64 (2+), members [MemberMetadata]:
  memberId string, groupInstanceId string? (3+), clientId string, clientHost string,
  rebalanceTimeout int32 (1+), sessionTimeout int32, subscription bytes, assignment bytes.
- A null value is a tombstone.

Also the consumer protocol's subscription and assignment (ConsumerProtocolSubscription /
ConsumerProtocolAssignment, clients/src/main/resources/common/message), which is what
GroupMetadataValue members carry for a "consumer" group.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSIONS = range(0, 5)
GROUP_METADATA_VALUE_VERSIONS = range(0, 5)
FLEXIBLE_VALUE_VERSION = 4


class DecodeError(ValueError):
    """The bytes do not follow the schema (short, trailing bytes, bad length...)."""


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class OffsetCommitKey:
    version: int
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupMetadataKey:
    version: int
    group: str


@dataclass(frozen=True)
class UnknownKey:
    """A key version this reader does not know (newer group protocols): skipped."""

    version: int
    raw: bytes


@dataclass(frozen=True)
class OffsetCommitValue:
    version: int
    offset: int
    leader_epoch: int  # -1 before v3
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # v1 only


@dataclass(frozen=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int  # -1 before v1
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadataValue:
    version: int
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int  # -1 before v2
    members: tuple[MemberMetadata, ...]


Key = OffsetCommitKey | GroupMetadataKey | UnknownKey
Value = OffsetCommitValue | GroupMetadataValue


# --------------------------------------------------------------------------- reader


class Reader:
    """Big-endian primitives of the Kafka protocol, classic and flexible (compact) forms."""

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = bytes(data)
        self.pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise DecodeError(
                f"need {n} bytes at position {self.pos}, only {len(self.data) - self.pos} left"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            (b,) = self._take(1)
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise DecodeError("unsigned varint longer than 5 bytes")

    def _length(self) -> int:
        """Length of a string/bytes/array; -1 for null."""
        if self.flexible:
            return self.uvarint() - 1
        return self.int32()

    def string(self, nullable: bool = False) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.int16()
        if n < 0:
            if not nullable:
                raise DecodeError(f"null string in a non-nullable field at {self.pos}")
            return None
        raw = self._take(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"string is not UTF-8: {raw[:40]!r}") from exc

    def bytes_(self, nullable: bool = False) -> bytes | None:
        n = self._length()
        if n < 0:
            if not nullable:
                raise DecodeError(f"null bytes in a non-nullable field at {self.pos}")
            return None
        return self._take(n)

    def array_len(self) -> int:
        n = self._length()
        if n < 0:
            raise DecodeError(f"null array at {self.pos}")
        return n

    def tagged_fields(self) -> dict[int, bytes]:
        """Flexible versions end every struct with tagged fields (all optional here)."""
        if not self.flexible:
            return {}
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self._take(self.uvarint())
        return out

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def done(self, what: str) -> None:
        if self.pos != len(self.data):
            raise DecodeError(
                f"{what}: {len(self.data) - self.pos} trailing bytes after the schema's fields"
            )


# --------------------------------------------------------------------------- keys & values


def decode_key(data: bytes) -> Key:
    """The key of a `__consumer_offsets` record. Every byte must belong to the schema."""
    r = Reader(data)
    version = r.int16()
    if version in OFFSET_COMMIT_KEY_VERSIONS:
        group = r.string()
        topic = r.string()
        partition = r.int32()
        r.done(f"OffsetCommitKey v{version}")
        return OffsetCommitKey(version, group, topic, partition)  # type: ignore[arg-type]
    if version == GROUP_METADATA_KEY_VERSION:
        group = r.string()
        r.done("GroupMetadataKey v2")
        return GroupMetadataKey(version, group)  # type: ignore[arg-type]
    if version < 0:
        raise DecodeError(f"negative key version {version}")
    return UnknownKey(version, bytes(data))


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    version = Reader(data).int16()
    if version not in OFFSET_COMMIT_VALUE_VERSIONS:
        raise DecodeError(f"OffsetCommitValue version {version} is not 0-4")
    r = Reader(data, flexible=version >= FLEXIBLE_VALUE_VERSION)
    r.int16()
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.int64()
    expire_ts = r.int64() if version == 1 else -1
    r.tagged_fields()
    r.done(f"OffsetCommitValue v{version}")
    return OffsetCommitValue(version, offset, leader_epoch, metadata, commit_ts, expire_ts)  # type: ignore[arg-type]


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    version = Reader(data).int16()
    if version not in GROUP_METADATA_VALUE_VERSIONS:
        raise DecodeError(f"GroupMetadataValue version {version} is not 0-4")
    r = Reader(data, flexible=version >= FLEXIBLE_VALUE_VERSION)
    r.int16()
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.string(nullable=True)
    leader = r.string(nullable=True)
    state_ts = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len()):
        member_id = r.string()
        instance_id = r.string(nullable=True) if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.tagged_fields()
        members.append(
            MemberMetadata(
                member_id,  # type: ignore[arg-type]
                instance_id,
                client_id,  # type: ignore[arg-type]
                client_host,  # type: ignore[arg-type]
                rebalance_timeout,
                session_timeout,
                subscription,  # type: ignore[arg-type]
                assignment,  # type: ignore[arg-type]
            )
        )
    r.tagged_fields()
    r.done(f"GroupMetadataValue v{version}")
    return GroupMetadataValue(
        version,
        protocol_type,  # type: ignore[arg-type]
        generation,
        protocol,
        leader,
        state_ts,
        tuple(members),
    )


def decode_value(key: Key, data: bytes | None) -> Value | None:
    """The value for `key`; None for a tombstone (or a key this reader skips)."""
    if data is None or isinstance(key, UnknownKey):
        return None
    if isinstance(key, OffsetCommitKey):
        return decode_offset_commit_value(data)
    return decode_group_metadata_value(data)


@dataclass(frozen=True)
class OffsetsRecord:
    """One `__consumer_offsets` record, decoded."""

    partition: int
    offset: int
    key: Key
    value: Value | None
    raw_key: bytes
    raw_value: bytes | None = field(repr=False, default=None)

    @property
    def tombstone(self) -> bool:
        return self.raw_value is None


def decode_record(partition: int, offset: int, key: bytes, value: bytes | None) -> OffsetsRecord:
    k = decode_key(key)
    return OffsetsRecord(partition, offset, k, decode_value(k, value), bytes(key), value)


# --------------------------------------------------------------------------- consumer protocol


@dataclass(frozen=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    user_data: bytes | None
    owned_partitions: dict[str, tuple[int, ...]]
    generation_id: int = -1


@dataclass(frozen=True)
class Assignment:
    version: int
    partitions: dict[str, tuple[int, ...]]
    user_data: bytes | None


def _topic_partitions(r: Reader) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for _ in range(r.array_len()):
        topic = r.string()
        out[topic] = tuple(r.int32() for _ in range(r.array_len()))  # type: ignore[index]
    return out


def decode_subscription(data: bytes) -> Subscription:
    """ConsumerProtocolSubscription; newer versions are read with the known fields (the
    schema promises they only append)."""
    r = Reader(data)
    version = r.int16()
    topics = tuple(r.string() for _ in range(r.array_len()))  # type: ignore[misc]
    user_data = r.bytes_(nullable=True)
    owned = _topic_partitions(r) if version >= 1 and r.remaining() else {}
    generation = r.int32() if version >= 2 and r.remaining() >= 4 else -1
    if version <= 2:
        r.done(f"ConsumerProtocolSubscription v{version}")
    return Subscription(version, topics, user_data, owned, generation)


def decode_assignment(data: bytes) -> Assignment:
    """ConsumerProtocolAssignment (an empty byte string is an empty assignment)."""
    if not data:
        return Assignment(-1, {}, None)
    r = Reader(data)
    version = r.int16()
    partitions = _topic_partitions(r)
    user_data = r.bytes_(nullable=True) if r.remaining() else None
    if version <= 2:
        r.done(f"ConsumerProtocolAssignment v{version}")
    return Assignment(version, partitions, user_data)


# --------------------------------------------------------------------------- encoders (tests)


def _s(value: str | None, flexible: bool = False) -> bytes:
    if value is None:
        return b"\x00" if flexible else struct.pack(">h", -1)
    raw = value.encode()
    return (_uvarint(len(raw) + 1) if flexible else struct.pack(">h", len(raw))) + raw


def _b(value: bytes, flexible: bool = False) -> bytes:
    return (_uvarint(len(value) + 1) if flexible else struct.pack(">i", len(value))) + value


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_offset_commit_key(group: str, topic: str, partition: int, version: int = 1) -> bytes:
    """Hand-made bytes for the decoder's own tests (straight from the schema text)."""
    return struct.pack(">h", version) + _s(group) + _s(topic) + struct.pack(">i", partition)


def encode_group_metadata_key(group: str) -> bytes:
    return struct.pack(">h", 2) + _s(group)


def encode_offset_commit_value(
    offset: int,
    leader_epoch: int,
    metadata: str,
    commit_ts: int,
    version: int = 3,
    expire_ts: int = -1,
) -> bytes:
    flexible = version >= FLEXIBLE_VALUE_VERSION
    out = struct.pack(">hq", version, offset)
    if version >= 3:
        out += struct.pack(">i", leader_epoch)
    out += _s(metadata, flexible) + struct.pack(">q", commit_ts)
    if version == 1:
        out += struct.pack(">q", expire_ts)
    return out + (b"\x00" if flexible else b"")


def encode_group_metadata_value(
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    state_ts: int,
    members: list[MemberMetadata],
    version: int = 3,
) -> bytes:
    flexible = version >= FLEXIBLE_VALUE_VERSION
    out = struct.pack(">h", version) + _s(protocol_type, flexible) + struct.pack(">i", generation)
    out += _s(protocol, flexible) + _s(leader, flexible)
    if version >= 2:
        out += struct.pack(">q", state_ts)
    out += _uvarint(len(members) + 1) if flexible else struct.pack(">i", len(members))
    for m in members:
        out += _s(m.member_id, flexible)
        if version >= 3:
            out += _s(m.group_instance_id, flexible)
        out += _s(m.client_id, flexible) + _s(m.client_host, flexible)
        if version >= 1:
            out += struct.pack(">i", m.rebalance_timeout)
        out += struct.pack(">i", m.session_timeout)
        out += _b(m.subscription, flexible) + _b(m.assignment, flexible)
        out += b"\x00" if flexible else b""
    return out + (b"\x00" if flexible else b"")
