"""Three replicas of one partition (segment log, journal, Raft group on the core, producer
state, produce queue), each node with its own Raft driver, on the in-process network of
support/raftnet.py, with an injected clock: Raft runs for real, and a test decides when time
passes and which messages arrive."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from kafka.record.memory_records import MemoryRecords

from epoch.history import HistoryJournal
from raftlog.api.values import ProduceResult
from raftlog.config import topic_config
from raftlog.config.broker_settings import BROKER_DEFAULTS, TOPIC_SYNONYMS
from raftlog.partition.base import NodeContext
from raftlog.partition.partition import Partition
from raftlog.raft.driver import TICK_SECONDS, Driver
from raftlog.raft.durability import Durability
from raftlog.raft.elections import ELECTION_BURST, ELECTIONS_PER_SECOND, ElectionBudget
from raftlog.raft.install import Installs
from raftlog.raft.timings import RaftTimings
from support.raftnet import Clock, Net, NetMesh
from support.wire import make_batch

_T = TypeVar("_T")
IDS = ("1", "2", "3")
# Where in each tick each node pings and ticks (a share of the tick; the last at its end):
# the nodes' loops are not in step. Ticked at once, two followers woken together whose timers
# drew the same timeout stood together and split their votes, about one election in ten (400
# runs: 9.8 %, none at these phases; tests/sim's SimConfig.latency, per-node tick phases).
PHASES = {"1": 1 / 3, "2": 2 / 3, "3": 1.0}
PID = 7


def settings() -> dict[str, str]:
    """A topic's effective settings with every broker default."""
    defaults = {topic: str(BROKER_DEFAULTS[b]) for b, topic in TOPIC_SYNONYMS.items()}
    return {name: topic_config.value(name, {}, defaults) for name in topic_config.TOPIC_SETTINGS}


class Replicas:
    def __init__(
        self, root: Path, clock: Clock, durabilities: dict[str, Durability] | None = None
    ) -> None:
        """`durabilities`: a node's own Raft state saves (a slow disk, say)."""
        self.clock = clock
        self.root = root
        self.net = Net(IDS, clock)
        self.contexts: dict[str, NodeContext] = {}
        self.partitions: dict[str, Partition] = {}
        self.meshes: dict[str, NetMesh] = {}
        for node_id in IDS:
            mesh = NetMesh(self.net, node_id, (durabilities or {}).get(node_id))
            self.meshes[node_id] = mesh
            timings = RaftTimings()
            budget = ElectionBudget(ELECTIONS_PER_SECOND, ELECTION_BURST, clock)
            self.contexts[node_id] = NodeContext(
                int(node_id),
                mesh,  # type: ignore[arg-type]
                timings,
                HistoryJournal(_dir(root / node_id), int(node_id)),
                driver=Driver(int(node_id), mesh, timings.election_min, budget, clock),
                installs=Installs(mesh),
            )
            self.start(node_id)

    def start(self, node_id: str) -> None:
        self.partitions[node_id] = Partition(
            self.contexts[node_id],
            "t",
            0,
            "t/0",
            self.root / node_id / "t-0",
            (1, 2, 3),
            settings(),
            lambda _p: None,
        )

    def crash_and_restart(self, node_id: str) -> None:
        """As kill -9 and a restart: nothing is saved on the way down (the page cache, which
        kill -9 keeps, holds what was written), and the replica is rebuilt from its files."""
        self.partitions[node_id].group.close()
        self.start(node_id)

    def driver(self, node_id: str) -> Driver:
        driver = self.contexts[node_id].driver
        assert driver is not None
        return driver

    async def step(self, seconds: float = TICK_SECONDS) -> None:
        """Time moves on by `seconds` (a tick each TICK_SECONDS), and what that sends arrives.
        Each node pings and ticks at its own phase within the tick (PHASES), as its driver's
        loop timer does, and what it sends arrives before the next node's turn."""
        ticks = max(1, round(seconds / TICK_SECONDS))
        length = seconds / ticks
        for _ in range(ticks):
            start = self.clock.now
            for node_id, phase in PHASES.items():
                self.clock.now = start + phase * length
                self.meshes[node_id].keepalive()
                self.driver(node_id).tick()
                await self.settle()

    async def settle(self) -> None:
        """Delivers what the nodes send, and what that sends in turn, until nothing moves."""
        for _ in range(50):
            for _ in range(3):
                await asyncio.sleep(0)  # the drivers' turns, saves and answers run
            if not self.net.deliver():
                break
        await asyncio.sleep(0)

    async def run(self, seconds: float) -> None:
        for _ in range(round(seconds / TICK_SECONDS)):
            await self.step()

    async def until(self, awaitable: Awaitable[_T], seconds: float = 10.0) -> _T:
        """Steps the replicas until `awaitable` (which needs Raft to make progress) is done."""
        task = asyncio.ensure_future(awaitable)
        for _ in range(round(seconds / TICK_SECONDS)):
            await asyncio.sleep(0)
            if task.done():
                return task.result()
            await self.step()
        task.cancel()
        raise AssertionError(f"not done within {seconds} s of Raft time")

    async def leader(
        self, among: tuple[str, ...] = IDS, seconds: float = 10.0, above_term: int = 0
    ) -> str:
        """A node of `among` leading a term above `above_term`, with that term committed (a
        deposed leader still believes in its old term until it hears of the new one)."""
        for _ in range(round(seconds / TICK_SECONDS)):
            await self.step()
            for node_id in among:
                p = self.partitions[node_id]
                if p.is_leader and p.term_committed and p.group.term > above_term:
                    return node_id
        raise AssertionError(f"no leader among {among} above term {above_term}")

    def produce(self, node_id: str, first_seq: int, count: int, pid: int = PID) -> asyncio.Future:
        """An idempotent producer's batch of `count` records (values p<pid>-s<seq>), acks=all."""
        batch = make_batch(
            [(None, b"p%d-s%d" % (pid, first_seq + i)) for i in range(count)],
            producer=(pid, 0, first_seq),
        )
        return self.send(node_id, batch)

    def send(
        self, node_id: str, records: bytes, acks: int = -1, timeout_ms: int = 30_000
    ) -> asyncio.Future[ProduceResult]:
        """Partition.produce on one replica, its answer as a future."""
        answer: Awaitable[ProduceResult] = self.partitions[node_id].produce(
            records, acks, timeout_ms
        )
        return asyncio.ensure_future(answer)

    def close(self) -> None:
        for p in self.partitions.values():
            p.close()


def _dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def values(p: Partition, upto: int | None = None) -> list[bytes]:
    """The records' values in offset order: the committed ones, or all below `upto`."""
    end = p.high_watermark if upto is None else upto
    data = p.log.read(p.log_start_offset, 1 << 22, end, True)
    records = MemoryRecords(bytes(data))
    found = []
    while (batch := records.next_batch()) is not None:
        found.extend(r.value for r in batch)
    return found
