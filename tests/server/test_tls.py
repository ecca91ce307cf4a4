"""TLS for the coordinator's HTTP: members verify it, it rotates without losing a heartbeat.

A real server on loopback (SQLite store) serving certificates made by the project's own
`CertificateAuthority` (staticfleet/kafka/pki.py), and real `GroupMember`s over HTTPS.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509

from coordinator import CoordinatorConfig, GroupCoordinator, SqliteStore
from coordinator.client import GroupMember, HttpTransport, MemberConfig, TransportError
from coordinator.client.coordinator_tls import (
    CoordinatorCertificateExpired,
    CoordinatorCertificateRefused,
    CoordinatorCertificateUntrusted,
    CoordinatorHostnameMismatch,
    client_context,
)
from coordinator.client.member import MemberAccessDenied
from coordinator.messages import HeartbeatRequest, HeartbeatResponse
from coordinator.server import AuthConfig, RunningServer, create_app, start_server
from coordinator.server.tls import ReloadingTls, TlsConfigError, TlsFiles, plain_http_problem
from staticfleet.kafka.pki import CertificateAuthority, KeyPair, ip_sans, name
from tests.serve import staticfleet

GROUP = "tls-group"
TOPIC = "events"
RELOAD_S = 0.05


def serving_pair(ca: CertificateAuthority, directory: Path, stem: str, **kwargs: object) -> KeyPair:
    sans = [*ip_sans("127.0.0.1"), x509.DNSName("coordinator.example")]
    return ca.issue(directory, stem, name("127.0.0.1"), server=True, sans=sans, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority.create(tmp_path / "pki", "ca", "staticfleet-test-ca")


@pytest.fixture
async def served(
    tmp_path: Path, ca: CertificateAuthority
) -> AsyncIterator[tuple[RunningServer, KeyPair]]:
    pair = serving_pair(ca, tmp_path / "pki", "tls")
    config = CoordinatorConfig(
        group_min_session_timeout_ms=1000, group_initial_rebalance_delay_ms=0
    )
    coordinator = GroupCoordinator(config=config, store=SqliteStore(tmp_path / "c.db"))
    tls = ReloadingTls(TlsFiles(pair.cert, pair.key))
    running = await start_server(
        create_app(coordinator, AuthConfig(insecure=True)),
        "127.0.0.1",
        0,
        tls=tls,
        tls_reload_interval_s=RELOAD_S,
    )
    await coordinator.set_topic_metadata({TOPIC: 6})
    yield running, pair
    await running.stop()


def config(instance: str) -> MemberConfig:
    return MemberConfig(
        group_id=GROUP,
        topics=(TOPIC,),
        group_instance_id=instance,
        session_timeout_ms=3000,
        heartbeat_interval_ms=50,
        retry_backoff_ms=20,
        retry_backoff_max_ms=200,
    )


class CountingTransport(HttpTransport):
    """Counts heartbeats sent and those that failed (no answer, or not NONE)."""

    def __init__(self, url: str, context: ssl.SSLContext) -> None:
        super().__init__(url, ssl_context=context)
        self.heartbeats = 0
        self.failures: list[str] = []
        self.retired: list[aiohttp.ClientSession] = []

    def reconnect(self) -> None:
        """Make the next request open a new connection (a new handshake), leaving requests
        in flight on the old ones to finish."""
        if self._session is not None:
            self.retired.append(self._session)
            self._session = None

    async def close(self) -> None:
        await super().close()
        for session in self.retired:
            await session.close()

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        self.heartbeats += 1
        try:
            response = await super().heartbeat(request)
        except TransportError as error:
            self.failures.append(str(error))
            raise
        if response.error_code.value != 0:
            self.failures.append(response.error_code.name)
        return response


async def peer_serial(port: int, ca_file: Path) -> int:
    """The serial number of the certificate a new handshake gets."""
    _, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_context(ca_file), server_hostname="127.0.0.1"
    )
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
        await writer.wait_closed()
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


async def test_members_over_https_and_the_metrics_route(served, ca):
    running, pair = served
    assert running.url.startswith("https://127.0.0.1:")
    context = client_context(ca.cert_path)
    transport = HttpTransport(running.url, ssl_context=context)
    member = GroupMember(transport, config("s-0"))
    await member.start()
    try:
        assert len(await member.wait_for_assignment(timeout=10)) == 6
    finally:
        await member.close()
        await transport.close()
    async with (
        aiohttp.ClientSession() as http,
        http.get(running.url + "/metrics", ssl=context) as response,
    ):
        assert response.status == 200
        text = await response.text()
    # The expiry alert's series: the serving certificate's notAfter.
    expires = x509.load_pem_x509_certificate(pair.cert.read_bytes()).not_valid_after_utc
    (line,) = [
        line
        for line in text.splitlines()
        if line.startswith("staticfleet_coordinator_tls_certificate_expiry_timestamp_seconds ")
    ]
    assert float(line.split()[1]) == expires.timestamp()


async def test_a_member_refuses_a_coordinator_it_does_not_trust(served, tmp_path):
    running, _ = served
    stranger = CertificateAuthority.create(tmp_path / "other", "ca", "someone-else")
    transport = HttpTransport(running.url, ssl_context=client_context(stranger.cert_path))
    member = GroupMember(transport, config("s-0"))
    await member.start()
    try:
        with pytest.raises(MemberAccessDenied) as refused:
            await member.wait_for_assignment(timeout=10)
        access = refused.value.access
        assert isinstance(access, CoordinatorCertificateUntrusted)
        assert "untrusted" in str(access) and running.url in str(access)
        assert access.reason == "CoordinatorCertificateUntrusted"
    finally:
        await member.close()
        await transport.close()


async def test_a_hostname_mismatch_is_named(served, ca):
    running, _ = served
    # The certificate names 127.0.0.1 and coordinator.example, not localhost.
    url = running.url.replace("127.0.0.1", "localhost")
    transport = HttpTransport(url, ssl_context=client_context(ca.cert_path))
    try:
        with pytest.raises(CoordinatorHostnameMismatch, match="hostname mismatch"):
            await transport.topic_metadata()
    finally:
        await transport.close()


async def test_an_expired_certificate_is_named(tmp_path, ca):
    now = datetime.datetime.now(datetime.UTC)
    expired = serving_pair(
        ca,
        tmp_path / "pki",
        "expired",
        valid_from=now - datetime.timedelta(days=2),
        valid_until=now - datetime.timedelta(days=1),
    )
    coordinator = GroupCoordinator(config=CoordinatorConfig(), store=SqliteStore(tmp_path / "e.db"))
    running = await start_server(
        create_app(coordinator, AuthConfig(insecure=True)),
        tls=ReloadingTls(TlsFiles(expired.cert, expired.key)),
    )
    transport = HttpTransport(running.url, ssl_context=client_context(ca.cert_path))
    try:
        with pytest.raises(CoordinatorCertificateExpired, match="expired") as refused:
            await transport.topic_metadata()
        assert isinstance(refused.value, CoordinatorCertificateRefused)
    finally:
        await transport.close()
        await running.stop()


async def test_rotation_with_members_connected_loses_no_heartbeat(served, ca, tmp_path):
    running, pair = served
    context = client_context(ca.cert_path)
    transports = [CountingTransport(running.url, context) for _ in range(3)]
    members = [GroupMember(t, config(f"s-{i}")) for i, t in enumerate(transports)]
    for member in members:
        await member.start()
    try:
        for member in members:
            await member.wait_for_assignment(timeout=15)
        # Settled: all three stable in one generation (members that joined apart rebalance
        # once more; their REBALANCE_IN_PROGRESS heartbeats are not the rotation's).
        deadline = asyncio.get_running_loop().time() + 15
        while not (
            len({m.generation_id for m in members}) == 1
            and all(m.state == "stable" for m in members)
            and sum(len(m.assignment) for m in members) == 6
        ):
            assert asyncio.get_running_loop().time() < deadline, "the members did not settle"
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        generation = members[0].generation_id
        for transport in transports:
            transport.heartbeats, transport.failures = 0, []
        before = await peer_serial(running.port, ca.cert_path)

        # As the kubelet updates a mounted Secret: the new pair replaces the old at once.
        renewed_until = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=3)
        fresh = serving_pair(ca, tmp_path / "pki", "rotated", valid_until=renewed_until)
        for source, target in ((fresh.cert, pair.cert), (fresh.key, pair.key)):
            staged = target.with_suffix(".new")
            staged.write_bytes(source.read_bytes())
            os.replace(staged, target)
        tls = running.tls
        assert tls is not None
        deadline = asyncio.get_running_loop().time() + 5
        while tls.reloads == 0:
            assert asyncio.get_running_loop().time() < deadline, "the new pair was not loaded"
            await asyncio.sleep(RELOAD_S)
        after = await peer_serial(running.port, ca.cert_path)
        assert after != before  # a new handshake gets the new certificate
        rotated = x509.load_pem_x509_certificate(fresh.cert.read_bytes())
        assert tls.not_after == rotated.not_valid_after_utc.timestamp()  # what /metrics shows

        # New connections of the members themselves verify against the same CA.
        for transport in transports:
            transport.reconnect()
        await asyncio.sleep(0.5)
        heartbeats = sum(t.heartbeats for t in transports)
        assert heartbeats > 20
        assert [f for t in transports for f in t.failures] == []
        assert all(m.error is None and m.generation_id == generation for m in members)
    finally:
        for member in members:
            await member.close()
        for transport in transports:
            await transport.close()


def test_a_pair_that_does_not_load_is_refused_with_the_file_named(tmp_path, ca):
    pair = serving_pair(ca, tmp_path / "pki", "tls")
    other = serving_pair(ca, tmp_path / "pki", "other")
    with pytest.raises(TlsConfigError, match="key must match"):
        ReloadingTls(TlsFiles(pair.cert, other.key))
    with pytest.raises(TlsConfigError, match="does not exist"):
        ReloadingTls(TlsFiles(tmp_path / "missing.crt", pair.key))
    # A bad pair after a good one: the good one keeps serving.
    tls = ReloadingTls(TlsFiles(pair.cert, pair.key))
    pair.key.write_bytes(other.key.read_bytes())
    assert tls.reload_if_changed() is False
    assert tls.reloads == 0


def test_plain_http_needs_asking_off_loopback():
    assert plain_http_problem("127.0.0.1", tls=False, insecure_http=False) is None
    assert plain_http_problem("::1", tls=False, insecure_http=False) is None
    assert plain_http_problem("localhost", tls=False, insecure_http=False) is None
    problem = plain_http_problem("0.0.0.0", tls=False, insecure_http=False)
    assert problem is not None and "--insecure-http" in problem
    assert plain_http_problem("0.0.0.0", tls=True, insecure_http=False) is None
    assert plain_http_problem("0.0.0.0", tls=False, insecure_http=True) is None


def test_serve_refuses_plain_http_on_all_addresses_without_the_flag(tmp_path):
    done = subprocess.run(
        staticfleet(
            "coordinator",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--insecure",
            "--store",
            "memory://",
        ),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "refusing to serve plain HTTP" in done.stderr
