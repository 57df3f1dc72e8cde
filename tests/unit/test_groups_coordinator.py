"""The group coordinator's state machine, driven through its methods over an in-memory
`__consumer_offsets` partition (MemoryLog: the coordinator's storage seam, nothing more) on a
manual clock (support.clock): time moves only when a test moves it, so the timeouts are
asserted to the millisecond and nothing sleeps."""

from __future__ import annotations

import asyncio
import random

import pytest
from support import groups as G
from support import offsets_decoder as D
from support.clock import ManualClock, settle

from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.groups import records as R
from raftlog.groups.coordinator import GroupConfig, GroupCoordinator
from raftlog.groups.metadata_manager import java_string_hash
from raftlog.groups.offsets_log import LogRecord
from raftlog.groups.rebalance import PENDING_MEMBER_MAX_MS
from raftlog.groups.results import CommitOffset, JoinResult, LeavingMember

E = ErrorCode
RANGE = (("range", b"range-meta"),)
HOST = "/127.0.0.1"


class MemoryLog:
    """OffsetsLog in memory. `hold()` parks appends until `release()` resolves (or fails)
    them, so a test can look at the coordinator while a write is in flight."""

    def __init__(self, index: int = 0, records=()) -> None:
        self.index = index
        self.leader_epoch = 1
        self.records: list[LogRecord] = []
        self.appends: list[list[tuple[bytes, bytes | None]]] = []
        self.producers: list[tuple[int, int] | None] = []  # each append's transaction
        self.held: list[tuple[asyncio.Future, tuple]] | None = None
        for key, value in records:
            self.records.append(LogRecord(len(self.records), key, value))

    def append(self, records, producer=None):
        future = asyncio.get_running_loop().create_future()
        if self.held is not None:
            self.held.append((future, (list(records), producer)))
        else:
            self._write(future, (list(records), producer))
        return future

    def _write(self, future, written) -> None:
        records, producer = written
        base = len(self.records)
        self.appends.append(records)
        self.producers.append(producer)
        pid = producer[0] if producer else -1
        self.records += [LogRecord(base + i, k, v, pid) for i, (k, v) in enumerate(records)]
        future.set_result(base)

    def marker(self, producer_id: int, commit: bool) -> None:
        """A transaction's marker, as the transaction coordinator writes it."""
        self.records.append(LogRecord(len(self.records), b"", None, producer_id, commit))

    def hold(self) -> None:
        self.held = []

    def release(self, error: KafkaError | None = None) -> None:
        held, self.held = self.held or [], None
        for future, records in held:
            if error is None:
                self._write(future, records)
            else:
                future.set_exception(error)

    def read_committed(self):
        return iter(list(self.records))

    def decoded(self) -> list[tuple[object, object]]:
        out = []
        for _, key, value, _, marker in self.records:
            if marker is not None:
                continue
            k = R.decode_key(key)
            out.append((k, R.decode_value(k, value)))
        return out


def config(**overrides) -> GroupConfig:
    values = dict(
        num_partitions=1,
        initial_rebalance_delay_ms=100,
        min_session_timeout_ms=10,
        max_session_timeout_ms=60_000,
        offsets_retention_check_interval_ms=60_000,
    )
    values.update(overrides)
    return GroupConfig(**values)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(autouse=True)
async def close_coordinators(monkeypatch):
    """Every coordinator a test creates is detached at its end: no timers outlive a test."""
    created: list[GroupCoordinator] = []
    init = GroupCoordinator.__init__

    def tracked(self, *args, **kwargs):
        init(self, *args, **kwargs)
        created.append(self)

    monkeypatch.setattr(GroupCoordinator, "__init__", tracked)
    yield
    for coord in created:
        coord.close()


async def coordinator(
    clock: ManualClock, log: MemoryLog | None = None, **overrides
) -> tuple[GroupCoordinator, MemoryLog]:
    log = log or MemoryLog()
    coord = GroupCoordinator(1, config(**overrides), clock=clock)
    coord.attach(log.index, log)
    await settle()
    return coord, log


async def join(
    coord: GroupCoordinator,
    group: str = "g",
    member_id: str = "",
    instance: str | None = None,
    protocols=RANGE,
    session: int = 5000,
    rebalance: int = 1000,
    client: str = "client",
    **kwargs,
) -> JoinResult:
    """A v4+ client's JoinGroup, including the MEMBER_ID_REQUIRED round trip."""
    result = await coord.join_group(
        group,
        member_id,
        instance,
        "consumer",
        protocols,
        session,
        rebalance,
        client,
        HOST,
        **kwargs,
    )
    if result.error is E.member_id_required:
        return await join(
            coord,
            group,
            result.member_id,
            instance,
            protocols,
            session,
            rebalance,
            client,
            **kwargs,
        )
    return result


async def form_group(
    clock: ManualClock, coord: GroupCoordinator, count: int, group: str = "g", **kwargs
) -> list[JoinResult]:
    """`count` members join together (the initial delay passes) and sync; returns their join
    answers."""
    joined = await clock.run(
        asyncio.gather(*(join(coord, group, client=f"c{i}", **kwargs) for i in range(count)))
    )
    leader = next(j for j in joined if j.members)
    assignments = {j.member_id: f"assigned-{j.member_id}".encode() for j in joined}
    synced = await asyncio.gather(
        *(
            coord.sync_group(
                group,
                j.generation_id,
                j.member_id,
                kwargs.get("instance"),
                assignments=assignments if j is leader else None,
            )
            for j in joined
        )
    )
    assert all(s.error is E.none for s in synced)
    return list(joined)


async def state(coord: GroupCoordinator, group: str = "g") -> str:
    return coord.describe_group(group).state


# ------------------------------------------------------------------ placement


def test_java_string_hash_matches_java():
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -(2**31)
    # UTF-16 code units: a character outside the BMP counts as its surrogate pair.
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00


