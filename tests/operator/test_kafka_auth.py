"""spec.coordinator.kafka: the schema's CEL rules and the model agree; the operator's settings
from the spec and its Secrets (`client_settings`); the members' client configuration in each
family's dialect; the pod's mount; the backends' cache by settings."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from jproperties import Properties  # type: ignore[import-untyped]
from pydantic import SecretStr

from coordinator.client.config import RebalanceProtocolSetting
from coordinator.client.kafka_settings import (
    PLAINTEXT_SETTINGS,
    KafkaClientSettings,
    SaslMechanism,
    SecurityProtocol,
    parse_jaas_config,
)
from staticfleet_operator.backends import KafkaBackends
from staticfleet_operator.crd import (
    AUTHENTICATION_RULES,
    KAFKA_CLIENT_RULES,
    ClientFamily,
    parse_spec,
    validate_spec,
)
from staticfleet_operator.crd.models import (
    RULE_AUTH_OAUTH_FIELDS,
    RULE_AUTH_SASL_FIELDS,
    RULE_AUTH_TLS_FIELDS,
    RULE_KAFKA_SETTINGS_NEED_KAFKA,
    RULE_TLS_AUTH_NEEDS_TLS,
)
from staticfleet_operator.kafka_auth import (
    KafkaCredentialsMissing,
    client_settings,
    referenced_secrets,
)
from staticfleet_operator.kafka_clients import (
    CLIENT_CONFIG_DIR,
    client_config_files,
    client_config_secret,
    java_properties,
    kafka_python_config,
    librdkafka_properties,
    pkcs8,
    properties_text,
)
from staticfleet_operator.members import MemberSettings, managed_pod, template_hash
from tests.operator.test_crd import (
    MANAGED,
    Json,
    apply_defaults,
    cel,
    crd,
    root_schema,
    schema_errors,
    spec_schema,
    with_changes,
)

__all__ = ["crd", "root_schema", "spec_schema"]  # fixtures used by name

CA = "-----BEGIN CERTIFICATE-----\nMIIBca\n-----END CERTIFICATE-----"
CERT = "-----BEGIN CERTIFICATE-----\nMIIBuser\n-----END CERTIFICATE-----"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIBkey\n-----END PRIVATE KEY-----"
TRUST = {"trustedCertificates": [{"secretName": "cluster-ca", "certificate": "ca.crt"}]}
SCRAM = {
    "type": "scram-sha-512",
    "username": "orders",
    "passwordSecret": {"secretName": "orders-user", "password": "password"},
}
MTLS = {
    "type": "tls",
    "certificateAndKey": {
        "secretName": "orders-user",
        "certificate": "user.crt",
        "key": "user.key",
    },
}
OAUTH = {
    "type": "oauth",
    "tokenEndpointUri": "https://sso.example/token",
    "clientId": "orders",
    "clientSecret": {"secretName": "orders-oauth", "key": "secret"},
    "scope": "kafka",
}
SECRETS: dict[str, dict[str, str] | None] = {
    "cluster-ca": {"ca.crt": CA},
    "orders-user": {"password": 'pa"ss\\word', "user.crt": CERT, "user.key": KEY},
    "orders-oauth": {"secret": "oauth-secret"},
}


def kafka_group(kafka: Json | None = None, family: str = "staticfleet") -> Json:
    coordinator: Json = {"type": "kafka", "bootstrapServers": "k:9093", "clientFamily": family}
    if kafka is not None:
        coordinator["kafka"] = kafka
    return with_changes(MANAGED, topics=[{"name": "orders"}], coordinator=coordinator)


def settings(kafka: Json | None, secrets: Any = None) -> KafkaClientSettings:
    spec = parse_spec(kafka_group(kafka)).coordinator.kafka
    return client_settings(spec, SECRETS if secrets is None else secrets, PLAINTEXT_SETTINGS)


# --------------------------------------------------------------------------- schema and model


@pytest.mark.parametrize(
    ("authentication", "rule"),
    [
        (SCRAM, None),
        ({**SCRAM, "type": "plain"}, None),
        (MTLS, None),
        (OAUTH, None),
        ({"type": "scram-sha-512", "username": "orders"}, RULE_AUTH_SASL_FIELDS),
        (
            {"type": "scram-sha-256", "passwordSecret": SCRAM["passwordSecret"]},
            RULE_AUTH_SASL_FIELDS,
        ),
        ({**SCRAM, "certificateAndKey": MTLS["certificateAndKey"]}, RULE_AUTH_SASL_FIELDS),
        ({"type": "tls"}, RULE_AUTH_TLS_FIELDS),
        ({**MTLS, "username": "orders"}, RULE_AUTH_TLS_FIELDS),
        ({**OAUTH, "clientSecret": None}, RULE_AUTH_OAUTH_FIELDS),
        ({**OAUTH, "passwordSecret": SCRAM["passwordSecret"]}, RULE_AUTH_OAUTH_FIELDS),
    ],
)
def test_authentication_rules_agree(authentication: Json, rule: Any, spec_schema: Json) -> None:
    authentication = {k: v for k, v in authentication.items() if v is not None}
    spec = kafka_group({"authentication": authentication, "tls": TRUST})
    schema = spec_schema["properties"]["coordinator"]["properties"]["kafka"]
    auth_schema = schema["properties"]["authentication"]
    assert schema_errors(spec_schema, spec) == []
    value = apply_defaults(copy.deepcopy(authentication), auth_schema)
    cel_failures = [r.message for r in AUTHENTICATION_RULES if not cel(r.rule, value)]
    problems = validate_spec(spec)
    if rule is None:
        assert cel_failures == [] and problems == []
    else:
        assert cel_failures == [rule.message]
        assert any(rule.message in line for line in problems), problems


def test_tls_authentication_needs_tls(spec_schema: Json) -> None:
    kafka = {"authentication": MTLS}
    assert [r.message for r in KAFKA_CLIENT_RULES if not cel(r.rule, kafka)] == [
        RULE_TLS_AUTH_NEEDS_TLS.message
    ]
    assert any(RULE_TLS_AUTH_NEEDS_TLS.message in p for p in validate_spec(kafka_group(kafka)))
    # An empty trust list: the system's CAs, TLS on.
    assert validate_spec(kafka_group({"authentication": MTLS, "tls": {}})) == []


def test_kafka_settings_only_with_a_kafka_coordinator(spec_schema: Json) -> None:
    coordinator = {"type": "embedded", "kafka": {"tls": {}}}
    assert not cel(RULE_KAFKA_SETTINGS_NEED_KAFKA.rule, coordinator)
    problems = validate_spec(with_changes(MANAGED, coordinator=coordinator))
    assert any(RULE_KAFKA_SETTINGS_NEED_KAFKA.message in p for p in problems)


def test_a_secret_reference_needs_its_name_and_key(spec_schema: Json) -> None:
    bad = kafka_group({"authentication": {**SCRAM, "passwordSecret": {"secretName": "x"}}})
    assert schema_errors(spec_schema, bad)
    assert validate_spec(bad)


def test_hash_of_groups_without_the_new_fields_is_unchanged() -> None:
    """An operator upgrade must not bounce existing Kafka fleets: the hashed coordinator has
    exactly the fields it had before spec.coordinator.kafka and env.clientConfig existed."""
    spec = parse_spec(kafka_group())
    assert template_hash(spec) == "6421a50880"  # what the operator before them computed
    secured = parse_spec(kafka_group({"authentication": SCRAM, "tls": TRUST}))
    assert template_hash(secured) != template_hash(spec)


# ------------------------------------------------------------------ the operator's settings


def test_scram_over_tls() -> None:
    s = settings({"authentication": SCRAM, "tls": TRUST})
    assert s.security_protocol is SecurityProtocol.SASL_SSL
    assert s.sasl_mechanism is SaslMechanism.SCRAM_SHA_512
    assert s.sasl_username == "orders"
    assert s.sasl_password is not None and s.sasl_password.get_secret_value() == 'pa"ss\\word'
    assert s.ssl_ca_pem == CA + "\n"
    assert s.ssl_ca_location is None  # inline: nothing on disk
    assert 'pa"ss' not in repr(s)


@pytest.mark.parametrize(
    ("kafka", "protocol", "mechanism"),
    [
        (None, SecurityProtocol.PLAINTEXT, None),
        ({}, SecurityProtocol.PLAINTEXT, None),
        ({"tls": {}}, SecurityProtocol.SSL, None),
        ({"authentication": {**SCRAM, "type": "plain"}}, SecurityProtocol.SASL_PLAINTEXT, "PLAIN"),
        (
            {"authentication": {**SCRAM, "type": "scram-sha-256"}, "tls": TRUST},
            "SASL_SSL",
            "SCRAM-SHA-256",
        ),
        ({"authentication": MTLS, "tls": TRUST}, SecurityProtocol.SSL, None),
        ({"authentication": OAUTH, "tls": TRUST}, SecurityProtocol.SASL_SSL, "OAUTHBEARER"),
    ],
)
def test_protocol_and_mechanism(kafka: Json | None, protocol: str, mechanism: str | None) -> None:
    s = settings(kafka)
    assert s.security_protocol == protocol
    assert (s.sasl_mechanism.value if s.sasl_mechanism else None) == mechanism


def test_mutual_tls_and_oauth_fields() -> None:
    s = settings({"authentication": MTLS, "tls": TRUST})
    assert s.ssl_certificate_pem == CERT + "\n"
    assert s.ssl_key_pem is not None and s.ssl_key_pem.get_secret_value() == KEY + "\n"
    o = settings({"authentication": OAUTH, "tls": TRUST})
    assert (o.oauth_method, o.oauth_token_endpoint_url, o.oauth_client_id, o.oauth_scope) == (
        "oidc",
        "https://sso.example/token",
        "orders",
        "kafka",
    )
    assert o.oauth_client_secret is not None
    assert o.oauth_client_secret.get_secret_value() == "oauth-secret"


def test_no_kafka_section_takes_the_operator_default() -> None:
    default = KafkaClientSettings(security_protocol=SecurityProtocol.SSL)
    spec = parse_spec(kafka_group()).coordinator.kafka
    assert client_settings(spec, {}, default) is default


@pytest.mark.parametrize(
    ("secrets", "message"),
    [
        ({**SECRETS, "orders-user": None}, "Secret team/orders-user (passwordSecret) not found"),
        ({**SECRETS, "orders-user": {}}, "Secret team/orders-user has no key 'password'"),
        ({**SECRETS, "cluster-ca": {"ca.crt": ""}}, "Secret team/cluster-ca has no key 'ca.crt'"),
    ],
)
def test_missing_credentials_name_secret_and_key(secrets: Any, message: str) -> None:
    spec = parse_spec(kafka_group({"authentication": SCRAM, "tls": TRUST})).coordinator.kafka
    with pytest.raises(KafkaCredentialsMissing) as caught:
        client_settings(spec, secrets, PLAINTEXT_SETTINGS, namespace="team")
    assert message in str(caught.value)
    assert caught.value.reason == "KafkaCredentialsMissing"


def test_referenced_secrets() -> None:
    spec = parse_spec(kafka_group({"authentication": MTLS, "tls": TRUST})).coordinator.kafka
    assert referenced_secrets(spec) == ["cluster-ca", "orders-user"]
    assert referenced_secrets(None) == []


def test_backends_follow_the_settings() -> None:
    """A rotated password is a new backend; the old one closes when no group uses it."""

    async def scenario() -> None:
        backends = KafkaBackends()
        first = settings({"authentication": SCRAM, "tls": TRUST})
        rotated_secrets = {**SECRETS, "orders-user": {"password": "new"}}
        rotated = settings({"authentication": SCRAM, "tls": TRUST}, rotated_secrets)
        a = await backends.for_group("ns/a", "k:9093", first)
        b = await backends.for_group("ns/b", "k:9093", first)
        assert a is b
        a2 = await backends.for_group("ns/a", "k:9093", rotated)
        assert a2 is not a and a2.settings == rotated
        assert backends.get("k:9093", first) is a  # still used by ns/b
        await backends.for_group("ns/b", "k:9093", rotated)
        assert backends.get("k:9093", first) is not a  # closed and dropped: a new one
        await backends.close()

    asyncio.run(scenario())


# --------------------------------------------------------------------------- dialects

SCRAM_SETTINGS = KafkaClientSettings(
    security_protocol=SecurityProtocol.SASL_SSL,
    sasl_mechanism=SaslMechanism.SCRAM_SHA_512,
    sasl_username="orders",
    sasl_password=SecretStr('pa"ss\\word'),
    ssl_ca_pem=CA + "\n",
)
MTLS_SETTINGS = KafkaClientSettings(
    security_protocol=SecurityProtocol.SSL,
    ssl_ca_pem=CA + "\n",
    ssl_certificate_pem=CERT + "\n",
    ssl_key_pem=SecretStr(KEY + "\n"),
    ssl_endpoint_identification=False,
)
OAUTH_SETTINGS = KafkaClientSettings(
    security_protocol=SecurityProtocol.SASL_SSL,
    sasl_mechanism=SaslMechanism.OAUTHBEARER,
    oauth_method="oidc",
    oauth_token_endpoint_url="https://sso.example/token",
    oauth_client_id="orders",
    oauth_client_secret=SecretStr("oauth-secret"),
    oauth_scope="kafka",
)
PATH = CLIENT_CONFIG_DIR


@pytest.mark.parametrize(
    ("settings_", "expected"),
    [
        (
            SCRAM_SETTINGS,
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "orders",
                "sasl.password": 'pa"ss\\word',
                "ssl.ca.pem": CA + "\n",
                "ssl.endpoint.identification.algorithm": "https",
            },
        ),
        (
            MTLS_SETTINGS,
            {
                "security.protocol": "SSL",
                "ssl.ca.pem": CA + "\n",
                "ssl.certificate.pem": CERT + "\n",
                "ssl.key.pem": KEY + "\n",
                "ssl.endpoint.identification.algorithm": "none",
            },
        ),
    ],
)
def test_librdkafka_dialect(settings_: KafkaClientSettings, expected: dict[str, str]) -> None:
    assert librdkafka_properties(settings_) == expected


@pytest.mark.parametrize(
    ("settings_", "expected"),
    [
        (
            SCRAM_SETTINGS,
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                'required username="orders" password="pa\\"ss\\\\word";',
                "ssl.truststore.type": "PEM",
                "ssl.truststore.certificates": CA + "\n",
                "ssl.endpoint.identification.algorithm": "https",
            },
        ),
        (
            MTLS_SETTINGS,
            {
                "security.protocol": "SSL",
                "ssl.truststore.type": "PEM",
                "ssl.truststore.certificates": CA + "\n",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": CERT + "\n",
                "ssl.keystore.key": KEY + "\n",
                "ssl.endpoint.identification.algorithm": "",
            },
        ),
        (
            OAUTH_SETTINGS,
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
                'OAuthBearerLoginModule required clientId="orders" clientSecret="oauth-secret" '
                'scope="kafka";',
                "sasl.login.callback.handler.class": "org.apache.kafka.common.security."
                "oauthbearer.OAuthBearerLoginCallbackHandler",
                "sasl.oauthbearer.token.endpoint.url": "https://sso.example/token",
                "ssl.endpoint.identification.algorithm": "https",
            },
        ),
    ],
)
def test_java_dialect(settings_: KafkaClientSettings, expected: dict[str, str]) -> None:
    props = java_properties(settings_)
    assert props == expected
    if "sasl.jaas.config" in props:
        _, options = parse_jaas_config(props["sasl.jaas.config"])
        secret = settings_.sasl_password or settings_.oauth_client_secret
        assert secret is not None and secret.get_secret_value() in options.values()


@pytest.mark.parametrize(
    ("settings_", "expected"),
    [
        (
            SCRAM_SETTINGS,
            {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_plain_username": "orders",
                "sasl_plain_password": 'pa"ss\\word',
                "ssl_check_hostname": True,
                "ssl_ca_pem": CA + "\n",
            },
        ),
        (
            MTLS_SETTINGS,
            {
                "security_protocol": "SSL",
                "ssl_check_hostname": False,
                "ssl_ca_pem": CA + "\n",
                "ssl_certificate_pem": CERT + "\n",
                "ssl_key_pem": KEY + "\n",
            },
        ),
        (
            OAUTH_SETTINGS,
            {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "OAUTHBEARER",
                "sasl_oauth_token_provider": {
                    "token_endpoint_url": "https://sso.example/token",
                    "client_id": "orders",
                    "client_secret": "oauth-secret",
                    "scope": "kafka",
                },
                "ssl_check_hostname": True,
            },
        ),
    ],
)
def test_kafka_python_dialect(settings_: KafkaClientSettings, expected: dict[str, Any]) -> None:
    assert kafka_python_config(settings_) == expected


def test_one_self_contained_file_per_family() -> None:
    """One file, PEMs inline: nothing names a sibling file by path (a mount
    elsewhere would break such a path; a rotation replaces the one file whole)."""
    for family in ClientFamily:
        for settings_ in (SCRAM_SETTINGS, MTLS_SETTINGS):
            files = client_config_files(family, settings_)
            name = "client.json" if family is ClientFamily.KAFKA_PYTHON else "client.properties"
            assert list(files) == [name]
            text = next(iter(files.values()))
            assert PATH not in text and ".location" not in text and "_cafile" not in text
    java = client_config_files(ClientFamily.JAVA, MTLS_SETTINGS)["client.properties"]
    parsed = Properties()
    parsed.load(java.encode(), "utf-8")  # Java's Properties.load reads the same escapes
    assert parsed["ssl.keystore.key"].data == KEY + "\n"
    assert parsed["ssl.keystore.certificate.chain"].data == CERT + "\n"
    python = client_config_files(ClientFamily.KAFKA_PYTHON, MTLS_SETTINGS)["client.json"]
    assert json.loads(python)["ssl_key_pem"] == KEY + "\n"
    python = client_config_files(ClientFamily.KAFKA_PYTHON, SCRAM_SETTINGS)["client.json"]
    assert json.loads(python)["sasl_plain_username"] == "orders"


def test_our_members_file_reads_back_as_the_same_settings(tmp_path: Any) -> None:
    """The staticfleet dialect is what `member run --kafka-config` reads: written, read back
    by Java's parser (jproperties) and by KafkaClientSettings.from_file, secrets intact."""
    files = client_config_files(ClientFamily.STATICFLEET, SCRAM_SETTINGS)
    path = tmp_path / "client.properties"
    path.write_text(files["client.properties"])
    parsed = Properties()
    parsed.load(path.read_bytes(), "utf-8")
    assert {k: v.data for k, v in parsed.items()} == librdkafka_properties(SCRAM_SETTINGS)
    back = KafkaClientSettings.from_file(path)
    assert back.sasl_password == SCRAM_SETTINGS.sasl_password
    assert back.ssl_ca_pem is not None and back.ssl_ca_pem.strip() == CA  # inline, no path
    assert back.ssl_ca_location is None


