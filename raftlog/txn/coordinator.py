"""The transaction coordinator: for each `__transaction_state` partition this node leads, the
transactional ids hashed to it, their state (metadata.py) and the work that finishes a
transaction (its markers, then the Complete record).

Like the group coordinator, memory changes only once the log holds the record, and a
transactional id has at most one write in flight (others answer CONCURRENT_TRANSACTIONS).
A PrepareCommit or PrepareAbort in the log is a decision: whoever leads the partition next
loads it and sends the markers again until every partition has one, so a transaction is
never left half done by a failover.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from epoch import history
from raftlog.common.clock import LOOP_CLOCK, Clock, Timer, now_ms
from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.groups.metadata_manager import coordinator_partition
from raftlog.groups.offsets_log import LogRecord
from raftlog.txn import metadata as rules
from raftlog.txn.log_records import (
    Partitions,
    RecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from raftlog.txn.markers import MarkerWrite
from raftlog.txn.metadata import PREPARING, Decision, TxnMetadata, TxnState

log = logging.getLogger(__name__)
E = ErrorCode

TOPIC = "__transaction_state"
# Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms
TIMEOUT_CHECK_S = 10.0
LOAD_YIELD_RECORDS = 1000  # a long log is loaded a slice per loop turn
# How long EndTxn waits for its markers before it answers anyway (they go on being written).
END_WAIT_S = 1.0


@dataclass(frozen=True, slots=True)
class TxnSettings:
    """The node's transaction settings (Kafka's names in the [broker] config)."""

    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    # transaction.remove.expired.transaction.cleanup.interval.ms
    cleanup_interval_ms: int = 3_600_000
    # transactional.id.max.per.partition: raftlog's bound on the ids one `__transaction_state`
    # partition keeps (Kafka has none; Redpanda's max_transactions_per_coordinator). A new id
    # over it makes room by forgetting the idle id used longest ago.
    max_ids: int = 10_000


class TxnLog(Protocol):
    """A `__transaction_state` partition led by this node (offsets_partition.py's)."""

    @property
    def leader_epoch(self) -> int: ...

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> int: ...

    def read_committed(self) -> Iterator[LogRecord]: ...


class Held(NamedTuple):
    """A producer id as its coordinator holds it: the epoch, and whether the transaction
    of it on the partition asked about is the coordinator's to end (ongoing there, or a
    decision or a write of its id in flight)."""

    epoch: int
    running: bool


# the marker's outcome, once written or given up (markers.py)
WriteMarker = Callable[[MarkerWrite], Awaitable[ErrorCode]]


class _Shard:
    def __init__(self, index: int, txn_log: TxnLog) -> None:
        self.index = index
        self.log = txn_log
        self.txns: dict[str, TxnMetadata] = {}
        # the id using each producer id, so a partition leader asking about a marker's
        # producer (WriteTxnMarkers) is answered without a pass over every id
        self.by_producer: dict[int, str] = {}
        self.offsets: dict[str, int] = {}  # where each id's state was last written
        # ids with a record on its way to the log, and the state it writes (None: a tombstone)
        self.writing: dict[str, TxnState | None] = {}
        self.loading = True
        self.attached = True
        self.tasks: set[asyncio.Task[None]] = set()
        self.timeout_check: Timer | None = None
        self.expiry_check: Timer | None = None

    def put(self, txn: TxnMetadata) -> None:
        """The id's state, as the log now holds it."""
        old = self.txns.get(txn.transactional_id)
        if old is not None and old.producer_id != txn.producer_id:
            self.by_producer.pop(old.producer_id, None)
        self.txns[txn.transactional_id] = txn
        self.by_producer[txn.producer_id] = txn.transactional_id

    def drop(self, txn_id: str) -> None:
        """The id, forgotten (a tombstone in the log)."""
        old = self.txns.pop(txn_id, None)
        if old is not None:
            self.by_producer.pop(old.producer_id, None)


class TxnCoordinator:
    def __init__(
        self,
        num_partitions: int,
        allocate_id: Callable[[], Awaitable[int | None]],
        write_marker: WriteMarker,
        settings: TxnSettings,
        clock: Clock = LOOP_CLOCK,
        node_id: int = -1,
        journal: Callable[[history.Record], None] | None = None,
    ) -> None:
        """allocate_id: a fresh producer id (the controller's blocks), None when none can be
        had now; write_marker: the marker on one partition, retried until it is written or
        cannot be (markers.py); journal: the node's history, where decisions and completions
        go for the epoch audit."""
        self.num_partitions = num_partitions
        self._allocate_id = allocate_id
        self._write_marker = write_marker
        self._settings = settings
        self._clock = clock
        self._node_id = node_id
        self._journal = journal
        self._shards: dict[int, _Shard] = {}

    def partition_for(self, transactional_id: str) -> int:
        return coordinator_partition(transactional_id, self.num_partitions)

    # --- leadership of the log's partitions ---------------------------------------------------

    def attach(self, index: int, txn_log: TxnLog) -> None:
        """This node now leads the partition (its term committed): load, then serve."""
        self.detach(index)
        shard = self._shards[index] = _Shard(index, txn_log)
        self._spawn(shard, self._load(shard))

    def detach(self, index: int) -> None:
        shard = self._shards.pop(index, None)
        if shard is None:
            return
        shard.attached = False
        for timer in (shard.timeout_check, shard.expiry_check):
            if timer is not None:
                timer.cancel()
        for task in list(shard.tasks):
            task.cancel()

    def close(self) -> None:
        for index in list(self._shards):
            self.detach(index)

    async def _load(self, shard: _Shard) -> None:
        for n, (offset, key, value, _pid, marker) in enumerate(shard.log.read_committed()):
            if n % LOAD_YIELD_RECORDS == LOAD_YIELD_RECORDS - 1:
                await asyncio.sleep(0)
            if marker is not None:
                continue
            try:
                txn_id = decode_key(key)
                if txn_id is None:
                    continue
                if value is None:
                    shard.drop(txn_id)
                else:
                    shard.put(TxnMetadata.from_log(txn_id, decode_value(value)))
                    shard.offsets[txn_id] = offset
            except (RecordError, ValueError) as exc:
                log.error("%s partition %d: unreadable record skipped: %s", TOPIC, shard.index, exc)
        shard.loading = False
        decided = [t for t in shard.txns.values() if t.state in PREPARING]
        if decided:
            log.info(
                "%s partition %d: finishing %d transactions decided before this node led it",
                TOPIC,
                shard.index,
                len(decided),
            )
        for txn in decided:
            self._spawn(shard, self._finish(shard, txn))
        self._abort_timed_out(shard)
        self._expire_idle(shard)

    # --- the APIs ----------------------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        shard, error = self._serving(transactional_id)
        if shard is None:
            return error, -1, -1
        if not 0 < timeout_ms <= self._settings.max_timeout_ms:
            return E.invalid_transaction_timeout, -1, -1
        txn = shard.txns.get(transactional_id)
        fresh = -1
        if txn is None or txn.producer_epoch + 1 > rules.MAX_EPOCH:
            allocated = await self._allocate_id()
            if allocated is None:
                return E.coordinator_not_available, -1, -1
            fresh = allocated
            shard, error = self._serving(transactional_id)
            if shard is None:
                return error, -1, -1
            txn = shard.txns.get(transactional_id)
        if txn is None:
            if not await self._room_for_one(shard):
                return E.coordinator_not_available, -1, -1
            shard, error = self._serving(transactional_id)
            if shard is None:
                return error, -1, -1
            txn = rules.new_producer(transactional_id, fresh, timeout_ms)
        decision = rules.init_producer(
            txn, timeout_ms, producer_id, producer_epoch, fresh, now_ms(self._clock)
        )
        if decision.error == E.concurrent_transactions and decision.write is not None:
            # an ongoing transaction fenced: its abort goes on without this caller
            if await self._write(shard, decision.write) == E.none:
                self._spawn(shard, self._finish(shard, decision.write))
            return E.concurrent_transactions, -1, -1
        error = await self._decided(shard, decision)
        if error != E.none:
            return error, -1, -1
        current = shard.txns[transactional_id]
        return E.none, current.producer_id, current.producer_epoch

    async def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Partitions
    ) -> ErrorCode:
        shard, error = self._serving(transactional_id)
        if shard is None:
            return error
        decision = rules.add_partitions(
            shard.txns.get(transactional_id), producer_id, epoch, partitions, now_ms(self._clock)
        )
        return await self._decided(shard, decision)

    async def end_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> ErrorCode:
        """Answered once the decision (PrepareCommit/PrepareAbort) is in the log and either the
        markers and the Complete record followed or END_WAIT_S passed. Kafka answers at the
        decision; its producer's next AddPartitionsToTxn then meets CONCURRENT_TRANSACTIONS
        while the markers are written, and librdkafka asks again only 20 ms later: in the
        bench that was most of a transaction's time (30 ms each, 100 records)."""
        shard, error = self._serving(transactional_id)
        if shard is None:
            return error
        decision = rules.end_transaction(
            shard.txns.get(transactional_id), producer_id, epoch, commit, now_ms(self._clock)
        )
        error = await self._decided(shard, decision)
        if error == E.none and decision.write is not None:
            finishing = self._spawn(shard, self._finish(shard, decision.write))
            settled = asyncio.get_running_loop().create_future()

            def settle(*_: object) -> None:
                if not settled.done():
                    settled.set_result(None)

            timer = self._clock.call_later(END_WAIT_S, settle)
            finishing.add_done_callback(settle)
            try:
                await settled
            finally:
                timer.cancel()
        return error

    def verify(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str, index: int
    ) -> ErrorCode:
        """Answered from the recorded state also while partitions are being added: a
        partition in the ongoing transaction stays in it. kafkajs adds partitions one broker
        at a time, in parallel with its produce to the partitions already added, which were
        told CONCURRENT_TRANSACTIONS (retriable) until the add was in the log. Any other
        write in flight may end or fence the transaction, and is waited for, as is an add
        that may be the one adding this partition."""
        shard, error = self._shard(transactional_id)
        if shard is None:
            return error
        writing = transactional_id in shard.writing
        if writing and shard.writing[transactional_id] != TxnState.ONGOING:
            return E.concurrent_transactions
        error = rules.in_transaction(
            shard.txns.get(transactional_id), producer_id, epoch, topic, index
        )
        return E.concurrent_transactions if writing and error != E.none else error

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TxnMetadata | None]:
        """The state the log last recorded (a write in flight shows the state it replaces:
        Kafka's DescribeTransactions never answers CONCURRENT_TRANSACTIONS, and an admin
        client takes any error as a failure)."""
        shard, error = self._shard(transactional_id)
        if shard is None:
            return error, None
        txn = shard.txns.get(transactional_id)
        return (E.none, txn) if txn is not None else (E.transactional_id_not_found, None)

    def producer_held(
        self, producer_id: int, indexes: Iterable[int], topic: str, index: int
    ) -> tuple[bool, Held | None]:
        """For a WriteTxnMarkers from a client: what the `__transaction_state` partitions
        `indexes` (all led and loaded here, else (False, None): this node cannot say) hold of
        the producer id, None if no id of theirs uses it."""
        held: Held | None = None
        for i in indexes:
            shard = self._shards.get(i)
            if shard is None or not shard.attached or shard.loading:
                return False, None
            txn_id = shard.by_producer.get(producer_id)
            if txn_id is None:
                continue
            txn = shard.txns[txn_id]
            writing = shard.writing.get(txn_id, TxnState.EMPTY)
            running = writing in rules.IN_PROGRESS or (
                txn.state in rules.IN_PROGRESS and index in txn.partitions.get(topic, ())
            )
            held = Held(txn.producer_epoch, running)
        return True, held

    def transactions(self) -> list[TxnMetadata]:
        """Every transactional id this node coordinates (ListTransactions)."""
        return [t for s in self._shards.values() if not s.loading for t in s.txns.values()]

    # --- internals ---------------------------------------------------------------------------

    def _shard(self, transactional_id: str) -> tuple[_Shard | None, ErrorCode]:
        """The loaded partition of the id this node coordinates, or why there is none."""
        if not transactional_id:
            return None, E.invalid_request
        shard = self._shards.get(self.partition_for(transactional_id))
        if shard is None or not shard.attached:
            return None, E.not_coordinator
        if shard.loading:
            return None, E.coordinator_load_in_progress
        return shard, E.none

    def _serving(self, transactional_id: str) -> tuple[_Shard | None, ErrorCode]:
        """As _shard, and no write of the id in flight (Kafka's pending transition)."""
        shard, error = self._shard(transactional_id)
        if shard is not None and transactional_id in shard.writing:
            return None, E.concurrent_transactions
        return shard, error

    async def _decided(self, shard: _Shard, decision: Decision) -> ErrorCode:
        if decision.error != E.none or decision.write is None:
            return decision.error
        return await self._write(shard, decision.write)

    async def _write(self, shard: _Shard, txn: TxnMetadata) -> ErrorCode:
        """Appends the record; memory follows only if the log took it."""
        txn_id = txn.transactional_id
        error, offset = await self._append(shard, txn_id, txn.state, encode_value(txn.to_log()))
        if error == E.none:
            shard.put(txn)
            shard.offsets[txn_id] = offset
        return error

    async def _forget(self, shard: _Shard, txn: TxnMetadata) -> None:
        """A tombstone for an idle id, if nothing changed it since it was chosen (checked and
        written with no await between, as `_serving` does for clients); memory follows. If it
        is not written now, the next expiry check tries again."""
        txn_id = txn.transactional_id
        if not _unchanged(shard, txn):
            return
        error, _ = await self._append(shard, txn_id, None, None)
        if error == E.none:
            shard.drop(txn_id)
            shard.offsets.pop(txn_id, None)

    async def _append(
        self, shard: _Shard, txn_id: str, state: TxnState | None, value: bytes | None
    ) -> tuple[ErrorCode, int]:
        """One record of the id, with the id marked as being written meanwhile."""
        shard.writing[txn_id] = state
        try:
            offset = await shard.log.append([(encode_key(txn_id), value)])
        except KafkaError as exc:
            return _append_error(exc.code), -1
        except asyncio.CancelledError:
            return E.not_coordinator, -1
        finally:
            shard.writing.pop(txn_id, None)
        if not shard.attached:
            return E.not_coordinator, -1
        return E.none, offset

    async def _room_for_one(self, shard: _Shard) -> bool:
        """Whether a new id fits the partition's bound, after forgetting the idle id used
        longest ago if it is full; False when every id there has a transaction open."""

        def held() -> int:  # ids being added count already
            return len(shard.txns) + sum(1 for i in shard.writing if i not in shard.txns)

        if held() < self._settings.max_ids:
            return True
        idle = (
            t
            for t in shard.txns.values()
            if rules.idle(t) and t.transactional_id not in shard.writing
        )
        oldest = min(idle, key=lambda t: t.last_update_ms, default=None)
        if oldest is not None:
            log.info(
                "transactional id %r forgotten to make room for a new one", oldest.transactional_id
            )
            await self._forget(shard, oldest)
        if held() < self._settings.max_ids:
            return True
        log.warning(
            "%s partition %d holds its maximum of %d transactional ids "
            "(transactional.id.max.per.partition), none idle: a new id is refused",
            TOPIC,
            shard.index,
            self._settings.max_ids,
        )
        return False

    async def _finish(self, shard: _Shard, txn: TxnMetadata) -> None:
        """Markers on every partition of the transaction, then CompleteCommit/CompleteAbort.
        A marker that cannot be written (its topic deleted, the producer fenced since, a
        newer coordinator's marker there) is given up, as Kafka does; once this node no longer
        leads the partition in this epoch, all of it is (markers.py)."""
        commit = txn.state == TxnState.PREPARE_COMMIT
        epoch = shard.log.leader_epoch
        decided_at = shard.offsets.get(txn.transactional_id, -1)
        partitions = [
            (t, i) for t, indexes in sorted(txn.partitions.items()) for i in sorted(indexes)
        ]
        self._record(
            history.TxnDecision,
            shard,
            transactional_id=txn.transactional_id,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            commit=int(commit),
            decision_offset=decided_at,
            partitions=[f"{t}:{i}" for t, i in partitions],
        )
        markers = [
            MarkerWrite(
                t, i, txn.producer_id, txn.producer_epoch, commit, epoch, shard.index, decided_at
            )
            for t, i in partitions
        ]
        outcomes = await asyncio.gather(*(self._write_marker(m) for m in markers))
        if E.not_coordinator in outcomes:
            return  # no longer this node's: the next leader loads the decision and ends it
        for marker, outcome in zip(markers, outcomes, strict=True):
            if outcome != E.none:  # given up: the audit counts it as accounted for
                self._record(
                    history.TxnMarker,
                    shard,
                    producer_id=marker.producer_id,
                    producer_epoch=marker.producer_epoch,
                    commit=int(commit),
                    marker_offset=-1,
                    decision_partition=shard.index,
                    decision_offset=decided_at,
                    coordinator_epoch=marker.coordinator_epoch,
                    data_partition=(marker.topic, marker.partition),
                )
        while shard.attached:
            error = await self._write(shard, rules.complete(txn, now_ms(self._clock)))
            if error == E.none:
                self._record(
                    history.TxnComplete,
                    shard,
                    transactional_id=txn.transactional_id,
                    decision_offset=decided_at,
                )
            if error in (E.none, E.not_coordinator):
                return
            await self._clock.sleep(0.1)  # the log is busy or short of replicas: again

    def _record(
        self,
        cls: type[history.Record],
        shard: _Shard,
        data_partition: tuple[str, int] | None = None,
        **fields: Any,
    ) -> None:
        """A history record of the partition's term (its leader's: this node), about the
        partition itself or (`data_partition`) a partition of a transaction."""
        if self._journal is not None:
            topic, index = data_partition or (TOPIC, shard.index)
            fields["term"] = shard.log.leader_epoch
            self._journal(
                cls(
                    time_ms=now_ms(self._clock),
                    node=self._node_id,
                    topic=topic,
                    partition=index,
                    **fields,
                )
            )

    def _abort_timed_out(self, shard: _Shard) -> None:
        if not shard.attached:
            return
        now = now_ms(self._clock)
        for txn in list(shard.txns.values()):
            if rules.timed_out(txn, now) and txn.transactional_id not in shard.writing:
                self._spawn(shard, self._fence_and_abort(shard, txn, now))
        shard.timeout_check = self._clock.call_later(TIMEOUT_CHECK_S, self._abort_timed_out, shard)

    def _expire_idle(self, shard: _Shard) -> None:
        if not shard.attached:
            return
        now = now_ms(self._clock)
        expiring = [
            t for t in shard.txns.values() if rules.expired(t, now, self._settings.id_expiration_ms)
        ]
        if expiring:
            log.info(
                "%s partition %d: %d transactional ids expired", TOPIC, shard.index, len(expiring)
            )
        for txn in expiring:
            self._spawn(shard, self._forget(shard, txn))
        shard.expiry_check = self._clock.call_later(
            self._settings.cleanup_interval_ms / 1000, self._expire_idle, shard
        )

    async def _fence_and_abort(self, shard: _Shard, txn: TxnMetadata, now: int) -> None:
        """Only if nothing changed the transaction since it was found expired: its producer's
        EndTxn may have been decided meanwhile, and two decisions would mean markers of both
        kinds. Checked and written with no await between, as `_serving` does for clients."""
        if not _unchanged(shard, txn):
            return
        fenced = rules.fence(txn, now)
        if await self._write(shard, fenced) == E.none:
            log.info("transaction of %r timed out: aborted", txn.transactional_id)
            await self._finish(shard, fenced)

    def _spawn(self, shard: _Shard, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        shard.tasks.add(task)
        task.add_done_callback(lambda t: _task_done(shard, t))
        return task

    @property
    def loading(self) -> bool:
        """A partition this node leads is still being read: Kafka's ListTransactions answers
        COORDINATOR_LOAD_IN_PROGRESS then, rather than a list missing its ids."""
        return any(shard.loading for shard in self._shards.values())


def _unchanged(shard: _Shard, txn: TxnMetadata) -> bool:
    """`txn` is still the id's recorded state and no write of it is in flight: a write the
    coordinator decided on its own (a timeout's abort, an expiry) may go ahead only then."""
    return shard.txns.get(txn.transactional_id) is txn and txn.transactional_id not in shard.writing


def _task_done(shard: _Shard, task: asyncio.Task[None]) -> None:
    shard.tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.error(
            "transaction coordinator task for partition %d failed",
            shard.index,
            exc_info=task.exception(),
        )


def _append_error(code: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed `__transaction_state` append (TransactionStateManager)."""
    if code in (E.not_leader_or_follower, E.not_coordinator, E.kafka_storage_error):
        return E.not_coordinator
    if code in (E.message_too_large, E.record_list_too_large):
        return E.unknown_server_error
    return E.coordinator_not_available
