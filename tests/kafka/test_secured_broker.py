"""The secured test broker (docs/kafka.md, "The secured test broker") with librdkafka clients:
each SASL mechanism and the SSL listener carry records; each kind of refusal is refused; ACLs
and passwords changed at runtime take effect."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from staticfleet.kafka.broker import (
    OIDC_CLIENT_ID,
    Acl,
    KafkaBroker,
    connect_error,
    format_arguments,
    previous_listener_ports,
)
from staticfleet.kafka.pki import BrokerPki
from tests.conftest import SecuredUser, SslClient

pytestmark = pytest.mark.kafka


def round_trip(config: Mapping[str, str], topic: str, group: str) -> list[bytes]:
    """Produces three records to partition 0 and consumes them in `group`; returns the values."""
    sent = [f"{topic}-{n}".encode() for n in range(3)]
    delivery_errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, _: object) -> None:
        if error is not None:
            delivery_errors.append(error)

    producer = Producer({**config, "message.timeout.ms": 15000})
    for value in sent:
        producer.produce(topic, value=value, partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert delivery_errors == []

    consumer = Consumer(
        {**config, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.subscribe([topic])
    received: list[bytes] = []
    try:
        for _ in range(120):
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            payload = message.value()
            assert payload is not None
            received.append(payload)
            if len(received) == len(sent):
                consumer.commit(asynchronous=False)
                break
    finally:
        consumer.close()
    assert received == sent
    return received


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER"])
def test_records_travel_over_sasl_ssl_with_each_mechanism(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], mechanism: str
) -> None:
    topic = kafka_topic(1)
    # The default users: admin (a super user) and the OIDC provider's client, whose principal
    # is its client id and gets the ACLs it needs.
    user = OIDC_CLIENT_ID if mechanism == "OAUTHBEARER" else "admin"
    acls = [
        Acl(user, "ALL", "TOPIC", topic),
        Acl(user, "ALL", "GROUP", f"{topic}-group"),
    ]
    if mechanism == "OAUTHBEARER":
        kafka_broker.grant(*acls)
    before = kafka_broker.oidc.tokens_issued(OIDC_CLIENT_ID)
    config = kafka_broker.client_config("SASL_SSL", user, mechanism)
    round_trip(config, topic, f"{topic}-group")
    if mechanism == "OAUTHBEARER":
        assert config["sasl.oauthbearer.method"] == "oidc"
        # The token came from the provider's endpoint (one per client at least).
        assert kafka_broker.oidc.tokens_issued(OIDC_CLIENT_ID) > before
        kafka_broker.revoke(*acls)


def test_records_travel_over_ssl_with_a_client_certificate(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], ssl_client: SslClient
) -> None:
    topic = kafka_topic(1)
    # The principal is the certificate's CN: ACLs of User:<CN> let it read and write.
    kafka_broker.grant(
        Acl(ssl_client.principal, "ALL", "TOPIC", topic),
        Acl(ssl_client.principal, "ALL", "GROUP", f"{topic}-group"),
    )
    config = kafka_broker.client_config("SSL", ssl_client.name)
    assert config["ssl.certificate.location"] == str(ssl_client.pair.cert)
    round_trip(config, topic, f"{topic}-group")


def test_an_encrypted_client_key_is_read_with_its_password(kafka_broker: KafkaBroker) -> None:
    pair = kafka_broker.pki.client_certificate("admin", key_password="key-secret")
    assert b"ENCRYPTED PRIVATE KEY" in pair.key.read_bytes()
    config = {
        **kafka_broker.client_config("SSL", "admin"),
        "ssl.certificate.location": str(pair.cert),
        "ssl.key.location": str(pair.key),
        "ssl.key.password": "key-secret",
    }
    assert connect_error(config) is None


def test_an_oidc_client_with_a_short_token_lifetime_gets_a_new_token_before_it_expires(
    kafka_broker: KafkaBroker,
) -> None:
    kafka_broker.oidc.add_client("short-lived", "short-secret", lifetime=4)
    config = kafka_broker.client_config(
        "SASL_SSL", "short-lived", "OAUTHBEARER", password="short-secret"
    )
    producer = Producer(config)
    try:
        # librdkafka refreshes at 80% of the lifetime: about every 3.2 s.
        deadline_polls = 0
        while kafka_broker.oidc.tokens_issued("short-lived") < 3 and deadline_polls < 200:
            producer.poll(0.1)
            deadline_polls += 1
        assert kafka_broker.oidc.tokens_issued("short-lived") >= 3
        assert producer.list_topics(timeout=10).brokers
    finally:
        producer.flush(1)


# ---------------------------------------------------------------------- refusals


def test_a_wrong_password_is_refused(kafka_broker: KafkaBroker, secured_user: SecuredUser) -> None:
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        error = connect_error(
            kafka_broker.client_config(
                "SASL_SSL", secured_user.name, mechanism, password="not-" + secured_user.password
            )
        )
        assert error is not None and "Authentication failed" in error, error
    error = connect_error(kafka_broker.client_config("SASL_SSL", "alice", "PLAIN", password="no"))
    assert error is not None and "Authentication failed" in error, error


def test_an_unknown_user_is_refused(kafka_broker: KafkaBroker) -> None:
    error = connect_error(
        kafka_broker.client_config("SASL_SSL", "nobody", "SCRAM-SHA-512", password="x")
    )
    assert error is not None and "Authentication failed" in error, error


def test_an_unknown_oidc_client_gets_no_token(kafka_broker: KafkaBroker) -> None:
    error = connect_error(
        kafka_broker.client_config("SASL_SSL", "stranger", "OAUTHBEARER", password="x")
    )
    assert error is not None


def test_a_token_for_another_audience_is_refused_by_the_broker(kafka_broker: KafkaBroker) -> None:
    kafka_broker.oidc.add_client("elsewhere", "elsewhere-secret", audience="not-kafka")
    error = connect_error(
        kafka_broker.client_config(
            "SASL_SSL", "elsewhere", "OAUTHBEARER", password="elsewhere-secret"
        )
    )
    assert kafka_broker.oidc.tokens_issued("elsewhere") >= 1  # the provider said yes
    # OAUTHBEARER's failure answer (RFC 7628 3.2.2), which librdkafka passes on.
    assert error is not None and "SASL authentication error" in error, error
    assert '"status":"invalid_token"' in error, error


def _with_certificate(
    config: dict[str, str], cert: Path | None, key: Path | None
) -> dict[str, str]:
    config = {k: v for k, v in config.items() if not k.startswith(("ssl.certificate", "ssl.key"))}
    if cert is not None and key is not None:
        config |= {"ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
    return config


def test_the_ssl_listener_refuses_a_client_without_a_certificate(
    kafka_broker: KafkaBroker,
) -> None:
    config = _with_certificate(kafka_broker.client_config("SSL"), None, None)
    error = connect_error(config)
    assert error is not None and "bad certificate" in error, error


def test_the_ssl_listener_refuses_an_expired_client_certificate(
    kafka_broker: KafkaBroker,
) -> None:
    pair = kafka_broker.pki.expired_client_certificate("admin")
    error = connect_error(_with_certificate(kafka_broker.client_config("SSL"), pair.cert, pair.key))
    assert error is not None and "certificate unknown" in error, error


def test_the_ssl_listener_refuses_a_certificate_of_an_untrusted_ca(
    kafka_broker: KafkaBroker,
) -> None:
    pair = kafka_broker.pki.untrusted_client_certificate("admin")
    error = connect_error(_with_certificate(kafka_broker.client_config("SSL"), pair.cert, pair.key))
    assert error is not None and "bad certificate" in error, error


@pytest.mark.parametrize("listener", ["SASL_SSL", "SSL"])
def test_a_client_that_does_not_trust_the_ca_refuses_the_broker(
    kafka_broker: KafkaBroker, listener: Any
) -> None:
    config = kafka_broker.client_config(listener)
    config["ssl.ca.location"] = str(kafka_broker.pki.untrusted_ca_path)
    error = connect_error(config)
    assert error is not None and "certificate verify failed" in error, error


@pytest.mark.parametrize("listener", ["SASL_SSL", "SSL"])
def test_localhost_is_not_a_name_of_the_broker_certificate(
    kafka_broker: KafkaBroker, listener: Any
) -> None:
    config = kafka_broker.client_config(listener)
    config["bootstrap.servers"] = config["bootstrap.servers"].replace("127.0.0.1", "localhost")
    error = connect_error(config)
    assert error is not None and "certificate verify failed" in error, error
    # The same CA without the name check is accepted: the refusal was the name alone.
    assert connect_error({**config, "ssl.endpoint.identification.algorithm": "none"}) is None


def test_the_server_certificate_names_127_0_0_1_only(kafka_broker: KafkaBroker) -> None:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(kafka_broker.pki.server.cert.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert names.get_values_for_type(x509.DNSName) == []


# ---------------------------------------------------------------------- runtime changes


def test_an_acl_granted_then_revoked_changes_what_a_user_may_do(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str], secured_user: SecuredUser
) -> None:
    topic = kafka_topic(1)
    config = kafka_broker.client_config("SASL_SSL", secured_user.name, "SCRAM-SHA-512")

    def produce_error() -> KafkaError | None:
        errors: list[KafkaError | None] = []
        producer = Producer({**config, "message.timeout.ms": 5000})
        producer.produce(topic, value=b"x", partition=0, on_delivery=lambda e, _: errors.append(e))
        producer.flush(15)
        assert len(errors) == 1
        return errors[0]

    denied = produce_error()
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, denied

    write = Acl(secured_user.principal, "WRITE", "TOPIC", topic)
    kafka_broker.grant(write)
    assert produce_error() is None
    assert any(b.name == topic for b in kafka_broker.acls(secured_user.name))

    kafka_broker.revoke(write)
    again = produce_error()
    assert again is not None and again.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, again
    assert kafka_broker.acls(secured_user.name) == []


def test_cluster_and_prefixed_acls_are_granted_listed_and_revoked(
    kafka_broker: KafkaBroker, secured_user: SecuredUser
) -> None:
    cluster = Acl(secured_user.name, "DESCRIBE", "CLUSTER")
    groups = Acl(secured_user.name, "READ", "GROUP", "app-", pattern_type="PREFIXED")
    kafka_broker.grant(cluster, groups)
    assert set(kafka_broker.acls(secured_user.principal)) == {
        cluster.binding(),
        groups.binding(),
    }
    # The CLUSTER resource is confluent-kafka's BROKER, named kafka-cluster.
    assert cluster.binding().name == "kafka-cluster"
    kafka_broker.revoke(cluster, groups)
    assert kafka_broker.acls(secured_user.principal) == []
    with pytest.raises(ValueError, match="unknown name"):
        Acl(secured_user.name, "READ", "QUEUE", "x").binding()


def test_a_password_changed_at_runtime_refuses_the_old_one(
    kafka_broker: KafkaBroker, secured_user: SecuredUser
) -> None:
    old = kafka_broker.client_config("SASL_SSL", secured_user.name, "SCRAM-SHA-512")
    assert connect_error(old) is None
    kafka_broker.set_password(secured_user.name, "rotated-" + secured_user.password)
    error = connect_error(old)
    assert error is not None and "Authentication failed" in error, error
    new = kafka_broker.client_config("SASL_SSL", secured_user.name, "SCRAM-SHA-512")
    assert new["sasl.password"] == "rotated-" + secured_user.password
    assert connect_error(new) is None
    # Each SCRAM mechanism has its own credential: SCRAM-SHA-256 still has the old one.
    assert (
        connect_error(kafka_broker.client_config("SASL_SSL", secured_user.name, "SCRAM-SHA-256"))
        is None
    )


def test_plain_users_are_fixed(kafka_broker: KafkaBroker) -> None:
    with pytest.raises(ValueError, match="PLAIN's are fixed"):
        kafka_broker.add_user("dave", "dave-secret", "PLAIN")


# ---------------------------------------------------------------------- units


def test_format_adds_both_scram_credentials_of_each_user(tmp_path: Path) -> None:
    arguments = format_arguments("id", tmp_path / "p", {"alice": "alice-secret"})
    assert "--add-scram=SCRAM-SHA-512=[name=alice,password=alice-secret]" in arguments
    assert "--add-scram=SCRAM-SHA-256=[name=alice,password=alice-secret]" in arguments


def test_a_password_storagetool_would_misparse_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="password may hold only"):
        KafkaBroker(tmp_path, secured=True, users={"admin": "a,b]"})


def test_an_expired_server_certificate_names_127_0_0_1_and_is_expired(tmp_path: Path) -> None:
    import datetime

    from cryptography import x509

    pair = BrokerPki(tmp_path).expired_server_certificate()
    cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
    assert cert.not_valid_after_utc < datetime.datetime.now(datetime.UTC)


def test_the_pki_is_kept_across_restarts(tmp_path: Path) -> None:
    first = BrokerPki(tmp_path)
    client = first.client_certificate("alice")
    again = BrokerPki(tmp_path)
    assert again.ca_path.read_bytes() == first.ca_path.read_bytes()
    assert again.server == first.server
    assert again.client_certificate("alice") == client
    with pytest.raises(ValueError, match="certificate name"):
        again.client_certificate("a/b")


def test_every_listener_of_a_restarted_secured_broker_keeps_its_port(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path / "broker", secured=True)
    broker.start()
    try:
        broker.wait_ready(120)
        ports = previous_listener_ports(tmp_path / "broker")
        assert set(ports) == {"PLAINTEXT", "CONTROLLER", "SASL_SSL", "SSL", "OIDC"}
        broker.kill()
        broker.start()
        broker.wait_ready(120)
        assert previous_listener_ports(tmp_path / "broker") == ports
        assert connect_error(broker.client_config("SASL_SSL", "alice", "SCRAM-SHA-512")) is None
        assert connect_error(broker.client_config("SASL_SSL", mechanism="OAUTHBEARER")) is None
    finally:
        broker.stop()
    again = KafkaBroker(tmp_path / "broker", secured=True)
    assert (again.port, again.sasl_ssl_port, again.ssl_port, again.oidc_port) == (
        ports["PLAINTEXT"],
        ports["SASL_SSL"],
        ports["SSL"],
        ports["OIDC"],
    )


def test_client_properties_files_are_written_per_listener(kafka_broker: KafkaBroker) -> None:
    files = kafka_broker.write_client_properties()
    assert set(files) >= {"plaintext", "sasl-ssl-scram-sha-512", "sasl-ssl-oauthbearer", "ssl"}
    text = files["sasl-ssl-scram-sha-512"].read_text()
    assert "security.protocol=SASL_SSL\n" in text and "sasl.username=admin\n" in text
    assert files["ssl"].stat().st_mode & 0o077 == 0  # secrets inside: owner only


# ---------------------------------------------------------------------- the OIDC provider


def _token_request(
    url: str, form: dict[str, str], basic: tuple[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    import base64
    import json
    import urllib.error
    import urllib.parse
    import urllib.request

    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode())
    if basic is not None:
        encoded = base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {encoded}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def _verified_claims(jwks_url: str, token: str) -> dict[str, Any]:
    """The token's claims, after checking its RS256 signature against the JWKS."""
    import base64
    import json
    import urllib.request

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    def decode(part: str) -> bytes:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))

    header_b64, claims_b64, signature_b64 = token.split(".")
    header = json.loads(decode(header_b64))
    with urllib.request.urlopen(jwks_url, timeout=5) as response:
        (key,) = [k for k in json.load(response)["keys"] if k["kid"] == header["kid"]]
    public = rsa.RSAPublicNumbers(
        int.from_bytes(decode(key["e"]), "big"), int.from_bytes(decode(key["n"]), "big")
    ).public_key()
    public.verify(
        decode(signature_b64),
        f"{header_b64}.{claims_b64}".encode(),
        padding.PKCS1v15(),
        hashes.SHA256(),
    )
    assert header["alg"] == "RS256"
    claims: dict[str, Any] = json.loads(decode(claims_b64))
    return claims


