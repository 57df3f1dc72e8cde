"""ListOffsets by timestamp on a new leader of three real replicas (tests/support/replicas.py)
before its high watermark reaches the start of its epoch: records its predecessor committed
lie above that watermark, so Kafka answers OFFSET_NOT_AVAILABLE, which clients retry, and
never "no such record"."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.raftnet import Clock, message_types
from support.replicas import IDS, Replicas
from support.wire import make_batch

from raftlog.api.values import MAX_TIMESTAMP
from raftlog.common.errors import ErrorCode, KafkaError


@pytest.fixture
async def replicas(tmp_path: Path):
    r = Replicas(tmp_path, Clock())
    yield r
    r.close()


async def test_a_new_leader_behind_its_epoch_start_answers_offset_not_available(
    replicas: Replicas,
) -> None:
    leader = await replicas.leader()
    old = replicas.partitions[leader]
    for stamp in (1_000, 2_000):
        if stamp == 2_000:  # its commit reaches no follower
            replicas.net.drop = lambda src, _dst, frame: (
                src == leader and old.high_watermark >= 2 and "app" in message_types(frame)
            )
        batch = make_batch([(None, b"at %d" % stamp)], timestamp_ms=stamp)
        assert (await replicas.until(replicas.send(leader, batch))).error == ErrorCode.none
        await replicas.run(0.3)
    assert old.high_watermark == 2

    # The old leader is cut off; a follower is elected but its first entry cannot commit.
    term = old.group.term
    replicas.net.isolate(leader)
    replicas.net.drop = lambda _src, _dst, frame: "app-resp" in message_types(frame)
    followers = [i for i in IDS if i != leader]
    for _ in range(200):
        await replicas.step()
        leading = [i for i in followers if replicas.partitions[i].is_leader]
        if leading and replicas.partitions[leading[0]].group.term > term:
            break
    else:
        raise AssertionError("no follower was elected")
    new = replicas.partitions[leading[0]]
    assert new.high_watermark == 1  # offset 1 was committed, but this leader cannot know yet

    for timestamp in (2_000, MAX_TIMESTAMP, -1):
        with pytest.raises(KafkaError) as lagging:
            await new.offset_for_timestamp(timestamp)
        assert lagging.value.code == ErrorCode.offset_not_available, timestamp
    found = await new.offset_for_timestamp(1_000)  # below the watermark: answered as it is
    assert found is not None and (found.offset, found.timestamp) == (0, 1_000)

    replicas.net.drop = None  # the new leader's first entry commits: offset 1 is found
    await replicas.run(0.5)
    assert new.is_leader and new.high_watermark == 2
    found = await new.offset_for_timestamp(2_000)
    assert found is not None and (found.offset, found.timestamp) == (1, 2_000)
    newest = await new.offset_for_timestamp(MAX_TIMESTAMP)
    assert newest is not None and (newest.offset, newest.timestamp) == (1, 2_000)
