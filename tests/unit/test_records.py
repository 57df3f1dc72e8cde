"""raftlog/storage/records.py: the produce path's length walk agrees with a plain reading of
Kafka's record layout on generated and mutated record sections."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.wire import zigzag

from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.storage.records import count, skip, walk


def record(offset_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = b"\x00" + zigzag(0) + zigzag(offset_delta)
    for field in (key, value):
        body += zigzag(-1) if field is None else zigzag(len(field)) + field
    body += zigzag(0)  # no headers
    return zigzag(len(body)) + body


def lengths_line_up(data: bytes) -> int | None:
    """How many records the length prefixes describe, read the slow, obvious way."""
    pos, found = 0, 0
    while pos < len(data):
        value, shift = 0, 0
        while True:
            if pos >= len(data) or shift > 28:
                return None
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        length = (value >> 1) ^ -(value & 1)
        if length <= 0 or pos + length > len(data):
            return None
        pos += length
        found += 1
    return found


fields = st.one_of(st.none(), st.binary(max_size=20_000))
sections = st.lists(st.tuples(fields, fields), min_size=1, max_size=8)


@given(sections)
@settings(max_examples=200, deadline=None)
def test_whole_sections_pass_both_walks(section: list[tuple[bytes | None, bytes | None]]) -> None:
    data = b"".join(record(i, k, v) for i, (k, v) in enumerate(section))
    count(data, len(section))
    walked = list(walk(data, len(section)))
    assert [(r[2], r[4]) for r in walked] == [(i, k) for i, (k, _) in enumerate(section)]
    for passed, (start, *_) in enumerate(walked):  # the length-only skip lands on each record
        assert skip(data, passed) == start
    assert skip(data, len(section)) == len(data)
    with pytest.raises(KafkaError):
        skip(data, len(section) + 1)


@given(sections, st.data())
@settings(max_examples=300, deadline=None)
def test_the_fast_walk_refuses_exactly_what_does_not_line_up(
    section: list[tuple[bytes | None, bytes | None]], data: st.DataObject
) -> None:
    whole = bytearray(b"".join(record(i, k, v) for i, (k, v) in enumerate(section)))
    where = data.draw(st.integers(0, len(whole) - 1))
    whole[where] = data.draw(st.integers(0, 255))
    cut = bytes(whole[: data.draw(st.integers(1, len(whole)))])
    expected = lengths_line_up(cut)
    claimed = data.draw(st.sampled_from([len(section), expected or 1]))
    if expected == claimed:
        count(cut, claimed)
    else:
        with pytest.raises(KafkaError) as info:
            count(cut, claimed)
        assert info.value.code == ErrorCode.corrupt_message