def test_the_oidc_provider_issues_signed_tokens_to_basic_and_form_clients(
    kafka_broker: KafkaBroker,
) -> None:
    oidc = kafka_broker.oidc
    oidc.add_client("form-client", "form-secret", lifetime=120)
    grant = {"grant_type": "client_credentials", "scope": "kafka groups"}
    by_basic = _token_request(oidc.token_endpoint_url, grant, ("form-client", "form-secret"))
    by_form = _token_request(
        oidc.token_endpoint_url,
        {**grant, "client_id": "form-client", "client_secret": "form-secret"},
    )
    for status, body in (by_basic, by_form):
        assert status == 200, body
        assert body["token_type"] == "Bearer" and body["expires_in"] == 120
        claims = _verified_claims(oidc.jwks_endpoint_url, body["access_token"])
        assert claims["sub"] == "form-client"
        assert claims["aud"] == "kafka" and claims["iss"] == oidc.issuer
        assert claims["scope"] == "kafka groups"
        assert claims["exp"] - claims["iat"] == 120
    assert oidc.tokens_issued("form-client") == 2


def test_the_oidc_provider_refuses_bad_clients_and_grants(kafka_broker: KafkaBroker) -> None:
    url = kafka_broker.oidc.token_endpoint_url
    grant = {"grant_type": "client_credentials"}
    status, body = _token_request(url, grant, (OIDC_CLIENT_ID, "wrong"))
    assert (status, body["error"]) == (401, "invalid_client")
    status, body = _token_request(url, grant)
    assert (status, body["error"]) == (401, "invalid_client")
    status, body = _token_request(url, {"grant_type": "password"}, (OIDC_CLIENT_ID, "x"))
    assert (status, body["error"]) == (400, "unsupported_grant_type")
    with pytest.raises(ValueError, match="at least 1 second"):
        kafka_broker.oidc.add_client("c", "s", lifetime=0)


