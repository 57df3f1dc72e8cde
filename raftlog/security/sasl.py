"""The server side of a connection's SASL exchange (SaslHandshake, then SaslAuthenticate
frames): PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802/7677: scramp reads the client's
first message and writes the server's; the final check is scram.server_final). Both check
against the controller's SCRAM credentials, so no password is stored anywhere; PLAIN salts the
password it receives with the user's stored salt, as Redpanda does."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass

import scramp

from raftlog.security.principal import user
from raftlog.security.scram import MECHANISMS, ScramCredential, server_final

PLAIN = "PLAIN"
SUPPORTED = (PLAIN, *MECHANISMS)
# What a failed authentication says, for every cause, so a client cannot tell an unknown user
# from a wrong password (Kafka's message for SCRAM; PLAIN says the same).
FAILED = "Authentication failed: Invalid username or password"
MAX_PLAIN_FIELD = 255  # Kafka's PlainSaslServer bound on each of authzid, user, password

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
        self._scram: scramp.core.ScramServer | None = None
        self._scram_user: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first = ""

    def handshake(self, mechanism: str, raw: bool = False) -> bool:
        """Chooses the mechanism; False (UNSUPPORTED_SASL_MECHANISM) if it is not enabled."""
        if mechanism not in self.mechanisms:
            return False
        self.mechanism = mechanism
        self.raw = raw
        self.stage = Stage.AUTHENTICATE
        if mechanism != PLAIN:
            self._scram = scramp.ScramMechanism(mechanism).make_server(self._scram_lookup)
        return True

    async def authenticate(self, token: bytes) -> Step:
        if self.mechanism == PLAIN:
            self.stage = Stage.CHECKING
            return self._finish(await asyncio.to_thread(self._plain, token))
        assert self._scram is not None
        try:
            if self._credential is None:
                self._client_first = token.decode()
                self._scram.set_client_first(self._client_first)
                return Step(self._scram.get_server_first().encode())
            final = server_final(
                self._credential, self._client_first, self._scram.server_first, token.decode()
            )
        except (scramp.ScramException, UnicodeDecodeError, ValueError):
            return self._finish(None)
        return self._finish(self._scram_user if final else None, (final or "").encode())

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
        for mechanism in MECHANISMS:
            credential = self._credentials(name, mechanism)
            if credential is not None:
                return name if credential.matches_password(password) else None
        return None

    def _scram_lookup(self, escaped: str) -> tuple[bytes, bytes, bytes, int] | None:
        """scramp's auth_fn: the saslname of the client's first message, unescaped (RFC 5802
        §5.1) as Kafka does, names the user."""
        name = escaped.replace("=2C", ",").replace("=3D", "=")
        self.attempted_user = name
        assert self.mechanism is not None
        credential = self._credentials(name, self.mechanism)
        if credential is None:
            return None
        self._scram_user, self._credential = name, credential
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations
