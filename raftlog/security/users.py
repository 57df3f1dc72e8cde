"""SCRAM users: what AlterUserScramCredentials, DescribeUserScramCredentials, the admin API
and SASL read and change. Credentials live in the controller group, so every node
authenticates alike and they survive restarts and controller failover."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftlog.controller import ControllerUnavailable
from raftlog.errors import ErrorCode
from raftlog.security import scram
from raftlog.security.scram import MECHANISM_NAMES, ScramCredential

if TYPE_CHECKING:
    from raftlog.node import Node


@dataclass(frozen=True, slots=True)
class Upsertion:
    """A credential as Kafka's AlterUserScramCredentials carries it: the client salts."""

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


def upsertion_from_password(name: str, mechanism: str, password: str, iterations: int) -> Upsertion:
    """What `raftlog user create` and the admin API send: salted here, never stored plain."""
    salt = scram.new_salt()
    return Upsertion(
        name,
        scram.MECHANISMS[mechanism],
        iterations,
        salt,
        scram.salted_password(mechanism, password, salt, iterations),
    )


class UserAdmin:
    def __init__(self, node: Node) -> None:
        self._node = node

    def credential(self, name: str, mechanism: str) -> ScramCredential | None:
        record = self._node.controller.state.scram_users.get(name, {}).get(mechanism)
        return ScramCredential.from_record(record) if record is not None else None

    def describe(self) -> dict[str, dict[str, int]]:
        """User -> mechanism -> iteration count."""
        return {
            name: {mechanism: int(record[4]) for mechanism, record in sorted(creds.items())}
            for name, creds in sorted(self._node.controller.state.scram_users.items())
        }

    async def alter(
        self, deletions: list[tuple[str, int]], upsertions: list[Upsertion]
    ) -> list[UserResult]:
        """One result per user named, in the order first named; a user with any refused change
        gets none of its changes, as in Kafka."""
        refused: dict[str, UserResult] = {}
        seen: set[tuple[str, int]] = set()
        order: list[str] = []
        changes = [(d[0], d[1], None) for d in deletions] + [
            (u.name, u.mechanism, u) for u in upsertions
        ]
        for name, mechanism, upsertion in changes:
            if name not in order:
                order.append(name)
            problem = _refusal(name, mechanism, upsertion, (name, mechanism) in seen)
            seen.add((name, mechanism))
            if problem is not None and name not in refused:
                refused[name] = problem
        wanted_deletions = [
            [name, MECHANISM_NAMES[mechanism]]
            for name, mechanism in deletions
            if name not in refused
        ]
        wanted_upsertions = [
            [
                u.name,
                scram.from_salted_password(
                    MECHANISM_NAMES[u.mechanism], u.salt, u.salted_password, u.iterations
                ).to_record(),
            ]
            for u in upsertions
            if u.name not in refused
        ]
        if wanted_deletions or wanted_upsertions:
            try:
                missing = await self._node.controller.call(
                    "store_user_scram_credentials", wanted_deletions, wanted_upsertions
                )
            except ControllerUnavailable as e:
                for name in order:
                    refused.setdefault(name, UserResult(name, ErrorCode.request_timed_out, str(e)))
                missing = {}
            for name, message in missing.items():
                refused[name] = UserResult(name, ErrorCode.resource_not_found, message)
        return [refused.get(name, UserResult(name)) for name in order]


def _refusal(
    name: str, mechanism: int, upsertion: Upsertion | None, duplicate: bool
) -> UserResult | None:
    if not name:
        return UserResult(name, ErrorCode.unacceptable_credential, "Username must not be empty")
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
            upsertion.iterations,
            upsertion.salt,
            upsertion.salted_password,
        )
        if problem is not None:
            return UserResult(name, ErrorCode.unacceptable_credential, problem)
    return None