def test_the_secured_properties_use_kafka_4_4_names(tmp_path: Path) -> None:
    from staticfleet.kafka.broker_security import jaas_quote, secured_properties

    ports = {"PLAINTEXT": 1, "CONTROLLER": 2, "SASL_SSL": 3, "SSL": 4}
    properties = secured_properties(
        ports=ports,
        keystore=tmp_path / "k.pem",
        truststore=tmp_path / "ca.crt",
        oidc_issuer="http://127.0.0.1:5",
        oidc_audience="kafka",
        plain_users={"admin": 'a"b'},
        super_users=("ANONYMOUS", "admin"),
    )
    assert properties["advertised.listeners"] == (
        "PLAINTEXT://127.0.0.1:1,SASL_SSL://127.0.0.1:3,SSL://127.0.0.1:4"
    )
    assert properties["listener.name.ssl.ssl.client.auth"] == "required"
    assert properties["listener.name.sasl_ssl.sasl.enabled.mechanisms"] == (
        "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN,OAUTHBEARER"
    )
    assert 'user_admin="a\\"b"' in properties["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert properties["sasl.oauthbearer.jwks.endpoint.url"] == "http://127.0.0.1:5/jwks"
    assert properties["super.users"] == "User:ANONYMOUS;User:admin"
    assert jaas_quote("a\\b") == '"a\\\\b"'


def test_the_secured_listeners_go_where_the_clients_are(tmp_path: Path) -> None:
    # Pods on a node reach this host on its bridge: the secured listeners are bound and
    # advertised there, the tests' PLAINTEXT view and the controller stay on loopback.
    from staticfleet.kafka.broker_security import secured_properties

    properties = secured_properties(
        ports={"PLAINTEXT": 1, "CONTROLLER": 2, "SASL_SSL": 3, "SSL": 4},
        keystore=tmp_path / "k.pem",
        truststore=tmp_path / "ca.crt",
        oidc_issuer="http://127.0.0.1:5",
        oidc_audience="kafka",
        plain_users={"admin": "a"},
        super_users=("admin",),
        client_host="10.244.0.1",
    )
    assert properties["listeners"] == (
        "PLAINTEXT://127.0.0.1:1,CONTROLLER://127.0.0.1:2,SASL_SSL://10.244.0.1:3,SSL://10.244.0.1:4"
    )
    assert properties["advertised.listeners"] == (
        "PLAINTEXT://127.0.0.1:1,SASL_SSL://10.244.0.1:3,SSL://10.244.0.1:4"
    )
    broker = KafkaBroker(tmp_path / "broker", secured=True, client_host="10.244.0.1")
    assert broker.sasl_ssl_bootstrap == f"10.244.0.1:{broker.sasl_ssl_port}"
    assert broker.bootstrap == f"127.0.0.1:{broker.port}"


def test_the_broker_certificate_names_every_address_it_is_given(tmp_path: Path) -> None:
    from cryptography import x509

    def ips(pki: BrokerPki) -> set[str]:
        cert = x509.load_pem_x509_certificate(pki.server.cert.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        return {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}

    assert ips(BrokerPki(tmp_path)) == {"127.0.0.1"}
    # A kept directory given another address: the certificate is issued again, by the same CA.
    ca = BrokerPki(tmp_path).ca_path.read_bytes()
    widened = BrokerPki(tmp_path, server_ips=("127.0.0.1", "10.244.0.1"))
    assert ips(widened) == {"127.0.0.1", "10.244.0.1"}
    assert widened.ca_path.read_bytes() == ca
    assert BrokerPki(tmp_path, server_ips=("127.0.0.1", "10.244.0.1")).server == widened.server
