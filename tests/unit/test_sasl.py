"""The server side of SASL against a real SCRAM client (scramp's) and PLAIN tokens."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac

import pytest
import scramp

from raftlog.security import scram
from raftlog.security.sasl import FAILED, SaslSession, Stage
from raftlog.security.scram import ScramCredential
from raftlog.security.users import upsertion_from_password


def _credential(mechanism: str, password: str, iterations: int = 4096) -> ScramCredential:
    u = upsertion_from_password("alice", mechanism, password, iterations)
    return scram.from_salted_password(mechanism, u.salt, u.salted_password, iterations)


USERS = {
    ("alice", "SCRAM-SHA-512"): _credential("SCRAM-SHA-512", "s3cret"),
    ("alice", "SCRAM-SHA-256"): _credential("SCRAM-SHA-256", "s3cret"),
    ("a,b=c", "SCRAM-SHA-256"): _credential("SCRAM-SHA-256", "odd"),
}
ALL = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def session(mechanisms: tuple[str, ...] = ALL) -> SaslSession:
    return SaslSession(mechanisms, lambda name, mechanism: USERS.get((name, mechanism)))


def scram_login(mechanism: str, name: str, password: str) -> tuple[SaslSession, str | None]:
    """Runs a whole SCRAM exchange; the client checks the server's signature too."""
    s = session()
    assert s.handshake(mechanism)
    client = scramp.ScramClient([mechanism], name, password)
    first = asyncio.run(s.authenticate(client.get_client_first().encode()))
    if first.error:
        return s, first.error
    client.set_server_first(first.challenge.decode())
    final = asyncio.run(s.authenticate(client.get_client_final().encode()))
    if final.error:
        return s, final.error
    client.set_server_final(final.challenge.decode())  # raises if the server signed wrong
    return s, None


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_logs_in_with_the_right_password_only(mechanism: str) -> None:
    s, error = scram_login(mechanism, "alice", "s3cret")
    assert error is None and s.stage is Stage.DONE and s.principal == "User:alice"
    s, error = scram_login(mechanism, "alice", "wrong")
    assert error == FAILED and s.stage is Stage.FAILED and s.principal is None
    s, error = scram_login(mechanism, "mallory", "s3cret")
    assert error == FAILED and s.stage is Stage.FAILED and s.attempted_user == "mallory"


def test_scram_usernames_are_unescaped_as_rfc_5802_says() -> None:
    s, error = scram_login("SCRAM-SHA-256", "a,b=c", "odd")
    assert error is None and s.principal == "User:a,b=c"


def test_a_credential_for_one_mechanism_does_not_log_in_with_another() -> None:
    s, error = scram_login("SCRAM-SHA-512", "a,b=c", "odd")
    assert error == FAILED


@pytest.mark.parametrize(
    ("token", "ok"),
    [
        (b"\0alice\0s3cret", True),
        (b"alice\0alice\0s3cret", True),
        (b"bob\0alice\0s3cret", False),  # another authorization id
        (b"\0alice\0wrong", False),
        (b"\0nobody\0s3cret", False),
        (b"\0alice", False),
        (b"\0alice\0s3cret\0extra", False),
        (b"\0" + b"a" * 300 + b"\0x", False),
        (b"\0\xff\xfe\0x", False),
    ],
)
def test_plain_checks_the_password_against_the_scram_credential(token: bytes, ok: bool) -> None:
    s = session()
    assert s.handshake("PLAIN")
    step = asyncio.run(s.authenticate(token))
    assert (step.error is None) is ok
    assert s.stage is (Stage.DONE if ok else Stage.FAILED)
    assert s.principal == ("User:alice" if ok else None)


def test_a_mechanism_that_is_not_enabled_is_refused() -> None:
    s = session(("SCRAM-SHA-512",))
    assert not s.handshake("PLAIN")
    assert not s.handshake("GSSAPI")
    assert s.stage is Stage.HANDSHAKE


def test_garbage_scram_messages_fail_cleanly() -> None:
    for garbage in (b"", b"\xff\xfe", b"n,,", b"x,,n=alice,r=abc", b"n,,n=alice"):
        s = session()
        s.handshake("SCRAM-SHA-256")
        assert asyncio.run(s.authenticate(garbage)).error == FAILED


