"""The server side of a connection's SASL exchange (SaslHandshake, then SaslAuthenticate
frames): PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802/7677, raftlog/security/scram.py).
Both check against the controller's SCRAM credentials, so no password is stored anywhere;
PLAIN salts the password it receives with the user's stored salt, as Redpanda does.

SCRAM is written here rather than taken from scramp, which the unit tests use as an
independent client: Kafka takes what scramp's server refuses, salts shorter than 12 bytes
(Kafka's AdminClient may send any) and librdkafka 2.0's client-final nonce."""

from __future__ import annotations

import asyncio
import enum
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from raftlog.security.principal import user
from raftlog.security.scram import (
    DEFAULT_MECHANISM,
    MECHANISMS,
    MIN_ITERATIONS,
    ClientFirst,
    ScramCredential,
    from_salted_password,
    new_salt,
    salted_password,
    server_final,
    server_first,
)

PLAIN = "PLAIN"
SUPPORTED = (PLAIN, *MECHANISMS)
# What a failed authentication says, for every cause, so a client cannot tell an unknown user
# from a wrong password (Kafka's message for SCRAM; PLAIN says the same).
FAILED = "Authentication failed: Invalid username or password"
MAX_PLAIN_FIELD = 255  # Kafka's PlainSaslServer bound on each of authzid, user, password
# PLAIN checks the default mechanism first: most users have it, and the stand-in below for
# a user that does not exist costs what it costs (a user made with other settings, more or
# less: Kafka's own PLAIN does not salt at all).
_PLAIN_ORDER = (DEFAULT_MECHANISM, *(m for m in MECHANISMS if m != DEFAULT_MECHANISM))
_NOBODY_SALT = new_salt()
_NOBODY = from_salted_password(
    DEFAULT_MECHANISM,
    _NOBODY_SALT,
    salted_password(DEFAULT_MECHANISM, secrets.token_urlsafe(32), _NOBODY_SALT, MIN_ITERATIONS),
    MIN_ITERATIONS,
)  # a password nobody knows

# (user, mechanism) -> the user's credential for that mechanism, or None.
CredentialLookup = Callable[[str, str], ScramCredential | None]


class Stage(enum.Enum):
    HANDSHAKE = "handshake"  # waiting for SaslHandshake
    AUTHENTICATE = "authenticate"  # a mechanism is chosen; SaslAuthenticate frames follow
    CHECKING = "checking"  # a PLAIN password is being salted, off the event loop
    DONE = "done"  # authenticated
    FAILED = "failed"  # the connection is closed after its answer


@dataclass(frozen=True, slots=True)
class Step:
    """One SaslAuthenticate answer: bytes for the client, or why authentication failed."""

    challenge: bytes = b""
    error: str | None = None


class SaslSession:
    """One connection's exchange. SCRAM steps cost a few HMACs; PLAIN costs one PBKDF2 of the
    stored iteration count (up to 16384 rounds, milliseconds), so it runs in a thread
    (hashlib lets go of the GIL) rather than on the event loop every connection shares."""

    def __init__(self, mechanisms: tuple[str, ...], credentials: CredentialLookup) -> None:
        self.mechanisms = mechanisms
        self._credentials = credentials
        self.stage = Stage.HANDSHAKE
        self.mechanism: str | None = None
        self.raw = False  # SaslHandshake v0: tokens in bare frames, not in SaslAuthenticate
        self.principal: str | None = None  # "User:<name>" once authenticated
        self.attempted_user: str | None = None  # for the failure log
        self._scram_user: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first = ""
        self._server_first = ""

    def handshake(self, mechanism: str, raw: bool = False) -> bool:
        """Chooses the mechanism; False (UNSUPPORTED_SASL_MECHANISM) if it is not enabled."""
        if mechanism not in self.mechanisms:
            return False
        self.mechanism = mechanism
        self.raw = raw
        self.stage = Stage.AUTHENTICATE
        return True

    async def authenticate(self, token: bytes) -> Step:
        if self.mechanism == PLAIN:
            self.stage = Stage.CHECKING
            return self._finish(await asyncio.to_thread(self._plain, token))
        try:
            message = token.decode()
        except UnicodeDecodeError:
            return self._finish(None)
        if self._credential is None:
            return self._scram_first(message)
        final = server_final(self._credential, self._client_first, self._server_first, message)
        return self._finish(self._scram_user if final else None, (final or "").encode())

    def _scram_first(self, message: str) -> Step:
        first = ClientFirst.parse(message)
        if first is None:
            return self._finish(None)
        self.attempted_user = first.user
        assert self.mechanism is not None
        credential = self._credentials(first.user, self.mechanism)
        if credential is None:
            return self._finish(None)  # Kafka fails an unknown user here too
        self._scram_user, self._credential = first.user, credential
        self._client_first = message
        self._server_first = server_first(first, credential)
        return Step(self._server_first.encode())

    def _finish(self, name: str | None, final: bytes = b"") -> Step:
        if name is None or self.stage is Stage.FAILED:  # (failed meanwhile: out of turn)
            self.stage = Stage.FAILED
            return Step(error=FAILED)
        self.stage = Stage.DONE
        self.principal = user(name)
        return Step(final)

    def _plain(self, token: bytes) -> str | None:
        parts = token.split(b"\0")
        if len(parts) != 3 or any(len(p) > MAX_PLAIN_FIELD for p in parts):
            return None
        try:
            authzid, name, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            return None
        self.attempted_user = name
        if not name or (authzid and authzid != name):
            return None  # Kafka: an authorization id other than the user is not supported
        found = (self._credentials(name, mechanism) for mechanism in _PLAIN_ORDER)
        credential = next((c for c in found if c is not None), None)
        # An unknown user is salted too, against a credential of the default's cost: the
        # answer takes as long as a wrong password's, so it does not tell who exists.
        matches = (credential or _NOBODY).matches_password(password)
        return name if matches and credential is not None else None
