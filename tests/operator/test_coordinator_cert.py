"""The operator issues and renews its coordinator's serving certificate from a CA
(operator/staticfleet_operator/coordinator_cert.py), and the server reloads it."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import pytest
from cryptography import x509

from coordinator import CoordinatorConfig, GroupCoordinator, MemoryStore
from coordinator.client import HttpTransport
from coordinator.client.coordinator_tls import client_context
from coordinator.server import AuthConfig, create_app, start_server
from coordinator.server.tls import ReloadingTls
from staticfleet.kafka.pki import CertificateAuthority
from staticfleet_operator.coordinator_cert import ServingCertIssuer, renewal_due

DAY = datetime.timedelta(days=1)


def serving(issuer: ServingCertIssuer) -> x509.Certificate:
    return x509.load_pem_x509_certificate(issuer.files.cert_file.read_bytes())


def test_renewal_is_due_when_a_third_of_the_lifetime_is_left(tmp_path: Path) -> None:
    ca = CertificateAuthority.create(tmp_path, "ca", "coordinator-ca")
    issuer = ServingCertIssuer(tmp_path, tmp_path / "out", ("localhost",))
    now = datetime.datetime.now(datetime.UTC)
    assert issuer.ensure(now) is True
    cert = serving(issuer)
    assert cert.issuer == ca.cert.subject
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    end = cert.not_valid_after_utc
    lifetime = end - cert.not_valid_before_utc
    assert not renewal_due(cert, end - lifetime / 3 - datetime.timedelta(minutes=1))
    assert renewal_due(cert, end - lifetime / 3 + datetime.timedelta(minutes=1))
    assert renewal_due(cert, cert.not_valid_before_utc - DAY)  # a clock that went back

    assert issuer.ensure(now + DAY) is False  # fresh: kept
    assert issuer.ensure(now + 21 * DAY) is True  # 9 of 30 days left: renewed
    assert serving(issuer).serial_number != cert.serial_number
    assert not (issuer.out_dir / ".next").exists()


def test_a_pair_from_another_ca_is_replaced(tmp_path: Path) -> None:
    CertificateAuthority.create(tmp_path / "old", "ca", "old-ca")
    CertificateAuthority.create(tmp_path / "new", "ca", "new-ca")
    out = tmp_path / "out"
    assert ServingCertIssuer(tmp_path / "old", out, ("localhost",)).ensure() is True
    issuer = ServingCertIssuer(tmp_path / "new", out, ("localhost",))
    assert issuer.ensure() is True
    assert serving(issuer).issuer.rfc4514_string() == "CN=new-ca"


def test_an_unreadable_ca_or_no_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read the coordinator CA"):
        ServingCertIssuer(tmp_path, tmp_path / "out", ("localhost",)).ensure()
    with pytest.raises(ValueError, match="at least one DNS name"):
        ServingCertIssuer(tmp_path, tmp_path / "out", ())


async def test_a_renewed_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    ca = CertificateAuthority.create(tmp_path, "ca", "coordinator-ca")
    issuer = ServingCertIssuer(tmp_path, tmp_path / "out", ("localhost",))
    now = datetime.datetime.now(datetime.UTC)
    issuer.ensure(now)
    tls = ReloadingTls(issuer.files)
    coordinator = GroupCoordinator(config=CoordinatorConfig(), store=MemoryStore())
    running = await start_server(
        create_app(coordinator, AuthConfig(insecure=True)), "127.0.0.1", 0, tls=tls
    )
    transport = HttpTransport(
        f"https://localhost:{running.port}", ssl_context=client_context(ca.cert_path)
    )
    try:
        await transport.topic_metadata()  # verified as "localhost" against the CA
        first = serving(issuer).serial_number
        assert await served_serial(running.port, ca.cert_path) == first
        issuer.ensure(now + 21 * DAY)
        assert tls.reload_if_changed() is True
        renewed = await served_serial(running.port, ca.cert_path)
        assert renewed == serving(issuer).serial_number != first
        await transport.topic_metadata()
    finally:
        await transport.close()
        await running.stop()


async def served_serial(port: int, ca_file: Path) -> int:
    _, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_context(ca_file), server_hostname="localhost"
    )
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
        await writer.wait_closed()
    return x509.load_der_x509_certificate(der).serial_number


def test_operator_run_issues_from_a_ca_dir_for_the_advertised_host(tmp_path: Path) -> None:
    from staticfleet.cli import build_parser
    from staticfleet.commands.operator_cmd import options_from_args

    CertificateAuthority.create(tmp_path / "ca", "ca", "coordinator-ca")
    argv = [
        "operator",
        "run",
        "--coordinator-url",
        "https://sf-coordinator.ops.svc:9092",
        "--coordinator-tls-ca-dir",
        str(tmp_path / "ca"),
        "--coordinator-tls-work-dir",
        str(tmp_path / "work"),
    ]
    options = options_from_args(build_parser().parse_args(argv))
    issuer = options.coordinator_tls
    assert isinstance(issuer, ServingCertIssuer)
    assert issuer.dns_names == ("sf-coordinator.ops.svc",)
    assert issuer.files.cert_file.is_file()  # issued at start
    both = [*argv, "--coordinator-tls-cert-file", "x", "--coordinator-tls-key-file", "y"]
    with pytest.raises(ValueError, match="not both"):
        options_from_args(build_parser().parse_args(both))
