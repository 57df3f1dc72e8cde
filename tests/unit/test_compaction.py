"""Log compaction (raftlog.storage.compaction via Log.compact) against a record-level model."""

import contextlib
import os
import random
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import cramjam
import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from raftlog.storage import compaction
from raftlog.storage.batch import HEADER_SIZE, BatchHeader, crc_ok, iter_batches, parse_header
from raftlog.storage.compaction import CHECKPOINT, read_checkpoint
from raftlog.storage.log import Log, LogConfig

from .test_log import max_timestamp, offset_for_timestamp

CODECS = ["none", "gzip", "snappy-xerial", "snappy-raw", "lz4", "zstd"]
_BUILDER_CODEC = {"none": 0, "gzip": 1, "lz4": 3, "zstd": 4}
SNAPPY = 2
DAY = 86_400_000
NOW = 10 * DAY
KEYS = [b"k%d" % i for i in range(6)]

Pair = tuple[bytes | None, bytes | None]


def make_batch(
    pairs: list[Pair],
    ts: int,
    codec: str = "none",
    producer: tuple[int, int, int] = (-1, -1, -1),
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=_BUILDER_CODEC.get(codec, 0),
        is_transactional=False,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 24,
    )
    for i, (key, value) in enumerate(pairs):
        builder.append(i, timestamp=ts + i, key=key, value=value, headers=[("h", b"%d" % i)])
    batch = bytearray(builder.build())
    if codec.startswith("snappy"):  # kafka-python needs python-snappy for these; cramjam does it
        records = bytes(batch[HEADER_SIZE:])
        if codec == "snappy-xerial":
            payload = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
            for i in range(0, len(records), 64):
                block = bytes(cramjam.snappy.compress_raw(records[i : i + 64]))
                payload += struct.pack(">i", len(block)) + block
        else:
            payload = bytes(cramjam.snappy.compress_raw(records))
        batch = batch[:HEADER_SIZE] + payload
        struct.pack_into(">h", batch, 21, SNAPPY)
        reseal(batch)
    return bytes(batch)


def reseal(buf: bytearray) -> bytearray:
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return buf


def plain(batch: bytes) -> bytes:
    """The batch uncompressed, so kafka-python can decode it without python-snappy."""
    header = parse_header(batch)
    if header.compression != SNAPPY:
        return batch
    payload = batch[HEADER_SIZE:]
    if payload.startswith(b"\x82SNAPPY\x00"):
        records, pos = b"", 16
        while pos < len(payload):
            (size,) = struct.unpack_from(">i", payload, pos)
            records += bytes(cramjam.snappy.decompress_raw(payload[pos + 4 : pos + 4 + size]))
            pos += 4 + size
    else:
        records = bytes(cramjam.snappy.decompress_raw(payload))
    out = bytearray(batch[:HEADER_SIZE]) + records
    struct.pack_into(">h", out, 21, header.attributes & ~0x07)
    return bytes(reseal(out))


@dataclass(frozen=True)
class Stored:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple
    batch: tuple[int, int, int]  # base offset, next offset, leader epoch


def batches(log: Log) -> list[tuple[BatchHeader, bytes]]:
    """Every stored batch; each must pass its CRC-32C check."""
    data = log.read(log.log_start_offset, 1 << 30, log.log_end_offset, True)
    found = []
    for pos, header in iter_batches(data):
        assert crc_ok(data, pos, header), header
        found.append((header, data[pos : pos + header.size]))
    return found


def stored(log: Log) -> list[Stored]:
    out = []
    for header, batch in batches(log):
        decoded = DefaultRecordBatch(plain(batch))
        assert decoded.validate_crc()
        where = (header.base_offset, header.next_offset, header.partition_leader_epoch)
        for record in decoded:
            out.append(
                Stored(
                    record.offset,
                    record.key,
                    record.value,
                    record.timestamp,
                    tuple(record.headers),
                    where,
                )
            )
    return out


def shape(log: Log) -> list[tuple[int, int, int]]:
    return [(s.base_offset, s.term, s.next_offset) for s in log.segments()]


def expected(
    before: list[Stored], cleaned_end: int, floor: int, horizon: int, max_ts: dict[int, int]
) -> list[Stored]:
    """Kafka's rules, record by record: the latest per key below the floor wins."""
    latest = {r.key: r.offset for r in before if r.key is not None and r.offset < floor}
    return [
        r
        for r in before
        if r.offset >= cleaned_end
        or r.key is None
        or (latest[r.key] == r.offset and not (r.value is None and max_ts[r.batch[0]] < horizon))
    ]


