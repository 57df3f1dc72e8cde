"""`__consumer_offsets` records: byte-exact against hand-computed bytes (Kafka's schemas), read
back by the independent test-side decoder, and every older or newer version Kafka may have
written read as far as its fields go."""

import struct

import pytest
from support import offsets_decoder as D
from support.groups import encode_assignment, encode_subscription

from raftlog.groups import records as R

TS = 1_700_000_000_000
TS_BYTES = "00 00 01 8b cf e5 68 00"


def hexbytes(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def test_offset_commit_key_v1_bytes():
    assert R.offset_commit_key("grp", "t", 7) == hexbytes(
        "00 01"  # version
        "00 03 67 72 70"  # group "grp"
        "00 01 74"  # topic "t"
        "00 00 00 07"  # partition
    )


def test_group_metadata_key_v2_bytes():
    assert R.group_metadata_key("grp") == hexbytes("00 02 00 03 67 72 70")


def test_offset_commit_value_v3_bytes():
    value = R.OffsetCommitValue(42, 5, "md", TS)
    assert R.offset_commit_value(value) == hexbytes(
        "00 03"  # version
        "00 00 00 00 00 00 00 2a"  # offset
        "00 00 00 05"  # leaderEpoch
        "00 02 6d 64" + TS_BYTES  # metadata "md"  # commitTimestamp
    )


def test_group_metadata_value_v3_bytes():
    member = R.MemberMetadata("m1", None, "c1", "/h", 30000, 10000, b"\x01", b"\x02\x03")
    value = R.GroupMetadataValue("consumer", 3, "range", "m1", TS, (member,))
    assert (
        R.group_metadata_value(value)
        == hexbytes(
            "00 03"  # version
            "00 08" + b"consumer".hex() + "00 00 00 03"  # protocolType, generation
            "00 05"
            + b"range".hex()
            + "00 02 6d 31"  # protocol, leader
            + TS_BYTES  # currentStateTimestamp
            + "00 00 00 01"  # one member
            "00 02 6d 31"  # memberId
            "ff ff"  # groupInstanceId: null
            "00 02 63 31"  # clientId
            "00 02 2f 68"  # clientHost
            "00 00 75 30 00 00 27 10"  # rebalanceTimeout, sessionTimeout
            "00 00 00 01 01"  # subscription
            "00 00 00 02 02 03"  # assignment
        )
    )


def test_empty_group_value_has_null_protocol_and_leader():
    value = R.GroupMetadataValue("consumer", 4, None, None, TS, ())
    assert R.group_metadata_value(value) == hexbytes(
        "00 03 00 08" + b"consumer".hex() + "00 00 00 04 ff ff ff ff" + TS_BYTES + "00 00 00 00"
    )


def test_round_trips_and_the_independent_decoder_agrees():
    members = (
        R.MemberMetadata("m1", "static-1", "c1", "/10.0.0.1", 300000, 45000, b"sub", b"asg"),
        R.MemberMetadata("m2", None, "c2", "/10.0.0.2", 300000, 45000, b"", b""),
    )
    group = R.GroupMetadataValue("consumer", 9, "cooperative-sticky", "m1", TS, members)
    data = R.group_metadata_value(group)
    assert R.decode_group_metadata_value(data) == group
    theirs = D.decode_group_metadata_value(data)
    assert (theirs.version, theirs.protocol, theirs.leader, theirs.generation) == (
        3,
        "cooperative-sticky",
        "m1",
        9,
    )
    assert [m.group_instance_id for m in theirs.members] == ["static-1", None]

    offset = R.OffsetCommitValue(2**40, -1, "ü" * 3, TS)
    data = R.offset_commit_value(offset)
    assert R.decode_offset_commit_value(data) == offset
    assert D.decode_offset_commit_value(data).metadata == "ü" * 3

    key = R.offset_commit_key("g", "orders", 3)
    assert R.decode_key(key) == R.OffsetCommitKey("g", "orders", 3)
    assert D.decode_key(key) == D.OffsetCommitKey(1, "g", "orders", 3)
    assert R.decode_key(R.group_metadata_key("g")) == R.GroupMetadataKey("g")
    assert R.decode_value(R.GroupMetadataKey("g"), None) is None  # tombstone


def test_key_versions():
    v0 = struct.pack(">h", 0) + hexbytes("00 01 67 00 01 74 00 00 00 02")
    assert R.decode_key(v0) == R.OffsetCommitKey("g", "t", 2)
    # 3+ belong to newer group protocols (consumer groups...): skipped, but for 11, the
    # ShareGroupMetadataKey raftlog writes for share groups.
    assert R.decode_key(hexbytes("00 03 00 01 67 00 00")) is None
    assert R.decode_key(hexbytes("00 0b 00 01 67")) == R.ShareGroupMetadataKey("g")
    assert R.decode_value(None, b"whatever") is None


def test_share_group_metadata_is_kafkas_version_0_value():
    key = R.share_group_metadata_key("g")
    assert key == hexbytes("00 0b 00 01 67")
    value = R.share_group_metadata_value(R.ShareGroupMetadataValue(7))
    # version 0, epoch, metadata hash, no tagged fields (flexible)
    assert value == hexbytes("00 00 00 00 00 07 00 00 00 00 00 00 00 00 00")
    assert R.decode_value(R.decode_key(key), value) == R.ShareGroupMetadataValue(7, 0)


def test_older_offset_values():
    v0 = D.encode_offset_commit_value(7, -1, "a", TS, version=0)
    assert R.decode_offset_commit_value(v0) == R.OffsetCommitValue(7, -1, "a", TS)
    v1 = D.encode_offset_commit_value(7, -1, "a", TS, version=1, expire_ts=TS + 5)
    assert R.decode_offset_commit_value(v1) == R.OffsetCommitValue(7, -1, "a", TS, TS + 5)
    v2 = D.encode_offset_commit_value(7, -1, "a", TS, version=2)
    assert R.decode_offset_commit_value(v2).expire_timestamp == -1


def test_flexible_v4_values_with_tagged_fields():
    # OffsetCommitValue v4: compact string (length + 1), then a tagged field (tag 5, 2 bytes).
    data = (
        hexbytes("00 04 00 00 00 00 00 00 00 09 00 00 00 02")
        + hexbytes("03 6d 64")
        + hexbytes(TS_BYTES)
        + hexbytes("01 05 02 ab cd")
    )
    assert R.decode_offset_commit_value(data) == R.OffsetCommitValue(9, 2, "md", TS)

    member = D.MemberMetadata("m1", "i1", "c1", "/h", 100, 200, b"s", b"a")
    data = D.encode_group_metadata_value("consumer", 2, "range", "m1", TS, [member], version=4)
    decoded = R.decode_group_metadata_value(data)
    assert decoded.members == (R.MemberMetadata("m1", "i1", "c1", "/h", 100, 200, b"s", b"a"),)
    assert (decoded.protocol, decoded.leader, decoded.current_state_timestamp) == (
        "range",
        "m1",
        TS,
    )


def test_older_group_values():
    member = D.MemberMetadata("m1", None, "c1", "/h", -1, 200, b"s", b"a")
    v0 = D.encode_group_metadata_value("consumer", 2, None, None, -1, [member], version=0)
    decoded = R.decode_group_metadata_value(v0)
    assert decoded.members[0].rebalance_timeout_ms == -1
    assert decoded.current_state_timestamp == -1
    assert decoded.protocol is None
    member = D.MemberMetadata("m1", None, "c1", "/h", 100, 200, b"s", b"a")
    v2 = D.encode_group_metadata_value("consumer", 2, "range", "m1", TS, [member], version=2)
    assert R.decode_group_metadata_value(v2).members[0].rebalance_timeout_ms == 100


@pytest.mark.parametrize(
    "data",
    [
        hexbytes("00 03 00 00"),  # truncated
        R.offset_commit_value(R.OffsetCommitValue(1, 1, "", 1)) + b"\x00",  # trailing byte
        hexbytes("00 05") + bytes(30),  # unknown value version
        hexbytes("00 03 00 00 00 00 00 00 00 01 00 00 00 01 ff ff") + bytes(8),  # null string
    ],
)
def test_malformed_offset_values_are_rejected(data):
    with pytest.raises(R.RecordError):
        R.decode_offset_commit_value(data)


def test_malformed_keys_are_rejected():
    with pytest.raises(R.RecordError):
        R.decode_key(hexbytes("ff ff 00 00"))
    with pytest.raises(R.RecordError):
        R.decode_key(R.group_metadata_key("g") + b"x")


def test_consumer_protocol_topics_and_partitions_read_with_the_records_reader() -> None:
    """`raftlog groups describe` and the offsets-topic dump show a member's subscription and
    assignment through these; a cut-off one is a RecordError, never a wrong answer."""
    assignment = encode_assignment({"u": [1], "t": [2, 0]})
    assert R.assigned_partitions(assignment) == [("t", 0), ("t", 2), ("u", 1)]
    assert R.subscription_topics(encode_subscription(["t", "u"], b"ud")) == ["t", "u"]
    with pytest.raises(R.RecordError):
        R.assigned_partitions(assignment[:-9])
    with pytest.raises(R.RecordError):
        R.subscription_topics(b"\x00\x00\x00\x00\x00\x02\x00\x01t")
