"""Test certificates: a CA that issues server and client certificates, written as PEM files.

`CertificateAuthority` is the one way the project makes certificates (the e2e control plane's
in e2e/certs.py, the secured Kafka broker's here). `BrokerPki` is the secured test broker's
set (docs/kafka.md, "The secured test broker"): a CA, the broker's server certificate naming
`IP:127.0.0.1` only (so `localhost` is a hostname mismatch), client certificates by name
(CN=name, the principal `User:name`), an expired one, and a second CA nobody trusts.

Keys are EC P-256, PKCS#8, unencrypted and mode 0600 unless a password is given (then
encrypted, for `ssl.key.password`). Files already written are reused, so a broker restarted on
its work directory keeps its CA and clients keep their certificates.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from pathlib import Path
from typing import NamedTuple, TypeAlias

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey: TypeAlias = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

VALIDITY = datetime.timedelta(days=365)
# Clocks of processes on one machine agree, but a certificate made this second must already
# be valid for a peer that rounds down.
_BACKDATE = datetime.timedelta(minutes=5)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class KeyPair(NamedTuple):
    """A PEM certificate and its PEM private key: `pair.cert`, `pair.key`, or `cert, key = pair`."""

    cert: Path
    key: Path


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def write_key(path: Path, key: PrivateKey, password: str | None = None) -> None:
    """PKCS#8 PEM, mode 0600; encrypted (PBES2, AES-256) when a password is given."""
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password is not None
        else serialization.NoEncryption()
    )
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