def test_java_string_hash_of_long_ids_in_every_plane():
    """Summed a chunk of code units at a time: the same as Java's one unit at a time
    (tests/support/groups.py's), across chunk boundaries and surrogate pairs."""
    rng = random.Random(42)
    alphabet = "aZ9-é€\uffff\U0001f600\U0010ffff"
    for length in (*range(0, 8), 255, 256, 257, 511, 512, 513, 1000, 32767):
        value = "".join(rng.choice(alphabet) for _ in range(length))
        assert java_string_hash(value) == G.java_string_hash(value), length


def test_partition_for():
    coord = GroupCoordinator(1, GroupConfig(num_partitions=16))
    assert coord.partition_for("hello") == 99162322 % 16
    assert coord.partition_for("polygenelubricants") == 0  # abs(Integer.MIN_VALUE) -> 0
    negative = "polygenelubricantz"
    assert java_string_hash(negative) < 0
    assert coord.partition_for(negative) == abs(java_string_hash(negative)) % 16
    assert coord.partition_for("") == 0


# ------------------------------------------------------------------ joining


async def test_three_members_join_in_one_generation(clock):
    coord, log = await coordinator(clock)
    joined = await clock.run(asyncio.gather(*(join(coord, client=f"c{i}") for i in range(3))))
    assert {j.error for j in joined} == {E.none}
    assert {j.generation_id for j in joined} == {1}
    assert all(j.member_id.startswith(f"c{i}-") for i, j in enumerate(joined))
    leaders = [j for j in joined if j.members]
    assert len(leaders) == 1 and leaders[0].leader == leaders[0].member_id
    assert {m.member_id for m in leaders[0].members} == {j.member_id for j in joined}
    assert {m.metadata for m in leaders[0].members} == {b"range-meta"}
    assert {j.protocol_name for j in joined} == {"range"}
    assert await state(coord) == "CompletingRebalance"

    # Followers sync first and wait for the leader's assignment.
    leader = leaders[0]
    followers = [j for j in joined if j is not leader]
    waiting = [asyncio.ensure_future(coord.sync_group("g", 1, f.member_id)) for f in followers]
    await settle()
    assert not any(w.done() for w in waiting)
    assignments = {j.member_id: j.member_id.encode() for j in joined}
    mine = await coord.sync_group("g", 1, leader.member_id, None, "consumer", "range", assignments)
    assert mine.assignment == leader.member_id.encode()
    for f, w in zip(followers, waiting, strict=True):
        assert (await w).assignment == f.member_id.encode()
    assert await state(coord) == "Stable"

    ((key, value),) = [(k, v) for k, v in log.decoded() if isinstance(k, R.GroupMetadataKey)]
    assert value.generation == 1 and value.protocol == "range" and value.leader == leader.member_id
    assert {m.member_id: m.assignment for m in value.members} == assignments
    assert {m.client_host for m in value.members} == {HOST}
    assert {m.subscription for m in value.members} == {b"range-meta"}


async def test_new_member_and_leaving_member_rebalance_everyone(clock):
    coord, _ = await coordinator(clock)
    a, b, c = await form_group(clock, coord, 3)
    joining = asyncio.ensure_future(join(coord, client="d"))
    await settle()
    assert await state(coord) == "PreparingRebalance"
    assert await coord.heartbeat("g", 1, a.member_id) is E.rebalance_in_progress
    left = await coord.leave_group("g", [LeavingMember(c.member_id)])
    assert left.members[0].error is E.none
    rejoined = await asyncio.gather(
        join(coord, member_id=a.member_id), join(coord, member_id=b.member_id), joining
    )
    assert {r.generation_id for r in rejoined} == {2}
    leader = next(r for r in rejoined if r.members)
    assert {m.member_id for m in leader.members} == {r.member_id for r in rejoined}
    assert c.member_id not in {m.member_id for m in leader.members}
    assert await coord.heartbeat("g", 2, c.member_id) is E.unknown_member_id


async def test_initial_delay_extends_while_members_keep_arriving(clock):
    coord, _ = await coordinator(clock, initial_rebalance_delay_ms=100)
    started = clock.now()
    # Each arrival within a delay buys another one, up to the rebalance timeout (1 s).
    joining = [asyncio.ensure_future(join(coord, client="a"))]
    await clock.advance(0.08)
    joining.append(asyncio.ensure_future(join(coord, client="b")))
    await clock.advance(0.08)
    joining.append(asyncio.ensure_future(join(coord, client="c")))
    joined = await clock.run(asyncio.gather(*joining))
    assert {j.generation_id for j in joined} == {1}
    assert len(next(j for j in joined if j.members).members) == 3
    assert clock.now() - started == pytest.approx(0.3)  # three delays: b and c each bought one


async def test_members_that_never_sync_are_removed(clock):
    coord, _ = await coordinator(clock)
    joined = await clock.run(
        asyncio.gather(*(join(coord, rebalance=200, session=300) for _ in range(2)))
    )
    leader = next(j for j in joined if j.members)
    follower = next(j for j in joined if not j.members)
    # The leader heartbeats but never sends SyncGroup: after the rebalance timeout, but no
    # sooner than the session timeout, it is out.
    started = clock.now()
    syncing = asyncio.ensure_future(coord.sync_group("g", 1, follower.member_id))
    for _ in range(5):  # 250 ms
        assert await coord.heartbeat("g", 1, leader.member_id) is E.none
        await clock.advance(0.05)
    assert not syncing.done()
    assert (await clock.run(syncing)).error is E.rebalance_in_progress
    assert clock.now() - started == pytest.approx(0.3)
    again = await join(coord, member_id=follower.member_id, rebalance=200, session=300)
    assert again.generation_id == 2 and [m.member_id for m in again.members] == [follower.member_id]


