"""Each node's history journal: what happened to the terms and logs of its Raft groups.

One JSON object per line in `<data_dir>/history.jsonl`, appended as it happens and flushed to
the OS at once (so `kill -9` loses nothing written; a node's acknowledgements of one loop turn
go in one write, before their answers leave). The record types below are the schema:
the writer builds these dataclasses and the epoch audit (analytics/) reads them back through
`parse()`, so both sides share one definition. epoch/README.md documents them for people.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, ClassVar

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Record:
    kind: ClassVar[str] = ""
    time_ms: int  # wall clock of the node that wrote it, ms since the Unix epoch
    node: int  # the node that wrote it
    topic: str  # "__controller" for the controller group
    partition: int


@dataclass(frozen=True, slots=True)
class Election(Record):
    """This node became leader of `term`; it enters the epoch at its log end offset."""

    kind: ClassVar[str] = "election"
    term: int
    log_end_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class LeaderSeen(Record):
    """This node learned of a leader (or of none: leader -1) in `term`."""

    kind: ClassVar[str] = "leader"
    term: int
    leader: int


@dataclass(frozen=True, slots=True)
class Truncation(Record):
    """Raft removed an uncommitted tail from this node's log."""

    kind: ClassVar[str] = "truncation"
    term: int  # this node's current term when it truncated
    reason: str  # "raft" (a new leader's log disagreed) or "install" (before a snapshot install)
    from_index: int  # first Raft index removed
    to_index: int  # last Raft index removed
    from_offset: int  # first Kafka offset removed
    to_offset: int  # offset after the last removed one
    entry_terms: list[int]  # terms of the removed entries (epochs of the removed batches)
    records: int
    batches: int
    bytes: int


@dataclass(frozen=True, slots=True)
class HighWatermark(Record):
    """The high watermark moved (sampled: at most once a second per partition, and at every
    change of term)."""

    kind: ClassVar[str] = "hw"
    term: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class SnapshotInstall(Record):
    """This node installed segment data streamed from `leader` to catch up."""

    kind: ClassVar[str] = "snapshot_install"
    term: int
    leader: int
    resume_offset: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class LogStart(Record):
    """This node's log now starts at `log_start_offset`: a DeleteRecords committed in the
    partition's Raft log (`reason` "delete_records"), one learned with a snapshot install
    ("install"), or retention deleted the segments below ("retention"). What lies below was
    deleted on purpose, not lost."""

    kind: ClassVar[str] = "log_start"
    term: int
    log_start_offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class Ack(Record):
    """This node, as leader of `term`, acknowledged records to producers: everything below
    `end_offset` that it wrote in `term` was answered as written (acks 1: appended here;
    acks -1: committed). Written before the answers leave the node."""

    kind: ClassVar[str] = "ack"
    term: int
    acks: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class EpochAnswer(Record):
    """An OffsetForLeaderEpoch answer this node gave as leader."""

    kind: ClassVar[str] = "offset_for_leader_epoch"
    term: int
    requested_epoch: int
    answer_epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class TxnDecision(Record):
    """This node, coordinating a transactional id from `__transaction_state` partition
    `partition` in `term`, has its decision committed there: the PrepareCommit or PrepareAbort
    record at `decision_offset`, which names the transaction's partitions ("topic:index").
    Written again by a coordinator that loads a decision and finishes it."""

    kind: ClassVar[str] = "txn_decision"
    term: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: int  # 1 commit, 0 abort
    decision_offset: int
    partitions: list[str]


@dataclass(frozen=True, slots=True)
class TxnMarker(Record):
    """This node, leading `topic`/`partition` in `term`, has a transaction's marker committed at
    `marker_offset`, written for the decision at `decision_offset` of `__transaction_state`
    partition `decision_partition` by its coordinator of `coordinator_epoch` (the term in
    which that node led the decision's partition). `marker_offset` -1: the coordinator (this
    node, `term` its own) gave the marker up, the partition gone or its producer fenced there
    since."""

    kind: ClassVar[str] = "txn_marker"
    term: int
    producer_id: int
    producer_epoch: int
    commit: int
    marker_offset: int
    decision_partition: int
    decision_offset: int
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class TxnComplete(Record):
    """The coordinator wrote CompleteCommit or CompleteAbort for the decision at
    `decision_offset`: every partition of the transaction has its marker (or, deleted since,
    never will)."""

    kind: ClassVar[str] = "txn_complete"
    term: int
    transactional_id: str
    decision_offset: int


@dataclass(frozen=True, slots=True)
class _Conf(Record):
    """A configuration entry of the partition's Raft group (issue 44): who votes (`voters`;
    `outgoing`, the old voters, while the group is joint: a majority of both halves then)
    and who only follows (`learners`), set by the entry at Raft index `index` of term
    `entry_term`, which sits at Kafka offset `offset` of the log (before the record there).
    `term` is this node's term when it wrote the record, as in `truncation`."""

    term: int
    index: int
    entry_term: int
    offset: int
    voters: list[int]
    outgoing: list[int]
    learners: list[int]


