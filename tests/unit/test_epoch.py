"""Leader-epoch rules of DESIGN.md section 3, the fencing check and the history schema."""

import dataclasses
import json

import pytest

from epoch import history
from epoch.cache import EpochCache, read_checkpoint
from epoch.fencing import check_leader_epoch
from raftlog.common.errors import ErrorCode


@pytest.fixture
def cache(tmp_path):
    c = EpochCache(tmp_path / "leader-epoch-checkpoint")
    # epoch 2 led but wrote nothing (an empty term segment shares its start with epoch 3)
    c.refresh([(1, 0), (2, 100), (3, 100), (5, 250)])
    return c


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (-1, (-1, -1)),  # undefined epoch
        (5, (5, 400)),  # the latest epoch ends at the log end offset
        (6, (-1, -1)),  # above every known epoch
        (0, (0, 0)),  # below the first cached epoch: its start
        (1, (1, 100)),  # ends where the next larger epoch starts
        (2, (2, 100)),  # an empty epoch ends where it started
        (4, (3, 250)),  # unknown epoch in the middle: the largest epoch below it
    ],
)
def test_offset_for_leader_epoch_rules(cache, requested, expected):
    assert cache.end_offset_for(requested, log_end_offset=400) == expected


def test_empty_cache_knows_no_epoch(tmp_path):
    c = EpochCache(tmp_path / "cp")
    c.refresh([])
    assert c.end_offset_for(0, 0) == (-1, -1)
    assert c.epoch_for_offset(0) == -1


def test_epoch_for_offset_skips_empty_epochs(cache):
    assert cache.epoch_for_offset(0) == 1
    assert cache.epoch_for_offset(99) == 1
    assert cache.epoch_for_offset(100) == 3
    assert cache.epoch_for_offset(1000) == 5
    assert cache.start_offset(3) == 100
    assert cache.start_offset(4) is None


def test_checkpoint_is_kafkas_format(tmp_path, cache):
    path = tmp_path / "leader-epoch-checkpoint"
    cache.flush()
    assert path.read_text() == "0\n4\n1 0\n2 100\n3 100\n5 250\n"
    assert read_checkpoint(path) == [(1, 0), (2, 100), (3, 100), (5, 250)]
    cache.refresh([(1, 0), (2, 100), (3, 100), (5, 250), (7, 300)])
    cache.flush()
    assert read_checkpoint(path)[-1] == (7, 300)
    assert not (tmp_path / "leader-epoch-checkpoint.tmp").exists()


@pytest.mark.parametrize(
    ("client", "ours", "expected"),
    [
        (-1, 7, ErrorCode.none),
        (7, 7, ErrorCode.none),
        (6, 7, ErrorCode.fenced_leader_epoch),
        (8, 7, ErrorCode.unknown_leader_epoch),
    ],
)
def test_fencing(client, ours, expected):
    assert check_leader_epoch(client, ours) == expected


def test_history_records_round_trip(tmp_path):
    journal = history.HistoryJournal(tmp_path, node_id=2)
    records = [
        history.Election(
            time_ms=1, node=2, topic="t", partition=0, term=3, log_end_offset=10, high_watermark=9
        ),
        history.Truncation(
            time_ms=2,
            node=2,
            topic="t",
            partition=0,
            term=4,
            reason="raft",
            from_index=5,
            to_index=7,
            from_offset=10,
            to_offset=13,
            entry_terms=[3],
            records=3,
            batches=2,
            bytes=300,
        ),
        history.HighWatermark(time_ms=3, node=2, topic="t", partition=0, term=4, high_watermark=10),
    ]
    for r in records:
        journal.write(r)
    journal.close()
    lines = (tmp_path / "history.jsonl").read_text().splitlines()
    assert [history.parse(line) for line in lines] == records


@pytest.mark.parametrize("topic", ["small", 'a"b\\c', "caf\u00e9\n"])
def test_an_ack_line_is_the_line_of_every_other_record(topic):
    """Acks, one a produce, are formatted directly (history._ack_json): the line is the
    generic encoding's, byte for byte, and parses back."""
    ack = history.Ack(
        time_ms=1_796_613_557_656,
        node=3,
        topic=topic,
        partition=7,
        term=12,
        acks=-1,
        end_offset=2**40,
    )
    generic = {"kind": "ack", "v": history.SCHEMA_VERSION}
    generic.update((f.name, getattr(ack, f.name)) for f in dataclasses.fields(ack))
    assert history.to_json(ack) == json.dumps(generic)
    assert history.parse(history.to_json(ack)) == ack


def test_history_parse_rejects_unknown_fields():
    with pytest.raises(ValueError, match="fields"):
        history.parse(
            '{"kind": "hw", "time_ms": 1, "node": 1, "topic": "t", "partition": 0, '
            '"term": 1, "high_watermark": 2, "surprise": 3}'
        )