class CertificateAuthority:
    """A self-signed CA (its certificate and key in `directory`) that issues leaf certificates."""

    def __init__(self, pair: KeyPair, key: PrivateKey, cert: x509.Certificate) -> None:
        self.pair = pair
        self.key = key
        self.cert = cert

    @property
    def cert_path(self) -> Path:
        return self.pair.cert

    @classmethod
    def create(cls, directory: Path, stem: str, common_name: str) -> CertificateAuthority:
        """A new CA written to `directory/stem.crt` and `directory/stem.key`."""
        directory.mkdir(parents=True, exist_ok=True)
        key = new_key()
        subject = name(common_name)
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage(ca=True), critical=True)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
        write_cert(pair.cert, cert)
        write_key(pair.key, key)
        return cls(pair, key, cert)

    @classmethod
    def load_or_create(cls, directory: Path, stem: str, common_name: str) -> CertificateAuthority:
        """The CA a previous run wrote to `directory`, or a new one."""
        pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
        if not (pair.cert.exists() and pair.key.exists()):
            return cls.create(directory, stem, common_name)
        key = serialization.load_pem_private_key(pair.key.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ValueError(f"{pair.key}: not an EC or RSA private key")
        return cls(pair, key, x509.load_pem_x509_certificate(pair.cert.read_bytes()))

    def _authority_key_identifier(self) -> x509.AuthorityKeyIdentifier:
        """The CA certificate's own key id when it has one: a CA made elsewhere (Helm's
        genCA, Go) computes it differently from `from_issuer_public_key`, and OpenSSL finds
        no issuer for a leaf whose key id does not match."""
        try:
            ski = self.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
        except x509.ExtensionNotFound:
            return x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key())
        return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski.value)

    def issue(
        self,
        directory: Path,
        stem: str,
        subject: x509.Name,
        *,
        server: bool,
        sans: list[x509.GeneralName] | None = None,
        valid_from: datetime.datetime | None = None,
        valid_until: datetime.datetime | None = None,
        key_password: str | None = None,
    ) -> KeyPair:
        """A new leaf certificate signed by this CA, written to `directory/stem.{crt,key}`."""
        directory.mkdir(parents=True, exist_ok=True)
        key = new_key()
        now = datetime.datetime.now(datetime.UTC)
        usage = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid_from or now - _BACKDATE)
            .not_valid_after(valid_until or now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(ca=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
            .add_extension(self._authority_key_identifier(), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
        write_cert(pair.cert, cert)
        write_key(pair.key, key, key_password)
        return pair


def ip_sans(*ips: str) -> list[x509.GeneralName]:
    return [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]


def _names_ips(cert_path: Path, ips: tuple[str, ...]) -> bool:
    """Whether the certificate at `cert_path` names every one of `ips` (a kept certificate is
    issued again when a broker is given another address)."""
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    held = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    return set(ips) <= held


def check_name(common_name: str) -> str:
    """A client name usable as a file stem and as a Kafka principal, or a ValueError."""
    if not _NAME.match(common_name):
        raise ValueError(
            f"certificate name {common_name!r}: use 1-64 letters, digits, '.', '_' or '-'"
        )
    return common_name


class BrokerPki:
    """The secured test broker's certificates, under `directory` (docs/kafka.md).

    `ca_path` is what clients trust (`ssl.ca.location`); `server` is the broker's certificate
    and key; `client_certificate(name)` is a client's (principal `User:name` on the SSL
    listener); `expired_client_certificate` and `untrusted_client_certificate` are the refused
    kinds; `untrusted_ca_path` is a CA that did not sign the broker's certificate;
    `expired_server_certificate` is for a test's own TLS server that clients must refuse.
    """

    SERVER_IP = "127.0.0.1"

    def __init__(self, directory: Path, server_ips: tuple[str, ...] = (SERVER_IP,)) -> None:
        """`server_ips`: the addresses the broker's certificate names (its clients' view:
        loopback, and a bridge's address where pods reach it)."""
        self.directory = Path(directory)
        self.ca = CertificateAuthority.load_or_create(self.directory, "ca", "staticfleet-test-ca")
        self.untrusted_ca = CertificateAuthority.load_or_create(
            self.directory, "untrusted-ca", "staticfleet-untrusted-ca"
        )
        server = KeyPair(self.directory / "broker.crt", self.directory / "broker.key")
        if not (
            server.cert.exists() and server.key.exists() and _names_ips(server.cert, server_ips)
        ):
            server = self.ca.issue(
                self.directory,
                "broker",
                name(self.SERVER_IP),
                server=True,
                sans=ip_sans(*server_ips),
            )
        self.server = server

    @property
    def ca_path(self) -> Path:
        return self.ca.cert_path

    @property
    def untrusted_ca_path(self) -> Path:
        return self.untrusted_ca.cert_path

    def client_certificate(self, common_name: str, *, key_password: str | None = None) -> KeyPair:
        """CN=common_name, signed by the trusted CA; the key encrypted when a password is given.

        Made once per name (and password or not); later calls return the same files.
        """
        stem = f"client-{check_name(common_name)}" + ("-encrypted" if key_password else "")
        return self._client(self.ca, stem, common_name, key_password=key_password)

    def expired_client_certificate(self, common_name: str) -> KeyPair:
        """CN=common_name, signed by the trusted CA, valid for a day that ended yesterday."""
        now = datetime.datetime.now(datetime.UTC)
        return self._client(
            self.ca,
            f"expired-{check_name(common_name)}",
            common_name,
            valid_from=now - datetime.timedelta(days=2),
            valid_until=now - datetime.timedelta(days=1),
        )

    def expired_server_certificate(self) -> KeyPair:
        """A server certificate like the broker's (IP:127.0.0.1, the trusted CA) that expired
        yesterday: for a TLS server of a test whose clients must refuse it as expired."""
        pair = KeyPair(self.directory / "expired-server.crt", self.directory / "expired-server.key")
        if pair.cert.exists() and pair.key.exists():
            return pair
        now = datetime.datetime.now(datetime.UTC)
        return self.ca.issue(
            self.directory,
            "expired-server",
            name(self.SERVER_IP),
            server=True,
            sans=ip_sans(self.SERVER_IP),
            valid_from=now - datetime.timedelta(days=2),
            valid_until=now - datetime.timedelta(days=1),
        )

    def untrusted_client_certificate(self, common_name: str) -> KeyPair:
        """CN=common_name, signed by the CA the broker does not trust."""
        return self._client(self.untrusted_ca, f"untrusted-{check_name(common_name)}", common_name)

    def _client(
        self,
        ca: CertificateAuthority,
        stem: str,
        common_name: str,
        *,
        valid_from: datetime.datetime | None = None,
        valid_until: datetime.datetime | None = None,
        key_password: str | None = None,
    ) -> KeyPair:
        directory = self.directory / "clients"
        pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
        if pair.cert.exists() and pair.key.exists():
            return pair
        return ca.issue(
            directory,
            stem,
            name(common_name),
            server=False,
            valid_from=valid_from,
            valid_until=valid_until,
            key_password=key_password,
        )
