import os
import random
import struct
import threading
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.storage.batch import (
    crc_ok,
    first_record_at,
    iter_batches,
    offset_stamped,
    parse_header,
    record_timestamps,
)
from raftlog.storage.flusher import POINT_FILE, settle
from raftlog.storage.log import Log, LogConfig
from raftlog.storage.log_reads import Location

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)


def make_batch(timestamps: list[int], compression: int = NONE, value_size: int = 40) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 24,
    )
    for i, ts in enumerate(timestamps):
        builder.append(i, timestamp=ts, key=None, value=b"r" * value_size, headers=[])
    return bytes(builder.build())


def records(count: int, ts: int = 1_000, **kwargs: int) -> bytes:
    return make_batch([ts + i for i in range(count)], **kwargs)


def open_log(path: Path, **config: int) -> Log:
    return Log(path, LogConfig(**config))


def offset_for_timestamp(log: Log, timestamp: int, upper_bound: int) -> tuple[int, int] | None:
    """What Partition.offset_for_timestamp asks of the log, with the record reads inline."""
    start = log.log_start_offset
    while (batch := log.batch_reaching(timestamp, start, upper_bound)) is not None:
        found = first_record_at(batch, timestamp, upper_bound)
        if found is not None:
            return found
        start = parse_header(batch).next_offset
    return None


def max_timestamp(log: Log, upper_bound: int) -> tuple[int, int] | None:
    newest = log.newest_batch(upper_bound)
    return None if newest is None else (newest[0], offset_stamped(newest[1], newest[0]))


def crash(log: Log) -> None:
    """Drops the log as a killed process would: no flush, no .clean marker."""
    for segment in log.segments():
        segment.close()


def offsets_of(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.next_offset) for _, h in iter_batches(data)]


def read_all(log: Log) -> bytes:
    return log.read(log.log_start_offset, 1 << 30, log.log_end_offset, True)


def layout(log: Log) -> list[tuple[int, int, int, int]]:
    return [(s.base_offset, s.term, s.next_offset, s.size) for s in log.segments()]


def read_point(directory: Path) -> int:
    """The log's recovery point as on disk (0 without one)."""
    path = directory / POINT_FILE
    return int(path.read_text().split()[1]) if path.exists() else 0


def test_append_assigns_offsets_and_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    assert (log.log_start_offset, log.log_end_offset, log.active_term) == (0, 0, -1)
    first = log.append(records(3), term=4)
    second = log.append(records(2) + records(5), term=4)
    assert (first.base_offset, first.next_offset) == (0, 3)
    assert (second.base_offset, second.next_offset) == (3, 10)
    assert first.location == Location(0, 4, 0, len(records(3)))
    assert second.location.position == first.location.size
    assert second.max_timestamp == 1_004
    assert (log.log_end_offset, log.active_term) == (10, 4)
    stored = log.read_location(second.location)
    assert offsets_of(stored) == [(3, 5), (5, 10)]
    for pos, header in iter_batches(stored):
        assert header.partition_leader_epoch == 4
        assert crc_ok(stored, pos, header)
    assert read_all(log) == log.read_location(first.location) + stored