async def test_a_member_joining_with_rebalance_timeout_zero_can_still_sync(clock):
    """kafkajs's protocol tests join with rebalance timeout 0 (left unset): the member has its
    session timeout to send SyncGroup, not no time at all."""
    coord, _ = await coordinator(clock)
    joined = await clock.run(join(coord, rebalance=0, session=1000))
    assert joined.error is E.none and joined.generation_id == 1
    await clock.advance(0.5)
    assignment = {joined.member_id: b"mine"}
    synced = await coord.sync_group("g", 1, joined.member_id, None, "consumer", "range", assignment)
    assert synced.error is E.none and synced.assignment == b"mine"
    assert await state(coord) == "Stable"


async def test_rebalance_timeout_removes_members_that_do_not_rejoin(clock):
    coord, _ = await coordinator(clock)
    a, b = await form_group(clock, coord, 2, rebalance=200)
    started = clock.now()
    again = await clock.run(join(coord, member_id=a.member_id, rebalance=200))  # b never rejoins
    assert clock.now() - started == pytest.approx(0.2)
    assert again.generation_id == 2 and [m.member_id for m in again.members] == [a.member_id]
    assert await coord.heartbeat("g", 2, b.member_id) is E.unknown_member_id


async def test_session_timeout_removes_a_silent_member(clock):
    coord, _ = await coordinator(clock)
    a, b = await form_group(clock, coord, 2, session=200)
    errors = []
    for _ in range(8):  # a heartbeats for 400 ms, b stays silent
        await clock.advance(0.05)
        errors.append(await coord.heartbeat("g", 1, a.member_id))
    assert errors[:3] == [E.none] * 3  # b's 200 ms are not up yet
    assert E.rebalance_in_progress in errors
    again = await join(coord, member_id=a.member_id, session=200)
    assert again.generation_id == 2 and [m.member_id for m in again.members] == [a.member_id]


async def test_pending_member_that_never_rejoins_is_forgotten(clock):
    coord, _ = await coordinator(clock)
    first = await coord.join_group("g", "", None, "consumer", RANGE, 100, 100, "c", HOST)
    assert first.error is E.member_id_required and first.member_id.startswith("c-")
    assert coord.describe_group("g").error is E.none  # waiting for it
    await clock.advance(0.15)
    assert coord.describe_group("g").error is E.group_id_not_found


async def test_a_pending_member_is_forgotten_within_seconds_whatever_its_session(clock):
    # 30 min: one client's joins that never came back were each kept that long
    coord, _ = await coordinator(clock, max_session_timeout_ms=1_800_000)
    first = await coord.join_group("g", "", None, "consumer", RANGE, 1_800_000, 100, "c", HOST)
    assert first.error is E.member_id_required
    await clock.advance(PENDING_MEMBER_MAX_MS / 1000 + 0.01)
    assert coord.describe_group("g").error is E.group_id_not_found


async def test_cooperative_second_round_rebalances_normally(clock):
    protocols = (("cooperative-sticky", b"v1"),)
    coord, _ = await coordinator(clock)
    a, b = await form_group(clock, coord, 2, protocols=protocols)
    # Incremental cooperative rebalancing: right after the first round, a member rejoins.
    second = asyncio.ensure_future(
        join(coord, member_id=a.member_id, protocols=(("cooperative-sticky", b"v2"),))
    )
    await settle()
    assert await coord.heartbeat("g", 1, b.member_id) is E.rebalance_in_progress
    other = await join(coord, member_id=b.member_id, protocols=protocols)
    first = await second
    assert {first.generation_id, other.generation_id} == {2}
    leader = first if first.members else other
    assert {m.metadata for m in leader.members} == {b"v1", b"v2"}
    synced = await asyncio.gather(
        coord.sync_group(
            "g",
            2,
            a.member_id,
            assignments={a.member_id: b"x", b.member_id: b"y"} if leader is first else None,
        ),
        coord.sync_group(
            "g",
            2,
            b.member_id,
            assignments={a.member_id: b"x", b.member_id: b"y"} if leader is other else None,
        ),
    )
    assert [s.assignment for s in synced] == [b"x", b"y"]
    assert await state(coord) == "Stable"


async def test_protocol_vote_picks_the_common_protocol_most_prefer(clock):
    coord, _ = await coordinator(clock)
    both = (("roundrobin", b"r"), ("range", b"g"))
    joined = await clock.run(
        asyncio.gather(
            join(coord, protocols=both), join(coord, protocols=both), join(coord, protocols=RANGE)
        )
    )
    assert {j.protocol_name for j in joined} == {"range"}  # the only one every member supports


async def test_static_member_rejoins_without_rebalance(clock):
    coord, log = await coordinator(clock)
    joined = await clock.run(
        asyncio.gather(
            join(coord, instance="i1", client="c1"), join(coord, instance="i2", client="c2")
        )
    )
    assert all(j.member_id.startswith(f"i{n}-") for n, j in enumerate(joined, 1))
    leader = next(j for j in joined if j.members)
    follower = next(j for j in joined if not j.members)
    instance = "i1" if follower is joined[0] else "i2"
    assignments = {leader.member_id: b"L", follower.member_id: b"F"}
    await asyncio.gather(
        coord.sync_group(
            "g", 1, leader.member_id, "i1" if leader is joined[0] else "i2", assignments=assignments
        ),
        coord.sync_group("g", 1, follower.member_id, instance),
    )
    records_before = len(log.records)

    # The follower restarts: same instance id, no member id, same protocols.
    back = await join(coord, instance=instance, client="c9")
    assert back.error is E.none and back.member_id != follower.member_id
    assert back.generation_id == 1 and not back.members
    assert await state(coord) == "Stable"
    assert (await coord.sync_group("g", 1, back.member_id, instance)).assignment == b"F"
    assert await coord.heartbeat("g", 1, follower.member_id, instance) is E.fenced_instance_id
    assert await coord.heartbeat("g", 1, leader.member_id) is E.none  # nobody rebalances
    # The new member id was persisted before the answer.
    ((_, value),) = [(k, v) for k, v in log.decoded()[records_before:]]
    assert back.member_id in {m.member_id for m in value.members}

    # The static leader restarting: v9+ gets the members and skips the assignment...
    leader_instance = "i1" if instance == "i2" else "i2"
    again = await join(coord, instance=leader_instance)
    assert again.skip_assignment and again.leader == again.member_id and len(again.members) == 2
    # ...older versions are told the old leader id, so they do not reassign.
    old = await join(coord, instance=leader_instance, supports_skip_assignment=False)
    assert not old.skip_assignment and old.leader == again.member_id and not old.members
    assert await state(coord) == "Stable"