@dataclass(frozen=True, slots=True)
class ConfAppended(_Conf):
    """A configuration entry was appended to this node's log (a Raft group uses a
    configuration from when it is appended)."""

    kind: ClassVar[str] = "conf_appended"


@dataclass(frozen=True, slots=True)
class ConfCommitted(_Conf):
    """This node learned that a configuration entry is committed."""

    kind: ClassVar[str] = "conf_committed"


@dataclass(frozen=True, slots=True)
class ConfTruncated(_Conf):
    """A truncation removed a configuration entry from this node's log: the configuration
    before it is back in force here. Legal only for an entry never committed."""

    kind: ClassVar[str] = "conf_truncated"


@dataclass(frozen=True, slots=True)
class ReplicaDropped(Record):
    """This node closed its replica of the partition and is deleting its directory: the
    partition moved off the node (`reason` "moved") or its topic was deleted ("deleted").
    Written before the files go, so a replica opened here later is a new one. `term`: the
    dropped replica's term; `log_end_offset` and `last_epoch`: where its log ended and the
    epoch (Raft term) of its last entry, so the audit knows what the copy held (a voter a
    move removes may be dropped before it learns that its last records committed)."""

    kind: ClassVar[str] = "replica_dropped"
    term: int
    reason: str
    log_end_offset: int
    last_epoch: int


@dataclass(frozen=True, slots=True)
class ReplicaCreated(Record):
    """This node opened a new, empty replica of the partition (no directory was there, or
    one left by a deleted topic of the same name, `reason` "stale", was removed first; else
    "new"). Its log, term and high watermark start again from nothing: a new incarnation of
    the node's replica, which the audit follows apart from any earlier one. `term` is 0,
    the new replica's. Written before the replica writes anything."""

    kind: ClassVar[str] = "replica_created"
    term: int
    reason: str


RECORD_TYPES: dict[str, type[Record]] = {
    cls.kind: cls
    for cls in (
        Ack,
        Election,
        LeaderSeen,
        Truncation,
        HighWatermark,
        SnapshotInstall,
        LogStart,
        EpochAnswer,
        TxnDecision,
        TxnMarker,
        TxnComplete,
        ConfAppended,
        ConfCommitted,
        ConfTruncated,
        ReplicaDropped,
        ReplicaCreated,
    )
}


@cache
def _names(cls: type[Record]) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def to_json(record: Record) -> str:
    # Not dataclasses.asdict: its deep copy was most of the cost of a record, and a node
    # writes one per partition per second under load (the fields are JSON values already).
    if type(record) is Ack:
        return _ack_json(record)
    data: dict[str, Any] = {"kind": record.kind, "v": SCHEMA_VERSION}
    # A class is hashable; mypy checks type[Record] against Hashable with the instances'
    # __hash__ and says no (python/mypy#11470).
    for name in _names(type(record)):  # type: ignore[arg-type]
        data[name] = getattr(record, name)
    return json.dumps(data)


def _ack_json(record: Ack) -> str:
    """to_json of an Ack, the line of every acknowledged produce (one a partition a loop
    turn): the same line, formatted directly. The dict and json.dumps took 4-5 us, this
    0.7-0.9 (small writes)."""
    return (
        f'{{"kind": "ack", "v": {SCHEMA_VERSION}, "time_ms": {record.time_ms}, '
        f'"node": {record.node}, "topic": {_json_string(record.topic)}, '
        f'"partition": {record.partition}, "term": {record.term}, '
        f'"acks": {record.acks}, "end_offset": {record.end_offset}}}'
    )


@lru_cache(maxsize=4096)
def _json_string(text: str) -> str:
    return json.dumps(text)


def parse(line: str) -> Record:
    """One history line back into its record; unknown fields are an error, not silently lost."""
    data: dict[str, Any] = json.loads(line)
    cls = RECORD_TYPES[data.pop("kind")]
    data.pop("v", None)
    names = {f.name for f in fields(cls)}
    if set(data) != names:
        raise ValueError(f"{cls.kind} record has fields {sorted(data)}, expected {sorted(names)}")
    return cls(**data)


def now_ms() -> int:
    return int(time.time() * 1000)


class HistoryJournal:
    FILE_NAME = "history.jsonl"

    def __init__(self, data_dir: Path, node_id: int) -> None:
        self.path = data_dir / self.FILE_NAME
        self.node_id = node_id
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the node
        self._holding = 0

    def write(self, record: Record) -> None:
        """In the file (the OS's page cache: a kill -9 keeps it) on return, or, within
        held(), when its block ends."""
        self._file.write(to_json(record) + "\n")
        if not self._holding:
            self._file.flush()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The records written within go to the file in one write at the end."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding:
                self._file.flush()

    def close(self) -> None:
        self._file.close()
