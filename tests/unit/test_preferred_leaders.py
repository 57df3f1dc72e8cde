"""Preferred leader elections on the leader's node (raftlog/cluster/preferred_leaders.py), with a
group that hands over when told and a clock the test moves: the answer comes when the
preferred replica leads, a replica out of sync is refused after a short grace, a transfer the
core dropped is started again, and one that never completes times out."""

from __future__ import annotations

import asyncio
from typing import Any

from support.clock import ManualClock

from raftlog.cluster.preferred_leaders import IN_SYNC_GRACE_SECONDS, PreferredLeaders
from raftlog.common.errors import ErrorCode
from raftlog.common.mesh_calls import MeshCalls

E = ErrorCode
ME, PREFERRED = 2, 1


class NoPeers:
    def on_control(self, kind: str, handler: Any) -> None:
        pass

    def send_control(self, peer_id: str, kind: str, payload: Any) -> None:
        raise AssertionError("no mesh call expected: this node leads")

    def connected(self, peer_id: str) -> bool:
        return False


class Group:
    def __init__(self) -> None:
        self.is_leader = True
        self.leader_id: str | None = str(ME)
        self.transferring = False
        self.transfers: list[str] = []

    def transfer_leadership(self, to: str | None = None) -> bool:
        assert to is not None
        self.transfers.append(to)
        self.transferring = True
        return True

    def hand_over(self, to: int) -> None:
        self.is_leader, self.leader_id, self.transferring = False, str(to), False


class Partition:
    def __init__(self) -> None:
        self.group = Group()

    @property
    def is_leader(self) -> bool:
        return self.group.is_leader


def _elections(partition: Partition, clock: ManualClock, in_sync: set[int]) -> PreferredLeaders:
    def leader(topic: str, index: int) -> int | None:
        return int(partition.group.leader_id) if partition.group.leader_id else None

    return PreferredLeaders(
        ME,
        MeshCalls(NoPeers(), clock),
        lambda topic, index: (PREFERRED, ME, 3) if (topic, index) == ("t", 0) else None,
        leader,
        lambda node_id: node_id != 3,
        lambda topic, index: partition,  # type: ignore[arg-type,return-value]
        lambda _p: tuple(in_sync),
        clock,
    )


def _error(result: tuple[ErrorCode, str | None] | None) -> ErrorCode | None:
    return None if result is None else result[0]


def test_answered_once_the_preferred_replica_leads() -> None:
    async def run() -> None:
        clock, partition = ManualClock(), Partition()
        elections = _elections(partition, clock, {ME, PREFERRED})
        election = asyncio.ensure_future(elections.elect("t", 0, 5000))
        await clock.advance(0.1)
        assert partition.group.transfers == [str(PREFERRED)] and not election.done()
        partition.group.hand_over(PREFERRED)
        await clock.advance(0.1)
        assert election.result() == (E.none, None)
        assert _error(elections.needed("t", 0)) is E.election_not_needed  # it leads now
        assert _error(elections.needed("t", 1)) is E.unknown_topic_or_partition

    asyncio.run(run())


def test_a_replica_out_of_sync_is_refused_after_the_grace() -> None:
    async def run() -> None:
        clock, partition = ManualClock(), Partition()
        elections = _elections(partition, clock, {ME})
        election = asyncio.ensure_future(elections.elect("t", 0, 60_000))
        await clock.advance(IN_SYNC_GRACE_SECONDS - 0.1)
        assert not election.done()
        await clock.advance(0.2)
        assert election.result()[0] is E.preferred_leader_not_available
        assert partition.group.transfers == []

    asyncio.run(run())


def test_a_dropped_transfer_is_started_again_and_a_stuck_one_times_out() -> None:
    async def run() -> None:
        clock, partition = ManualClock(), Partition()
        elections = _elections(partition, clock, {ME, PREFERRED})
        election = asyncio.ensure_future(elections.elect("t", 0, 3000))
        await clock.advance(1.0)
        partition.group.transferring = False  # the core dropped it after an election timeout
        await clock.advance(1.0)
        assert partition.group.transfers == [str(PREFERRED)] * 2
        await clock.advance(1.1)
        assert election.result()[0] is E.request_timed_out

    asyncio.run(run())