async def test_static_member_session_timeout_rebalances(clock):
    coord, _ = await coordinator(clock)
    joined = await clock.run(
        asyncio.gather(
            join(coord, instance="i1", session=200), join(coord, instance="i2", session=200)
        )
    )
    leader = next(j for j in joined if j.members)
    await asyncio.gather(
        *(
            coord.sync_group("g", 1, j.member_id, f"i{n}", assignments={} if j is leader else None)
            for n, j in enumerate(joined, 1)
        )
    )
    keep = joined[0]
    errors = []
    for _ in range(8):
        await clock.advance(0.05)
        errors.append(await coord.heartbeat("g", 1, keep.member_id, "i1"))
    assert errors[:3] == [E.none] * 3
    assert E.rebalance_in_progress in errors
    again = await join(coord, member_id=keep.member_id, instance="i1", session=200)
    assert again.generation_id == 2 and [m.group_instance_id for m in again.members] == ["i1"]


async def test_leave_by_instance_id(clock):
    coord, _ = await coordinator(clock)
    joined = await clock.run(asyncio.gather(join(coord, instance="i1"), join(coord, instance="i2")))
    leader = next(j for j in joined if j.members)
    await asyncio.gather(
        *(
            coord.sync_group("g", 1, j.member_id, f"i{n}", assignments={} if j is leader else None)
            for n, j in enumerate(joined, 1)
        )
    )
    result = await coord.leave_group("g", [LeavingMember("", "i2"), LeavingMember("", "nope")])
    assert [m.error for m in result.members] == [E.none, E.unknown_member_id]
    assert await state(coord) == "PreparingRebalance"


# ------------------------------------------------------------------ errors


async def test_join_errors(clock):
    coord, _ = await coordinator(clock, max_group_id_bytes=10)
    call = coord.join_group
    assert (
        await call("", "", None, "consumer", RANGE, 1000, 1000, "c", HOST)
    ).error is E.invalid_group_id
    assert (
        await call("x" * 11, "", None, "consumer", RANGE, 1000, 1000, "c", HOST)
    ).error is E.invalid_group_id
    assert (
        await call("g", "", None, "consumer", RANGE, 5, 1000, "c", HOST)
    ).error is E.invalid_session_timeout
    assert (
        await call("g", "", None, "consumer", RANGE, 60_001, 1000, "c", HOST)
    ).error is E.invalid_session_timeout
    assert (
        await call("g", "", None, "consumer", (), 1000, 1000, "c", HOST)
    ).error is E.inconsistent_group_protocol
    assert (
        await call("g", "", None, "", RANGE, 1000, 1000, "c", HOST)
    ).error is E.inconsistent_group_protocol
    assert (
        await call("g", "m", None, "consumer", RANGE, 1000, 1000, "c", HOST)
    ).error is E.unknown_member_id
    await form_group(clock, coord, 1)
    assert (
        await call("g", "", None, "connect", RANGE, 1000, 1000, "c", HOST)
    ).error is E.inconsistent_group_protocol
    other = (("other", b""),)
    assert (
        await call("g", "", None, "consumer", other, 1000, 1000, "c", HOST)
    ).error is E.inconsistent_group_protocol
    assert (
        await call("g", "m", None, "consumer", RANGE, 1000, 1000, "c", HOST)
    ).error is E.unknown_member_id
    # v0-v3 clients get a member id without the MEMBER_ID_REQUIRED round trip.
    old = asyncio.ensure_future(
        call("h", "", None, "consumer", RANGE, 1000, 1000, "c", HOST, require_known_member_id=False)
    )
    assert (await clock.run(old)).error is E.none


async def test_not_coordinator_and_loading(clock):
    log = MemoryLog()
    coord = GroupCoordinator(1, config(num_partitions=2), clock=clock)
    other = next(g for g in (f"g{i}" for i in range(100)) if coord.partition_for(g) == 1)
    mine = next(g for g in (f"g{i}" for i in range(100)) if coord.partition_for(g) == 0)
    coord.attach(0, log)
    assert (await join(coord, mine)).error is E.coordinator_load_in_progress
    await settle()
    assert (await join(coord, other)).error is E.not_coordinator
    assert await coord.heartbeat(other, 1, "m") is E.not_coordinator
    assert (await coord.offset_fetch(other, None)).error is E.not_coordinator
    assert await coord.offset_commit(other, -1, "", None, [CommitOffset("t", 0, 1)]) == [
        E.not_coordinator
    ]