def test_append_rejects_empty_data_and_older_terms(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(records(1), term=2)
    with pytest.raises(ValueError):
        log.append(b"", term=2)
    with pytest.raises(ValueError):
        log.append(records(1), term=1)
    with pytest.raises(ValueError):
        log.begin_term(1)
    assert log.log_end_offset == 1


def test_terms_own_segments_even_when_empty_and_survive_restart(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.begin_term(1)
    log.append(records(3), term=1)
    log.begin_term(2)
    log.begin_term(2)
    log.begin_term(3)
    log.append(records(2), term=3)
    log.append(records(1), term=5)
    expected = [(0, 1, 3), (3, 2, 3), (3, 3, 5), (5, 5, 6)]
    assert [(b, t, n) for b, t, n, _ in layout(log)] == expected
    assert log.epochs() == [(1, 0), (2, 3), (3, 3), (5, 5)]
    assert [log.epoch_for_offset(o) for o in (-1, 0, 2, 3, 4, 5, 6)] == [-1, 1, 1, 3, 3, 5, -1]
    log.close()
    assert (tmp_path / "p" / ".clean").exists()
    reopened = open_log(tmp_path / "p")
    assert reopened.was_clean
    assert not (tmp_path / "p" / ".clean").exists()
    assert [(b, t, n) for b, t, n, _ in layout(reopened)] == expected
    assert reopened.epochs() == [(1, 0), (2, 3), (3, 3), (5, 5)]
    assert offsets_of(read_all(reopened)) == [(0, 3), (3, 5), (5, 6)]


def test_segments_roll_on_size_within_a_term(tmp_path: Path) -> None:
    batch = records(4)
    log = open_log(tmp_path / "p", segment_bytes=3 * len(batch) + 10)
    for _ in range(10):
        log.append(batch, term=1)
    result = log.append(batch * 5, term=1)  # larger than a segment: it gets one to itself
    assert [(b, n) for b, _, n, _ in layout(log)] == [
        (0, 12),
        (12, 24),
        (24, 36),
        (36, 40),
        (40, 60),
    ]
    assert result.location == Location(40, 1, 0, 5 * len(batch))
    assert log.epochs() == [(1, 0)]
    data = read_all(log)
    assert offsets_of(data) == [(i, i + 4) for i in range(0, 60, 4)]


def test_read_honours_upper_bound_max_bytes_and_min_one(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    small, large = records(2), records(5, value_size=500)
    for batch in (small, small, large, small):
        log.append(batch, term=1)
    # offsets: [0,2) [2,4) [4,9) [9,11)
    assert offsets_of(log.read(0, 1 << 20, 11, False)) == [(0, 2), (2, 4), (4, 9), (9, 11)]
    assert offsets_of(log.read(0, 1 << 20, 9, False)) == [(0, 2), (2, 4), (4, 9)]
    assert offsets_of(log.read(0, 1 << 20, 8, False)) == [(0, 2), (2, 4)]
    assert offsets_of(log.read(3, 1 << 20, 4, False)) == [(2, 4)]  # from inside a batch
    assert offsets_of(log.read(0, 2 * len(small) + 10, 11, False)) == [(0, 2), (2, 4)]
    assert log.read(4, len(large) - 1, 11, False) == b""
    assert offsets_of(log.read(4, len(large) - 1, 11, True)) == [(4, 9)]
    assert offsets_of(log.read(4, 10, 11, True)) == [(4, 9)]
    assert log.read(4, 0, 11, False) == b""
    assert log.read(11, 1 << 20, 11, True) == b""
    assert log.read(5, 1 << 20, 5, True) == b""
    for offset in (-1, 12):
        with pytest.raises(KafkaError) as info:
            log.read(offset, 1 << 20, 11, True)
        assert info.value.code == ErrorCode.offset_out_of_range


def test_read_continues_across_segments_and_empty_terms(tmp_path: Path) -> None:
    batch = records(3)
    log = open_log(tmp_path / "p", segment_bytes=len(batch) + 1)
    log.append(batch, term=1)
    log.append(batch, term=1)
    log.begin_term(2)
    log.begin_term(3)
    log.append(batch, term=3)
    log.append(batch, term=3)
    assert [(b, t) for b, t, _, _ in layout(log)] == [(0, 1), (3, 1), (6, 2), (6, 3), (9, 3)]
    assert offsets_of(log.read(1, 1 << 20, 12, False)) == [(0, 3), (3, 6), (6, 9), (9, 12)]
    assert offsets_of(log.read(4, 2 * len(batch), 12, False)) == [(3, 6), (6, 9)]
    assert offsets_of(log.read(4, 1 << 20, 9, False)) == [(3, 6), (6, 9)]


def test_bytes_from_an_offset_count_every_batch_from_the_one_holding_it(tmp_path: Path) -> None:
    """What a replica whose log ends at an offset lacks (a move's bytes still to copy)."""
    batch = records(3)
    log = open_log(tmp_path / "p", segment_bytes=2 * len(batch) + 1)
    for _ in range(3):
        log.append(batch, term=1)
    log.begin_term(2)
    log.append(batch, term=2)
    # offsets [0,3) [3,6) | [6,9) | term 2: [9,12); 4 batches in 3 segments
    size = len(batch)
    assert [log.bytes_from(o) for o in (0, 3, 4, 6, 9, 11, 12, 20)] == [
        *(4 * size, 3 * size, 3 * size, 2 * size, size, size),
        *(0, 0),
    ]


def test_truncate_inside_a_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", index_interval_bytes=64)
    locations = [log.append(records(3), term=1).location for _ in range(6)]
    cut = locations[2]
    result = log.truncate(cut.segment_base, cut.term, cut.position, drop_segment=False)
    assert (result.records, result.batches, result.bytes) == (12, 4, 4 * cut.size)
    assert result.terms_removed == []
    assert log.log_end_offset == 6
    assert offsets_of(read_all(log)) == [(0, 3), (3, 6)]
    assert log.append(records(2), term=2).base_offset == 6
    log.close()
    reopened = open_log(tmp_path / "p")
    assert layout(reopened) == [(0, 1, 6, 2 * cut.size), (6, 2, 8, len(records(2)))]


def test_truncate_rejects_positions_inside_a_batch_and_unknown_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(records(3), term=1)
    log.append(records(2), term=2)
    with pytest.raises(ValueError):
        log.truncate(0, 1, 10, drop_segment=False)
    with pytest.raises(ValueError):
        log.truncate(0, 7, 0, drop_segment=False)
    assert [(b, t, n) for b, t, n, _ in layout(log)] == [(0, 1, 3), (3, 2, 5)]


def test_truncate_dropping_the_segment_that_opened_a_term(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(records(2), term=1)
    opened = log.append(records(3), term=2).location
    log.append(records(4), term=2)
    log.begin_term(3)
    result = log.truncate(opened.segment_base, opened.term, opened.position, drop_segment=True)
    assert (result.records, result.batches) == (7, 2)
    assert result.bytes == len(records(3)) + len(records(4))
    assert result.terms_removed == [2, 3]
    assert (log.log_end_offset, log.active_term, log.epochs()) == (2, 1, [(1, 0)])
    # index files appear with a first entry; two records are too few for one
    files = sorted(p.name for p in (tmp_path / "p").iterdir() if p.name != POINT_FILE)
    assert files == ["00000000000000000000-1.log"]


def test_truncate_across_segments_counts_everything_removed(tmp_path: Path) -> None:
    batch = records(5)
    log = open_log(tmp_path / "p", segment_bytes=2 * len(batch))
    for term in (1, 1, 1, 2, 2, 2):
        log.append(batch, term=term)
    assert len(log.segments()) == 4  # 1:[0,10) 1:[10,15) 2:[15,25) 2:[25,30)
    result = log.truncate(0, 1, len(batch), drop_segment=False)
    assert (result.records, result.batches, result.bytes) == (25, 5, 5 * len(batch))
    assert result.terms_removed == [2]
    assert layout(log) == [(0, 1, 5, len(batch))]


def test_truncate_of_an_empty_log_or_at_the_end_is_a_no_op(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    assert log.truncate(0, 1, 0, drop_segment=False).batches == 0
    location = log.append(records(2), term=1).location
    result = log.truncate(0, 1, location.size, drop_segment=False)
    assert (result.records, result.batches, result.bytes, result.terms_removed) == (0, 0, 0, [])
    assert log.truncate_to_offset(2).batches == 0
    assert log.log_end_offset == 2


def test_truncate_to_offset(tmp_path: Path) -> None:
    batch = records(2)
    log = open_log(tmp_path / "p", segment_bytes=2 * len(batch))
    for term in (1, 1, 1, 2):
        log.append(batch, term=term)
    with pytest.raises(ValueError):
        log.truncate_to_offset(3)
    result = log.truncate_to_offset(2)
    assert (result.records, result.batches, result.terms_removed) == (6, 3, [2])
    assert layout(log) == [(0, 1, 2, len(batch))]
    result = log.truncate_to_offset(0)
    assert (result.records, result.terms_removed) == (2, [1])
    assert (log.log_start_offset, log.log_end_offset, log.segments()) == (0, 0, [])


def test_dropping_every_segment_keeps_the_log_end_offset(tmp_path: Path) -> None:
    batch = records(2)
    log = open_log(tmp_path / "p", segment_bytes=len(batch), retention_bytes=0)
    for _ in range(3):
        log.append(batch, term=1)
    log.begin_term(2)
    assert log.apply_retention(now_ms=0, floor_offset=6) == 3
    log.truncate(6, 2, 0, drop_segment=True)
    assert (log.log_start_offset, log.log_end_offset, log.active_term) == (6, 6, -1)
    assert log.append(batch, term=3).base_offset == 6


def test_recovery_cuts_a_torn_tail_and_rebuilds_indexes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", index_interval_bytes=100)
    batch = records(4)
    for _ in range(8):
        log.append(batch, term=1)
    segment_path = log.segments()[0].path
    crash(log)
    with open(segment_path, "r+b") as file:
        file.truncate(7 * len(batch) + 30)
        file.seek(0, os.SEEK_END)
        file.write(b"\xde\xad" * 50)
    recovered = open_log(tmp_path / "p", index_interval_bytes=100)
    assert not recovered.was_clean
    assert (recovered.log_end_offset, segment_path.stat().st_size) == (28, 7 * len(batch))
    index = segment_path.with_suffix(".index").read_bytes()
    entries = list(struct.iter_unpack(">ii", index))
    assert entries and all(
        parse_header(batch_at, 0).base_offset == rel
        for rel, pos in entries
        for batch_at in [recovered.read_location(Location(0, 1, pos, len(batch)))]
    )
    assert [pos for _, pos in entries] == sorted({pos for _, pos in entries})
    for offset in range(28):
        data = recovered.read(offset, 1, 28, True)
        assert offsets_of(data) == [(offset - offset % 4, offset - offset % 4 + 4)]
    assert recovered.append(batch, term=1).base_offset == 28


def test_recovery_cuts_at_a_corrupted_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    batch = records(4)
    for _ in range(5):
        log.append(batch, term=1)
    segment_path = log.segments()[0].path
    crash(log)
    with open(segment_path, "r+b") as file:
        file.seek(2 * len(batch) + 70)
        file.write(b"\xff")
    recovered = open_log(tmp_path / "p")
    assert recovered.log_end_offset == 8
    assert segment_path.stat().st_size == 2 * len(batch)


def test_recovery_rejects_valid_batches_that_do_not_continue_the_segment(tmp_path: Path) -> None:
    other = open_log(tmp_path / "other")
    other.append(records(2), term=1)
    foreign = other.read_location(other.append(records(3), term=2).location)  # wrong epoch
    log = open_log(tmp_path / "p")
    log.append(records(2), term=1)
    replay = log.read(0, 1 << 20, 2, True)  # right epoch, offsets already used
    segment_path = log.segments()[0].path
    crash(log)
    for tail in (foreign, replay):
        with open(segment_path, "ab") as file:
            file.write(tail)
        assert open_log(tmp_path / "p").log_end_offset == 2
        assert segment_path.stat().st_size == len(replay)


def test_recovery_handles_batches_larger_than_its_read_chunk(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    big = records(9, value_size=600_000)  # ~5.4 MB, above the 4 MiB recovery chunk
    log.append(big, term=1)
    log.append(big, term=1)
    crash(log)
    with open(log.segments()[0].path, "r+b") as file:
        file.truncate(2 * len(big) - 1)
    recovered = open_log(tmp_path / "p")
    assert layout(recovered) == [(0, 1, 9, len(big))]


@pytest.mark.parametrize("damage", ["missing and malformed", "both missing"])
@pytest.mark.parametrize("active", [True, False])
def test_missing_index_files_are_rebuilt_identically(
    tmp_path: Path, damage: str, active: bool
) -> None:
    """A segment without index files is one that never got an entry; one that should have
    had entries gets them rebuilt, active or not."""
    log = open_log(tmp_path / "p", index_interval_bytes=200)
    for i in range(20):
        log.append(make_batch([5_000 + 7 * i, 5_000 + 7 * i - 3]), term=1)
    if not active:
        log.begin_term(2)
    log.close()
    segment = tmp_path / "p" / "00000000000000000000-1"
    index = segment.with_suffix(".index").read_bytes()
    timeindex = segment.with_suffix(".timeindex").read_bytes()
    assert len(index) > 8 and len(timeindex) > 12
    segment.with_suffix(".index").unlink()
    if damage == "both missing":
        segment.with_suffix(".timeindex").unlink()
    else:
        segment.with_suffix(".timeindex").write_bytes(b"\x00" * 5)
    reopened = open_log(tmp_path / "p", index_interval_bytes=200)
    assert reopened.log_end_offset == 40
    reopened.close()
    assert segment.with_suffix(".index").read_bytes() == index
    assert segment.with_suffix(".timeindex").read_bytes() == timeindex


def test_index_files_use_kafka_layout_and_interval_rule(tmp_path: Path) -> None:
    size = len(records(3))
    log = open_log(tmp_path / "p", index_interval_bytes=size)
    # Kafka indexes a batch once *more than* the interval was written since the last entry.
    for ts in (1_000, 1_050, 1_040, 1_030, 1_020, 1_090, 1_010):
        log.append(records(3, ts=ts), term=1)
    log.close()
    segment = tmp_path / "p" / "00000000000000000000-1"
    assert list(struct.iter_unpack(">ii", segment.with_suffix(".index").read_bytes())) == [
        (6, 2 * size),
        (12, 4 * size),
        (18, 6 * size),
    ]
    # (largest timestamp so far, offset of its batch), only when it grew.
    assert list(struct.iter_unpack(">qi", segment.with_suffix(".timeindex").read_bytes())) == [
        (1_052, 3),
        (1_092, 15),
    ]


def index_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if "index" in p.suffix}


def rebuilt_index_files(directory: Path, **config: int) -> dict[str, bytes]:
    for path in directory.iterdir():
        if "index" in path.suffix:
            path.unlink()
    open_log(directory, **config).close()
    return index_files(directory)


def test_indexes_after_truncation_match_a_rebuild(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    size = len(records(2))
    log = open_log(directory, index_interval_bytes=size)
    locations = [
        log.append(records(2, ts=ts), term=1).location
        for ts in (100, 300, 200, 500, 400, 700, 600, 900, 800, 1_000)
    ]
    for cut in (locations[8], locations[6], locations[3]):  # indexed, not indexed, indexed
        log.truncate(0, 1, cut.position, drop_segment=False)
        log.close()
        truncated = index_files(directory)
        assert truncated == rebuilt_index_files(directory, index_interval_bytes=size)
        log = open_log(directory, index_interval_bytes=size)
    assert max_timestamp(log, 100) == (301, 3)


def test_inconsistent_index_files_are_rebuilt_on_open(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    log = open_log(directory, index_interval_bytes=10)
    for i in range(6):
        log.append(records(2, ts=100 * i), term=1)
    log.close()
    good = index_files(directory)
    index = directory / "00000000000000000000-1.index"
    timeindex = directory / "00000000000000000000-1.timeindex"
    size = len(records(2))
    entries = good[index.name]  # (2, S) (4, 2S) (6, 3S) (8, 4S) (10, 5S)
    for path, content in [
        (index, entries + struct.pack(">ii", 13, 6 * size)),  # at the end of the log
        (index, entries[:-8] + struct.pack(">ii", 11, 5 * size)),  # wrong offset there
        (index, entries[:-8] + struct.pack(">ii", 10, 5 * size + 3)),  # inside a batch
        (index, b"".join(reversed([entries[i : i + 8] for i in range(0, 40, 8)]))),
        (index, entries[:8] + entries[16:24] + entries[8:16] + entries[24:]),  # unsorted
        (index, struct.pack(">ii", 2, -size) + entries[8:]),  # negative position
        (index, entries[:-3]),  # torn entry
        (timeindex, good[timeindex.name] + struct.pack(">qi", 9_999, 11)),  # beyond .index
        (timeindex, good[timeindex.name][:-1]),  # torn entry
    ]:
        path.write_bytes(content)
        reopened = open_log(directory, index_interval_bytes=10)
        assert reopened.log_end_offset == 12
        assert [offsets_of(reopened.read(o, 1, 12, True)) for o in range(0, 12, 2)] == [
            [(o, o + 2)] for o in range(0, 12, 2)
        ]
        assert max_timestamp(reopened, 12) == (501, 11)
        reopened.close()
        assert index_files(directory) == good, content


def test_clean_shutdown_still_catches_a_log_longer_than_its_indexes(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    log = open_log(directory)
    log.append(records(2), term=1)
    log.close()
    with open(log.segments()[0].path, "ab") as file:
        file.write(records(3)[:50])
    reopened = open_log(directory)
    assert reopened.was_clean
    assert layout(reopened) == [(0, 1, 2, len(records(2)))]


def test_a_gap_between_segments_drops_the_rest_of_the_log(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    log = open_log(directory)
    log.append(records(2), term=1)
    log.append(records(2), term=1)
    log.append(records(3), term=2)
    crash(log)
    settle()  # the flusher would write the point again
    # No recovery point (a release before it, or a torn file): every segment is verified.
    (directory / POINT_FILE).unlink(missing_ok=True)
    with open(log.segments()[0].path, "r+b") as file:  # lose a batch of a rolled segment
        file.truncate(len(records(2)))
    reopened = open_log(directory)
    assert layout(reopened) == [(0, 1, 2, len(records(2)))]
    segment_files = sorted(p.name for p in directory.iterdir() if p.name != POINT_FILE)
    assert segment_files == ["00000000000000000000-1.log"]
    assert read_point(directory) <= reopened.log_end_offset  # segments to come lie above it


def test_a_roll_leaves_the_fsyncs_to_the_flusher_and_the_recovery_point_passes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An election rolls every replica's log: fsynced on the event loop, the rolled segments
    of a thousand partitions held it for seconds after a leader's kill -9. The flusher thread
    syncs the rolled segment's data and indexes; then the recovery point passes it."""
    synced: list[tuple[str, str]] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append((threading.current_thread().name, os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    directory = tmp_path / "p"
    log = open_log(directory, index_interval_bytes=1)
    log.append(records(3), term=1)
    log.append(records(3), term=1)
    log.append(records(2), term=2)
    settle()
    rolled = log.segments()[0].path
    names = {rolled, rolled.with_suffix(".index"), rolled.with_suffix(".timeindex")}
    assert {Path(name) for _, name in synced} == names
    assert all(thread.startswith("segment-flush") for thread, _ in synced)
    assert read_point(directory) == 6
    log.close()


def test_after_an_unclean_stop_segments_from_the_recovery_point_on_are_verified(
    tmp_path: Path,
) -> None:
    """A segment the flusher had not synced yet may be torn by a power loss like the last one
    (its size grew, its last pages never reached the disk): from the recovery point on, every
    segment is checked batch by batch and cut where it tears, and what follows a cut goes.
    Below the point none is read at start."""
    directory = tmp_path / "p"
    log = open_log(directory)
    for term, count in ((1, 3), (2, 2), (3, 2)):
        log.append(records(count), term=term)
    settle()
    assert read_point(directory) == 5  # segments 1 and 2 are on disk
    crash(log)
    torn = directory / "00000000000000000003-2.log"
    with open(torn, "r+b") as file:
        file.seek(-10, os.SEEK_END)
        file.write(bytes(10))
    assert len(layout(open_log(directory))) == 3  # below the point: trusted as it is
    (directory / POINT_FILE).write_text("0\n3\n")  # as if the flusher had not synced it
    reopened = open_log(directory)
    assert layout(reopened) == [(0, 1, 3, len(records(3))), (3, 2, 3, 0)]
    assert torn.stat().st_size == 0


def test_the_recovery_point_passes_a_rolled_segment_that_was_synced_already(
    tmp_path: Path,
) -> None:
    """A segment flushed by a clean shutdown has nothing to hand off when the log rolls past
    it; the point moves on all the same, or every unclean start would verify it again."""
    directory = tmp_path / "p"
    log = open_log(directory)
    log.append(records(3), term=1)
    log.close()
    log = open_log(directory)
    log.append(records(2), term=2)
    settle()
    assert read_point(directory) == 3


def test_a_truncation_below_the_recovery_point_lowers_it(tmp_path: Path) -> None:
    """Segments created after a truncation start where it left the log: the point comes down
    to there first, or an unclean stop would trust them unsynced."""
    directory = tmp_path / "p"
    log = open_log(directory)
    for term, count in ((1, 3), (2, 2), (3, 2)):
        log.append(records(count), term=term)
    settle()
    assert read_point(directory) == 5
    log.truncate_to_offset(3)
    assert read_point(directory) == 3
    log.append(records(4), term=4)
    log.append(records(1), term=5)
    settle()
    assert read_point(directory) == 7


def test_a_failed_write_leaves_no_partial_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "p")
    log.append(records(2), term=1)
    real_writev = os.writev

    def some_then_fail(fd: int, parts: list) -> int:
        monkeypatch.setattr(os, "writev", fail)
        return real_writev(fd, parts[:1])

    def fail(fd: int, parts: list) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "writev", some_then_fail)
    with pytest.raises(OSError):
        log.append(records(3), term=1)
    monkeypatch.setattr(os, "writev", real_writev)
    assert log.segments()[0].path.stat().st_size == len(records(2))
    assert log.append(records(3), term=1).base_offset == 2
    assert offsets_of(read_all(log)) == [(0, 2), (2, 5)]


def test_short_writes_are_continued_where_they_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """writev may take part of a buffer; what it left must follow, byte for byte."""
    whole = open_log(tmp_path / "whole")
    data = records(3) + records(4)
    whole.append(data, term=2)
    real_writev = os.writev
    monkeypatch.setattr(os, "writev", lambda fd, parts: real_writev(fd, [bytes(parts[0])[:7]]))
    short = open_log(tmp_path / "short")
    short.append(data, term=2)
    monkeypatch.setattr(os, "writev", real_writev)
    assert short.segments()[0].path.read_bytes() == whole.segments()[0].path.read_bytes()
    assert offsets_of(read_all(short)) == [(0, 3), (3, 7)]


def test_offsets_beyond_int32_of_a_segment_roll_it(tmp_path: Path) -> None:
    huge = bytearray(make_batch([1, 2], GZIP))  # compressed: counts are not checked against bytes
    struct.pack_into(">i", huge, 23, 2**31 - 2)
    struct.pack_into(">i", huge, 57, 2**31 - 1)
    log = open_log(tmp_path / "p", index_interval_bytes=0)
    log.append(records(1), term=1)
    log.append(bytes(huge), term=1)
    log.append(records(1), term=1)
    assert [(b, n) for b, _, n, _ in layout(log)] == [(0, 2**31), (2**31, 2**31 + 1)]
    log.close()
    assert open_log(tmp_path / "p").log_end_offset == 2**31 + 1


def test_time_lookup_with_sparse_entries_matches_a_full_scan(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    rng = random.Random(7)
    stamps = [10 * i + rng.randrange(80) for i in range(60)]  # rising with jitter
    size = len(make_batch([0]))
    log = open_log(directory, index_interval_bytes=int(2.5 * size))
    for ts in stamps:
        log.append(make_batch([ts]), term=1)

    def check(current: Log) -> None:
        for target in range(-1, max(stamps) + 2):
            expected = next(((o, ts) for o, ts in enumerate(stamps) if ts >= target), None)
            assert offset_for_timestamp(current, target, 60) == expected, target

    check(log)
    log.close()
    check(open_log(directory, index_interval_bytes=int(2.5 * size)))


def test_unrelated_files_are_left_alone(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    (directory / "raft").mkdir(parents=True)
    (directory / "raft" / "state").write_text("term 3")
    (directory / "leader-epoch-checkpoint").write_text("0\n0\n")
    (directory / "00000000000000000009-2.index").write_bytes(b"orphan")
    log = open_log(directory, segment_bytes=200, retention_bytes=0)
    for term in (1, 1, 2):
        log.append(records(3), term=term)
    log.apply_retention(now_ms=0, floor_offset=9)
    log.truncate_to_offset(6)
    log.close()
    assert (directory / "raft" / "state").read_text() == "term 3"
    assert (directory / "leader-epoch-checkpoint").exists()
    assert not (directory / "00000000000000000009-2.index").exists()


def test_retention_by_time_honours_floor_and_moves_log_start(tmp_path: Path) -> None:
    batch_size = len(records(2))
    log = open_log(tmp_path / "p", segment_bytes=batch_size, retention_ms=1_000)
    for ts in (10_000, 20_000, 30_000, 40_000):
        log.append(records(2, ts=ts), term=1)
    assert log.apply_retention(now_ms=30_500, floor_offset=2) == 1
    assert log.log_start_offset == 2
    assert log.apply_retention(now_ms=30_500, floor_offset=100) == 1  # 30_000 is not expired
    assert log.log_start_offset == 4
    assert log.apply_retention(now_ms=10**9, floor_offset=100) == 1  # the active one stays
    assert (log.log_start_offset, log.log_end_offset) == (6, 8)
    with pytest.raises(KafkaError) as info:
        log.read(5, 1 << 20, 8, True)
    assert info.value.code == ErrorCode.offset_out_of_range
    assert offsets_of(log.read(6, 1 << 20, 8, True)) == [(6, 8)]


def test_retention_by_bytes(tmp_path: Path) -> None:
    batch = records(2)
    log = open_log(tmp_path / "p", segment_bytes=len(batch), retention_bytes=2 * len(batch))
    for _ in range(5):
        log.append(batch, term=1)
    assert log.apply_retention(now_ms=0, floor_offset=4) == 2
    assert log.apply_retention(now_ms=0, floor_offset=100) == 1
    assert log.apply_retention(now_ms=0, floor_offset=100) == 0
    assert (log.log_start_offset, len(log.segments())) == (6, 2)


def test_retention_disabled_keeps_everything(tmp_path: Path) -> None:
    batch = records(2)
    log = open_log(tmp_path / "p", segment_bytes=len(batch), retention_ms=-1)
    for _ in range(3):
        log.append(batch, term=1)
    assert log.apply_retention(now_ms=10**12, floor_offset=100) == 0


@pytest.mark.parametrize("compression", [NONE, GZIP, LZ4, ZSTD])
def test_offset_for_timestamp(tmp_path: Path, compression: int) -> None:
    stamps = [
        [100, 110, 105],
        [120, 90, 130],
        [125, 140, 135],
        [150, 145, 160],
        [170, 165, 180],
        [190, 185, 200],
    ]
    first = make_batch(stamps[0], compression, value_size=80)
    log = open_log(tmp_path / "p", segment_bytes=2 * len(first), index_interval_bytes=64)
    for i, batch_stamps in enumerate(stamps):
        log.begin_term(1 + i // 3)
        log.append(make_batch(batch_stamps, compression, value_size=80), term=1 + i // 3)
    assert len(log.segments()) > 2
    flat = [ts for batch_stamps in stamps for ts in batch_stamps]

    def expected(target: int, bound: int) -> tuple[int, int] | None:
        return next(((o, ts) for o, ts in enumerate(flat) if ts >= target and o < bound), None)

    for target in (0, 100, 106, 111, 121, 131, 136, 161, 181, 199, 200, 201):
        assert offset_for_timestamp(log, target, 18) == expected(target, 18), target
        assert offset_for_timestamp(log, target, 9) == expected(target, 9), target
    assert offset_for_timestamp(log, 0, 0) is None


def test_offset_for_timestamp_decodes_inside_a_compressed_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(records(3, ts=10), term=1)
    batch = make_batch(list(range(1_000, 1_100, 2)), ZSTD)
    assert parse_header(batch).compression == ZSTD
    log.append(batch, term=1)
    assert offset_for_timestamp(log, 1_051, 53) == (3 + 26, 1_052)
    assert offset_for_timestamp(log, 1_051, 3) is None


def test_max_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=300)
    log.append(make_batch([100, 300, 200], GZIP), term=1)
    log.append(make_batch([250, 260]), term=1)
    log.append(make_batch([900, 400]), term=2)
    log.append(make_batch([300]), term=2)
    assert max_timestamp(log, 8) == (900, 5)
    assert max_timestamp(log, 5) == (300, 1)
    assert max_timestamp(log, 0) is None
    log.close()
    assert max_timestamp(open_log(tmp_path / "p", segment_bytes=300), 8) == (900, 5)


def test_max_timestamp_inside_the_bounded_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(make_batch([10, 50]), term=1)
    log.append(make_batch([70]), term=1)
    log.append(make_batch([90]), term=1)
    assert max_timestamp(log, 3) == (70, 2)


def test_locate_finds_the_bytes_of_an_appended_entry(tmp_path: Path) -> None:
    batch = records(2)
    log = open_log(tmp_path / "p", segment_bytes=3 * len(batch))
    log.append(batch, term=1)
    entry = log.append(batch + records(3), term=1)
    log.append(batch, term=2)
    assert log.locate(2, 7) == entry.location
    assert log.locate(7, 9) == Location(7, 2, 0, len(batch))
    assert log.locate(2, 4) == Location(2, 1, 0, len(batch))  # whole batches, any run of them
    for offset, next_offset in [(2, 5), (2, 8), (3, 7), (0, 7), (7, 10), (5, 5)]:
        with pytest.raises(ValueError):
            log.locate(offset, next_offset)


def test_reset_continues_an_emptied_log_at_a_later_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(records(2), term=1)
    log.reset(500)
    assert (log.log_start_offset, log.log_end_offset, log.segments()) == (500, 500, [])
    assert log.append(records(2), term=3).base_offset == 500
    assert log.epochs() == [(3, 500)]
    log.close()
    assert layout(open_log(tmp_path / "p")) == [(500, 3, 502, len(records(2)))]


def test_record_timestamps_of_stored_batches_use_assigned_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(records(4), term=1)
    location = log.append(make_batch([7, 8], LZ4), term=1).location
    assert list(record_timestamps(log.read_location(location))) == [(4, 7), (5, 8)]


def test_a_moved_log_start_hides_the_prefix_survives_restart_and_frees_whole_segments(
    tmp_path: Path,
) -> None:
    batch = records(4)
    log = open_log(tmp_path / "p", segment_bytes=3 * len(batch) + 10)
    for _ in range(9):  # segments [0, 12), [12, 24), [24, 36)
        log.append(batch, term=1)
    assert log.advance_start(14)  # inside the batch [12, 16)
    assert not log.advance_start(10)  # never back
    assert (log.log_start_offset, log.segment_start) == (14, 0)
    # whole segments below the start go, but only up to the floor Raft still needs
    assert log.delete_below_start(floor_offset=5) == 0
    assert log.delete_below_start(floor_offset=36) == 1
    assert (log.log_start_offset, log.segment_start) == (14, 12)
    # the segments still hold the batch the start is in: a snapshot install copies from there
    assert offsets_of(log.read(12, 1 << 20, 36, True))[0] == (12, 16)
    log.close()
    log = open_log(tmp_path / "p", segment_bytes=3 * len(batch) + 10)
    assert (log.log_start_offset, log.segment_start, log.log_end_offset) == (14, 12, 36)
    assert not log.advance_start(14)
    assert log.advance_start(1_000)  # clamped to the log end: an empty log, starting there
    assert log.log_start_offset == 36