def open_log(path: Path, segment_bytes: int = 400) -> Log:
    return Log(path, LogConfig(segment_bytes=segment_bytes, index_interval_bytes=128))


def crash(log: Log) -> None:
    """Drops the log as a killed process would: no flush, no .clean marker."""
    for segment in log.segments():
        with contextlib.suppress(OSError):
            segment.close()


def random_pairs(rng: random.Random, count: int) -> list[Pair]:
    pairs: list[Pair] = []
    for _ in range(count):
        roll = rng.random()
        key = None if roll < 0.1 else rng.choice(KEYS)
        value = None if 0.1 <= roll < 0.25 else b"v%d" % rng.randrange(10**6)
        pairs.append((key, value))
    return pairs


def build_log(path: Path, codec: str = "none", seed: int = 1, terms: int = 3) -> Log:
    """Several terms of several segments of several batches; half the batches are old."""
    rng = random.Random(seed)
    log = open_log(path)
    for term in range(1, terms + 1):
        for n in range(8):
            ts = NOW - 2 * DAY if n < 4 and term < terms else NOW - 1000
            log.append(make_batch(random_pairs(rng, 4), ts + n, codec), term)
    return log


def batch_max_ts(log: Log) -> dict[int, int]:
    return {h.base_offset: h.max_timestamp for h, _ in batches(log)}


def compact(log: Log, floor: int | None = None, ratio: float = 0.5, **kw: int):
    return log.compact(NOW, log.log_end_offset if floor is None else floor, DAY, ratio, **kw)


# -- the rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_compaction_keeps_the_latest_record_per_key(tmp_path: Path, codec: str) -> None:
    log = build_log(tmp_path / "p", codec)
    before, layout, epochs = stored(log), shape(log), log.epochs()
    original = {h.base_offset: h for h, _ in batches(log)}
    assert len(layout) > 6
    active = log.segments()[-1]
    want = expected(before, active.base_offset, log.log_end_offset, NOW - DAY, batch_max_ts(log))

    result = compact(log)

    assert result.cleaned and result.dirty_ratio == 1.0
    assert result.records_removed == len(before) - len(want) > 0
    assert result.bytes_after < result.bytes_before
    assert result.first_dirty_offset == active.base_offset
    assert result.map_keys == len(KEYS)
    assert stored(log) == want
    assert (shape(log), log.epochs()) == (layout, epochs)
    for header, batch in batches(log):  # same batch, fewer records
        old = original[header.base_offset]
        assert header.next_offset == old.next_offset
        assert header.partition_leader_epoch == old.partition_leader_epoch
        same = ("producer_id", "producer_epoch", "base_sequence")
        assert [getattr(header, f) for f in same] == [getattr(old, f) for f in same]
        if header.record_count:
            assert header.base_timestamp == old.base_timestamp
            assert header.attributes == old.attributes
            assert header.compression == old.compression
            xerial = batch[HEADER_SIZE:].startswith(b"\x82SNAPPY\x00")
            assert xerial == (codec == "snappy-xerial")  # snappy keeps the producer's framing
    log.close()
    log = open_log(tmp_path / "p")
    assert stored(log) == want and shape(log) == layout
    crash(log)
    log = open_log(tmp_path / "p")
    assert stored(log) == want and shape(log) == layout
    assert not compact(log).cleaned  # nothing dirty is left