async def test_sync_and_heartbeat_errors(clock):
    coord, _ = await coordinator(clock)
    (a,) = await form_group(clock, coord, 1)
    assert (await coord.sync_group("g", 1, "nobody")).error is E.unknown_member_id
    assert (await coord.sync_group("missing", 1, a.member_id)).error is E.unknown_member_id
    assert (await coord.sync_group("g", 7, a.member_id)).error is E.illegal_generation
    assert (
        await coord.sync_group("g", 1, a.member_id, None, "consumer", "roundrobin")
    ).error is E.inconsistent_group_protocol
    assert (
        await coord.sync_group("g", 1, a.member_id, None, "connect")
    ).error is E.inconsistent_group_protocol
    assert await coord.heartbeat("g", 1, "nobody") is E.unknown_member_id
    assert await coord.heartbeat("g", 0, a.member_id) is E.illegal_generation
    assert await coord.heartbeat("g", 1, a.member_id) is E.none
    rejoin = asyncio.ensure_future(join(coord, client="b"))
    await settle()
    assert (await coord.sync_group("g", 1, a.member_id)).error is E.rebalance_in_progress
    assert await coord.heartbeat("g", 1, a.member_id) is E.rebalance_in_progress
    await join(coord, member_id=a.member_id)
    await rejoin
    left = await coord.leave_group("g", [LeavingMember("nobody"), LeavingMember(a.member_id)])
    assert [m.error for m in left.members] == [E.unknown_member_id, E.none]
    assert (await coord.leave_group("missing", [LeavingMember("x")])).members[
        0
    ].error is E.unknown_member_id


# ------------------------------------------------------------------ offsets


async def test_standalone_commit_and_commit_checks(clock):
    coord, log = await coordinator(clock, offset_metadata_max_bytes=4)
    commit = coord.offset_commit
    assert await commit("solo", -1, "", None, [CommitOffset("t", 0, 5, 3, "meta")]) == [E.none]
    ((key, value),) = log.decoded()
    assert key == R.OffsetCommitKey("solo", "t", 0)
    assert value == R.OffsetCommitValue(5, 3, "meta", 1_000_000)  # the clock's 1000.0 s
    fetched = await coord.offset_fetch("solo", [("t", 0), ("t", 1)])
    assert [(o.offset, o.leader_epoch, o.metadata) for o in fetched.offsets] == [
        (5, 3, "meta"),
        (-1, -1, ""),
    ]
    assert (await coord.offset_fetch("solo", None)).offsets == fetched.offsets[:1]
    assert await commit("ghost", 3, "m", None, [CommitOffset("t", 0, 1)]) == [E.group_id_not_found]
    assert coord.describe_group("ghost").error is E.group_id_not_found

    a, b = await form_group(clock, coord, 2)
    assert await commit("g", -1, "", None, [CommitOffset("t", 0, 1)]) == [E.unknown_member_id]
    assert await commit("g", 1, "nobody", None, [CommitOffset("t", 0, 1)]) == [E.unknown_member_id]
    assert await commit("g", 9, a.member_id, None, [CommitOffset("t", 0, 1)]) == [
        E.illegal_generation
    ]
    too_big = [CommitOffset("t", 0, 1, -1, "12345"), CommitOffset("t", 1, 2, -1, "1234")]
    assert await commit("g", 1, a.member_id, None, too_big) == [E.offset_metadata_too_large, E.none]
    assert [o.offset for o in (await coord.offset_fetch("g", None)).offsets] == [2]
    # CompletingRebalance: the member knows the new generation but has no assignment yet.
    await asyncio.gather(join(coord, member_id=a.member_id), join(coord, member_id=b.member_id))
    assert await state(coord) == "CompletingRebalance"
    assert await commit("g", 2, a.member_id, None, [CommitOffset("t", 0, 1)]) == [
        E.rebalance_in_progress
    ]
    # Offsets are still answered mid-rebalance.
    assert (await coord.offset_fetch("g", [("t", 1)])).offsets[0].offset == 2


async def test_offsets_change_only_after_the_append_resolves(clock):
    coord, log = await coordinator(clock)
    assert await coord.offset_commit("g", -1, "", None, [CommitOffset("t", 0, 5)]) == [E.none]
    log.hold()
    pending = asyncio.ensure_future(
        coord.offset_commit("g", -1, "", None, [CommitOffset("t", 0, 10), CommitOffset("t", 1, 11)])
    )
    await settle()
    assert not pending.done()
    assert [o.offset for o in (await coord.offset_fetch("g", [("t", 0), ("t", 1)])).offsets] == [
        5,
        -1,
    ]
    log.release()
    assert await pending == [E.none, E.none]
    assert len(log.appends[-1]) == 2  # one append per request
    assert [o.offset for o in (await coord.offset_fetch("g", [("t", 0), ("t", 1)])).offsets] == [
        10,
        11,
    ]


@pytest.mark.parametrize(
    ("failure", "answer"),
    [
        (E.request_timed_out, E.coordinator_not_available),
        (E.not_coordinator, E.not_coordinator),
        (E.not_leader_or_follower, E.not_coordinator),
        (E.message_too_large, E.invalid_commit_offset_size),
    ],
)
async def test_failed_append_changes_nothing(clock, failure, answer):
    coord, log = await coordinator(clock)
    assert await coord.offset_commit("g", -1, "", None, [CommitOffset("t", 0, 5)]) == [E.none]
    log.hold()
    pending = asyncio.ensure_future(
        coord.offset_commit("g", -1, "", None, [CommitOffset("t", 0, 10)])
    )
    await settle()
    log.release(KafkaError(failure))
    assert await pending == [answer]
    assert (await coord.offset_fetch("g", [("t", 0)])).offsets[0].offset == 5


async def test_failed_append_of_a_new_standalone_group_leaves_no_group(clock):
    coord, log = await coordinator(clock)
    log.hold()
    pending = asyncio.ensure_future(
        coord.offset_commit("new", -1, "", None, [CommitOffset("t", 0, 1)])
    )
    await settle()
    log.release(KafkaError(E.request_timed_out))
    await pending
    assert (await coord.list_groups()).groups == ()


