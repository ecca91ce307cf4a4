"""Certificates and keys of the e2e control plane (e2e/controlplane.py).

One cluster CA signs the API server's serving certificate and the client certificates of the
admin (CN=e2e-admin, O=system:masters) and of kube-controller-manager
(CN=system:kube-controller-manager). A separate front-proxy CA signs the aggregator's client
certificate (CN=front-proxy-client). The service-account key pair signs and verifies
ServiceAccount tokens. All files are PEM; private keys are unencrypted and mode 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# The first address of --service-cluster-ip-range=10.96.0.0/16: the `kubernetes` Service.
KUBERNETES_SERVICE_IP = "10.96.0.1"
API_SERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
ADMIN_USER = "e2e-admin"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
FRONT_PROXY_CLIENT_USER = "front-proxy-client"

_VALIDITY = datetime.timedelta(days=365)

_Key: TypeAlias = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class ClusterCerts:
    """Every file generate_certs() writes."""

    directory: Path
    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    controller_manager: KeyPair
    front_proxy_ca: KeyPair
    front_proxy_client: KeyPair
    service_account_key: Path  # private (RSA): --service-account-signing-key-file and KCM's
    service_account_pub: Path  # public: --service-account-key-file


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: _Key) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, key: _Key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def _make_ca(directory: Path, stem: str, common_name: str) -> tuple[KeyPair, _Key, x509.Name]:
    key = _new_key()
    name = _name(common_name)
    cert = (
        _builder(name, name, key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    _write_cert(pair.cert, cert)
    _write_key(pair.key, key)
    return pair, key, name


def _make_leaf(
    directory: Path,
    stem: str,
    subject: x509.Name,
    ca_key: _Key,
    ca_name: x509.Name,
    *,
    server: bool,
    sans: list[x509.GeneralName] | None = None,
) -> KeyPair:
    key = _new_key()
    usage = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (
        _builder(subject, ca_name, key)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    _write_cert(pair.cert, cert)
    _write_key(pair.key, key)
    return pair


def generate_certs(directory: Path, node_ip: str) -> ClusterCerts:
    """Write a fresh CA, the API server's and clients' certificates and the SA keys."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key, ca_name = _make_ca(directory, "ca", "e2e-kubernetes-ca")
    ips = {"127.0.0.1", node_ip, KUBERNETES_SERVICE_IP}
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in sorted(ips)]
    sans += [x509.DNSName(name) for name in API_SERVER_DNS_NAMES]
    apiserver = _make_leaf(
        directory, "apiserver", _name("kube-apiserver"), ca_key, ca_name, server=True, sans=sans
    )
    admin = _make_leaf(
        directory, "admin", _name(ADMIN_USER, "system:masters"), ca_key, ca_name, server=False
    )
    controller_manager = _make_leaf(
        directory,
        "controller-manager",
        _name(CONTROLLER_MANAGER_USER),
        ca_key,
        ca_name,
        server=False,
    )
    front_proxy_ca, fp_key, fp_name = _make_ca(directory, "front-proxy-ca", "e2e-front-proxy-ca")
    front_proxy_client = _make_leaf(
        directory,
        "front-proxy-client",
        _name(FRONT_PROXY_CLIENT_USER),
        fp_key,
        fp_name,
        server=False,
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_key_path = directory / "sa.key"
    sa_pub_path = directory / "sa.pub"
    _write_key(sa_key_path, sa_key)
    sa_pub_path.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return ClusterCerts(
        directory=directory,
        ca=ca,
        apiserver=apiserver,
        admin=admin,
        controller_manager=controller_manager,
        front_proxy_ca=front_proxy_ca,
        front_proxy_client=front_proxy_client,
        service_account_key=sa_key_path,
        service_account_pub=sa_pub_path,
    )


def serving_cert(directory: Path, ip: str) -> tuple[KeyPair, KeyPair]:
    """A fresh CA and a server certificate for `ip` signed by it (a webhook served on
    loopback, named by URL in a webhook configuration): (ca, server)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key, ca_name = _make_ca(directory, "serving-ca", "staticfleet-serving-ca")
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip))]
    server = _make_leaf(directory, "serving", _name(ip), ca_key, ca_name, server=True, sans=sans)
    return ca, server
