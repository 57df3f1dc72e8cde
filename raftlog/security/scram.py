"""SCRAM credentials (RFC 5802 / RFC 7677) as Kafka keeps them: salt, iteration count,
StoredKey and ServerKey. Neither a password nor the salted password is ever kept: the
StoredKey checks a client's proof (and a PLAIN password, salted again), the ServerKey signs
the server's final message."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from typing import Any

# Kafka's ScramMechanism type codes (AlterUserScramCredentials, DescribeUserScramCredentials).
MECHANISMS: dict[str, int] = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {code: name for name, code in MECHANISMS.items()}
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's bounds on the iteration count (ScramMechanism.minIterations / maxIterations).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
SALT_BYTES = 32  # what raftlog salts with
# What `raftlog user create` and the admin API make, and what PLAIN salts for an unknown user.
DEFAULT_MECHANISM = "SCRAM-SHA-512"

# Bounds Kafka leaves open. A salt goes back to anyone who sends a client-first message,
# before any proof: unbounded, 18 bytes fetched 14 MB. Clients salt with 26 (Kafka's
# AdminClient), 32 (raftlog) or 64 bytes (librdkafka, so confluent-kafka): 128 leaves room.
MAX_SALT_BYTES = 128
# PLAIN reads a user name of at most 255 bytes (sasl.MAX_PLAIN_FIELD): longer could never
# log in with it; and a name travels in every controller command and listing.
MAX_NAME_BYTES = 255
# What one AlterUserScramCredentials may change (deletions + upsertions; Kafka bounds a
# controller operation at 10,000 records). An upsertion costs two HMACs and a hash (about
# 8 us) and 220 bytes in the controller command, so 1,000 make 8 ms of key derivation and a
# command of about 220 KB; past it, a request is refused whole (POLICY_VIOLATION).
MAX_CHANGES_PER_REQUEST = 1000
# SCRAM users per cluster, checked where the controller applies a change. Each costs every
# node up to about 1 KB (a name, two credentials); at 10,000 the controller's dump, which it
# pickles on the event loop when it compacts, is about 4 MB (25 ms), and a full listing
# 10,000 entries. Kafka sets none; deployments have a user per service, tens to hundreds.
MAX_USERS = 10_000


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_record(self) -> list[Any]:
        """What the controller replicates (msgpack/pickle friendly)."""
        return [self.mechanism, self.salt, self.stored_key, self.server_key, self.iterations]

    @classmethod
    def from_record(cls, record: list[Any]) -> ScramCredential:
        mechanism, salt, stored_key, server_key, iterations = record
        return cls(mechanism, bytes(salt), bytes(stored_key), bytes(server_key), int(iterations))

    def matches_password(self, password: str) -> bool:
        """A PLAIN password checked against the SCRAM credential: salted and hashed as a SCRAM
        client would, then compared with the StoredKey in constant time."""
        salted = salted_password(self.mechanism, password, self.salt, self.iterations)
        stored, _ = _keys(self.mechanism, salted)
        return hmac.compare_digest(stored, self.stored_key)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: what a client sends in AlterUserScramCredentials."""
    return hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode(), salt, iterations)


