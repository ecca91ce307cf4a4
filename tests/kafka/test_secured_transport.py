"""Our `KafkaTransport` on the secured broker's listeners: each refusal is its own typed error.

docs/kafka.md, "Secured clusters". The broker (tests/conftest.py) has a SASL_SSL listener
(SCRAM-SHA-512/256, PLAIN, OAUTHBEARER), an SSL listener requiring client certificates, the
StandardAuthorizer, and a certificate naming IP:127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.client.kafka_errors import (
    KafkaAccessError,
    KafkaAuthenticationFailed,
    KafkaAuthorizationFailed,
    KafkaSaslMechanismUnsupported,
    KafkaTLSHostnameMismatch,
    KafkaTLSVerificationFailed,
)
from coordinator.client.kafka_settings import KafkaClientSettings, KafkaSettingsFile
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.client.transport import TransportError
from coordinator.errors import ErrorCode
from staticfleet.kafka.broker import Acl, KafkaBroker
from staticfleet.kafka.pki import CertificateAuthority, ip_sans, name
from tests.conftest import SecuredUser, SslClient

pytestmark = pytest.mark.kafka


def settings_of(props: dict[str, str], **extra: str) -> KafkaClientSettings:
    return KafkaClientSettings.from_properties({**props, **extra})


async def describe(
    bootstrap: str, settings: KafkaClientSettings, group: str, wait_s: float = 30.0
) -> ErrorCode:
    """DescribeGroups once the group's coordinator is loaded (a fresh broker creates its
    offsets topic first); access errors are not waited out."""
    transport = KafkaTransport(f"kafka://{bootstrap}", settings=settings, request_timeout_ms=10_000)
    try:
        if wait_s:
            await transport.wait_for_coordinator(group, wait_s)
        return (await transport.describe_group(group)).error_code
    finally:
        await transport.close()


async def refusal(bootstrap: str, settings: KafkaClientSettings) -> KafkaAccessError:
    with pytest.raises(KafkaAccessError) as error:
        await describe(bootstrap, settings, "no-such-group")
    return error.value


def grant_group(broker: KafkaBroker, principal: str, group: str) -> None:
    broker.grant(Acl(principal, "READ", "GROUP", group))


async def test_scram_and_mutual_tls_reach_the_coordinator(
    kafka_broker: KafkaBroker, secured_user: SecuredUser, ssl_client: SslClient
) -> None:
    grant_group(kafka_broker, secured_user.principal, "g-scram")
    grant_group(kafka_broker, ssl_client.principal, "g-mtls")
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        props = kafka_broker.client_properties(
            "SASL_SSL", secured_user.name, mechanism, password=secured_user.password
        )
        assert (
            await describe(kafka_broker.sasl_ssl_bootstrap, settings_of(props), "g-scram")
            is ErrorCode.NONE
        )
    props = kafka_broker.client_properties("SSL", ssl_client.name)
    assert await describe(kafka_broker.ssl_bootstrap, settings_of(props), "g-mtls") is (
        ErrorCode.NONE
    )


async def test_wrong_password_and_unknown_user(
    kafka_broker: KafkaBroker, secured_user: SecuredUser
) -> None:
    wrong = kafka_broker.client_properties(
        "SASL_SSL", secured_user.name, password="not-the-password"
    )
    error = await refusal(kafka_broker.sasl_ssl_bootstrap, settings_of(wrong))
    assert isinstance(error, KafkaAuthenticationFailed), error
    assert secured_user.name in str(error) and "not-the-password" not in str(error)
    unknown = kafka_broker.client_properties("SASL_SSL", "nobody-here", password="x")
    error = await refusal(kafka_broker.sasl_ssl_bootstrap, settings_of(unknown))
    assert isinstance(error, KafkaAuthenticationFailed), error


async def test_untrusted_ca_and_hostname_mismatch(
    kafka_broker: KafkaBroker, secured_user: SecuredUser
) -> None:
    props = kafka_broker.client_properties(
        "SASL_SSL", secured_user.name, password=secured_user.password
    )
    untrusted = settings_of(props, **{"ssl.ca.location": str(kafka_broker.pki.untrusted_ca_path)})
    error = await refusal(kafka_broker.sasl_ssl_bootstrap, untrusted)
    assert isinstance(error, KafkaTLSVerificationFailed), error
    assert "untrusted" in str(error)
    localhost = kafka_broker.sasl_ssl_bootstrap.replace("127.0.0.1", "localhost")
    error = await refusal(localhost, settings_of(props))
    assert isinstance(error, KafkaTLSHostnameMismatch), error
    # With the check off, the same connection is accepted.
    grant_group(kafka_broker, secured_user.principal, "g-localhost")
    unchecked = settings_of(props, **{"ssl.endpoint.identification.algorithm": "none"})
    assert await describe(localhost, unchecked, "g-localhost") is ErrorCode.NONE


async def test_client_certificates_the_broker_refuses(
    kafka_broker: KafkaBroker, ssl_client: SslClient
) -> None:
    props = kafka_broker.client_properties("SSL", ssl_client.name)
    expired = kafka_broker.pki.expired_client_certificate(ssl_client.name)
    untrusted = kafka_broker.pki.untrusted_client_certificate(ssl_client.name)
    for pair, why in ((expired, "expired"), (untrusted, "a CA the broker does not trust")):
        settings = settings_of(
            props,
            **{"ssl.certificate.location": str(pair.cert), "ssl.key.location": str(pair.key)},
        )
        error = await refusal(kafka_broker.ssl_bootstrap, settings)
        assert isinstance(error, KafkaTLSVerificationFailed), error
        assert "refused our client certificate" in str(error) and why in str(error), error
    none = {k: v for k, v in props.items() if not k.startswith(("ssl.certificate", "ssl.key"))}
    error = await refusal(kafka_broker.ssl_bootstrap, settings_of(none))
    assert isinstance(error, KafkaTLSVerificationFailed), error
    assert "refused our client certificate" in str(error) or "required" in str(error), error


async def test_a_listener_without_the_mechanism(
    kafka_broker: KafkaBroker, ssl_client: SslClient
) -> None:
    # SASL_SSL settings (with a client certificate, which the SSL listener needs for TLS)
    # against the SSL listener, which enables no SASL mechanism at all.
    props = kafka_broker.client_properties("SSL", ssl_client.name)
    settings = settings_of(
        props,
        **{
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "u",
            "sasl.password": "p",
        },
    )
    error = await refusal(kafka_broker.ssl_bootstrap, settings)
    assert isinstance(error, KafkaSaslMechanismUnsupported), error


async def test_wrong_protocol_says_so(kafka_broker: KafkaBroker) -> None:
    with pytest.raises(TransportError, match="is the listener SSL"):
        await describe(kafka_broker.sasl_ssl_bootstrap, KafkaClientSettings(), "g", wait_s=0)
    tls_to_plaintext = settings_of(
        {"security.protocol": "SSL", "ssl.ca.location": str(kafka_broker.pki.ca_path)}
    )
    with pytest.raises(TransportError, match="is the listener SSL"):
        await describe(kafka_broker.bootstrap, tls_to_plaintext, "g", wait_s=0)


async def test_a_missing_group_acl_is_an_authorization_error(
    kafka_broker: KafkaBroker, secured_user: SecuredUser
) -> None:
    props = kafka_broker.client_properties(
        "SASL_SSL", secured_user.name, password=secured_user.password
    )
    error = await refusal(kafka_broker.sasl_ssl_bootstrap, settings_of(props))
    assert isinstance(error, KafkaAuthorizationFailed), error
    assert (error.resource_type, error.resource_name) == ("Group", "no-such-group")
    assert error.operation == "FindCoordinator"


async def test_oauth_client_refused_by_the_token_endpoint(kafka_broker: KafkaBroker) -> None:
    props = kafka_broker.client_properties("SASL_SSL", mechanism="OAUTHBEARER")
    wrong = settings_of(props, **{"sasl.oauthbearer.client.secret": "wrong-secret"})
    error = await refusal(kafka_broker.sasl_ssl_bootstrap, wrong)
    assert isinstance(error, KafkaAuthenticationFailed), error
    assert kafka_broker.oidc.token_endpoint_url in str(error)
    assert "wrong-secret" not in str(error)


# ---------------------------------------------------------------------- expired server cert


@pytest.fixture
def expired_tls_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A TLS server on loopback whose certificate (from a CA of its own) expired yesterday;
    yields (port, the CA's path)."""
    ca = CertificateAuthority.create(tmp_path, "ca", "expired-server-test-ca")
    now = datetime.datetime.now(datetime.UTC)
    pair = ca.issue(
        tmp_path,
        "server",
        name("127.0.0.1"),
        server=True,
        sans=ip_sans("127.0.0.1"),
        valid_from=now - datetime.timedelta(days=2),
        valid_until=now - datetime.timedelta(days=1),
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pair.cert, pair.key)
    loop = asyncio.new_event_loop()
    ready: list[int] = []

    async def serve() -> asyncio.Server:
        async def handle(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
        ready.append(server.sockets[0].getsockname()[1])
        return server

    server = loop.run_until_complete(serve())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield ready[0], ca.cert_path
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


async def test_an_expired_server_certificate(
    expired_tls_server: tuple[int, Path],
) -> None:
    port, ca = expired_tls_server
    settings = settings_of({"security.protocol": "SSL", "ssl.ca.location": str(ca)})
    error = await refusal(f"127.0.0.1:{port}", settings)
    assert isinstance(error, KafkaTLSVerificationFailed), error
    assert "expired" in str(error)


async def test_a_rotated_password_is_used_by_the_next_connection(
    kafka_broker: KafkaBroker, secured_user: SecuredUser, tmp_path: Path
) -> None:
    grant_group(kafka_broker, secured_user.principal, "g-rotation")

    def write(password: str) -> None:
        props = kafka_broker.client_properties("SASL_SSL", secured_user.name, password=password)
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")

    path = tmp_path / "kafka.properties"
    write(secured_user.password)
    transport = KafkaTransport(
        f"kafka://{kafka_broker.sasl_ssl_bootstrap}", settings=KafkaSettingsFile(path)
    )
    try:
        await transport.wait_for_coordinator("g-rotation")
        kafka_broker.set_password(secured_user.name, "rotated-" + secured_user.password)
        write("rotated-" + secured_user.password)
        await transport.close()  # the next request opens new connections
        described = await transport.describe_group("g-rotation")
        assert described.error_code is ErrorCode.NONE
    finally:
        await transport.close()


async def test_every_mechanism_and_spelling_gets_in(
    kafka_broker: KafkaBroker, ssl_client: SslClient, tmp_path: Path
) -> None:
    """PLAIN, OAUTHBEARER, Java's sasl.jaas.config from a file, inline PEM, an encrypted key."""
    group = "g-every-way"
    for principal in ("User:alice", "User:oauth-client", ssl_client.principal):
        grant_group(kafka_broker, principal, group)
    plain = kafka_broker.client_properties("SASL_SSL", "alice", "PLAIN")
    oauth = kafka_broker.client_properties("SASL_SSL", mechanism="OAUTHBEARER")
    jaas_file = tmp_path / "jaas.properties"
    jaas_file.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" password="alice-secret";\n'
        f"ssl.ca.location={kafka_broker.pki.ca_path}\n",
        encoding="utf-8",
    )
    pair = kafka_broker.pki.client_certificate(ssl_client.name)
    inline = {
        "security.protocol": "SSL",
        "ssl.ca.pem": kafka_broker.pki.ca_path.read_text(),
        "ssl.certificate.pem": pair.cert.read_text(),
        "ssl.key.pem": pair.key.read_text(),
    }
    encrypted = kafka_broker.pki.client_certificate(ssl_client.name, key_password="key-secret")
    with_password = {
        **kafka_broker.client_properties("SSL", ssl_client.name),
        "ssl.certificate.location": str(encrypted.cert),
        "ssl.key.location": str(encrypted.key),
        "ssl.key.password": "key-secret",
    }
    cases = [
        (kafka_broker.sasl_ssl_bootstrap, settings_of(plain)),
        (kafka_broker.sasl_ssl_bootstrap, settings_of(oauth)),
        (kafka_broker.sasl_ssl_bootstrap, KafkaClientSettings.from_file(jaas_file)),
        (kafka_broker.ssl_bootstrap, settings_of(inline)),
        (kafka_broker.ssl_bootstrap, settings_of(with_password)),
    ]
    for bootstrap, settings in cases:
        assert await describe(bootstrap, settings, group) is ErrorCode.NONE, settings.describe()
