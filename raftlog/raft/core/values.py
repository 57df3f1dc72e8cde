"""The values the Raft core takes and hands out: messages between replicas, log entries, the
durable and volatile states, a proposal's refusals, and the Ready that tells the caller what to
do next."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from raftlog.raft.membership import Membership

NONE = 0
"""Node ids are positive; 0 means "nobody" (no vote, no known leader)."""


class Role(Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class MsgType(Enum):
    APP = "app"  # append entries; with none it is the heartbeat
    APP_RESP = "app-resp"
    VOTE = "vote"
    VOTE_RESP = "vote-resp"
    PREVOTE = "prevote"
    PREVOTE_RESP = "prevote-resp"
    TIMEOUT_NOW = "timeout-now"  # leadership transfer: the target stands at once
    SNAP = "snap"  # install the leader's snapshot point: index/log_term name its last entry
    PROP = "prop"  # a forwarded proposal: only sent when Rules.no_forwarding is off


class Payload(Protocol):
    """An entry's data as the core sees it: opaque, sized. A log may hand out a lazy payload
    that reads its bytes only when a message carrying it is encoded (the segment journal does:
    a leader's append is read back from its segment only if it is sent)."""

    def __len__(self) -> int: ...

    def __bytes__(self) -> bytes: ...


# The values the core hands out (entries, messages, states, Readies) are never changed once
# made; they are plain slotted dataclasses, not frozen ones, because a frozen dataclass's
# __init__ costs about six times as much and the per-entry path makes several of them. Each
# has an __init__ of its own, which mypyc compiles; the one dataclasses would generate stays
# interpreted (docs/architecture.md, "Compiled modules").


@dataclass(slots=True, init=False)
class Entry:
    """`conf`: the group's configuration from this entry on (a configuration entry, issue 44);
    it is used from when it is appended, not committed (Raft thesis 4.1)."""

    term: int
    index: int
    data: Payload
    conf: Membership | None

    def __init__(
        self, term: int, index: int, data: Payload = b"", conf: Membership | None = None
    ) -> None:
        self.term = term
        self.index = index
        self.data = data
        self.conf = conf


@dataclass(slots=True, init=False)
class Message:
    """One message between replicas of a group. Field meanings follow etcd's raftpb.Message:

    APP: index/log_term = the entry just before `entries`, commit = leader's commit.
    APP_RESP: index = last index matched (success) or the rejected prev index (reject);
    reject_hint/log_term = the follower's conflict hint (index, term there).
    VOTE/PREVOTE: index/log_term = the candidate's last entry.
    SNAP: index/log_term = the snapshot's last entry (the leader's first held entry), conf =
    the configuration in force there.
    """

    type: MsgType
    src: int
    dst: int
    term: int
    index: int
    log_term: int
    entries: tuple[Entry, ...]
    commit: int
    reject: bool
    reject_hint: int
    transfer: bool
    quiesce: bool  # APP: the leader's last heartbeat before its group goes quiet
    conf: Membership | None

    def __init__(
        self,
        type: MsgType,
        src: int,
        dst: int,
        term: int,
        index: int = 0,
        log_term: int = 0,
        entries: tuple[Entry, ...] = (),
        commit: int = 0,
        reject: bool = False,
        reject_hint: int = 0,
        transfer: bool = False,
        quiesce: bool = False,
        conf: Membership | None = None,
    ) -> None:
        self.type = type
        self.src = src
        self.dst = dst
        self.term = term
        self.index = index
        self.log_term = log_term
        self.entries = entries
        self.commit = commit
        self.reject = reject
        self.reject_hint = reject_hint
        self.transfer = transfer
        self.quiesce = quiesce
        self.conf = conf


@dataclass(slots=True, init=False)
class HardState:
    """What must be durable before any message that depends on it leaves."""

    term: int
    vote: int
    commit: int

    def __init__(self, term: int = 0, vote: int = NONE, commit: int = 0) -> None:
        self.term = term
        self.vote = vote
        self.commit = commit


@dataclass(slots=True, init=False)
class SoftState:
    """Volatile, for the caller: who leads (to redirect clients) and this replica's role."""

    leader: int
    role: Role

    def __init__(self, leader: int, role: Role) -> None:
        self.leader = leader
        self.role = role


@dataclass(slots=True)
class Install:
    """A snapshot to install: the caller fetches what the log holds up to (index, term) from
    `source`, replaces the log with that entry alone and calls `install_done`, or gives up
    and calls `install_failed`. Until then the core leaves its log alone."""

    index: int
    term: int
    source: int
    membership: Membership | None = None  # the configuration at the snapshot point


@dataclass(slots=True, init=False)
class Ready:
    """What the caller does, in order: cut the durable log after `truncate_after` (if not
    None), append `entries`, persist `hard_state` (if not None), sync; then send `messages`,
    apply `committed`, start `install` (if not None), and call `advance(ready)`."""

    hard_state: HardState | None
    truncate_after: int | None
    entries: tuple[Entry, ...]
    messages: tuple[Message, ...]
    committed: tuple[Entry, ...]
    soft_state: SoftState
    install: Install | None

    def __init__(
        self,
        hard_state: HardState | None,
        truncate_after: int | None,
        entries: tuple[Entry, ...],
        messages: tuple[Message, ...],
        committed: tuple[Entry, ...],
        soft_state: SoftState,
        install: Install | None = None,
    ) -> None:
        self.hard_state = hard_state
        self.truncate_after = truncate_after
        self.entries = entries
        self.messages = messages
        self.committed = committed
        self.soft_state = soft_state
        self.install = install


@dataclass(slots=True)
class NotLeader:
    """A proposal refused: the caller redirects its client to `leader` (NONE if unknown)."""

    leader: int


@dataclass(slots=True)
class Forwarded:
    """A proposal sent on to the leader (only with Rules.no_forwarding off): its index is
    unknown to the caller, which is exactly why partitions refuse instead."""

    leader: int


@dataclass(slots=True)
class ConfRefused:
    """A configuration change the leader will not append now, and why."""

    reason: str


ProposeResult = int | NotLeader | Forwarded
