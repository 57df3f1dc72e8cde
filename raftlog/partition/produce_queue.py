"""A leader's produce queue: requests wait here, in arrival order, until they can go into
Raft, and get their answer when Raft settles the entry that carried them. Few entries,
each as large as fits, because every entry costs each replica the same Raft work whatever
its size."""

from __future__ import annotations

import asyncio
import functools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from raftlog.api.values import ProduceResult
from raftlog.common.counters import Histogram
from raftlog.common.errors import ErrorCode, KafkaError
from raftlog.partition.ack_batch import AckBatch
from raftlog.partition.producer_state import Verdict
from raftlog.raft.replica import CoreGroup, Outcome
from raftlog.raft.window_entries import Batches

# How far a leader's log may run ahead of its commit index: Raft replicates whatever is
# appended, and a leader far ahead of its followers sends them a backlog they time out on
# (measured on the pysyncobj engine, before the core; the core's appends are bounded per
# message, not per log).
UNCOMMITTED_BYTES = 4 * 1024 * 1024
# Proposals a leader has in Raft at once; requests arriving meanwhile queue and go as one
# entry. Every entry costs each replica the same Raft work whatever its size, and a
# producer spread over 1,000 partitions sent one- or two-record batches: unbounded, each
# was an entry of its own (30,000 records: 0.4-2 MB/s, some never acknowledged; bounded at
# 2: 3-14 MB/s, all acknowledged). Over six partitions it helped too (~110 -> ~135 MB/s).
PROPOSALS_IN_FLIGHT = 2


@dataclass(slots=True)
class ProduceRequest:
    """One produce request's records for this partition, waiting for their offsets."""

    records: bytes
    batches: int
    offsets: int  # how many offsets its batches take
    acks: int
    future: asyncio.Future[ProduceResult] | None
    base_offset: int = -1
    term: int = -1  # of the Raft entry that carried it
    verdict: Verdict | None = None  # set when the leader left its batches out of the log
    # compressed or long batches are walked (or recompressed: the rebuilt batches) in a
    # thread; the request is proposed once they pass
    checked: asyncio.Future[None] | None = None
    log_append_time: int = -1  # the leader's stamp on a LogAppendTime topic's batches
    timer: asyncio.TimerHandle | None = None  # answers REQUEST_TIMED_OUT (answer_within)


class Proposal(Batches):
    """The batches of one or more produce requests, proposed as one Raft entry. The journal
    sees this very object in add() on the leader, which is how the offsets it assigns reach
    the producers. One request's batches are its own buffer, never copied on their way to the
    segment's writev; several are joined once (this was a bytes subclass: a join, the DATA
    byte prepended and the subclass built, three copies of every byte)."""

    __slots__ = ("requests", "proposed_at")

    def __init__(self, requests: list[ProduceRequest]) -> None:
        super().__init__(
            requests[0].records if len(requests) == 1 else b"".join(r.records for r in requests)
        )
        self.requests = requests
        self.proposed_at = time.monotonic()  # for the commit latency