def test_old_tombstones_go_and_recent_ones_stay(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(make_batch([(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], NOW - 5 * DAY), term=1)
    log.append(make_batch([(b"a", None)], NOW - DAY - 1), term=1)  # older than the retention
    log.append(make_batch([(b"b", None)], NOW - DAY + 1), term=1)  # not yet
    log.append(make_batch([(b"c", None), (b"c", b"2")], NOW - 3 * DAY), term=1)  # superseded
    log.begin_term(2)
    result = compact(log)
    assert [(r.key, r.value) for r in stored(log)] == [(b"b", None), (b"c", b"2")]
    assert (result.records_removed, result.tombstones_expired) == (5, 1)


def test_null_keys_and_control_batches_are_kept(tmp_path: Path) -> None:
    control = bytearray(make_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], NOW))
    struct.pack_into(">h", control, 21, 0x30)  # transactional control batch (a commit marker)
    log = open_log(tmp_path / "p")
    log.append(make_batch([(None, b"x"), (b"k", b"1"), (None, None)], NOW), term=1)
    log.append(bytes(reseal(control)), term=1)
    log.append(make_batch([(b"k", b"2"), (None, b"y")], NOW), term=1)
    log.begin_term(2)
    compact(log)
    assert [(r.offset, r.key, r.value) for r in stored(log)] == [
        (0, None, b"x"),
        (2, None, None),
        (3, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00"),
        (4, b"k", b"2"),
        (5, None, b"y"),
    ]
    assert [h.is_control for h, _ in batches(log)] == [False, True, False]


def test_empty_batches_keep_segment_ends_and_producer_sequences(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=10_000)
    log.append(make_batch([(b"a", b"1"), (b"b", b"1")], NOW, producer=(7, 0, 0)), term=1)
    log.append(make_batch([(b"a", b"2"), (b"b", b"2")], NOW, producer=(7, 0, 2)), term=1)
    log.append(make_batch([(b"c", b"1")], NOW), term=1)
    log.append(make_batch([(b"d", b"1")], NOW), term=1)  # the segment's last batch
    log.begin_term(2)
    log.append(make_batch([(b"a", b"3"), (b"b", b"3"), (b"c", b"3"), (b"d", b"3")], NOW), term=2)
    log.begin_term(3)
    compact(log)
    kept = [(h.base_offset, h.next_offset, h.record_count, h.producer_id) for h, _ in batches(log)]
    # 7's first batch is not its last: gone. Its last one stays empty with its offsets, for the
    # sequence; offset 4 goes; the segment's last batch stays empty so the segment ends at 6.
    assert kept == [(2, 4, 0, 7), (5, 6, 0, -1), (6, 10, 4, -1)]
    header = batches(log)[0][0]
    assert (header.base_sequence, header.last_offset_delta, header.compression) == (2, 1, 0)
    assert shape(log) == [(0, 1, 6), (6, 2, 10), (10, 3, 10)]


def test_reads_in_gaps_start_at_the_next_batch(tmp_path: Path) -> None:
    log = build_log(tmp_path / "p", "lz4")
    compact(log)
    after = batches(log)
    start, end = log.log_start_offset, log.log_end_offset
    for offset in range(start, end):
        first = next(h for h, _ in after if h.next_offset > offset)
        got = parse_header(log.read(offset, 1, end, True))
        assert got.base_offset == first.base_offset, offset
        assert log.epoch_for_offset(offset) == first.partition_leader_epoch
    records = stored(log)
    stamps = sorted({r.timestamp for r in records})
    for target in [0, *stamps, *(t + 1 for t in stamps)]:
        want = next(((r.offset, r.timestamp) for r in records if r.timestamp >= target), None)
        assert offset_for_timestamp(log, target, end) == want, target
    newest = max(records, key=lambda r: r.timestamp)
    assert max_timestamp(log, end)[0] == newest.timestamp


def test_only_segments_below_the_floor_are_rewritten(tmp_path: Path) -> None:
    log = build_log(tmp_path / "p")
    before = stored(log)
    segments = log.segments()
    floor = segments[4].base_offset + 1  # inside segment 4: it and what follows stay as they are
    untouched = {s.path.name: s.path.read_bytes() for s in segments[4:]}
    compact(log, floor=floor)
    assert {s.path.name: s.path.read_bytes() for s in log.segments()[4:]} == untouched
    want = expected(before, segments[4].base_offset, floor, NOW - DAY, batch_max_ts(log))
    assert stored(log) == want
    # Even a floor past the end leaves the active segment alone.
    active = log.segments()[-1].path
    data = active.read_bytes()
    assert compact(log, floor=10**9, ratio=0.0).cleaned
    assert active.read_bytes() == data


def test_dirty_ratio_gates_a_pass(tmp_path: Path) -> None:
    log = build_log(tmp_path / "p")
    assert compact(log, ratio=1.0).cleaned
    clean_to = log.segments()[-1].base_offset
    assert read_checkpoint(tmp_path / "p") == clean_to
    assert (tmp_path / "p" / CHECKPOINT).read_text() == f"0\n{clean_to}\n"
    cleaned = sum(s.size for s in log.segments()[:-1])
    files = {p.name: p.read_bytes() for p in (tmp_path / "p").glob("*.log")}
    log.begin_term(9)  # the old active segment becomes cleanable and dirty
    dirty = log.segments()[-2].size
    result = compact(log, ratio=0.99)
    assert not result.cleaned
    assert result.dirty_ratio == pytest.approx(dirty / (cleaned + dirty))
    assert {
        p.name: p.read_bytes() for p in (tmp_path / "p").glob("*.log") if p.name in files
    } == files
    assert read_checkpoint(tmp_path / "p") == clean_to
    assert compact(log, ratio=0.1).cleaned
    assert read_checkpoint(tmp_path / "p") == log.segments()[-1].base_offset


def test_the_key_map_bound_cleans_in_steps(tmp_path: Path) -> None:
    rng = random.Random(5)
    log = open_log(tmp_path / "one")
    for term in (1, 2):
        for _ in range(12):
            log.append(
                make_batch([(b"k%d" % rng.randrange(40), b"v") for _ in range(3)], NOW), term
            )
    log.close()
    shutil.copytree(tmp_path / "one", tmp_path / "steps")
    single = open_log(tmp_path / "one")
    floor = single.segments()[-1].base_offset  # only the dirty part counts, as in Kafka
    compact(single, floor)
    stepped = open_log(tmp_path / "steps")
    passes = []
    while (result := compact(stepped, floor, ratio=0.0, max_map_keys=5)).cleaned:
        passes.append(result)
        # The bound, overshot by at most one batch, or the first dirty segment (3 batches of
        # 3 records), which a pass maps whole so that it always makes progress.
        assert result.map_keys <= 9
    assert len(passes) > 2
    assert [(r.offset, r.key) for r in stored(stepped)] == [
        (r.offset, r.key) for r in stored(single)
    ]
    assert shape(stepped) == shape(single)


# -- around compaction -------------------------------------------------------------------------


def test_truncation_after_compaction_keeps_offsets_and_lowers_the_checkpoint(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "p", segment_bytes=10_000)
    log.append(make_batch([(b"a", b"1")], NOW), term=1)
    log.append(make_batch([(b"a", b"2")], NOW), term=1)
    log.append(make_batch([(b"b", b"1")], NOW), term=2)
    log.append(make_batch([(b"b", b"2")], NOW), term=2)
    log.append(make_batch([(b"c", b"1")], NOW), term=3)
    compact(log)
    assert [h.base_offset for h, _ in batches(log)] == [1, 3, 4]
    assert read_checkpoint(tmp_path / "p") == 4
    log.truncate(4, 3, 0, drop_segment=True)  # Raft drops the uncommitted term 3
    assert (log.log_end_offset, log.epochs()) == (4, [(1, 0), (2, 2)])
    with pytest.raises(ValueError, match="gap"):  # the log could not end at 3 any more
        log.truncate_to_offset(3)
    assert log.append(make_batch([(b"d", b"1")], NOW), term=4).base_offset == 4
    log.close()
    log = open_log(tmp_path / "p")
    assert [(r.offset, r.key) for r in stored(log)] == [(1, b"a"), (3, b"b"), (4, b"d")]
    log.reset(100)
    assert read_checkpoint(tmp_path / "p") == 0
    log.append(make_batch([(b"e", b"1")], NOW), term=5)
    log.append(make_batch([(b"e", b"2")], NOW), term=6)
    assert compact(log).first_dirty_offset == 101
    assert [(r.offset, r.key, r.value) for r in stored(log)] == [(101, b"e", b"2")]


def test_a_follower_copies_compacted_data_keeping_its_offsets(tmp_path: Path) -> None:
    leader = build_log(tmp_path / "leader", "zstd")
    compact(leader)
    follower = open_log(tmp_path / "follower", segment_bytes=500)
    for segment in leader.segments():  # term by term, as a snapshot streams them
        follower.begin_term(segment.term)
        data = leader.read(segment.base_offset, 1 << 30, segment.next_offset, True)
        if data:
            follower.append(data, segment.term, keep_offsets=True)
    assert stored(follower) == stored(leader)
    assert (follower.epochs(), follower.log_end_offset) == (leader.epochs(), leader.log_end_offset)
    crash(follower)
    follower = open_log(tmp_path / "follower", segment_bytes=500)
    assert stored(follower) == stored(leader)
    with pytest.raises(ValueError):  # offsets may skip forward, never back
        follower.append(make_batch([(b"x", b"1")], NOW), follower.active_term, keep_offsets=True)


# -- crash safety ------------------------------------------------------------------------------


class Crash(Exception):
    pass


class Doom:
    """Kills the process (raises Crash) at the n-th file system call, and every one after."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.calls = 0

    def wrap(self, real):
        def call(*args, **kwargs):
            self.calls += 1
            if self.calls >= self.at:
                raise Crash
            return real(*args, **kwargs)

        return call


def test_a_crash_at_any_step_of_a_pass_recovers_a_consistent_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    template = tmp_path / "template"
    build_log(template, "gzip", terms=2).close()
    reference = tmp_path / "reference"
    shutil.copytree(template, reference)
    log = open_log(reference)
    before, layout = stored(log), shape(log)
    compact(log)
    after = stored(log)
    log.close()

    def by_segment(records: list[Stored]) -> dict[int, list[Stored]]:
        bases = [base for base, _, _ in layout]
        groups: dict[int, list[Stored]] = {}
        for r in records:
            groups.setdefault(max(b for b in bases if b <= r.offset), []).append(r)
        return groups

    old, new = by_segment(before), by_segment(after)
    step = 0
    while True:
        step += 1
        directory = tmp_path / f"crash{step}"
        shutil.copytree(template, directory)
        log = open_log(directory)
        doom = Doom(step)
        finished = False
        with monkeypatch.context() as patch:
            for name in ("rename", "unlink", "fsync", "write"):
                patch.setattr(os, name, doom.wrap(getattr(os, name)))
            with contextlib.suppress(Crash):
                compact(log)
                finished = True
        crash(log)
        log = open_log(directory)
        leftovers = [p.name for p in directory.iterdir() if p.suffix in (".cleaned", ".swap")]
        assert not leftovers, step
        assert shape(log) == layout, step
        got = by_segment(stored(log))
        for base in old:
            assert got.get(base, []) in (old[base], new.get(base, [])), (step, base)
        compact(log)
        assert stored(log) == after, step
        log.close()
        if finished:
            break
    assert step > 20  # every write, fsync, rename and unlink of the pass was a crash point


def test_a_pass_runs_in_steps_between_other_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compaction, "STEP_RECORDS", 6)
    log = build_log(tmp_path / "p")
    reference = tmp_path / "reference"
    shutil.copytree(tmp_path / "p", reference)
    want = stored(open_log(reference))
    floor, cleaned_end = log.log_end_offset, log.segments()[-1].base_offset
    steps = log.compact_steps(NOW, floor, DAY, 0.5)
    paused = 0
    with pytest.raises(StopIteration) as done:
        while True:
            next(steps)
            paused += 1
            assert stored(log)  # reads between steps see a consistent log
            log.append(make_batch([(b"k0", b"late")], NOW), term=3)  # the active segment grows
    assert paused > 10 and done.value.value.cleaned
    full = expected(want, cleaned_end, floor, NOW - DAY, batch_max_ts(open_log(reference)))
    assert [r for r in stored(log) if r.offset < floor] == full


def test_retention_during_a_pass_aborts_it_and_leaves_a_consistent_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compaction, "STEP_RECORDS", 6)
    log = build_log(tmp_path / "p")
    layout = shape(log)
    steps = log.compact_steps(NOW, log.log_end_offset, DAY, 0.5)
    for _ in range(20):  # well into the rewrite of the first segments
        next(steps)
    log.config.retention_bytes = 0
    assert log.apply_retention(NOW, layout[2][0]) == 2
    with pytest.raises(StopIteration) as done:
        next(steps)
    assert done.value.value.aborted and not done.value.value.cleaned
    assert not [p for p in (tmp_path / "p").iterdir() if p.suffix in (".cleaned", ".swap")]
    assert shape(log) == layout[2:]
    stored(log)  # every batch still reads and passes its CRC
    crash(log)
    log = open_log(tmp_path / "p")
    assert shape(log) == layout[2:] and compact(log).cleaned
    # A pass closed half way (its caller went away) leaves nothing behind either.
    log.begin_term(7)
    steps = log.compact_steps(NOW, log.log_end_offset, DAY, 0.0)
    next(steps)
    steps.close()
    assert not [p for p in (tmp_path / "p").iterdir() if p.suffix in (".cleaned", ".swap")]


def test_open_discards_unfinished_rewrites_and_completes_committed_swaps(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    build_log(directory).close()
    reference = tmp_path / "reference"
    shutil.copytree(directory, reference)
    done = open_log(reference)
    compact(done)
    after = stored(done)
    first, second = (s.path.name for s in done.segments()[:2])
    done.close()
    # A rewrite of segment 0 that never committed, and one of segment 1 that did.
    original_first = (directory / first).read_bytes()
    assert original_first != (reference / first).read_bytes()
    (directory / (first + ".cleaned")).write_bytes(b"partial")
    (directory / (second + ".swap")).write_bytes((reference / second).read_bytes())
    log = open_log(directory)
    assert not [p for p in directory.iterdir() if p.suffix in (".cleaned", ".swap")]
    assert (directory / first).read_bytes() == original_first
    assert (directory / second).read_bytes() == (reference / second).read_bytes()
    # the uncompacted segment's index went with it; one is rebuilt only if an entry is due
    index, compacted = ((d / second).with_suffix(".index") for d in (directory, reference))
    assert index.exists() == compacted.exists()
    assert not index.exists() or index.read_bytes() == compacted.read_bytes()
    compact(log)
    assert stored(log) == after