def test_properties_escapes() -> None:
    text = properties_text({"a": " lead\\back\nline"})
    parsed = Properties()
    parsed.load(text.encode(), "utf-8")
    assert parsed["a"].data == " lead\\back\nline"


def test_java_keystore_key_is_pkcs8() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    sec1 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()
    assert "BEGIN EC PRIVATE KEY" in sec1
    converted = pkcs8(sec1)
    assert converted.startswith("-----BEGIN PRIVATE KEY-----")
    loaded = serialization.load_pem_private_key(converted.encode(), password=None)
    assert loaded.public_key() == key.public_key()


# --------------------------------------------------------------------------- member pods


@pytest.mark.parametrize(
    ("family", "variable", "file"),
    [
        ("staticfleet", "STATICFLEET_KAFKA_CONFIG", "client.properties"),
        ("java", "KAFKA_CLIENT_CONFIG", "client.properties"),
        ("librdkafka", "KAFKA_CLIENT_CONFIG", "client.properties"),
        ("kafka-python", "KAFKA_CLIENT_CONFIG", "client.json"),
    ],
)
def test_member_pod_mounts_the_group_secret(family: str, variable: str, file: str) -> None:
    spec = parse_spec(kafka_group({"authentication": SCRAM, "tls": TRUST}, family=family))
    pod = managed_pod(
        spec,
        MemberSettings("http://unused", "orders"),
        namespace="team",
        owner_uid="uid-1",
        slot=0,
        protocol=RebalanceProtocolSetting.EAGER,
        pod_key="k",
    )
    [volume] = pod["spec"]["volumes"]
    assert volume["secret"] == {"secretName": "orders-kafka-client"}
    for container in pod["spec"]["containers"]:
        assert {"name": volume["name"], "mountPath": PATH, "readOnly": True} in container[
            "volumeMounts"
        ]
        values = {e["name"]: e.get("value") for e in container["env"]}
        assert values[variable] == f"{PATH}/{file}"
        # No secret in env: only the path.
        assert all('pa"ss' not in str(v) for v in values.values())


