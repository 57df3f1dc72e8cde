"""TLS contexts from Kafka's PEM settings, and the principal a client certificate names.

Kafka's `ssl.keystore.type=PEM`: `ssl.keystore.location` is one PEM file holding the node's
private key and certificate chain (optionally encrypted with `ssl.key.password`), and
`ssl.truststore.location` the CA certificates that client (and peer) certificates must chain
to. TLS 1.2 is the floor whatever `ssl.enabled.protocols` says."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from cryptography import x509

from raftlog.security.principal import user

CLIENT_AUTH = ("none", "requested", "required")
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class TlsError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class TlsSettings:
    keystore: str  # PEM: private key and certificate chain
    truststore: str = ""  # PEM: CA certificates for verifying the other side
    key_password: str = ""
    client_auth: str = "none"
    protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")

    def __post_init__(self) -> None:
        if self.client_auth not in CLIENT_AUTH:
            raise TlsError(f"ssl.client.auth must be one of {', '.join(CLIENT_AUTH)}")
        unknown = [p for p in self.protocols if p not in _VERSIONS]
        if unknown or not self.protocols:
            raise TlsError(
                f"ssl.enabled.protocols: {', '.join(unknown) or 'none given'}; "
                f"raftlog serves {', '.join(_VERSIONS)}"
            )
        if self.client_auth != "none" and not self.truststore:
            raise TlsError("ssl.client.auth needs ssl.truststore.location")

    def _versions(self, context: ssl.SSLContext) -> None:
        versions = sorted(_VERSIONS[p] for p in self.protocols)
        context.minimum_version, context.maximum_version = versions[0], versions[-1]

    def _load_keystore(self, context: ssl.SSLContext) -> None:
        try:
            context.load_cert_chain(self.keystore, password=self.key_password or None)
        except (OSError, ssl.SSLError) as e:
            raise TlsError(f"ssl.keystore.location {self.keystore}: {e}") from None

    def _load_truststore(self, context: ssl.SSLContext) -> None:
        try:
            context.load_verify_locations(cafile=self.truststore)
        except (OSError, ssl.SSLError) as e:
            raise TlsError(f"ssl.truststore.location {self.truststore}: {e}") from None

    def server_context(self, client_auth: str | None = None) -> ssl.SSLContext:
        """`client_auth` overrides ssl.client.auth (the peer mesh always requires one)."""
        mode = client_auth or self.client_auth
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._versions(context)
        self._load_keystore(context)
        if mode != "none":
            self._load_truststore(context)
            context.verify_mode = ssl.CERT_REQUIRED if mode == "required" else ssl.CERT_OPTIONAL
        return context

    def client_context(self) -> ssl.SSLContext:
        """A peer's side of mutual TLS: verifies the server against the truststore and shows
        this node's own certificate. Peers are dialled by address, so the certificate must
        name it (subjectAltName)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._versions(context)
        self._load_keystore(context)
        if self.truststore:
            self._load_truststore(context)
        else:
            context.load_default_certs()
        return context


def certificate_principal(der: bytes | None) -> str | None:
    """Kafka's default SSL principal: "User:" and the subject's distinguished name in RFC 2253
    order (most specific first), e.g. "User:CN=alice,OU=eng,O=acme"."""
    if not der:
        return None
    return user(x509.load_der_x509_certificate(der).subject.rfc4514_string())
