"""kafka_security.py without a broker: the SASL loop against scripted answers, the TLS
context from inline PEM, the meaning of `ssl` failures, the OAuth token cache."""

from __future__ import annotations

import datetime
import os
import ssl
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from coordinator.client.kafka_errors import (
    KafkaAuthenticationFailed,
    KafkaSaslMechanismUnsupported,
    KafkaTLSHostnameMismatch,
    KafkaTLSVerificationFailed,
)
from coordinator.client.kafka_security import (
    OAuthTokenProvider,
    sasl_authenticate,
    tls_access_error,
    tls_context,
)
from coordinator.client.kafka_settings import KafkaClientSettings, KafkaSettingsError
from coordinator.client.transport import TransportError
from staticfleet.kafka.pki import CertificateAuthority, ip_sans, name

PLAIN = KafkaClientSettings.from_properties(
    {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
    }
)


class Script:
    """Answers requests in order, keeping what was sent."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.sent: list[Any] = []

    async def __call__(self, request: Any) -> Any:
        self.sent.append(request)
        return self.answers.pop(0)


def version_of(request_class: Any, wanted: int, minimum: int) -> int:
    return wanted


def handshake(error: int = 0, mechanisms: tuple[str, ...] = ("PLAIN",)) -> Any:
    return SaslHandshakeResponse[1](error_code=error, mechanisms=list(mechanisms))


def authenticate(error: int = 0, message: str | None = None, auth: bytes = b"") -> Any:
    return SaslAuthenticateResponse[2](
        error_code=error, error_message=message, auth_bytes=auth, session_lifetime_ms=5000
    )


async def test_plain_exchange_returns_the_session_lifetime() -> None:
    script = Script(handshake(), authenticate())
    lifetime = await sasl_authenticate(script, version_of, PLAIN, "b:1")
    assert lifetime == 5000
    assert script.sent[0].mechanism == "PLAIN"
    assert script.sent[1].auth_bytes == b"alice\0alice\0alice-secret"


async def test_a_mechanism_the_listener_does_not_enable_lists_what_it_does() -> None:
    script = Script(handshake(33, ("SCRAM-SHA-512", "OAUTHBEARER")))
    with pytest.raises(KafkaSaslMechanismUnsupported) as error:
        await sasl_authenticate(script, version_of, PLAIN, "b:1")
    assert "PLAIN" in str(error.value)
    assert "SCRAM-SHA-512, OAUTHBEARER" in str(error.value)


async def test_refused_credentials_name_the_user_never_the_password() -> None:
    script = Script(handshake(), authenticate(58, "Authentication failed: invalid credentials"))
    with pytest.raises(KafkaAuthenticationFailed) as error:
        await sasl_authenticate(script, version_of, PLAIN, "b:1")
    assert "user alice" in str(error.value) and "invalid credentials" in str(error.value)
    assert "alice-secret" not in str(error.value)


async def test_a_scram_server_with_a_wrong_signature_is_refused() -> None:
    scram = KafkaClientSettings.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "bob",
            "sasl.password": "pw",
        }
    )
    script = Script(handshake(mechanisms=("SCRAM-SHA-256",)))

    async def exchange(request: Any) -> Any:
        if not script.answers:
            sent = bytes(request.auth_bytes)
            if sent.startswith(b"n,,"):
                nonce = sent.split(b"r=")[1]
                return authenticate(auth=b"r=" + nonce + b"xyz,s=c2FsdA==,i=4096")
            return authenticate(auth=b"v=d3Jvbmc=")
        return await script(request)

    with pytest.raises(KafkaAuthenticationFailed, match="did not verify"):
        await sasl_authenticate(exchange, version_of, scram, "b:1")


# ---------------------------------------------------------------------- TLS


@pytest.fixture
def pki(tmp_path: Path) -> tuple[CertificateAuthority, Path, Path]:
    ca = CertificateAuthority.create(tmp_path, "ca", "unit-ca")
    pair = ca.issue(tmp_path, "client", name("client"), server=False, sans=ip_sans("127.0.0.1"))
    return ca, pair.cert, pair.key


def test_inline_pem_leaves_nothing_on_disk(pki: tuple[CertificateAuthority, Path, Path]) -> None:
    ca, cert, key = pki
    settings = KafkaClientSettings.from_properties(
        {
            "security.protocol": "SSL",
            "ssl.ca.pem": ca.cert_path.read_text(),
            "ssl.certificate.pem": cert.read_text(),
            "ssl.key.pem": key.read_text(),
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    before = set(os.listdir(tempfile.gettempdir()))
    context = tls_context(settings)
    assert set(os.listdir(tempfile.gettempdir())) - before == set()
    assert context is not None and context.check_hostname is False
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.cert_store_stats()["x509_ca"] == 1


def test_unreadable_tls_files_are_settings_errors(
    pki: tuple[CertificateAuthority, Path, Path], tmp_path: Path
) -> None:
    ca, cert, key = pki
    base = {"security.protocol": "SSL", "ssl.ca.location": str(ca.cert_path)}
    with pytest.raises(KafkaSettingsError, match=r"ssl\.ca\.location"):
        tls_context(
            KafkaClientSettings.from_properties({**base, "ssl.ca.location": str(tmp_path / "x")})
        )
    with pytest.raises(KafkaSettingsError, match="no such file"):
        tls_context(
            KafkaClientSettings.from_properties(
                {
                    **base,
                    "ssl.certificate.location": str(tmp_path / "absent.crt"),
                    "ssl.key.location": str(key),
                }
            )
        )
    with pytest.raises(KafkaSettingsError, match="does the key belong"):
        tls_context(
            KafkaClientSettings.from_properties(
                {**base, "ssl.certificate.location": str(cert), "ssl.key.location": str(cert)}
            )
        )


def verification_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, f"certificate verify failed: {message}")
    error.verify_code = code
    error.verify_message = message
    return error


def test_what_ssl_failures_mean(pki: tuple[CertificateAuthority, Path, Path]) -> None:
    hostname = tls_access_error(verification_error(62, "Hostname mismatch"), "b:1")
    assert isinstance(hostname, KafkaTLSHostnameMismatch)
    ip = tls_access_error(verification_error(64, "IP address mismatch"), "b:1")
    assert isinstance(ip, KafkaTLSHostnameMismatch)
    expired = tls_access_error(verification_error(10, "certificate has expired"), "b:1")
    assert isinstance(expired, KafkaTLSVerificationFailed) and "is expired" in str(expired)
    selfsigned = tls_access_error(verification_error(18, "self-signed certificate"), "b:1")
    assert isinstance(selfsigned, KafkaTLSVerificationFailed)
    assert "self-signed" in str(selfsigned)

    alert = ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] alert")
    alert.reason = "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    required = tls_access_error(alert, "b:1")
    assert isinstance(required, KafkaTLSVerificationFailed)
    assert "refused our client certificate" in str(required) and "none was sent" in str(required)

    ca, _, _ = pki
    now = datetime.datetime.now(datetime.UTC)
    old = ca.issue(
        pki[1].parent,
        "old",
        name("old"),
        server=False,
        valid_from=now - datetime.timedelta(days=3),
        valid_until=now - datetime.timedelta(days=2),
    )
    unknown = ssl.SSLError(1, "[SSL: SSLV3_ALERT_CERTIFICATE_UNKNOWN] alert")
    unknown.reason = "SSLV3_ALERT_CERTIFICATE_UNKNOWN"
    settings = KafkaClientSettings.from_properties(
        {
            "security.protocol": "SSL",
            "ssl.certificate.location": str(old.cert),
            "ssl.key.location": str(old.key),
        }
    )
    refused = tls_access_error(unknown, "b:1", settings)
    assert isinstance(refused, KafkaTLSVerificationFailed) and "it has expired" in str(refused)

    not_tls = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    not_tls.reason = "WRONG_VERSION_NUMBER"
    assert tls_access_error(not_tls, "b:1") is None


# ---------------------------------------------------------------------- OAuth


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def token_endpoint() -> AsyncIterator[tuple[str, list[str]]]:
    """A token endpoint on loopback: client `c` with secret `s` gets tokens of 100 s."""
    seen: list[str] = []

    async def token(request: web.Request) -> web.Response:
        form = await request.post()
        seen.append(str(form.get("scope")))
        if request.headers.get("Authorization") != "Basic Yzpz":  # c:s
            return web.json_response(
                {"error": "invalid_client", "error_description": "bad secret"}, status=401
            )
        return web.json_response({"access_token": f"token-{len(seen)}", "expires_in": 100})

    app = web.Application()
    app.router.add_post("/token", token)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/token", seen
    finally:
        await runner.cleanup()


def oauth(url: str, secret: str = "s") -> KafkaClientSettings:
    return KafkaClientSettings.from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": url,
            "sasl.oauthbearer.client.id": "c",
            "sasl.oauthbearer.client.secret": secret,
            "sasl.oauthbearer.scope": "kafka",
        }
    )


async def test_tokens_are_cached_until_80_percent_of_their_lifetime(
    token_endpoint: tuple[str, list[str]],
) -> None:
    url, seen = token_endpoint
    clock = Clock()
    provider = OAuthTokenProvider(oauth(url), clock=clock)
    assert await provider.token() == "token-1"
    clock.now += 79
    assert await provider.token() == "token-1"
    clock.now += 2
    assert await provider.token() == "token-2"
    assert seen == ["kafka", "kafka"]


async def test_a_refused_client_names_the_endpoint(token_endpoint: tuple[str, list[str]]) -> None:
    url, _ = token_endpoint
    provider = OAuthTokenProvider(oauth(url, secret="wrong"))
    with pytest.raises(KafkaAuthenticationFailed) as error:
        await provider.token()
    assert url in str(error.value) and "invalid_client" in str(error.value)


async def test_an_unreachable_endpoint_is_retriable() -> None:
    provider = OAuthTokenProvider(oauth("http://127.0.0.1:1/token"))
    with pytest.raises(TransportError, match=r"127\.0\.0\.1:1"):
        await provider.token()