def _keys(mechanism: str, salted: bytes) -> tuple[bytes, bytes]:
    digest = _HASHES[mechanism]
    client_key = hmac.digest(salted, b"Client Key", digest)
    stored_key = hashlib.new(digest, client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", digest)
    return stored_key, server_key


def from_salted_password(
    mechanism: str, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    stored_key, server_key = _keys(mechanism, salted)
    return ScramCredential(mechanism, salt, stored_key, server_key, iterations)


def new_salt() -> bytes:
    return os.urandom(SALT_BYTES)


def check_user_name(name: str) -> str | None:
    """Why a user name is refused (UNACCEPTABLE_CREDENTIAL, Kafka's code for an empty one)."""
    if not name:
        return "Username must not be empty"
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_BYTES:
        return f"Username of {size} bytes is longer than the {MAX_NAME_BYTES} allowed"
    return None


def check_iterations(mechanism: str, iterations: int) -> str | None:
    """Kafka's bounds (UNACCEPTABLE_CREDENTIAL), checked before any hashing."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        return (
            f"Iterations {iterations} must be between {MIN_ITERATIONS} and {MAX_ITERATIONS} "
            f"for {mechanism}"
        )
    return None


def check_upsertion(mechanism: str, iterations: int, salt: bytes, salted: bytes) -> str | None:
    """Why Kafka would refuse this credential (UNACCEPTABLE_CREDENTIAL), or None."""
    problem = check_iterations(mechanism, iterations)
    if problem is not None:
        return problem
    if not salt:
        return "Credential salt must not be empty"
    if len(salt) > MAX_SALT_BYTES:
        return f"Credential salt of {len(salt)} bytes is longer than the {MAX_SALT_BYTES} allowed"
    if len(salted) != hashlib.new(_HASHES[mechanism]).digest_size:
        return f"Salted password of {len(salted)} bytes is not a {mechanism} digest"
    return None


# Kafka's ScramMessages.ClientFirstMessage: gs2 header "n" (no channel binding), an optional
# authorization id, the user as a saslname, the nonce, then extensions.
_CLIENT_FIRST = re.compile(
    r"n,(?:a=([^,]*))?,n=([^,]+),r=([\x21-\x2b\x2d-\x7e]+)((?:,[a-zA-Z][a-zA-Z0-9]*=[^,]*)*)"
)
SERVER_NONCE_BYTES = 24


@dataclass(frozen=True, slots=True)
class ClientFirst:
    user: str
    nonce: str
    extensions: str

    @classmethod
    def parse(cls, message: str) -> ClientFirst | None:
        """None for a malformed message, a channel-binding one, an authorization id other
        than the user, or a delegation token (tokenauth), none of which raftlog serves."""
        match = _CLIENT_FIRST.fullmatch(message)
        if match is None:
            return None
        authzid, saslname, nonce, extensions = match.groups()
        if "=" in saslname.replace("=2C", "").replace("=3D", ""):
            return None  # RFC 5802 §5.1: "=" only in the two escapes
        name = saslname.replace("=2C", ",").replace("=3D", "=")
        if (authzid and authzid != name) or "tokenauth=" in (extensions or ""):
            return None
        return cls(name, nonce, extensions or "")


def server_first(first: ClientFirst, credential: ScramCredential) -> str:
    """The server-first-message: the client's nonce with ours appended, salt, iterations."""
    ours = base64.b64encode(os.urandom(SERVER_NONCE_BYTES)).decode()
    salt = base64.b64encode(credential.salt).decode()
    return f"r={first.nonce}{ours},s={salt},i={credential.iterations}"


def server_final(
    credential: ScramCredential, client_first: str, server_first: str, client_final: str
) -> str | None:
    """Checks the client-final-message (RFC 5802 §3) and returns the server-final-message,
    or None when the proof is wrong or the message malformed. The nonce check is Kafka's
    (ScramSaslServer): the client's nonce must end with the server-first nonce, so
    librdkafka 2.0's client-final, which repeats its own nonce in front, logs in here as it
    does on Kafka. The proof is over the messages as sent, so it binds the whole exchange."""
    head, sep, proof_text = client_final.rpartition(",p=")
    attributes = dict(part.split("=", 1) for part in head.split(",") if "=" in part)
    server_nonce = dict(p.split("=", 1) for p in server_first.split(",") if "=" in p).get("r")
    bare = client_first.split(",", 2)[2] if client_first.count(",") >= 2 else ""
    gs2_header = client_first[: len(client_first) - len(bare)]
    if (
        not sep
        or not bare
        or not server_nonce
        or not head.startswith("c=")
        or attributes.get("c") != base64.b64encode(gs2_header.encode()).decode()
        or not attributes.get("r", "").endswith(server_nonce)
    ):
        return None
    try:
        proof = base64.b64decode(proof_text, validate=True)
    except ValueError:
        return None
    digest = _HASHES[credential.mechanism]
    auth_message = f"{bare},{server_first},{head}".encode()
    signature = hmac.digest(credential.stored_key, auth_message, digest)
    if len(proof) != len(signature):
        return None
    client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
    if not hmac.compare_digest(hashlib.new(digest, client_key).digest(), credential.stored_key):
        return None
    verifier = hmac.digest(credential.server_key, auth_message, digest)
    return "v=" + base64.b64encode(verifier).decode()
