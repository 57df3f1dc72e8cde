"""The one entry bound (kafka_api/entry_bounds.py), walked before decode for every API: the
largest request it admits decodes, one entry more is refused undecoded, and the refusal is
INVALID_REQUEST wherever the response has a top-level error code to carry it."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from kio.schema.delete_records.v2.request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from kio.serial import entity_writer
from support.big_requests import BigRequest, largest

from kafka_api import codec, entry_bounds
from kafka_api.bounds import TooManyEntries, check_body
from kafka_api.handlers import HANDLERS
from raftlog.common.errors import ErrorCode

# Each API's newest version (tests/e2e/test_request_bounds.py sends every one).
ENDS = sorted((key, h.MAX_VERSION) for key, h in HANDLERS.items())


def _decode(big: BigRequest) -> object:
    """The body as the server decodes it, behind an empty header (and the empty tagged
    section a flexible header ends with)."""
    header = codec.RequestHeader(big.api_key, big.version, 1, None, 0)
    return codec.decode_request(header, b"\x00" * big.flexible_header + big.body)


@pytest.mark.parametrize(("key", "version"), ENDS)
def test_the_bound_is_admitted_and_one_more_is_not(key: int, version: int) -> None:
    admitted, past = largest(key, version)
    request = _decode(admitted)
    if past is None:
        return
    assert admitted.array is not None
    assert len(_array(request, admitted.path)) == entry_bounds.max_entries(key)
    with pytest.raises(TooManyEntries) as refused:
        _decode(past)
    assert refused.value.field == past.array
    assert refused.value.bound == entry_bounds.max_entries(key)


def _array(entity: object, path: tuple[str, ...]) -> tuple[object, ...]:
    for name in path:
        entity = getattr(entity, name)
    assert isinstance(entity, tuple)
    return entity


def test_a_huge_claim_is_refused_at_its_length() -> None:
    """An array claiming a million entries is refused at its length, before any of them is
    walked."""
    admitted, past = largest(75, 0)  # DescribeTopicPartitions v0: topics first
    assert past is not None
    claim = bytes([0x80, 0x89, 0x7A])  # compact array length 1,000,001 as a varint
    body = claim + past.body[3:]
    with pytest.raises(TooManyEntries):
        check_body(codec.request_schema(75, 0), body, 0, entry_bounds.max_entries(75))


@pytest.mark.parametrize(
    ("version", "claim"),
    [(1, b"\x7f\xff\xff\xff"), (3, b"\x80\x80\x80\x80\x08")],  # 2^31 - 1 creations
)
def test_a_leading_count_the_frame_cannot_hold_is_not_trusted(version: int, claim: bytes) -> None:
    """CreateAcls is answered per entry from its leading count before the decode: a count
    past what the frame holds is not read (a MemoryError building 2^31 answers, under the
    fuzz test's address cap), and the decode refuses the request as malformed."""
    flexible = codec.request_schema(30, version).__flexible__
    header = codec.RequestHeader(30, version, 1, None, 0)
    frame = b"\x00" * flexible + claim + b"\x01\x02\x03"
    assert codec.leading_count(header, frame) is None
    with pytest.raises(codec.MalformedRequest, match="OutOfBounds"):
        codec.decode_request(header, frame)
    held = b"\x00" * flexible + (b"\x04" if flexible else b"\x00\x00\x00\x03") + b"\x01\x02\x03"
    assert codec.leading_count(header, held) == 3


def test_nested_entries_count_together() -> None:
    """Entries are counted at every depth: 10 topics of 1,000 partitions are 10,010."""

    def body(partitions: int) -> bytes:
        request = DeleteRecordsRequest(
            topics=tuple(
                DeleteRecordsTopic(
                    name=f"t{i}",
                    partitions=tuple(
                        DeleteRecordsPartition(partition_index=p, offset=0)
                        for p in range(partitions)
                    ),
                )
                for i in range(10)
            ),
            timeout=timedelta(0),
        )
        out = io.BytesIO()
        entity_writer(DeleteRecordsRequest)(out, request)
        return out.getvalue()

    check_body(DeleteRecordsRequest, body(999), 0, 10_000)  # 10 + 9,990
    with pytest.raises(TooManyEntries):
        check_body(DeleteRecordsRequest, body(1000), 0, 10_000)


@pytest.mark.parametrize(("key", "version"), ENDS)
def test_the_refusal_carries_invalid_request_or_closes(key: int, version: int) -> None:
    response_type = codec.response_schema(key, version)
    refusal = entry_bounds.refusal(response_type, "too many")
    if refusal is None:
        assert "error_code" not in response_type.__dataclass_fields__
        return
    assert refusal.error_code == ErrorCode.invalid_request
    if "error_message" in response_type.__dataclass_fields__:
        assert refusal.error_message == "too many"
    framed = b"".join(codec.encode_response(1, refusal))
    assert len(framed) < 1024  # nothing of the request's size