class ProduceQueue:
    def __init__(
        self,
        group: CoreGroup,
        max_entry_bytes: Callable[[], int],
        log_start_offset: Callable[[], int],
        record_ack: Callable[[int, int, int], None],
        commit_latency: Histogram,
        refusal: Callable[[bytes], ProduceResult],
        batch: AckBatch,
    ) -> None:
        """max_entry_bytes: what one Raft entry may not reach (the node's max_message_bytes);
        record_ack(term, acks, end offset) puts acknowledgements into the node's history;
        commit_latency gets each committed entry's time from proposal to commit; refusal(records)
        is what a request not proposed is answered when leadership is lost (Partition's); batch:
        the node's, which writes every replica's acknowledgements of a loop turn at once."""
        self._group = group
        self._max_entry_bytes = max_entry_bytes
        self._log_start_offset = log_start_offset
        self._record_ack = record_ack
        self._commit_latency = commit_latency
        self._refusal = refusal
        self._batch = batch
        self._queue: deque[ProduceRequest] = deque()
        self._acks_pending: dict[tuple[int, int], int] = {}
        self._uncommitted = 0
        self._proposals = 0  # proposed, not yet settled

    def submit(self, request: ProduceRequest) -> None:
        """Queues the request and proposes what may go. Its future is answered on Raft's
        verdict (acks=-1) or at the leader's append (acks=1); acks=0 has none."""
        if request.checked is not None:
            request.checked.add_done_callback(self._checked)
        self._queue.append(request)
        self.propose()

    def _checked(self, checked: asyncio.Future[None]) -> None:
        """A request's batches were opened, or failed to be (its exception is read here: a
        request dropped with the leadership before then is not answered from it, and asyncio
        logs an error for an exception nobody read)."""
        if not checked.cancelled():
            checked.exception()
        self.propose()

    def propose(self) -> None:
        """Proposes queued requests, in arrival order, as few Raft entries as fit, while
        fewer than PROPOSALS_IN_FLIGHT are in Raft and the uncommitted part of the log is
        under UNCOMMITTED_BYTES (so it may pass the bound by one entry)."""
        if not self._group.is_leader:  # a deposed leader settles what it held
            self.fail_all()
            return
        limit = self._max_entry_bytes() - 1
        while (
            self._queue
            and self._uncommitted < UNCOMMITTED_BYTES
            and self._proposals < PROPOSALS_IN_FLIGHT
        ):
            requests, size = [], 0
            while self._queue and size + len(self._queue[0].records) <= limit:
                checked = self._queue[0].checked
                if checked is not None and not checked.done():
                    break  # its compressed batches are still being opened
                request = self._queue.popleft()
                error = checked.exception() if checked is not None else None
                if error is not None:
                    _refuse(request, error)
                    continue
                requests.append(request)
                size += len(request.records)
            if not requests:
                return
            proposal = Proposal(requests)
            self._uncommitted += len(proposal)
            self._proposals += 1
            self._group.propose(proposal, functools.partial(self._settled, proposal))

    def appended(self, proposal: Proposal, term: int) -> None:
        """The leader appended the entry: acks=1 is answered now (Kafka's meaning of it)."""
        for request in proposal.requests:
            request.term = term
            if request.acks == 1 and request.future is not None and not request.future.done():
                self._note_ack(request)
                _settle(request, self._answer(request))

    def fail_all(self) -> None:
        """Requests not yet proposed when leadership is lost go back to the client: "not the
        leader", or "possibly persisted" for a retry whose batch the log holds (`refusal`)."""
        while self._queue:
            request = self._queue.popleft()
            waiting = request.future is not None and not request.future.done()
            _settle(request, self._refusal(request.records) if waiting else None)

    def _settled(self, proposal: Proposal, outcome: Outcome) -> None:
        """Raft's verdict on a proposal: committed in its term; its leader stepped down before
        it committed (LEADER_CHANGED: it may still be); or not written."""
        self._uncommitted -= len(proposal)
        self._proposals -= 1
        if outcome == Outcome.COMMITTED:
            self._commit_latency.observe(time.monotonic() - proposal.proposed_at)
        for request in proposal.requests:
            if request.future is None or request.future.done():
                _settle(request, None)  # (cancelled with its client's connection)
                continue
            if outcome == Outcome.COMMITTED:
                result = self._answer(request)
                self._note_ack(request)
            elif outcome == Outcome.LEADER_CHANGED:  # in the log, may still be committed
                result = ProduceResult(
                    ErrorCode.request_timed_out,
                    message="leadership changed before the write committed; it may still be",
                )
            else:
                result = ProduceResult(ErrorCode.not_leader_or_follower)
            _settle(request, result)
        self.propose()

    def _note_ack(self, request: ProduceRequest) -> None:
        """Acknowledgements go into the history before the answers can leave this node: the
        write is queued on the event loop ahead of the producer's task (call_soon is FIFO),
        all acks of one loop turn share a record, and every replica's records of the turn a
        write (AckBatch)."""
        if request.verdict is not None or request.base_offset < 0:
            return
        key = (request.term, request.acks)
        end = request.base_offset + request.offsets
        if not self._acks_pending:
            self._batch.add(self._group.loop, self._record_acks)
        self._acks_pending[key] = max(end, self._acks_pending.get(key, 0))

    def _record_acks(self) -> None:
        pending, self._acks_pending = self._acks_pending, {}
        for (term, acks), end in sorted(pending.items()):
            self._record_ack(term, acks, end)

    def _answer(self, request: ProduceRequest) -> ProduceResult:
        verdict = request.verdict
        if verdict is None:
            return ProduceResult(
                base_offset=request.base_offset,
                log_append_time=request.log_append_time,
                log_start_offset=self._log_start_offset(),
            )
        if verdict.error == ErrorCode.none:  # a retried batch: where the first copy landed
            return ProduceResult(
                base_offset=verdict.base_offset, log_start_offset=self._log_start_offset()
            )
        return ProduceResult(verdict.error, message=verdict.message)


def answer_within(request: ProduceRequest, timeout_ms: int) -> asyncio.Future[ProduceResult]:
    """The request's answer, or REQUEST_TIMED_OUT once `timeout_ms` passed; the request keeps
    its place in the log either way (a timed-out request that commits later is not
    acknowledged). One timer per request, cancelled by whoever answers (_settle): wait_for
    and shield cost a task and two more futures each, and a done callback one more loop
    callback per request."""
    future = request.future
    assert future is not None  # acks=0 waits for nothing
    if not future.done():
        request.timer = future.get_loop().call_later(timeout_ms / 1000, _time_out, request)
    return future


def _time_out(request: ProduceRequest) -> None:
    request.timer = None
    _settle(request, ProduceResult(ErrorCode.request_timed_out, message="not committed in time"))


def _settle(request: ProduceRequest, result: ProduceResult | None) -> None:
    """Answers the request with `result` unless it was answered (or its waiter cancelled)
    already; its timer goes either way."""
    if request.timer is not None:
        request.timer.cancel()
        request.timer = None
    future = request.future
    if result is not None and future is not None and not future.done():
        future.set_result(result)


def _refuse(request: ProduceRequest, error: BaseException) -> None:
    if request.future is None or request.future.done():
        _settle(request, None)
        return
    if isinstance(error, KafkaError):
        result = ProduceResult.refused(error)
    else:
        result = ProduceResult(ErrorCode.corrupt_message, message=f"cannot check: {error}")
    _settle(request, result)
