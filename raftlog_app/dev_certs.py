"""Certificates for trying TLS on one machine (`raftlog dev-certs DIR`), and what the tests
and the benchmark make for themselves: a CA, a node certificate for 127.0.0.1 and localhost,
client certificates (in tests also expired ones, and ones from a foreign CA). Not for
production: the CA's key is thrown away and nothing is revocable."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Issued:
    cert: Path  # PEM certificate
    key: Path  # PEM private key
    bundle: Path  # key and certificate in one file (Kafka's PEM keystore)


def _name(common_name: str, unit: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "raftlog tests")]
    if unit:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


class Authority:
    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = _name(name)
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.cert = directory / f"{name}.pem"
        self.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        file_name: str,
        common_name: str,
        unit: str | None = None,
        *,
        server: bool = False,
        expired: bool = False,
        password: str | None = None,
    ) -> Issued:
        """`password`: encrypt the private key with it (Kafka's ssl.key.password)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        start = now - datetime.timedelta(days=10 if expired else 1)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, unit))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(
                now - datetime.timedelta(days=1) if expired else now + datetime.timedelta(days=30)
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
                ),
                critical=False,
            )
        cert_pem = builder.sign(self._key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password.encode())
            if password
            else serialization.NoEncryption(),
        )
        issued = Issued(
            self.directory / f"{file_name}.crt",
            self.directory / f"{file_name}.key",
            self.directory / f"{file_name}.pem",
        )
        issued.cert.write_bytes(cert_pem)
        issued.key.write_bytes(key_pem)
        issued.bundle.write_bytes(key_pem + cert_pem)
        return issued


def make_dev_certs(directory: Path) -> dict[str, Path]:
    """ca.pem (the truststore), node.pem (the nodes' keystore: key and certificate for
    127.0.0.1/localhost) and client.crt/client.key (CN=client, for ssl.client.auth)."""
    authority = Authority(directory, "ca")
    node = authority.issue("node", "raftlog-node", server=True)
    client = authority.issue("client", "client")
    return {
        "ca": authority.cert,
        "node": node.bundle,
        "client_cert": client.cert,
        "client_key": client.key,
    }