def test_no_mount_without_kafka_settings() -> None:
    spec = parse_spec(kafka_group())
    pod = managed_pod(
        spec,
        MemberSettings("http://unused", "orders"),
        namespace="team",
        owner_uid="uid-1",
        slot=0,
        protocol=RebalanceProtocolSetting.EAGER,
        pod_key="k",
    )
    assert "volumes" not in pod["spec"]
    assert all("KAFKA_CLIENT_CONFIG" not in str(c["env"]) for c in pod["spec"]["containers"])


def test_client_config_secret_is_owned_by_the_group() -> None:
    manifest = client_config_secret("team", "orders", "uid-1", {"a": "b"})
    assert manifest["metadata"]["name"] == "orders-kafka-client"
    assert manifest["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert base64.b64decode(manifest["data"]["a"]) == b"b"


def test_secured_example_is_a_valid_consumer_group(spec_schema: Json) -> None:
    import yaml

    from tests.operator.test_crd import ROOT

    documents = list(yaml.safe_load_all((ROOT / "examples" / "secured-group.yaml").read_text()))
    [group] = [d for d in documents if d["kind"] == "ConsumerGroup"]
    assert schema_errors(spec_schema, group["spec"]) == []
    assert validate_spec(group["spec"]) == []
    kafka = parse_spec(group["spec"]).coordinator.kafka
    secrets = {d["metadata"]["name"]: d["stringData"] for d in documents if d["kind"] == "Secret"}
    s = client_settings(kafka, secrets, PLAINTEXT_SETTINGS)
    assert s.security_protocol is SecurityProtocol.SASL_SSL
    assert s.sasl_mechanism is SaslMechanism.SCRAM_SHA_512


def test_operator_run_kafka_config(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`operator run --kafka-config FILE`: the default settings for groups without
    spec.coordinator.kafka; a bad file is refused naming the file and the property."""
    from staticfleet.cli import build_parser, main
    from staticfleet.commands.operator_cmd import options_from_args

    good = tmp_path / "operator.properties"
    good.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.username=operator\nsasl.password=s3cret\n"
    )
    args = build_parser().parse_args(["operator", "run", "--kafka-config", str(good)])
    options = options_from_args(args)
    assert options.kafka_settings.sasl_username == "operator"
    default = build_parser().parse_args(["operator", "run"])
    assert options_from_args(default).kafka_settings == PLAINTEXT_SETTINGS

    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n")
    assert main(["operator", "run", "--kafka-config", str(bad)]) == 2
    error = capsys.readouterr().err
    assert "bad.properties" in error and "sasl.username" in error
