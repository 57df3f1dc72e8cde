"""raftlog/storage/records.py: the produce path's length walk agrees with a plain reading of
Kafka's record layout on generated and mutated record sections."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.wire import zigzag

from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.storage.records import MAX_KEYLESS, Counter, count, keyless, skip, walk


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


@given(sections, st.data())
@settings(max_examples=300, deadline=None)
def test_counting_in_pieces_agrees_with_counting_whole(
    section: list[tuple[bytes | None, bytes | None]], data: st.DataObject
) -> None:
    """A compressed batch is counted a piece at a time as it decompresses: pieces cut
    anywhere, inside a record or its length prefix, give count()'s verdict on the whole."""
    records = [record(i, k, v) for i, (k, v) in enumerate(section)]
    whole = bytearray(b"".join(records))
    starts = [sum(map(len, records[:i])) for i in range(len(records))]
    # cuts anywhere, and inside or just after length prefixes (1-3 bytes here)
    near_prefix = st.sampled_from(starts).flatmap(lambda at: st.integers(at, at + 3))
    if data.draw(st.booleans()):  # a mutated or cut section, as in the test above
        whole[data.draw(st.integers(0, len(whole) - 1))] = data.draw(st.integers(0, 255))
        whole = whole[: data.draw(st.integers(1, len(whole)))]
    claimed = data.draw(st.sampled_from([len(section), lengths_line_up(bytes(whole)) or 1]))
    anywhere = st.one_of(st.integers(0, len(whole)), near_prefix)
    cuts = sorted(min(c, len(whole)) for c in data.draw(st.lists(anywhere, max_size=12)))

    def in_pieces() -> None:
        counter = Counter()
        for start, end in zip([0, *cuts], [*cuts, len(whole)], strict=True):
            counter.feed(memoryview(whole)[start:end])
        counter.check(claimed)

    try:
        count(bytes(whole), claimed)
    except KafkaError as exc:
        with pytest.raises(KafkaError) as info:
            in_pieces()
        assert info.value.code == exc.code == ErrorCode.corrupt_message
    else:
        in_pieces()


def test_a_length_prefix_cut_by_a_piece_is_read_across_it() -> None:
    """Length prefixes of one, two and three bytes, the section cut in two at every byte
    and fed a byte at a time: always three records, and a byte short is refused."""
    whole = b"".join(record(i, None, b"v" * n) for i, n in enumerate((0, 70, 9000)))
    for at in range(len(whole) + 1):
        counter = Counter()
        counter.feed(whole[:at])
        counter.feed(whole[at:])
        counter.check(3)
    counter = Counter()
    for at in range(len(whole)):
        counter.feed(whole[at : at + 1])
    counter.check(3)
    short = Counter()
    short.feed(whole[:-1])
    with pytest.raises(KafkaError):
        short.check(3)


@given(sections, st.data())
@settings(max_examples=300, deadline=None)
def test_records_without_a_key_are_found_whole_or_in_pieces(
    section: list[tuple[bytes | None, bytes | None]], data: st.DataObject
) -> None:
    """A compacted topic's produce reads each record's key length: keyless() names the
    records walk() reads with no key (an empty key is a key), and fed in pieces cut
    anywhere (inside the fields before a key too) Counter(keys=True) gives its verdict, on
    mutated and cut sections as well."""
    whole = bytearray(b"".join(record(i, k, v) for i, (k, v) in enumerate(section)))
    if data.draw(st.booleans()):
        whole[data.draw(st.integers(0, len(whole) - 1))] = data.draw(st.integers(0, 255))
        whole = whole[: data.draw(st.integers(1, len(whole)))]
    else:
        expected = [i for i, (k, _) in enumerate(section) if k is None]
        assert keyless(bytes(whole), len(section)) == (expected, len(expected))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(whole)), max_size=12)))

    def in_pieces() -> tuple[list[int], int]:
        counter = Counter(keys=True)
        for start, end in zip([0, *cuts], [*cuts, len(whole)], strict=True):
            counter.feed(memoryview(whole)[start:end])
        counter.check(len(section))
        return counter.keyless, counter.missing

    try:
        verdict = keyless(bytes(whole), len(section))
    except KafkaError as exc:
        with pytest.raises(KafkaError) as info:
            in_pieces()
        assert info.value.code == exc.code == ErrorCode.corrupt_message
    else:
        assert in_pieces() == verdict


def test_a_walk_names_the_first_max_keyless_records_without_a_key_and_counts_all() -> None:
    """Each one named is a record error in the answer: a batch of millions of tiny keyless
    records must not become an answer of hundreds of megabytes."""
    total = 3 * MAX_KEYLESS
    data = b"".join(record(i, None if i % 2 else b"", b"v") for i in range(total))
    assert keyless(data, total) == (list(range(1, 2 * MAX_KEYLESS, 2)), total // 2)
    counter = Counter(keys=True)
    for at in range(0, len(data), 5):
        counter.feed(data[at : at + 5])
    counter.check(total)
    assert (counter.keyless, counter.missing) == keyless(data, total)


def test_a_key_that_runs_past_its_record_is_corrupt() -> None:
    """count() reads only lengths and lets it pass; the key walk reads the key's."""
    bad = bytearray(record(0, b"key", b"") + record(1, b"k", b"v"))
    bad[4] = 2 * 40  # key length 40 in a record of 9 bytes
    count(bytes(bad), 2)
    with pytest.raises(KafkaError) as info:
        keyless(bytes(bad), 2)
    assert info.value.code == ErrorCode.corrupt_message