async def test_sync_answers_only_after_the_assignment_is_stored(clock):
    coord, log = await coordinator(clock)
    a = await clock.run(join(coord))
    log.hold()
    sync = asyncio.ensure_future(
        coord.sync_group("g", 1, a.member_id, assignments={a.member_id: b"x"})
    )
    await settle()
    assert not sync.done() and await state(coord) == "CompletingRebalance"
    log.release(KafkaError(E.request_timed_out))
    assert (await sync).error is E.coordinator_not_available
    assert await state(coord) == "PreparingRebalance"  # the members must rejoin


# ------------------------------------------------------------------ loading, leaving leadership


async def test_load_rebuilds_groups_and_offsets(clock):
    member = R.MemberMetadata("m1", "i1", "c1", "/10.1.1.1", 1000, 300, b"sub", b"asg")
    stable = R.GroupMetadataValue("consumer", 4, "range", "m1", 5, (member,))
    old_v1 = D.encode_offset_commit_value(77, -1, "", 1, version=1, expire_ts=2**50)
    records = [
        (
            R.offset_commit_key("g1", "t", 0),
            R.offset_commit_value(R.OffsetCommitValue(1, -1, "", 1)),
        ),
        (
            R.offset_commit_key("g1", "t", 1),
            R.offset_commit_value(R.OffsetCommitValue(2, -1, "", 1)),
        ),
        (R.offset_commit_key("g1", "t", 1), None),  # tombstone
        (
            R.offset_commit_key("g1", "t", 0),
            R.offset_commit_value(R.OffsetCommitValue(3, 7, "m", 2)),
        ),
        (R.group_metadata_key("g1"), R.group_metadata_value(stable)),
        (R.group_metadata_key("g2"), R.group_metadata_value(stable)),
        (
            R.offset_commit_key("g2", "t", 0),
            R.offset_commit_value(R.OffsetCommitValue(1, -1, "", 1)),
        ),
        (R.group_metadata_key("g2"), None),  # deleted group...
        (R.offset_commit_key("g2", "t", 0), None),  # ...and its offsets
        (R.offset_commit_key("g3", "u", 4), old_v1),  # standalone group, old value version
        (bytes.fromhex("0003") + b"\x00\x01x", b"newer protocol record"),  # skipped
        (b"\x00", b"garbage"),  # undecodable: skipped with a warning
    ]
    log = MemoryLog(records=records)
    coord = GroupCoordinator(1, config(), clock=clock)
    coord.attach(0, log)
    assert (await coord.list_groups()).error is E.coordinator_load_in_progress
    await settle()
    listed = await coord.list_groups()
    assert listed.error is E.none
    assert sorted((g.group_id, g.state, g.protocol_type) for g in listed.groups) == [
        ("g1", "Stable", "consumer"),
        ("g3", "Empty", ""),
    ]
    g1 = coord.describe_group("g1")
    assert (g1.protocol_data, g1.members[0].member_id, g1.members[0].assignment) == (
        "range",
        "m1",
        b"asg",
    )
    assert g1.members[0].group_instance_id == "i1" and g1.members[0].metadata == b"sub"
    fetched = await coord.offset_fetch("g1", None)
    assert [(o.topic, o.partition, o.offset, o.leader_epoch) for o in fetched.offsets] == [
        ("t", 0, 3, 7)
    ]
    assert (await coord.offset_fetch("g2", None)).offsets == ()
    assert (await coord.offset_fetch("g3", [("u", 4)])).offsets[0].offset == 77
    # Loaded members have sessions: heartbeats work, silence removes them.
    assert await coord.heartbeat("g1", 4, "m1", "i1") is E.none
    await clock.advance(0.29)
    assert await state(coord, "g1") == "Stable"
    await clock.advance(0.02)  # its 300 ms session
    assert await state(coord, "g1") == "Empty"


async def test_reload_after_rebalance_restores_the_stable_group(clock):
    coord, log = await coordinator(clock)
    joined = await form_group(clock, coord, 2)
    await coord.offset_commit("g", 1, joined[0].member_id, None, [CommitOffset("t", 0, 42)])
    coord.detach(0)
    fresh, _ = await coordinator(clock, log)
    g = fresh.describe_group("g")
    assert g.state == "Stable"
    assert {m.member_id: m.assignment for m in g.members} == {
        j.member_id: f"assigned-{j.member_id}".encode() for j in joined
    }
    assert await fresh.heartbeat("g", 1, joined[1].member_id) is E.none
    assert (await fresh.offset_fetch("g", [("t", 0)])).offsets[0].offset == 42


async def test_detach_fails_pending_requests_with_not_coordinator(clock):
    coord, log = await coordinator(clock, initial_rebalance_delay_ms=10_000)
    joins = [asyncio.ensure_future(join(coord, client=f"c{i}")) for i in range(2)]
    log.hold()
    commit = asyncio.ensure_future(
        coord.offset_commit("g2", -1, "", None, [CommitOffset("t", 0, 1)])
    )
    await settle()
    assert not any(j.done() for j in joins) and not commit.done()
    coord.detach(0)
    await settle()
    assert [j.result().error for j in joins] == [E.not_coordinator] * 2
    assert commit.result() == [E.not_coordinator]
    log.release()  # the write resolving later changes nothing
    await settle()
    assert (await join(coord)).error is E.not_coordinator
    assert await coord.heartbeat("g", 1, "m") is E.not_coordinator


async def test_detach_fails_waiting_syncs(clock):
    coord, _ = await coordinator(clock)
    joined = await clock.run(asyncio.gather(join(coord, client="a"), join(coord, client="b")))
    follower = next(j for j in joined if not j.members)
    sync = asyncio.ensure_future(coord.sync_group("g", 1, follower.member_id))
    await settle()
    coord.close()
    assert (await sync).error is E.not_coordinator


# ------------------------------------------------------------------ admin, retention


