"""`__consumer_offsets` keys and values in Kafka's own binary format, so any Kafka tool can
consume and decode the topic (schemas: apache/kafka group-coordinator/src/main/resources/
common/message/{OffsetCommitKey,OffsetCommitValue,GroupMetadataKey,GroupMetadataValue}.json).

A key is an int16 version followed by its struct: versions 0 and 1 are OffsetCommitKey, 2 is
GroupMetadataKey, 11 is ShareGroupMetadataKey (a share group exists, KIP-932: its value is
ShareGroupMetadataValue v0, flexible); the other versions past 2 belong to newer group
protocols and are skipped by readers. A value is an
int16 version followed by its struct; version 4 of both values is flexible (compact lengths,
tagged fields). A null value is a tombstone. Written: key v1/v2, values v3.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from epoch import NO_EPOCH

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
SHARE_GROUP_METADATA_KEY_VERSION = 11
VALUE_VERSION = 3  # written for both values
FLEXIBLE_VERSION = 4  # first flexible version of both values
MAX_VALUE_VERSION = 4

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordError(ValueError):
    """The bytes do not follow the schema their version names."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0  # Kafka's hash of the subscribed topics; raftlog writes 0


Key = OffsetCommitKey | GroupMetadataKey | ShareGroupMetadataKey


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int  # -1 when unknown (always before v3)
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # only v1 carries it


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int  # -1 before v1
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int  # -1 before v2
    members: tuple[MemberMetadata, ...]


# --------------------------------------------------------------------------- writing


def _string(value: str) -> bytes:
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


def _nullable_string(value: str | None) -> bytes:
    return _I16.pack(-1) if value is None else _string(value)


def _bytes(value: bytes) -> bytes:
    return _I32.pack(len(value)) + value


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return (
        _I16.pack(OFFSET_COMMIT_KEY_VERSION)
        + _string(group)
        + _string(topic)
        + _I32.pack(partition)
    )


