"""SCRAM users: what AlterUserScramCredentials, DescribeUserScramCredentials, the admin API
and SASL read and change. Credentials live in the controller group, so every node
authenticates alike and they survive restarts and controller failover.

Everything proportional to a request or to the number of users (checks, key derivation,
listings) runs in a thread, not on the event loop every connection shares. A thread reads a
shallow copy of the controller's mapping: the controller replaces a user's mapping on change,
never changes one in place."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from raftlog.common.errors import ErrorCode
from raftlog.common.limits import excessive
from raftlog.controller import Controller, ControllerUnavailable
from raftlog.security import scram
from raftlog.security.scram import MAX_CHANGES_PER_REQUEST, MECHANISM_NAMES, ScramCredential


class HasController(Protocol):
    """The node, as users need it: its controller (made when the node starts, after this)."""

    @property
    def controller(self) -> Controller: ...


class Deletion(Protocol):
    """A credential to delete, as Kafka's ScramCredentialDeletion carries it."""

    @property
    def name(self) -> str: ...

    @property
    def mechanism(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Removal:
    """A Deletion the admin API makes."""

    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class Upsertion:
    """A credential as Kafka's AlterUserScramCredentials carries it: the client salts.
    (The handler passes kio's ScramCredentialUpsertion, which has the same fields.)"""

    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class UserResult:
    name: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Described:
    """One user as DescribeUserScramCredentials answers: mechanism -> iterations, or why not."""

    name: str
    mechanisms: dict[str, int] = field(default_factory=dict)
    error: ErrorCode = ErrorCode.none
    message: str | None = None


def upsertion_from_password(name: str, mechanism: str, password: str, iterations: int) -> Upsertion:
    """What `raftlog user create` and the admin API send: salted here, never stored plain.
    PBKDF2 of `iterations` rounds: callers on the event loop run it in a thread."""
    salt = scram.new_salt()
    return Upsertion(
        name,
        scram.MECHANISMS[mechanism],
        iterations,
        salt,
        scram.salted_password(mechanism, password, salt, iterations),
    )


def refuse_all(
    deletions: Sequence[Deletion],
    upsertions: Sequence[Upsertion],
    error: ErrorCode,
    message: str | None,
) -> list[UserResult]:
    """One result per user named, in the order first named, all refused."""
    named = dict.fromkeys(change.name for change in (*deletions, *upsertions))
    return [UserResult(name, error, message) for name in named]


class UserAdmin:
    def __init__(self, node: HasController) -> None:
        self._node = node

    def _users(self) -> dict[str, dict[str, list[Any]]]:
        return self._node.controller.state.scram_users

    def credential(self, name: str, mechanism: str) -> ScramCredential | None:
        record = self._users().get(name, {}).get(mechanism)
        return ScramCredential.from_record(record) if record is not None else None

    def mechanisms(self, name: str) -> dict[str, int] | None:
        """One user's mechanisms and iteration counts; None if there is no such user."""
        credentials = self._users().get(name)
        return _iterations(credentials) if credentials else None

    async def describe(self, names: Iterable[str] | None = None) -> list[Described]:
        """Kafka's DescribeUserScramCredentials: every user (sorted) when `names` is None or
        empty, else each name once, in the order first named: DUPLICATE_RESOURCE when named
        twice, RESOURCE_NOT_FOUND when there is no such user."""
        return await asyncio.to_thread(_describe, dict(self._users()), names)

    async def alter(
        self, deletions: Sequence[Deletion], upsertions: Sequence[Upsertion]
    ) -> list[UserResult]:
        """One result per user named, in the order first named; a user with any refused change
        gets none of its changes, as in Kafka. A request of more than MAX_CHANGES_PER_REQUEST
        changes is refused whole (POLICY_VIOLATION; Kafka's controller answers an operation
        over its record bound with nothing more specific) before anything is proposed."""
        message = excessive(
            len(deletions) + len(upsertions),
            "credential deletions and upsertions",
            MAX_CHANGES_PER_REQUEST,
        )
        if message is not None:
            return await asyncio.to_thread(
                refuse_all, deletions, upsertions, ErrorCode.policy_violation, message
            )
        plan = await asyncio.to_thread(_plan, deletions, upsertions)
        if plan.deletions or plan.upsertions:
            try:
                refused = await self._node.controller.call(
                    "store_user_scram_credentials", plan.deletions, plan.upsertions
                )
            except ControllerUnavailable as e:
                refused = {}
                for name in plan.order:
                    plan.refused.setdefault(
                        name, UserResult(name, ErrorCode.request_timed_out, str(e))
                    )
            for name, (error, message) in refused.items():
                plan.refused[name] = UserResult(name, ErrorCode(error), message)
        return [plan.refused.get(name, UserResult(name)) for name in plan.order]


@dataclass
class _Plan:
    """A request checked: its users, those refused, and the commands for the rest."""

    order: dict[str, None] = field(default_factory=dict)
    refused: dict[str, UserResult] = field(default_factory=dict)
    deletions: list[list[str]] = field(default_factory=list)
    upsertions: list[list[Any]] = field(default_factory=list)


def _plan(deletions: Sequence[Deletion], upsertions: Sequence[Upsertion]) -> _Plan:
    """Checks every change and derives the keys of the upsertions (HMACs, in a thread)."""
    plan = _Plan()
    seen: set[tuple[str, int]] = set()
    changes: list[tuple[Deletion, Upsertion | None]] = [(d, None) for d in deletions]
    changes += [(u, u) for u in upsertions]
    for change, upsertion in changes:
        name, mechanism = change.name, int(change.mechanism)
        plan.order[name] = None
        problem = _refusal(name, mechanism, upsertion, (name, mechanism) in seen)
        seen.add((name, mechanism))
        if problem is not None and name not in plan.refused:
            plan.refused[name] = problem
    plan.deletions = [
        [d.name, MECHANISM_NAMES[int(d.mechanism)]] for d in deletions if d.name not in plan.refused
    ]
    plan.upsertions = [
        [
            u.name,
            scram.from_salted_password(
                MECHANISM_NAMES[int(u.mechanism)], u.salt, u.salted_password, int(u.iterations)
            ).to_record(),
        ]
        for u in upsertions
        if u.name not in plan.refused
    ]
    return plan


def _refusal(
    name: str, mechanism: int, upsertion: Upsertion | None, duplicate: bool
) -> UserResult | None:
    problem = scram.check_user_name(name)
    if problem is not None:
        return UserResult(name, ErrorCode.unacceptable_credential, problem)
    if mechanism not in MECHANISM_NAMES:
        return UserResult(
            name, ErrorCode.unsupported_sasl_mechanism, f"Unknown SCRAM mechanism {mechanism}"
        )
    if duplicate:
        return UserResult(
            name,
            ErrorCode.duplicate_resource,
            "A user credential cannot be altered twice in the same request",
        )
    if upsertion is not None:
        problem = scram.check_upsertion(
            MECHANISM_NAMES[mechanism],
            int(upsertion.iterations),
            upsertion.salt,
            upsertion.salted_password,
        )
        if problem is not None:
            return UserResult(name, ErrorCode.unacceptable_credential, problem)
    return None


def _iterations(credentials: Mapping[str, list[Any]]) -> dict[str, int]:
    return {mechanism: int(record[4]) for mechanism, record in sorted(credentials.items())}


def _describe(
    users: Mapping[str, Mapping[str, list[Any]]], names: Iterable[str] | None
) -> list[Described]:
    asked = list(names) if names is not None else []
    if not asked:
        return [Described(name, _iterations(users[name])) for name in sorted(users)]
    counts = Counter(asked)
    described = []
    for name in counts:  # in the order first named
        if counts[name] > 1:
            described.append(
                Described(
                    name,
                    error=ErrorCode.duplicate_resource,
                    message="Cannot describe SCRAM credentials for the same user twice in a "
                    f"single request: {name}",
                )
            )
        elif name in users:
            described.append(Described(name, _iterations(users[name])))
        else:
            described.append(
                Described(
                    name,
                    error=ErrorCode.resource_not_found,
                    message=f"Attempt to describe a user credential that does not exist: {name}",
                )
            )
    return described