async def test_list_describe_and_delete_groups(clock):
    coord, log = await coordinator(clock)
    await form_group(clock, coord, 1, group="busy")
    await coord.offset_commit(
        "idle", -1, "", None, [CommitOffset("t", 0, 1), CommitOffset("t", 1, 2)]
    )
    listed = await coord.list_groups()
    assert sorted((g.group_id, g.state, g.group_type) for g in listed.groups) == [
        ("busy", "Stable", "classic"),
        ("idle", "Empty", "classic"),
    ]
    assert [g.group_id for g in (await coord.list_groups(states=["stable"])).groups] == ["busy"]
    assert (await coord.list_groups(types=["consumer"])).groups == ()
    assert len((await coord.list_groups(types=["Classic"])).groups) == 2

    busy, idle, missing = map(coord.describe_group, ["busy", "idle", "missing"])
    assert (busy.state, busy.protocol_type, busy.protocol_data) == ("Stable", "consumer", "range")
    assert busy.members[0].client_id == "c0" and busy.members[0].client_host == HOST
    assert (idle.state, idle.members, missing.error) == ("Empty", (), E.group_id_not_found)

    before = len(log.records)
    deleted = await coord.delete_groups(["busy", "idle", "missing"])
    assert [d.error for d in deleted] == [E.non_empty_group, E.none, E.group_id_not_found]
    tombstones = [(k, v) for k, v in log.decoded()[before:]]
    assert tombstones == [
        (R.OffsetCommitKey("idle", "t", 0), None),
        (R.OffsetCommitKey("idle", "t", 1), None),
        (R.GroupMetadataKey("idle"), None),
    ]
    assert (await coord.offset_fetch("idle", None)).offsets == ()
    assert coord.describe_group("idle").error is E.group_id_not_found
    fresh, _ = await coordinator(clock, log)
    assert [g.group_id for g in (await fresh.list_groups()).groups] == ["busy"]


async def test_members_see_a_group_being_deleted_as_unavailable(clock):
    coord, log = await coordinator(clock)
    await coord.offset_commit("g", -1, "", None, [CommitOffset("t", 0, 1)])
    log.hold()
    deleting = asyncio.ensure_future(coord.delete_groups(["g"]))
    await settle()
    assert await coord.offset_commit("g", -1, "", None, [CommitOffset("t", 0, 2)]) == [
        E.coordinator_not_available
    ]
    assert (await join(coord)).error is E.coordinator_not_available
    log.release(KafkaError(E.request_timed_out))
    assert (await deleting)[0].error is E.coordinator_not_available
    assert await state(coord) == "Empty"  # not deleted after all


async def test_offsets_of_empty_groups_expire(clock):
    coord, log = await coordinator(
        clock,
        offsets_retention_minutes=1,
        offsets_retention_check_interval_ms=10_000,
        max_session_timeout_ms=600_000,  # the live group's member outlives the test
    )
    fetch = coord.offset_fetch
    await coord.offset_commit("solo", -1, "", None, [CommitOffset("t", 0, 1)])
    (a,) = await form_group(clock, coord, 1, session=600_000)
    await coord.offset_commit("g", 1, a.member_id, None, [CommitOffset("t", 0, 9)])
    await coord.leave_group("g", [LeavingMember(a.member_id)])  # Empty from now on (+0.1 s)
    (b,) = await form_group(clock, coord, 1, group="live", session=600_000)
    await coord.offset_commit("live", 1, b.member_id, None, [CommitOffset("t", 0, 5)])
    await clock.advance(59.5)  # checks every 10 s: nothing is a minute old yet
    assert (await fetch("solo", [("t", 0)])).offsets[0].offset == 1
    # At the 60 s check the standalone commit is a minute old; the group has been Empty for
    # a tenth of a second less, so its offset goes at the next check.
    await clock.advance(1)
    assert (await fetch("solo", [("t", 0)])).offsets[0].offset == -1
    assert (await fetch("g", [("t", 0)])).offsets[0].offset == 9
    await clock.advance(10)
    assert (await fetch("g", [("t", 0)])).offsets[0].offset == -1
    assert (await fetch("live", [("t", 0)])).offsets[0].offset == 5
    assert [g.group_id for g in (await coord.list_groups()).groups] == ["live"]
    fresh, _ = await coordinator(clock, log)
    assert [g.group_id for g in (await fresh.list_groups()).groups] == ["live"]


# --------------------------------------------------------------------------- share groups


def share_join(coord: GroupCoordinator, group: str = "s", member: str = "m1") -> None:
    result = coord.share_heartbeat(group, member, 0, None, ["t"], "c", HOST)
    assert result.error is E.none


async def test_a_share_group_is_written_listed_and_known_to_the_next_coordinator(clock) -> None:
    deleted: list[str] = []

    async def delete_state(group_id: str) -> ErrorCode:
        deleted.append(group_id)
        return E.none

    coord, log = await coordinator(clock)
    share_join(coord)
    await settle()
    assert log.decoded() == [(R.ShareGroupMetadataKey("s"), R.ShareGroupMetadataValue(1))]
    listed = await coord.list_groups()
    assert [(g.group_id, g.group_type, g.protocol_type, g.state) for g in listed.groups] == [
        ("s", "share", "share", "Stable")
    ]
    assert (await coord.list_groups(types=["classic"])).groups == ()
    described = coord.describe_group("s")
    assert described.error is E.group_id_not_found
    assert described.error_message == "Group s is not a classic group."
    # a new coordinator (the partition moved): the group exists, empty, until members rejoin
    coord.close()
    successor = GroupCoordinator(1, config(), clock=clock, delete_share_state=delete_state)
    successor.attach(log.index, log)
    await settle()
    error, _, found = successor.describe_share_group("s")
    assert error is E.none and found is not None and found.state == "Empty"
    assert (await successor.list_groups(types=["share"])).groups[0].state == "Empty"
    (gone,) = await successor.delete_groups(["s"])
    assert gone.error is E.none and deleted == ["s"]
    assert log.decoded()[-1] == (R.ShareGroupMetadataKey("s"), None)  # the tombstone
    assert successor.describe_share_group("s")[0] is E.group_id_not_found