def test_rfc_7677s_example_exchange() -> None:
    """RFC 7677's example (user "user", password "pencil"): the keys we derive from its salt
    and our final check give the RFC's server signature; one changed proof byte fails."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = scram.salted_password("SCRAM-SHA-256", "pencil", salt, 4096)
    credential = scram.from_salted_password("SCRAM-SHA-256", salt, salted, 4096)
    client_first = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = (
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    client_final = (
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    expected = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert scram.server_final(credential, client_first, server_first, client_final) == expected
    tampered = client_final.replace("p=dHzb", "p=eHzb")
    assert scram.server_final(credential, client_first, server_first, tampered) is None
    assert credential.matches_password("pencil") and not credential.matches_password("pencil ")


def test_upsertions_are_checked_as_kafka_checks_them() -> None:
    salted = bytes(64)
    assert scram.check_upsertion("SCRAM-SHA-512", 4096, b"salt", salted) is None
    assert "between" in (scram.check_upsertion("SCRAM-SHA-512", 4095, b"s", salted) or "")
    assert "between" in (scram.check_upsertion("SCRAM-SHA-512", 16385, b"s", salted) or "")
    assert scram.check_upsertion("SCRAM-SHA-512", 4096, b"", salted) is not None
    assert scram.check_upsertion("SCRAM-SHA-256", 4096, b"s", salted) is not None  # 64 != 32
    assert scram.check_upsertion("SCRAM-SHA-512", 4096, bytes(128), salted) is None
    assert "longer" in (scram.check_upsertion("SCRAM-SHA-512", 4096, bytes(129), salted) or "")


def _client_final(
    mechanism: str, password: str, client_first: str, server_first: str, nonce: str
) -> str:
    """A client-final-message for `nonce`, signed as a client signs it (RFC 5802 §3)."""
    digest = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    fields = dict(p.split("=", 1) for p in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        digest, password.encode(), base64.b64decode(fields["s"]), int(fields["i"])
    )
    client_key = hmac.digest(salted, b"Client Key", digest)
    stored_key = hashlib.new(digest, client_key).digest()
    head = f"c=biws,r={nonce}"
    auth = f"{client_first.split(',', 2)[2]},{server_first},{head}".encode()
    signature = hmac.digest(stored_key, auth, digest)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{head},p={base64.b64encode(proof).decode()}"


def test_a_client_final_nonce_that_ends_with_the_servers_is_taken_as_kafka_takes_it() -> None:
    """librdkafka 2.0 (Debian's kcat) repeats its own nonce in front of the server's in its
    final message; Kafka checks only that the nonce ends with the server's, and so do we.
    A nonce that does not end with it, or a proof over other messages, still fails."""
    for nonce_of, ok in (
        (lambda c, s: c + s, True),
        (lambda c, s: s, True),
        (lambda c, s: s + "x", False),
        (lambda c, s: c, False),
    ):
        s = session()
        s.handshake("SCRAM-SHA-512")
        client_first = "n,,n=alice,r=abcdef"
        first = asyncio.run(s.authenticate(client_first.encode()))
        server_first = first.challenge.decode()
        full = dict(p.split("=", 1) for p in server_first.split(","))["r"]
        final = _client_final(
            "SCRAM-SHA-512", "s3cret", client_first, server_first, nonce_of("abcdef", full)
        )
        step = asyncio.run(s.authenticate(final.encode()))
        assert (step.error is None) is ok, nonce_of
    s = session()
    s.handshake("SCRAM-SHA-512")
    server_first = asyncio.run(s.authenticate(b"n,,n=alice,r=abcdef")).challenge.decode()
    full = dict(p.split("=", 1) for p in server_first.split(","))["r"]
    other_first = "n,,n=alice,r=zzzzzz"  # signed over a first message never sent
    final = _client_final("SCRAM-SHA-512", "s3cret", other_first, server_first, full)
    assert asyncio.run(s.authenticate(final.encode())).error == FAILED


def test_a_short_salt_logs_in_as_on_kafka() -> None:
    """Kafka's AdminClient may set any non-empty salt; scramp's server wanted 12 bytes."""
    salt = b"short"
    salted = scram.salted_password("SCRAM-SHA-256", "pw", salt, 4096)
    credential = scram.from_salted_password("SCRAM-SHA-256", salt, salted, 4096)
    s = SaslSession(("SCRAM-SHA-256",), lambda _n, _m: credential)
    s.handshake("SCRAM-SHA-256")
    client_first = "n,,n=bob,r=nonce123"
    server_first = asyncio.run(s.authenticate(client_first.encode())).challenge.decode()
    nonce = dict(p.split("=", 1) for p in server_first.split(","))["r"]
    final = _client_final("SCRAM-SHA-256", "pw", client_first, server_first, nonce)
    assert asyncio.run(s.authenticate(final.encode())).error is None
    assert s.principal == "User:bob"


@pytest.mark.parametrize(
    "client_first",
    [
        "p=tls-unique,,n=alice,r=abc",  # channel binding
        "y,,n=alice,r=abc",
        "n,a=bob,n=alice,r=abc",  # another authorization id
        "n,,n=alice,r=abc,tokenauth=true",  # a delegation token
        "n,,n=al=ice,r=abc",  # a bare "=" in a saslname
        "n,,n=alice,r=a,bc",
    ],
)
def test_client_first_messages_raftlog_does_not_serve_fail(client_first: str) -> None:
    s = session()
    s.handshake("SCRAM-SHA-256")
    assert asyncio.run(s.authenticate(client_first.encode())).error == FAILED


def test_plain_salts_an_unknown_user_as_it_salts_a_known_one(monkeypatch) -> None:
    """A wrong password and a user that does not exist cost the same PBKDF2 (the default
    mechanism at the default iteration count) and get the same answer: the time an answer
    takes does not tell which users exist."""
    salted: list[tuple[str, int]] = []
    salt = scram.salted_password

    def recording(mechanism: str, password: str, salt_: bytes, iterations: int) -> bytes:
        salted.append((mechanism, iterations))
        return salt(mechanism, password, salt_, iterations)

    monkeypatch.setattr(scram, "salted_password", recording)
    answers = []
    for token in (b"\0alice\0wrong", b"\0mallory\0wrong"):
        s = session()
        s.handshake("PLAIN")
        answers.append(asyncio.run(s.authenticate(token)).error)
    assert answers == [FAILED, FAILED]
    assert salted == [("SCRAM-SHA-512", scram.MIN_ITERATIONS)] * 2
