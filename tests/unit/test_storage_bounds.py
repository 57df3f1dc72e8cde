"""Non-active segments load their indexes and open their .log on demand, under the process-wide
budgets of raftlog.storage.cache; a log of many segments must read exactly as an unbounded one."""

import errno
import os
import random
import shutil
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from raftlog.storage import cache, flusher
from raftlog.storage.batch import iter_batches
from raftlog.storage.index import OffsetIndex
from raftlog.storage.log import Log, LogConfig
from raftlog.storage.log_reads import Location

from .test_log import crash, max_timestamp, offset_for_timestamp

SEGMENTS = 240
MAX_FILES = 6
BATCH_RECORDS = 3
UNBOUNDED = {"max_index_bytes": 1 << 40, "max_open_files": 1 << 20}


def make_batch(first_ts: int, count: int = BATCH_RECORDS, keys: list[bytes] | None = None) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 24,
    )
    for i in range(count):
        key = keys[i] if keys else None
        builder.append(i, timestamp=first_ts + i, key=key, value=b"v%d" % first_ts, headers=[])
    return bytes(builder.build())


BATCH = len(make_batch(1_000_000))  # as write_log() makes them
CONFIG = {"segment_bytes": 8 * BATCH, "index_interval_bytes": BATCH // 2}


@pytest.fixture
def budget() -> Iterator[None]:
    """Lets a test set its own budgets; the process-wide ones are restored after it. What
    earlier tests' logs left under the budgets is released first (all but one of each)."""
    saved = cache.indexes.limit, cache.files.limit
    cache.configure(max_index_bytes=0, max_open_files=1)
    yield
    cache.configure(max_index_bytes=saved[0], max_open_files=saved[1])


def open_log(path: Path, **config: int) -> Log:
    return Log(path, LogConfig(**{**CONFIG, **config}))


def write_log(path: Path, segments: int = SEGMENTS, **config: int) -> None:
    """`segments` full segments of 8 batches (plus the active one), a new term every 50, with
    timestamps rising with jitter so the time index is not trivial."""
    rng = random.Random(3)
    log = open_log(path, **config)
    ts = 1_000_000
    while len(log.segments()) <= segments:
        ts += rng.randrange(1, 40)
        log.append(make_batch(ts - rng.randrange(30)), term=1 + len(log.segments()) // 50)
    log.close()


def index_budget(per_segment: int) -> int:
    """Room for `per_segment` loaded index pairs of a full segment: 7 offset entries (8 bytes)
    and up to 7 time entries (12 bytes). The fixed cost of a pair dominates, so the smallest
    pair (no time entries) still fits no more than `per_segment` times."""
    empty_pair = 2 * OffsetIndex(Path("/nonexistent"), 0).nbytes
    return per_segment * (empty_pair + 7 * 20)


def log_fds(directory: Path) -> int:
    """Descriptors this process really holds on files of `directory`."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(directory) + "/")
    return count


def check_bounds(log: Log, max_indexes: int) -> None:
    stats = cache.stats()
    assert stats.open_files <= MAX_FILES, stats
    assert stats.index_bytes <= stats.max_index_bytes, stats
    assert sum(s.resident[0] for s in log.segments()[:-1]) <= max_indexes, stats
    assert sum(s.resident[1] for s in log.segments()[:-1]) <= MAX_FILES, stats
    assert log_fds(log.directory) <= MAX_FILES + 1  # the budget plus the active segment


def observe(log: Log, after_each: Callable[[], None] | None = None) -> list[object]:
    """Everything a reader can ask of the log, in an order that jumps between segments."""
    start, end = log.log_start_offset, log.log_end_offset
    rng = random.Random(11)
    results: list[object] = [
        (start, end, log.active_term, log.epochs()),
        [(s.base_offset, s.term, s.next_offset, s.size, s.max_timestamp) for s in log.segments()],
    ]
    offsets = list(range(start, end, 5)) + [rng.randrange(start, end) for _ in range(300)]
    for offset in offsets:
        results.append(log.read(offset, rng.choice([1, 200, 3 * BATCH]), end, True))
        results.append(log.epoch_for_offset(offset))
        if after_each:
            after_each()
    stamps = [
        log.segments()[0].max_timestamp - 50,
        *(rng.randrange(999_000, 1_050_000) for _ in range(60)),
    ]
    for stamp in stamps:
        results.append(offset_for_timestamp(log, stamp, end))
        results.append(offset_for_timestamp(log, stamp, rng.randrange(start, end)))
        if after_each:
            after_each()
    for bound in (end, end // 2, start + 1):
        results.append(max_timestamp(log, bound))
    data = log.read(start, 1 << 30, end, True)
    runs = [(h.base_offset, h.next_offset) for _, h in iter_batches(data)]
    for first, last in [runs[i] for i in rng.sample(range(len(runs)), min(80, len(runs)))]:
        location = log.locate(first, last)
        results.append(location)
        results.append(log.read_location(location))
        if after_each:
            after_each()
    results.append(data)
    return results


def test_reads_across_many_segments_stay_within_budget_and_match_an_unbounded_log(
    tmp_path: Path, budget: None
) -> None:
    directory = tmp_path / "p"
    write_log(directory)
    cache.configure(**UNBOUNDED)
    unbounded = open_log(directory)
    expected = observe(unbounded)
    unbounded.close()

    max_indexes = 5
    cache.configure(max_index_bytes=index_budget(max_indexes), max_open_files=MAX_FILES)
    before = cache.stats()
    log = open_log(directory)
    assert len(log.segments()) == SEGMENTS + 1
    # Opening loads the active segment's indexes only; the others' last entries were peeked.
    assert log.segments()[-1].resident[0] and cache.stats().index_loads == before.index_loads
    assert not any(s.resident[0] for s in log.segments()[:-1])
    check_bounds(log, max_indexes)

    got = observe(log, after_each=lambda: check_bounds(log, max_indexes))
    assert got == expected
    stats = cache.stats()
    assert stats.index_loads - before.index_loads > SEGMENTS  # it did have to evict and reload
    assert stats.file_opens - before.file_opens > SEGMENTS
    assert sum(s.resident[0] for s in log.segments()[:-1]) <= max_indexes
    assert sum(s.resident[1] for s in log.segments()[:-1]) <= MAX_FILES
    assert log.segments()[-1].resident == (True, True)  # the active segment stays pinned
    log.close()  # everything the budgets held was this log's by now, and is released
    assert log_fds(directory) == 0
    assert (cache.stats().open_files, cache.stats().resident_indexes) == (0, 0)


def test_writing_a_long_log_keeps_descriptors_bounded(tmp_path: Path, budget: None) -> None:
    cache.configure(max_index_bytes=index_budget(3), max_open_files=MAX_FILES)
    directory = tmp_path / "p"
    log = open_log(directory)
    for i in range(400):
        log.append(make_batch(1_000 * i), term=1 + i // 100)
        if i % 25 == 0:
            check_bounds(log, 3)
    assert len(log.segments()) > 40
    check_bounds(log, 3)
    assert [s.active for s in log.segments()] == [False] * (len(log.segments()) - 1) + [True]
    log.close()


def test_past_terms_hold_no_descriptor_until_read(tmp_path: Path) -> None:
    """Each election rolls a segment; kept open, every past term's segment held a descriptor
    (a node went from 37 to 382 after repeated elections) whatever the budget had room for.
    Now only the active segment holds one, and a read of an old one opens it, under the
    budget."""
    cache.configure(**UNBOUNDED)
    log = open_log(tmp_path / "p")
    fds = len(os.listdir("/proc/self/fd"))
    for term in range(1, 101):
        log.append(make_batch(1_000 * term), term=term)
    assert len(log.segments()) == 100
    flusher.settle()  # its descriptors are not the log's
    assert len(os.listdir("/proc/self/fd")) <= fds + 1
    assert cache.stats().open_files == 0
    assert log.read(0, 1, log.log_end_offset, True)
    assert cache.stats().open_files == 1
    log.close()
    cache.configure(max_open_files=cache.DEFAULT_MAX_OPEN_FILES)


def test_truncation_into_an_evicted_segment_matches_an_unbounded_log(
    tmp_path: Path, budget: None
) -> None:
    write_log(tmp_path / "a", segments=40)
    shutil.copytree(tmp_path / "a", tmp_path / "b")

    def scenario(directory: Path) -> tuple[list[object], dict[str, bytes]]:
        log = open_log(directory)
        segment = log.segments()[12]
        data = log.read(segment.base_offset, 1 << 20, log.log_end_offset, True)
        cut = [h.base_offset for _, h in iter_batches(data)][5]  # inside segment 12
        for other in log.segments()[20:35]:  # a reader elsewhere evicts segment 12's state
            log.read(other.base_offset + 1, 1, log.log_end_offset, True)
        result = log.truncate_to_offset(cut)
        assert log.segments()[-1].active and log.segments()[-1] is segment
        log.append(make_batch(5_000_000), term=log.active_term)
        log.append(make_batch(5_000_100), term=log.active_term + 1)
        seen = [result, observe(log)]
        log.close()
        skip = {".clean", flusher.POINT_FILE}  # the point: as far as the flusher got
        files = {p.name: p.read_bytes() for p in directory.iterdir() if p.name not in skip}
        return seen, files

    cache.configure(**UNBOUNDED)
    expected = scenario(tmp_path / "a")
    cache.configure(max_index_bytes=index_budget(2), max_open_files=MAX_FILES)
    assert scenario(tmp_path / "b") == expected
    # The indexes written after the cut are those a rebuild from the .log makes.
    for path in (tmp_path / "b").iterdir():
        if "index" in path.suffix:
            path.unlink()
    open_log(tmp_path / "b").close()
    assert {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir() if "index" in p.suffix} == {
        name: data for name, data in expected[1].items() if "index" in name
    }


def test_retention_and_compaction_under_a_tight_budget(tmp_path: Path, budget: None) -> None:
    keys = [b"k%d" % i for i in range(12)]

    def build(directory: Path) -> Log:
        rng = random.Random(5)
        log = open_log(directory, retention_ms=-1, retention_bytes=-1)
        for i in range(300):
            log.append(make_batch(10_000 + 10 * i, keys=rng.sample(keys, 3)), term=1 + i // 120)
        return log

    def scenario(directory: Path) -> list[object]:
        log = build(directory)
        end = log.log_end_offset
        passes = [
            log.compact(
                now_ms=10**9, floor_offset=end, delete_retention_ms=0, min_cleanable_dirty_ratio=0.0
            )
        ]
        log.config.retention_bytes = sum(s.size for s in log.segments()) // 2
        deleted = log.apply_retention(now_ms=10**9, floor_offset=end)
        log.close()
        reopened = open_log(directory)
        seen = [passes, deleted, observe(reopened)]
        reopened.close()
        return seen

    cache.configure(**UNBOUNDED)
    expected = scenario(tmp_path / "a")
    cache.configure(max_index_bytes=index_budget(1), max_open_files=2)
    assert scenario(tmp_path / "b") == expected
    assert expected[0][0].segments_rewritten > 10 and expected[1] > 0


def test_a_descriptor_closed_under_a_running_scan_is_reopened(tmp_path: Path, budget: None) -> None:
    log = open_log(tmp_path / "p", segment_bytes=40_000)  # scans read 16 KiB at a time
    while len(log.segments()) < 5:
        log.append(make_batch(len(log.segments())), term=1)
    cache.configure(max_open_files=1)
    first, *others = log.segments()[:-1]
    expected = list(first.headers())
    opens = cache.stats().file_opens
    scan = first.headers()
    got = []
    reads = 0
    for i, item in enumerate(scan):
        got.append(item)
        if i % 50 == 0:  # another reader closes the scanned segment's descriptor
            others[i % len(others)].read(0, 61)
            reads += 1
            assert not first.resident[1]
    assert got == expected
    assert cache.stats().file_opens - opens > reads + 1  # the scan reopened it, more than once
    log.close()


def test_a_malformed_index_of_a_non_active_segment_is_rebuilt_on_first_use(
    tmp_path: Path, budget: None
) -> None:
    directory = tmp_path / "p"
    write_log(directory, segments=4)
    log = open_log(directory)
    segment = log.segments()[1]
    expected = [log.read(o, 1, log.log_end_offset, True) for o in range(log.log_end_offset)]
    log.close()
    index = segment.path.with_suffix(".index")
    good = index.read_bytes()
    entries = [good[i : i + 8] for i in range(0, len(good), 8)]
    assert len(entries) >= 4
    # The last entry is intact, so opening (which peeks at it) cannot tell: the first use must.
    index.write_bytes(entries[0] + entries[2] + entries[1] + b"".join(entries[3:]))
    reopened = open_log(directory)
    assert not reopened.segments()[1].resident[0]
    got = [
        reopened.read(o, 1, reopened.log_end_offset, True) for o in range(reopened.log_end_offset)
    ]
    assert got == expected
    assert index.read_bytes() == good
    reopened.close()


def test_a_gap_found_by_verifying_drops_the_rest_and_activates_the_new_last(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "p"
    write_log(directory, segments=5)
    log = open_log(directory)
    third = log.segments()[2]
    position, header = list(third.headers())[-1]
    crash(log)
    flusher.settle()  # the flusher would write the point again
    # No recovery point (a release before it, or a torn file): every segment is verified.
    (directory / flusher.POINT_FILE).unlink(missing_ok=True)
    with open(third.path, "r+b") as file:  # lose the last batch of a rolled segment
        file.truncate(position)
    reopened = open_log(directory)
    assert len(reopened.segments()) == 3
    last = reopened.segments()[-1]
    assert last.active and last.resident == (True, True)
    assert last.next_offset == header.base_offset
    appended = reopened.append(make_batch(9_000_000), term=reopened.active_term)
    assert (appended.base_offset, appended.location.segment_base) == (
        header.base_offset,
        last.base_offset,
    )
    reopened.close()


@pytest.mark.parametrize("interval", [BATCH // 2, 1 << 30], ids=["indexed", "too small to index"])
def test_segments_below_the_recovery_point_are_not_read_until_used(
    tmp_path: Path, interval: int
) -> None:
    """A restart opens a log of many segments without reading them: each is trusted as the
    directory lists it (one too small for an index entry has no index files), and its max
    timestamp is read the first time something asks."""
    directory = tmp_path / "p"
    write_log(directory, segments=6, index_interval_bytes=interval)
    log = open_log(directory, index_interval_bytes=interval)
    before = [(s.base_offset, s.size, s.next_offset, s.max_timestamp) for s in log.segments()]
    newest = max_timestamp(log, log.log_end_offset)
    log.close()
    assert (interval > BATCH * 8) == (not list(directory.glob("*.index")))
    opens = cache.stats().file_opens
    reopened = open_log(directory, index_interval_bytes=interval)
    assert cache.stats().file_opens == opens
    assert all(s.resident == (False, False) for s in reopened.segments()[:-1])
    after = [(s.base_offset, s.size, s.next_offset, s.max_timestamp) for s in reopened.segments()]
    assert after == before
    assert max_timestamp(reopened, reopened.log_end_offset) == newest
    reopened.close()


def test_running_out_of_descriptors_closes_idle_segment_files(
    tmp_path: Path, budget: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_log(tmp_path / "p", segments=12)
    cache.configure(max_open_files=100)
    log = open_log(tmp_path / "p")
    for segment in log.segments():
        segment.read(0, 61)
    held = cache.stats().open_files
    assert held >= 12
    real_open = os.open
    failures = [OSError(errno.EMFILE, "Too many open files")]

    def flaky_open(path: object, flags: int, mode: int = 0o777) -> int:
        if failures and str(path).endswith(".log"):
            raise failures.pop()
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", flaky_open)
    cache.files.trim(held)  # nothing to evict yet
    log.segments()[0]._release_file()  # as the budget would; the next read must reopen
    cache.files.discard(log.segments()[0])
    assert log.read(0, 1, log.log_end_offset, True)
    assert cache.stats().open_files <= held // 2 + 1
    log.close()


def test_budgets_are_validated() -> None:
    with pytest.raises(ValueError):
        cache.configure(max_open_files=0)
    with pytest.raises(ValueError):
        cache.configure(max_index_bytes=-1)


def test_location_reads_of_non_active_segments(tmp_path: Path, budget: None) -> None:
    """How the Raft journal reads entries back, one segment per entry here."""
    cache.configure(max_open_files=1)
    log = open_log(tmp_path / "p", segment_bytes=1)
    batches = [make_batch(1_000_000 + i) for i in range(40)]
    locations = [log.append(batch, term=1).location for batch in batches]
    assert len(log.segments()) == 40
    assert locations[3] == Location(3 * BATCH_RECORDS, 1, 0, BATCH)
    flusher.settle()  # its descriptors are not the log's
    for i in [*range(40), *reversed(range(40))]:
        data = log.read_location(locations[i])
        assert struct.unpack_from(">q", data)[0] == BATCH_RECORDS * i
        assert struct.unpack_from(">i", data, 12)[0] == 1  # the leader epoch, rewritten too
        assert data[16:] == batches[i][16:]
        assert log_fds(log.directory) <= 2
    log.close()