async def test_a_share_group_with_members_is_not_deleted(clock) -> None:
    coord, _ = await coordinator(clock)
    share_join(coord)
    (result,) = await coord.delete_groups(["s"])
    assert result.error is E.non_empty_group
    assert coord.describe_share_group("nope")[:2] == (
        E.group_id_not_found,
        "Group nope not found.",
    )


async def test_a_share_member_is_known_only_where_its_group_is_coordinated(clock) -> None:
    """What a partition leader asks before it opens a share session (share/members.py)."""
    coord, _ = await coordinator(clock, num_partitions=2)
    here = next(g for g in (f"s{i}" for i in range(100)) if coord.partition_for(g) == 0)
    elsewhere = next(g for g in (f"s{i}" for i in range(100)) if coord.partition_for(g) == 1)
    assert coord.share_member(here, "m1") is E.unknown_member_id  # never joined
    share_join(coord, here)
    assert coord.share_member(here, "m1") is E.none
    assert coord.share_member(here, "m2") is E.unknown_member_id
    assert coord.share_member(elsewhere, "m1") is E.not_coordinator
    coord.share_heartbeat(here, "m1", -1, None, None, "c", HOST)  # it leaves
    assert coord.share_member(here, "m1") is E.unknown_member_id


# ------------------------------------------------------------------ transactional offsets


async def test_a_transactions_offsets_count_only_once_its_commit_marker_is_written(clock):
    """TxnOffsetCommit: written in the producer's transaction and held aside; a read_committed
    consumer (require_stable) is told UNSTABLE_OFFSET_COMMIT meanwhile; the commit marker makes
    them the group's, an abort's drops them."""
    coord, log = await coordinator(clock)
    assert await coord.offset_commit("g", -1, "", None, [CommitOffset("t", 0, 5)]) == [E.none]
    commit = [CommitOffset("t", 0, 9), CommitOffset("t", 1, 3)]
    assert await coord.offset_commit("g", -1, "", None, producer=(42, 0), offsets=commit) == [
        E.none,
        E.none,
    ]
    assert log.producers[-1] == (42, 0)  # a transactional batch of the producer
    fetched = await coord.offset_fetch("g", [("t", 0), ("t", 1)])
    assert [o.offset for o in fetched.offsets] == [5, -1]
    stable = await coord.offset_fetch("g", [("t", 0), ("t", 1)], require_stable=True)
    assert [o.error for o in stable.offsets] == [E.unstable_offset_commit] * 2
    coord.end_transaction(0, 42, commit=True)
    fetched = await coord.offset_fetch("g", [("t", 0), ("t", 1)], require_stable=True)
    assert [(o.offset, o.error) for o in fetched.offsets] == [(9, E.none), (3, E.none)]

    assert await coord.offset_commit(
        "g", -1, "", None, producer=(42, 0), offsets=[CommitOffset("t", 0, 20)]
    )
    coord.end_transaction(0, 42, commit=False)
    assert [o.offset for o in (await coord.offset_fetch("g", [("t", 0)])).offsets] == [9]


async def test_a_transactional_commit_without_member_fields_is_taken_by_a_group_with_members(
    clock,
):
    """TxnOffsetCommit below v3 has no member id or generation (aiokafka sends only v0): it is
    taken while the group has members, where a plain OffsetCommit without them is not; with
    them it is checked, but not refused for a rebalance that is completing (Kafka's rules)."""
    coord, _ = await coordinator(clock)
    a, b = await form_group(clock, coord, 2)

    def txn(group, producer, generation, member, instance, offsets):
        return coord.offset_commit(group, generation, member, instance, offsets, producer)

    assert await txn("g", (42, 0), -1, "", None, [CommitOffset("t", 0, 1)]) == [E.none]
    assert await txn("g", (42, 0), 1, "nobody", None, [CommitOffset("t", 0, 1)]) == [
        E.unknown_member_id
    ]
    assert await txn("g", (42, 0), 9, a.member_id, None, [CommitOffset("t", 0, 1)]) == [
        E.illegal_generation
    ]
    await asyncio.gather(join(coord, member_id=a.member_id), join(coord, member_id=b.member_id))
    assert await state(coord) == "CompletingRebalance"
    assert await txn("g", (42, 0), 2, a.member_id, None, [CommitOffset("t", 0, 2)]) == [E.none]
    assert await txn("g", (42, 0), -1, "", None, [CommitOffset("t", 0, 3)]) == [E.none]


async def test_a_new_coordinator_applies_what_the_markers_in_the_log_decided(clock):
    """Loaded from the log: a committed transaction's offsets are the group's, an aborted
    one's are not, and one with no marker yet stays pending (unstable)."""
    _, log = await coordinator(clock)
    coord = GroupCoordinator(1, config(), clock=clock)
    log.held = None
    first = GroupCoordinator(1, config(), clock=clock)
    first.attach(0, log)
    await settle()
    for pid, offset in ((1, 10), (2, 20), (3, 30)):
        await first.offset_commit(
            "g", -1, "", None, producer=(pid, 0), offsets=[CommitOffset("t", pid, offset)]
        )
    log.marker(1, commit=True)
    log.marker(2, commit=False)
    first.detach(0)
    coord = GroupCoordinator(1, config(), clock=clock)
    coord.attach(0, log)
    await settle()
    fetched = await coord.offset_fetch("g", [("t", 1), ("t", 2), ("t", 3)], require_stable=True)
    assert [(o.offset, o.error) for o in fetched.offsets] == [
        (10, E.none),
        (-1, E.none),
        (-1, E.unstable_offset_commit),
    ]
    coord.end_transaction(0, 3, commit=True)
    assert [o.offset for o in (await coord.offset_fetch("g", [("t", 3)])).offsets] == [30]
