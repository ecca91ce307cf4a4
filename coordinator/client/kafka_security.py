"""TLS and SASL for the project's own Kafka connections (docs/kafka.md, "Secured clusters").

- `tls_context`: an `ssl.SSLContext` from the settings (the CA as a file or inline PEM, the
  client certificate and key as files or inline PEM, the hostname check on or off).
- `sasl_authenticate`: SaslHandshake then SaslAuthenticate on a connection that has already
  exchanged ApiVersions, the order of Kafka's `SaslClientAuthenticator` (SEND_APIVERSIONS_REQUEST
  -> SEND_HANDSHAKE_REQUEST -> INITIAL -> INTERMEDIATE -> COMPLETE). The mechanisms are
  kafka-python's sans-I/O classes (`kafka.net.sasl`); only the request loop is ours, because
  kafka-python's own loop lives inside its connection class and cannot drive an asyncio
  stream of ours.
- `OAuthTokenProvider`: the OIDC client-credentials flow for OAUTHBEARER (aiohttp), a token
  cached and fetched again at 80% of its lifetime.
- `tls_access_error`: what an `ssl` failure means, as a typed `KafkaAccessError`.

Every failure that retrying cannot fix is a `KafkaAccessError` (kafka_errors.py); what a retry
can fix (the broker or the token endpoint unreachable) stays a `TransportError`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import logging
import os
import shutil
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final
from urllib.parse import quote_plus

import aiohttp
from kafka.net.sasl import get_sasl_mechanism
from kafka.net.sasl.oauth import AbstractTokenProvider
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from coordinator.client.kafka_errors import (
    ILLEGAL_SASL_STATE,
    NOT_A_SASL_LISTENER,
    SASL_AUTHENTICATION_FAILED,
    UNSUPPORTED_SASL_MECHANISM,
    KafkaAccessError,
    KafkaAuthenticationFailed,
    KafkaSaslMechanismUnsupported,
    KafkaTLSHostnameMismatch,
    KafkaTLSVerificationFailed,
)
from coordinator.client.kafka_settings import (
    KafkaClientSettings,
    KafkaSettingsError,
    SaslMechanism,
)
from coordinator.client.transport import TransportError

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------- TLS


def tls_context(settings: KafkaClientSettings) -> ssl.SSLContext | None:
    """The client context for an SSL/SASL_SSL listener; None for a listener without TLS.

    Built per connection, so a CA or client certificate rotated on disk is used by the next
    connection. Inline PEM (`ssl.ca.pem` goes in as `cadata`; a certificate and key, which
    `ssl` loads only from files, through a private directory removed before this returns)
    never stays on disk.
    """
    if not settings.security_protocol.uses_tls:
        return None
    try:
        context = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH,
            cafile=settings.ssl_ca_location,
            cadata=settings.ssl_ca_pem,
        )
    except (OSError, ssl.SSLError) as error:
        prop = "ssl.ca.location" if settings.ssl_ca_location else "ssl.ca.pem"
        where = f" {settings.ssl_ca_location}" if settings.ssl_ca_location else ""
        raise KafkaSettingsError(f"{prop}{where}: not a readable PEM CA: {error}") from None
    context.check_hostname = settings.ssl_endpoint_identification
    context.verify_mode = ssl.CERT_REQUIRED
    _load_client_certificate(context, settings)
    return context


def _load_client_certificate(context: ssl.SSLContext, settings: KafkaClientSettings) -> None:
    password = settings.ssl_key_password.get_secret_value() if settings.ssl_key_password else None
    if settings.ssl_certificate_location is None and settings.ssl_certificate_pem is None:
        return
    with contextlib.ExitStack() as stack:
        certfile = settings.ssl_certificate_location
        keyfile = settings.ssl_key_location
        if settings.ssl_certificate_pem is not None or settings.ssl_key_pem is not None:
            directory = tempfile.mkdtemp(prefix="staticfleet-tls-")  # mode 0700
            stack.callback(shutil.rmtree, directory, ignore_errors=True)
            if settings.ssl_certificate_pem is not None:
                certfile = _write_private(directory, "cert.pem", settings.ssl_certificate_pem)
            if settings.ssl_key_pem is not None:
                keyfile = _write_private(
                    directory, "key.pem", settings.ssl_key_pem.get_secret_value()
                )
        try:
            context.load_cert_chain(certfile or "", keyfile, password)
        except FileNotFoundError as error:
            raise KafkaSettingsError(
                f"ssl.certificate.location/ssl.key.location: {error.filename}: no such file"
            ) from None
        except (OSError, ssl.SSLError) as error:
            hint = (
                "is ssl.key.password right?"
                if password is not None or "password" in str(error).lower()
                else "are they PEM, and does the key belong to the certificate?"
            )
            raise KafkaSettingsError(
                f"ssl.certificate.location/ssl.key.location (or .pem): cannot load the client "
                f"certificate and key ({hint}): {error}"
            ) from None


def _write_private(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    return path


# OpenSSL's verify codes for a certificate that is fine but names another host.
X509_V_ERR_HOSTNAME_MISMATCH: Final = 62
X509_V_ERR_IP_ADDRESS_MISMATCH: Final = 64
_HOSTNAME_CODES: Final = frozenset({X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH})
# Verify codes -> what a user should read (the rest: OpenSSL's own verify_message).
_VERIFY_MEANINGS: Final = {
    9: "not yet valid",
    10: "expired",
    18: "self-signed and not trusted",
    19: "self-signed/untrusted: its chain ends in a CA that ssl.ca.location does not hold",
    20: "untrusted: issued by a CA that ssl.ca.location does not hold",
    21: "untrusted: issued by a CA that ssl.ca.location does not hold",
}
# TLS alerts the broker sends when it refuses our client certificate -> why.
_CLIENT_CERT_ALERTS: Final = {
    "CERTIFICATE_EXPIRED": "it has expired",
    "UNKNOWN_CA": "it was issued by a CA the broker does not trust",
    "CERTIFICATE_REQUIRED": (
        "the listener requires one and none was sent (set ssl.certificate.location and "
        "ssl.key.location)"
    ),
    "BAD_CERTIFICATE": "the broker calls it bad",
    "CERTIFICATE_UNKNOWN": "the broker could not verify it",
    "CERTIFICATE_REVOKED": "it is revoked",
    "UNSUPPORTED_CERTIFICATE": "its type or usage is not accepted",
    "DECRYPT_ERROR": "its signature did not verify (does the key match the certificate?)",
}
# What OpenSSL says when the other end does not speak TLS at all.
_NOT_TLS: Final = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG")


def tls_access_error(
    error: BaseException, address: str, settings: KafkaClientSettings | None = None
) -> KafkaAccessError | None:
    """The access error an `ssl` failure on a connection to `address` means; None when it is
    not one (then the caller reports it as a `TransportError`). With the `settings`, a refused
    client certificate is looked at to say why (Java brokers send the same alert,
    certificate_unknown, for an expired and an untrusted certificate)."""
    if isinstance(error, ssl.SSLCertVerificationError):
        code = int(getattr(error, "verify_code", 0) or 0)
        message = str(getattr(error, "verify_message", "") or error)
        if code in _HOSTNAME_CODES:
            return KafkaTLSHostnameMismatch(
                f"broker {address}: its certificate does not name the host we connected to "
                f"({message}); connect with a name or IP its certificate holds, or set "
                "ssl.endpoint.identification.algorithm=none"
            )
        meaning = _VERIFY_MEANINGS.get(code, message)
        return KafkaTLSVerificationFailed(
            f"broker {address}: its certificate is {meaning} (OpenSSL: {message})"
            if code in _VERIFY_MEANINGS
            else f"broker {address}: its certificate did not verify: {message}"
        )
    if isinstance(error, ssl.SSLError):
        reason = str(getattr(error, "reason", "") or "")
        for alert, meaning in _CLIENT_CERT_ALERTS.items():
            if "ALERT" in reason and reason.endswith(alert):
                why = client_certificate_problem(settings) if settings is not None else None
                if why is None and alert in ("CERTIFICATE_UNKNOWN", "BAD_CERTIFICATE"):
                    why = (
                        f"{meaning}; it is within its validity period, so it is likely issued "
                        "by a CA the broker does not trust"
                    )
                return KafkaTLSVerificationFailed(
                    f"broker {address} refused our client certificate: {why or meaning} "
                    f"(TLS alert {alert.lower().replace('_', ' ')})"
                )
        if "ALERT_HANDSHAKE_FAILURE" in reason:
            return KafkaTLSVerificationFailed(
                f"broker {address} refused the TLS handshake (alert handshake failure): no "
                "common protocol version or cipher, or it refused our certificate"
            )
    return None


def client_certificate_problem(settings: KafkaClientSettings) -> str | None:
    """What is wrong with our own client certificate that we can see ourselves (expired, not
    yet valid); None when nothing is, or there is none, or it cannot be read."""
    try:
        from cryptography import x509
    except ImportError:  # the `kafka` extra brings it; without it, the alert says enough
        return None
    try:
        if settings.ssl_certificate_pem is not None:
            data = settings.ssl_certificate_pem.encode()
        elif settings.ssl_certificate_location is not None:
            with open(settings.ssl_certificate_location, "rb") as file:
                data = file.read()
        else:
            return None
        certificate = x509.load_pem_x509_certificate(data)
    except (OSError, ValueError):
        return None
    now = datetime.datetime.now(datetime.UTC)
    if certificate.not_valid_after_utc < now:
        return f"it has expired (on {certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC)"
    if certificate.not_valid_before_utc > now:
        return f"it is not valid yet (from {certificate.not_valid_before_utc:%Y-%m-%d %H:%M} UTC)"
    return None


def not_tls_hint(error: BaseException) -> str:
    """The hint for a TLS client that met a listener without TLS ('' when it is not that)."""
    reason = str(getattr(error, "reason", "") or "")
    if isinstance(error, ssl.SSLError) and any(r in reason for r in _NOT_TLS):
        return " (is the listener SSL? this one does not speak TLS: check security.protocol)"
    if isinstance(error, ssl.SSLError | ConnectionResetError | EOFError):
        return " (is the listener SSL? check security.protocol)"
    return ""


# ---------------------------------------------------------------------- SASL

Exchange = Callable[[Any], Awaitable[Any]]
VersionOf = Callable[[Any, int, int], int]

HANDSHAKE_VERSION: Final = 1
# v1+ is Kafka's framed form (v0 sent raw SASL bytes); v1 adds session_lifetime_ms (KIP-368).
AUTHENTICATE_VERSIONS: Final = (1, 2)


async def sasl_authenticate(
    exchange: Exchange,
    version_of: VersionOf,
    settings: KafkaClientSettings,
    address: str,
    token: Callable[[], Awaitable[str]] | None = None,
) -> int:
    """Authenticate a connection that has exchanged ApiVersions; returns the broker's session
    lifetime in ms (0: no limit). `exchange` sends one request and returns its decoded answer;
    `version_of(request_class, wanted, minimum)` picks the version the broker accepts;
    `token` gives the OAUTHBEARER access token."""
    mechanism = settings.sasl_mechanism
    assert mechanism is not None  # KafkaClientSettings checks it for a SASL protocol
    handshake = await exchange(
        SaslHandshakeRequest[version_of(SaslHandshakeRequest, HANDSHAKE_VERSION, 1)](
            mechanism=mechanism.value
        )
    )
    enabled = list(handshake.mechanisms or [])
    if handshake.error_code == UNSUPPORTED_SASL_MECHANISM or (
        handshake.error_code == 0 and mechanism.value not in enabled
    ):
        raise KafkaSaslMechanismUnsupported(
            f"broker {address} does not enable SASL mechanism {mechanism} on this listener "
            f"(it enables: {', '.join(enabled) or 'none'})"
        )
    if handshake.error_code == ILLEGAL_SASL_STATE:
        raise KafkaSaslMechanismUnsupported(f"broker {address}: {NOT_A_SASL_LISTENER}")
    if handshake.error_code != 0:
        raise KafkaAuthenticationFailed(
            f"broker {address}: SaslHandshake answered Kafka error {handshake.error_code}"
        )
    client = await _mechanism(settings, token)
    version = version_of(SaslAuthenticateRequest, *reversed(AUTHENTICATE_VERSIONS))
    who = _who(settings)
    lifetime_ms = 0
    while not client.is_done():
        answer = await exchange(SaslAuthenticateRequest[version](auth_bytes=client.auth_bytes()))
        if answer.error_code != 0:
            detail = answer.error_message or f"Kafka error {answer.error_code}"
            if answer.error_code == SASL_AUTHENTICATION_FAILED:
                raise KafkaAuthenticationFailed(
                    f"broker {address} refused SASL {mechanism} for {who}: {detail}"
                )
            raise KafkaAuthenticationFailed(
                f"broker {address}: SaslAuthenticate for {who} answered {detail}"
            )
        lifetime_ms = int(getattr(answer, "session_lifetime_ms", 0) or 0)
        try:
            client.receive(bytes(answer.auth_bytes or b""))
        except (ValueError, KeyError) as error:
            raise KafkaAuthenticationFailed(
                f"broker {address}: SASL {mechanism} for {who} failed: the broker's answer "
                f"did not verify ({error})"
            ) from None
    if not client.is_authenticated():
        raise KafkaAuthenticationFailed(f"broker {address} did not accept SASL {mechanism} {who}")
    return lifetime_ms


def _who(settings: KafkaClientSettings) -> str:
    if settings.sasl_mechanism is SaslMechanism.OAUTHBEARER:
        return f"OAuth client {settings.oauth_client_id}"
    return f"user {settings.sasl_username}"


class _FixedToken(AbstractTokenProvider):  # type: ignore[misc]
    """kafka-python's OAUTHBEARER mechanism asks a synchronous provider; ours is async, so
    the token is fetched first and handed over in this."""

    def __init__(self, token: str) -> None:
        self._token = token

    def token(self) -> str:
        return self._token


async def _mechanism(
    settings: KafkaClientSettings, token: Callable[[], Awaitable[str]] | None
) -> Any:
    mechanism = settings.sasl_mechanism
    assert mechanism is not None
    config: dict[str, Any] = {
        "security_protocol": settings.security_protocol.value,
        "sasl_mechanism": mechanism.value,
    }
    if mechanism is SaslMechanism.OAUTHBEARER:
        if token is None:
            raise KafkaSettingsError("OAUTHBEARER needs a token provider")
        config["sasl_oauth_token_provider"] = _FixedToken(await token())
    else:
        assert settings.sasl_password is not None
        config["sasl_plain_username"] = settings.sasl_username
        config["sasl_plain_password"] = settings.sasl_password.get_secret_value()
    return get_sasl_mechanism(mechanism.value)(**config)


# ---------------------------------------------------------------------- OAuth (OIDC)

REFRESH_AT: Final = 0.8  # of a token's lifetime, as Kafka's Java login refresh does by default
DEFAULT_TOKEN_LIFETIME_S: Final = 3600.0  # when the endpoint does not say (no expires_in)


class OAuthTokenProvider:
    """An access token from an OIDC token endpoint (client-credentials grant, the client
    authenticated with HTTP Basic, RFC 6749 section 2.3.1), cached until 80% of its lifetime.

    Shared by the connections of one transport: concurrent connects wait for one fetch.
    """

    def __init__(
        self, settings: KafkaClientSettings, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        assert settings.oauth_token_endpoint_url and settings.oauth_client_id
        assert settings.oauth_client_secret is not None
        self._url = settings.oauth_token_endpoint_url
        self._client_id = settings.oauth_client_id
        self._secret = settings.oauth_client_secret
        self._scope = settings.oauth_scope
        self._clock = clock
        self._token: str | None = None
        self._refresh_at = 0.0
        self._lock = asyncio.Lock()
        self.fetches = 0

    async def token(self) -> str:
        async with self._lock:
            if self._token is None or self._clock() >= self._refresh_at:
                started = self._clock()
                self._token, lifetime_s = await self._fetch()
                self._refresh_at = started + REFRESH_AT * lifetime_s
                self.fetches += 1
                logger.info(
                    "OAuth token for client %s from %s (lifetime %.0fs, next fetch in %.0fs)",
                    self._client_id,
                    self._url,
                    lifetime_s,
                    REFRESH_AT * lifetime_s,
                )
            return self._token

    async def _fetch(self) -> tuple[str, float]:
        form = {"grant_type": "client_credentials"}
        if self._scope:
            form["scope"] = self._scope
        # RFC 6749 section 2.3.1: id and secret form-encoded, then HTTP Basic.
        credentials = f"{quote_plus(self._client_id)}:{quote_plus(self._secret.get_secret_value())}"
        headers = {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
                session.post(self._url, data=form, headers=headers) as response,
            ):
                text = await response.text()
                if response.status in (400, 401, 403):
                    raise KafkaAuthenticationFailed(
                        f"OIDC token endpoint {self._url} refused client {self._client_id}: "
                        f"HTTP {response.status} {_oauth_error(text)}"
                    )
                if response.status != 200:
                    raise TransportError(f"OIDC token endpoint {self._url}: HTTP {response.status}")
                body = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            raise TransportError(f"OIDC token endpoint {self._url}: {error}") from error
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise KafkaAuthenticationFailed(
                f"OIDC token endpoint {self._url} gave client {self._client_id} no access_token"
            )
        lifetime = body.get("expires_in")
        lifetime_s = (
            float(lifetime)
            if isinstance(lifetime, int | float) and lifetime > 0
            else DEFAULT_TOKEN_LIFETIME_S
        )
        return token, lifetime_s


def _oauth_error(text: str) -> str:
    """RFC 6749's error and description, if the body is one (never the request's secret)."""
    with contextlib.suppress(ValueError):
        body = json.loads(text)
        if isinstance(body, dict) and "error" in body:
            description = body.get("error_description")
            return f"{body['error']}" + (f": {description}" if description else "")
    return text[:200]


def token_source(settings: KafkaClientSettings) -> OAuthTokenProvider | None:
    """The token provider the settings call for (OAUTHBEARER), else None."""
    if settings.sasl_mechanism is SaslMechanism.OAUTHBEARER:
        return OAuthTokenProvider(settings)
    return None
