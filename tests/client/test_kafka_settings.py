"""The Kafka client settings: properties, sasl.jaas.config, files, conflicts, secrets."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from coordinator.client.kafka_errors import (
    KafkaAccessError,
    KafkaAuthorizationFailed,
    authorization_failed,
)
from coordinator.client.kafka_settings import (
    PLAINTEXT_SETTINGS,
    REDACTED,
    KafkaClientSettings,
    KafkaSettingsError,
    KafkaSettingsFile,
    SaslMechanism,
    SecurityProtocol,
    jaas_quote,
    parse_jaas_config,
)
from coordinator.client.transport import TransportError

PASSWORD = 'pa55 "w=rd\\;'
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def scram_props(**extra: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": PASSWORD,
        "ssl.ca.location": "/etc/kafka/ca.pem",
        **extra,
    }


def oauth_props(**extra: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "sasl.oauthbearer.client.id": "fleet",
        "sasl.oauthbearer.client.secret": "s3cret",
        "sasl.oauthbearer.scope": "kafka",
        **extra,
    }


def test_default_is_plaintext() -> None:
    assert PLAINTEXT_SETTINGS.security_protocol is SecurityProtocol.PLAINTEXT
    assert KafkaClientSettings.from_properties({}) == PLAINTEXT_SETTINGS
    assert PLAINTEXT_SETTINGS.to_properties() == {"security.protocol": "PLAINTEXT"}


def test_every_property_is_read() -> None:
    s = KafkaClientSettings.from_properties(
        scram_props(
            **{
                "ssl.certificate.location": "/c.pem",
                "ssl.key.location": "/k.pem",
                "ssl.key.password": "kp",
                "ssl.endpoint.identification.algorithm": "none",
            }
        )
    )
    assert s.security_protocol is SecurityProtocol.SASL_SSL
    assert s.sasl_mechanism is SaslMechanism.SCRAM_SHA_512
    assert s.sasl_username == "alice"
    assert s.sasl_password is not None and s.sasl_password.get_secret_value() == PASSWORD
    assert s.ssl_ca_location == "/etc/kafka/ca.pem"
    assert (s.ssl_certificate_location, s.ssl_key_location) == ("/c.pem", "/k.pem")
    assert s.ssl_key_password is not None and s.ssl_key_password.get_secret_value() == "kp"
    assert s.ssl_endpoint_identification is False

    pem = KafkaClientSettings.from_properties(
        {
            "security.protocol": "ssl",
            "ssl.ca.pem": "-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----",
            "ssl.certificate.pem": "CERT",
            "ssl.key.pem": "KEY",
        }
    )
    assert pem.security_protocol is SecurityProtocol.SSL
    assert pem.ssl_ca_pem is not None and pem.ssl_ca_pem.startswith("-----BEGIN")
    assert pem.ssl_certificate_pem == "CERT"
    assert pem.ssl_key_pem == SecretStr("KEY")
    assert pem.ssl_endpoint_identification is True

    oauth = KafkaClientSettings.from_properties(oauth_props())
    assert oauth.sasl_mechanism is SaslMechanism.OAUTHBEARER
    assert oauth.oauth_method == "oidc"
    assert oauth.oauth_token_endpoint_url == "https://idp.example/token"
    assert oauth.oauth_client_id == "fleet"
    assert oauth.oauth_client_secret == SecretStr("s3cret")
    assert oauth.oauth_scope == "kafka"


def test_java_empty_endpoint_identification_means_none() -> None:
    s = KafkaClientSettings.from_properties(
        {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": ""}
    )
    assert s.ssl_endpoint_identification is False


@pytest.mark.parametrize(
    ("module", "mechanism"),
    [(SCRAM, "SCRAM-SHA-256"), (SCRAM, "SCRAM-SHA-512"), (PLAIN, "PLAIN"), (PLAIN, None)],
)
def test_jaas_config_gives_the_credentials(module: str, mechanism: str | None) -> None:
    props = {
        "security.protocol": "SASL_SSL",
        "sasl.jaas.config": (
            f"{module} required\n  username={jaas_quote('bob')} password={jaas_quote(PASSWORD)};"
        ),
    }
    if mechanism is not None:
        props["sasl.mechanism"] = mechanism
    s = KafkaClientSettings.from_properties(props)
    assert s.sasl_mechanism == (mechanism or "PLAIN")
    assert s.sasl_username == "bob"
    assert s.sasl_password == SecretStr(PASSWORD)


def test_jaas_escapes_and_bare_words() -> None:
    module, options = parse_jaas_config(
        f'{SCRAM} required username=carol password="a\\"b\\\\c\\n" tokenauth=false ;'
    )
    assert module == SCRAM
    assert options == {"username": "carol", "password": 'a"b\\c\n', "tokenauth": "false"}


def test_jaas_oauth_module() -> None:
    props = oauth_props()
    for key in ("sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret"):
        del props[key]
    props["sasl.jaas.config"] = f'{OAUTH} required clientId="fleet" clientSecret="s3cret";'
    s = KafkaClientSettings.from_properties(props)
    assert s == KafkaClientSettings.from_properties(oauth_props())


@pytest.mark.parametrize(
    ("jaas", "needle"),
    [
        (f'{SCRAM} required username="x" password="y"', "end with ';'"),
        (f'{SCRAM} mandatory username="x";', "control flag"),
        (f'{SCRAM} required username="x;', "unterminated"),
        (f"{SCRAM} required username;", "key=value"),
        (f'{SCRAM} required username="a" username="b";', "twice"),
        ('com.example.Kerberos required a="b";', "not supported"),
    ],
)
def test_bad_jaas_config(jaas: str, needle: str) -> None:
    props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}
    with pytest.raises(KafkaSettingsError, match=r"sasl\.jaas\.config") as error:
        KafkaClientSettings.from_properties({**props, "sasl.jaas.config": jaas})
    assert needle in str(error.value)


def test_scram_jaas_needs_a_scram_mechanism() -> None:
    with pytest.raises(KafkaSettingsError, match="SCRAM-SHA-256 or SCRAM-SHA-512"):
        KafkaClientSettings.from_properties(
            {
                "security.protocol": "SASL_SSL",
                "sasl.jaas.config": f'{SCRAM} required username="a" password="b";',
            }
        )


def test_jaas_and_username_both_given() -> None:
    with pytest.raises(KafkaSettingsError, match="both give the username"):
        KafkaClientSettings.from_properties(
            scram_props(**{"sasl.jaas.config": f'{SCRAM} required username="a" password="b";'})
        )


@pytest.mark.parametrize(
    ("props", "needle"),
    [
        (scram_props(**{"ssl.ca.pem": "PEM"}), "ssl.ca.location and ssl.ca.pem are both set"),
        (
            {
                "security.protocol": "SSL",
                "ssl.certificate.location": "/c",
                "ssl.certificate.pem": "C",
            },
            "ssl.certificate.location and ssl.certificate.pem",
        ),
        ({"security.protocol": "SSL", "ssl.certificate.location": "/c"}, "ssl.key.location"),
        ({"security.protocol": "SSL", "ssl.key.location": "/k"}, "ssl.certificate.location"),
        ({"security.protocol": "SSL", "ssl.key.password": "p"}, "ssl.key.password"),
        ({"security.protocol": "PLAINTEXT", "ssl.ca.location": "/ca"}, "does not use TLS"),
        ({"security.protocol": "SSL", "sasl.username": "a"}, "does not use SASL"),
        ({"security.protocol": "SASL_SSL"}, "sasl.mechanism is missing"),
        (scram_props(**{"sasl.mechanism": "GSSAPI"}), "GSSAPI' is not supported"),
        (scram_props(**{"security.protocol": "TLS"}), "security.protocol 'TLS'"),
        (scram_props(**{"sasl.password": ""}), "sasl.password is missing"),
        (scram_props(**{"sasl.username": ""}), "sasl.username is missing"),
        (scram_props(**{"ssl.endpoint.identification.algorithm": "x"}), "https or none"),
        (scram_props(**{"bootstrap.servers": "b:9092"}), "bootstrap.servers: unknown property"),
        (scram_props(**{"ssl.truststore.location": "/t.jks"}), "use ssl.ca.location"),
        (oauth_props(**{"sasl.oauthbearer.method": "default"}), "use oidc"),
        (oauth_props(**{"sasl.oauthbearer.client.secret": ""}), "client.secret is missing"),
        (oauth_props(**{"sasl.oauthbearer.token.endpoint.url": "idp"}), "not an http(s) URL"),
        (oauth_props(**{"sasl.username": "a"}), "sasl.username is set"),
        (scram_props(**{"sasl.oauthbearer.client.id": "c"}), "not OAUTHBEARER"),
    ],
)
def test_bad_properties(props: dict[str, str], needle: str) -> None:
    with pytest.raises(KafkaSettingsError) as error:
        KafkaClientSettings.from_properties(props)
    assert needle in str(error.value)
    assert PASSWORD not in str(error.value)


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(ValueError, match=r"sasl\.password is missing"):
        KafkaClientSettings(
            security_protocol=SecurityProtocol.SASL_SSL,
            sasl_mechanism=SaslMechanism.PLAIN,
            sasl_username="a",
        )


def test_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# a comment\n"
        "! another comment\n"
        "security.protocol : SASL_SSL\n"
        "sasl.mechanism   SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="dave" \\\n'
        '    password="q\\\\"uote";\n'
        "ssl.ca.location=/ca.pem\n"
        "ssl.endpoint.identification.algorithm=\n",
        encoding="utf-8",
    )
    s = KafkaClientSettings.from_file(path)
    assert s.sasl_mechanism is SaslMechanism.SCRAM_SHA_256
    assert s.sasl_username == "dave"
    assert s.sasl_password == SecretStr('q"uote')
    assert s.ssl_ca_location == "/ca.pem"
    assert s.ssl_endpoint_identification is False


def test_properties_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(KafkaSettingsError, match="cannot read"):
        KafkaClientSettings.from_file(tmp_path / "absent.properties")
    path = tmp_path / "bad.properties"
    path.write_text("security.protocol=SASL_SSL\n", encoding="utf-8")
    with pytest.raises(KafkaSettingsError, match=f"{path}: sasl.mechanism is missing"):
        KafkaClientSettings.from_file(path)


def test_secrets_stay_out_of_repr_str_and_redacted() -> None:
    s = KafkaClientSettings.from_properties(
        {
            **scram_props(),
            "ssl.ca.location": "/ca.pem",
            "ssl.key.pem": "PRIVATE-KEY-BYTES",
            "ssl.certificate.pem": "CERT",
            "ssl.key.password": "keypass",
        }
    )
    o = KafkaClientSettings.from_properties(oauth_props())
    for settings, secrets in ((s, [PASSWORD, "PRIVATE-KEY-BYTES", "keypass"]), (o, ["s3cret"])):
        shown = [repr(settings), str(settings), str(settings.redacted()), settings.describe()]
        for text in shown:
            for secret in secrets:
                assert secret not in text
    assert s.redacted()["sasl.password"] == REDACTED
    assert s.redacted()["ssl.key.pem"] == REDACTED
    assert s.redacted()["sasl.username"] == "alice"
    assert o.redacted()["sasl.oauthbearer.client.secret"] == REDACTED
    assert s.to_properties()["sasl.password"] == PASSWORD


def test_librdkafka_config_is_confluent_kafkas_spelling() -> None:
    import confluent_kafka

    no_ca_file = scram_props()
    del no_ca_file["ssl.ca.location"]  # librdkafka opens it at construction
    for props in (no_ca_file, oauth_props()):
        config = KafkaClientSettings.from_properties(props).librdkafka_config()
        # confluent-kafka checks every property name at construction.
        consumer = confluent_kafka.Consumer(
            {**config, "bootstrap.servers": "127.0.0.1:1", "group.id": "g"}
        )
        consumer.close()


def test_access_errors_are_not_transport_errors() -> None:
    assert not issubclass(KafkaAccessError, TransportError)
    error = authorization_failed(30, "JoinGroup", "orders")
    assert isinstance(error, KafkaAuthorizationFailed)
    assert (error.operation, error.resource_type, error.resource_name) == (
        "JoinGroup",
        "Group",
        "orders",
    )
    assert error.reason == "KafkaAuthorizationFailed"
    assert "JoinGroup on Group 'orders'" in str(error)
    cluster = authorization_failed(31, "Metadata", "x")
    assert cluster is not None and cluster.resource_type == "Cluster"
    assert authorization_failed(25, "Heartbeat", "g") is None


# ---------------------------------------------------------------------- round trip

_text = st.text(
    # Printable, no whitespace (values are stripped), quotes and backslashes included.
    st.characters(min_codepoint=0x21, max_codepoint=0x17F, exclude_categories=("Cc", "Zs")),
    min_size=1,
    max_size=20,
)
_secret = st.builds(SecretStr, _text)


@st.composite
def settings(draw: st.DrawFn) -> KafkaClientSettings:
    protocol = draw(st.sampled_from(SecurityProtocol))
    fields: dict[str, object] = {"security_protocol": protocol}
    if protocol.uses_tls:
        ca = draw(st.sampled_from(["location", "pem", None]))
        if ca:
            fields[f"ssl_ca_{ca}"] = draw(_text)
        if draw(st.booleans()):
            fields["ssl_certificate_location" if draw(st.booleans()) else "ssl_certificate_pem"] = (
                draw(_text)
            )
            if draw(st.booleans()):
                fields["ssl_key_location"] = draw(_text)
            else:
                fields["ssl_key_pem"] = draw(_secret)
            if draw(st.booleans()):
                fields["ssl_key_password"] = draw(_secret)
        fields["ssl_endpoint_identification"] = draw(st.booleans())
    if protocol.uses_sasl:
        mechanism = draw(st.sampled_from(SaslMechanism))
        fields["sasl_mechanism"] = mechanism
        if mechanism is SaslMechanism.OAUTHBEARER:
            fields["oauth_method"] = "oidc"
            fields["oauth_token_endpoint_url"] = "https://idp.example/" + draw(_text)
            fields["oauth_client_id"] = draw(_text)
            fields["oauth_client_secret"] = draw(_secret)
            if draw(st.booleans()):
                fields["oauth_scope"] = draw(_text)
        else:
            fields["sasl_username"] = draw(_text)
            fields["sasl_password"] = draw(_secret)
    return KafkaClientSettings(**fields)  # type: ignore[arg-type]


@given(settings())
def test_round_trip(s: KafkaClientSettings) -> None:
    assert KafkaClientSettings.from_properties(s.to_properties()) == s


@given(_text)
def test_jaas_quote_round_trips(value: str) -> None:
    _module, options = parse_jaas_config(f"{PLAIN} required password={jaas_quote(value)};")
    assert options == {"password": value}


def test_a_settings_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "kafka.properties"
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=a\n"
        + "sasl.password=one\n"
    )
    source = KafkaSettingsFile(path)
    assert source.current().sasl_password == SecretStr("one")
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=a\n"
        + "sasl.password=two!\n"
    )
    assert source.current().sasl_password == SecretStr("two!")
    path.write_text("security.protocol=SASL_SSL\n")  # broken mid-rotation: keep the last good
    assert source.current().sasl_password == SecretStr("two!")
    path.unlink()
    assert source.current().sasl_password == SecretStr("two!")
