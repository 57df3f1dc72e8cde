"""Partition replicas that move (issue 44; Kafka's KIP-455), by Raft membership change.

The controller holds each partition's replica set and, while it moves, its target
(`topic["moves"]`). On every partition this node leads, the group's configuration is stepped
toward the target, one committed change at a time: the new replicas join as learners (they
copy the leader's log, or install its snapshot, and count in no majority); once all of them
hold what is committed, the voters switch to the target (through a joint configuration when
more than one changes, raft/core/); a leader that is being removed hands leadership to a
voter that stays first. When the configuration is the target, the leader tells the
controller, which drops the move; the nodes no longer listed drop their replicas and data.
A new leader picks up from its log's configuration, so a move survives failovers, and a
cancelled move is the same walk back to the original replicas. The leader also knows what
the move has still to copy: the bytes of its log each adding replica lacks (`to_copy`, for
/metrics and the admin port's /v1/reassignments; Kafka's ListPartitionReassignments has no
field for it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from raftlog.controller import moves
from raftlog.raft.membership import Membership

log = logging.getLogger(__name__)

CHECK_SECONDS = 0.25

Key = tuple[str, int]


class Group(Protocol):
    """A partition's Raft group as the mover uses it (raft/replica.py's CoreGroup)."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def membership(self) -> Membership: ...

    def settled(self) -> bool: ...

    def match_indexes(self) -> dict[str, int]: ...

    @property
    def commit_index(self) -> int: ...

    def change_members(self, target: Membership) -> int | str: ...

    def transfer_leadership(self, to: str | None = None) -> bool: ...


class Movable(Protocol):
    @property
    def group(self) -> Group: ...

    def bytes_lacking(self, replicas: Iterable[int]) -> dict[int, int]: ...


def next_step(conf: Membership, target: frozenset[int]) -> Membership | None:
    """The configuration to ask for next on the way from `conf` to voters `target` (None:
    there already, or the caller must wait): first the new replicas as learners (and no
    learner that is not going to vote), then the voters."""
    adding = target - conf.voters
    if conf.learners != adding:
        return Membership(conf.voters, frozenset(), adding)
    if conf.voters != target:
        return Membership(target)
    return None


class Reassigner:
    def __init__(
        self,
        node_id: int,
        partitions: Callable[[], Mapping[Key, Movable]],
        topics: Callable[[], Mapping[str, dict[str, Any]]],
        finish: Callable[[str, int, list[int]], Awaitable[object]],
    ) -> None:
        self._node_id = node_id
        self._partitions = partitions
        self._topics = topics
        self._finish = finish
        self._finishing: set[Key] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._said: dict[Key, str] = {}  # the last step logged per moving partition
        self._tasks: set[asyncio.Future[None]] = set()

    def start(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(CHECK_SECONDS, self._check)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task in self._tasks:
            task.cancel()

    def _check(self) -> None:
        """Only partitions that move are looked at: a move ends (the controller's finish)
        only once the group's configuration is its target, so one that does not move has
        its replicas as voters."""
        self._timer = asyncio.get_running_loop().call_later(CHECK_SECONDS, self._check)
        partitions = self._partitions()
        for name, topic in self._topics().items():
            for index, move in (topic.get("moves") or {}).items():
                key = (name, index)
                partition = partitions.get(key)
                if partition is None or not partition.group.is_leader:
                    continue
                target = frozenset(move["target"])
                group = partition.group
                conf = group.membership
                if conf.voters == target and not (conf.learners or conf.joint):
                    if group.settled() and key not in self._finishing:
                        self._finish_move(key, list(move["target"]))
                    continue
                try:
                    self.step(key, group, target)
                except Exception:  # one partition's failure must not stop the others' moves
                    log.exception("moving the replicas of %s-%d", *key)

    def to_copy(self) -> dict[Key, dict[int, int]]:
        """Per moving partition this node leads, the bytes each replica the move adds still
        lacks of the leader's log (Kafka's addingReplicas: none for a move back)."""
        partitions = self._partitions()
        found = {}
        for name, topic in self._topics().items():
            for index in moves.moves_of(topic):
                partition = partitions.get((name, index))
                if partition is not None and partition.group.is_leader:
                    adding = moves.adding_replicas(topic, index)
                    found[(name, index)] = partition.bytes_lacking(adding)
        return found

    def _finish_move(self, key: Key, target: list[int]) -> None:
        self._finishing.add(key)
        self._said.pop(key, None)
        task = asyncio.ensure_future(self._tell_controller(key, target))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def step(self, key: Key, group: Group, target: frozenset[int]) -> None:
        """One step for a partition this node leads whose configuration is not `target`."""
        conf = group.membership
        if conf.joint or not group.settled():
            return  # a change is in flight: the core allows one at a time
        wanted = next_step(conf, target)
        if wanted is None:
            return
        if wanted.voters != conf.voters:
            if not self._caught_up(group, conf.learners):
                return
            if self._node_id not in target:
                stays = conf.voters & target
                if stays:
                    # Leadership leaves a replica being removed first (as Kafka's does).
                    group.transfer_leadership(str(min(stays)))
                    return
        result = group.change_members(wanted)
        said = f"{wanted}: {result}"
        if self._said.get(key) != said:
            self._said[key] = said
            log.info("%s-%d: replicas %s -> %s (%s)", key[0], key[1], conf, wanted, result)

    def _caught_up(self, group: Group, learners: frozenset[int]) -> bool:
        """Every learner holds what the leader has committed."""
        matches = group.match_indexes()
        commit = group.commit_index
        return all(matches.get(str(n), 0) >= commit for n in learners)

    async def _tell_controller(self, key: Key, target: list[int]) -> None:
        try:
            await self._finish(key[0], key[1], target)
            log.info("%s-%d: moved to replicas %s", key[0], key[1], target)
        except Exception as e:  # the next check tries again
            log.info("%s-%d: the controller did not take the move's end yet: %s", *key, e)
        finally:
            self._finishing.discard(key)