def group_metadata_key(group: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(group)


def share_group_metadata_key(group: str) -> bytes:
    return _I16.pack(SHARE_GROUP_METADATA_KEY_VERSION) + _string(group)


def share_group_metadata_value(value: ShareGroupMetadataValue) -> bytes:
    """ShareGroupMetadataValue v0 (flexible): epoch, metadata hash, no tagged fields."""
    return _I16.pack(0) + _I32.pack(value.epoch) + _I64.pack(value.metadata_hash) + b"\x00"


def offset_commit_value(value: OffsetCommitValue) -> bytes:
    """OffsetCommitValue v3 (v3 has no expireTimestamp: retention is the group's)."""
    return (
        _I16.pack(VALUE_VERSION)
        + _I64.pack(value.offset)
        + _I32.pack(value.leader_epoch)
        + _string(value.metadata)
        + _I64.pack(value.commit_timestamp)
    )


def group_metadata_value(value: GroupMetadataValue) -> bytes:
    """GroupMetadataValue v3."""
    parts = [
        _I16.pack(VALUE_VERSION),
        _string(value.protocol_type),
        _I32.pack(value.generation),
        _nullable_string(value.protocol),
        _nullable_string(value.leader),
        _I64.pack(value.current_state_timestamp),
        _I32.pack(len(value.members)),
    ]
    for m in value.members:
        parts += [
            _string(m.member_id),
            _nullable_string(m.group_instance_id),
            _string(m.client_id),
            _string(m.client_host),
            _I32.pack(m.rebalance_timeout_ms),
            _I32.pack(m.session_timeout_ms),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


# --------------------------------------------------------------------------- reading


class _Reader:
    """Big-endian primitives; `flexible` switches lengths to Kafka's compact (varint) form."""

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> memoryview:
        end = self._pos + n
        if n < 0 or end > len(self._data):
            raise RecordError(f"record ends early: need {n} bytes at {self._pos}")
        out = self._data[self._pos : end]
        self._pos = end
        return out

    def int16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def int64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def uvarint(self) -> int:
        value = shift = 0
        while shift <= 28:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise RecordError("unsigned varint longer than 5 bytes")

    def _length(self, width: int) -> int:
        """A classic int16/int32 length, or a compact one (varint of length + 1); -1 is null."""
        if self.flexible:
            return self.uvarint() - 1
        return self.int16() if width == 2 else self.int32()

    def nullable_string(self) -> str | None:
        n = self._length(2)
        if n < 0:
            return None
        try:
            return str(self._take(n), "utf-8")
        except UnicodeDecodeError as exc:
            raise RecordError(f"string is not UTF-8: {exc}") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise RecordError("null in a non-nullable string")
        return value

    def bytes_(self) -> bytes:
        n = self._length(4)
        if n < 0:
            raise RecordError("null in a non-nullable bytes field")
        return bytes(self._take(n))

    def array_length(self) -> int:
        n = self._length(4)
        if n < 0:
            raise RecordError("null array")
        return n

    def tagged_fields(self) -> None:
        """Flexible structs end with tagged fields; none of them matters to a coordinator."""
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self._take(self.uvarint())

    def end(self) -> None:
        if self._pos != len(self._data):
            raise RecordError(f"{len(self._data) - self._pos} bytes after the last field")


def decode_key(data: bytes) -> Key | None:
    """The key's struct; None for the other key versions past 2 (newer group protocols),
    which are skipped."""
    r = _Reader(data)
    version = r.int16()
    if version in (0, 1):
        key: Key = OffsetCommitKey(r.string(), r.string(), r.int32())
    elif version == GROUP_METADATA_KEY_VERSION:
        key = GroupMetadataKey(r.string())
    elif version == SHARE_GROUP_METADATA_KEY_VERSION:
        key = ShareGroupMetadataKey(r.string())
    elif version > GROUP_METADATA_KEY_VERSION:
        return None
    else:
        raise RecordError(f"negative key version {version}")
    r.end()
    return key


def _value_reader(data: bytes, what: str) -> tuple[_Reader, int]:
    r = _Reader(data)
    version = r.int16()
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise RecordError(f"{what} version {version} is not 0-{MAX_VALUE_VERSION}")
    r.flexible = version >= FLEXIBLE_VERSION
    return r, version


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    """OffsetCommitValue v0-v4."""
    r, version = _value_reader(data, "OffsetCommitValue")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else NO_EPOCH
    metadata = r.string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else -1
    r.tagged_fields()
    r.end()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    """GroupMetadataValue v0-v4."""
    r, version = _value_reader(data, "GroupMetadataValue")
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_timestamp = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_length()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.tagged_fields()
        members.append(
            MemberMetadata(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    r.tagged_fields()
    r.end()
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, state_timestamp, tuple(members)
    )


def decode_share_group_metadata_value(data: bytes) -> ShareGroupMetadataValue:
    """ShareGroupMetadataValue v0 (flexible)."""
    r = _Reader(data)
    version = r.int16()
    if version != 0:
        raise RecordError(f"ShareGroupMetadataValue version {version} is not 0")
    r.flexible = True
    value = ShareGroupMetadataValue(r.int32(), r.int64())
    r.tagged_fields()
    r.end()
    return value


def decode_value(
    key: Key | None, data: bytes | None
) -> OffsetCommitValue | GroupMetadataValue | ShareGroupMetadataValue | None:
    """The value of a record whose key decoded to `key`; None for a tombstone or a skipped key."""
    if data is None or key is None:
        return None
    if isinstance(key, OffsetCommitKey):
        return decode_offset_commit_value(data)
    if isinstance(key, ShareGroupMetadataKey):
        return decode_share_group_metadata_value(data)
    return decode_group_metadata_value(data)


# --------------------------------------------------------------------------- consumer protocol


def subscription_topics(data: bytes) -> list[str]:
    """The topics of a ConsumerProtocolSubscription (a classic consumer's join metadata). Its
    versions (0-3) are not flexible and add fields only after the topics."""
    r = _Reader(data)
    r.int16()
    return [r.string() for _ in range(r.array_length())]


def assigned_partitions(data: bytes) -> list[tuple[str, int]]:
    """(topic, partition) pairs, sorted, of a ConsumerProtocolAssignment (versions 0-3: not
    flexible, the partitions first)."""
    r = _Reader(data)
    r.int16()
    out: list[tuple[str, int]] = []
    for _ in range(r.array_length()):
        topic = r.string()
        out.extend((topic, r.int32()) for _ in range(r.array_length()))
    return sorted(out)
