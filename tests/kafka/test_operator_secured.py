"""The operator's `KafkaBackend` on the secured broker, configured the way a ConsumerGroup
configures it: `spec.coordinator.kafka` plus the (emulated) Secrets' data, through
`client_settings` (docs/operator.md, "Secured clusters").

Describe, batch LeaveGroup and Metadata on SASL_SSL (SCRAM-SHA-512), SSL (client
certificates) and OAUTHBEARER; each refusal as its own `KafkaAccessError`; the operator's
least privilege (exactly the ACLs docs/kafka.md lists work, one fewer names what is missing);
and a password rotated in its Secret taking effect on the next describe.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from confluent_kafka import Consumer

from coordinator.client.kafka_errors import (
    KafkaAuthenticationFailed,
    KafkaAuthorizationFailed,
    KafkaTLSHostnameMismatch,
    KafkaTLSVerificationFailed,
)
from coordinator.client.kafka_settings import KafkaClientSettings
from staticfleet.kafka.broker import Acl, KafkaBroker
from staticfleet_operator.backends import KafkaBackend, KafkaBackends
from staticfleet_operator.crd import KafkaClientSpec
from staticfleet_operator.kafka_auth import KafkaCredentialsMissing, client_settings
from staticfleet_operator.rollout import CoordinatorView
from tests.conftest import SecuredUser, SslClient

pytestmark = pytest.mark.kafka

PARTITIONS = 3
CA_SECRET = "cluster-ca-cert"


def operator_acls(principal: str, group: str, topic: str) -> list[Acl]:
    """What docs/kafka.md says the operator needs: READ on the group (LeaveGroup; Kafka's
    READ implies DESCRIBE, which FindCoordinator and DescribeGroups need) and DESCRIBE on
    each topic (Metadata)."""
    return [
        Acl(principal, "READ", "GROUP", group),
        Acl(principal, "DESCRIBE", "TOPIC", topic),
    ]


def ca_secret(broker: KafkaBroker) -> dict[str, str]:
    return {"ca.crt": broker.pki.ca_path.read_text()}


def scram_spec(user: str) -> KafkaClientSpec:
    return KafkaClientSpec.model_validate(
        {
            "authentication": {
                "type": "scram-sha-512",
                "username": user,
                "passwordSecret": {"secretName": "kafka-user", "password": "password"},
            },
            "tls": {"trustedCertificates": [{"secretName": CA_SECRET, "certificate": "ca.crt"}]},
        }
    )


def tls_spec() -> KafkaClientSpec:
    return KafkaClientSpec.model_validate(
        {
            "authentication": {
                "type": "tls",
                "certificateAndKey": {
                    "secretName": "kafka-user",
                    "certificate": "user.crt",
                    "key": "user.key",
                },
            },
            "tls": {"trustedCertificates": [{"secretName": CA_SECRET, "certificate": "ca.crt"}]},
        }
    )


def oauth_spec(broker: KafkaBroker, client_id: str) -> KafkaClientSpec:
    return KafkaClientSpec.model_validate(
        {
            "authentication": {
                "type": "oauth",
                "tokenEndpointUri": broker.oidc.token_endpoint_url,
                "clientId": client_id,
                "clientSecret": {"secretName": "oauth-client", "key": "secret"},
            },
            "tls": {"trustedCertificates": [{"secretName": CA_SECRET, "certificate": "ca.crt"}]},
        }
    )


def settings_of(
    spec: KafkaClientSpec, secrets: Mapping[str, Mapping[str, str] | None]
) -> KafkaClientSettings:
    return client_settings(spec, secrets, KafkaClientSettings(), namespace="team")


@pytest.fixture
def static_member(
    kafka_broker: KafkaBroker, kafka_topic: Any, request: pytest.FixtureRequest
) -> Iterator[tuple[str, str, str]]:
    """(group, topic, instance id) of a group with one static member (a librdkafka consumer
    as the super user), Stable before the test starts."""
    topic = kafka_topic(PARTITIONS)
    group = f"op-{request.node.name[:40]}-{time.time_ns() % 10**6}".replace("[", "-").replace(
        "]", ""
    )
    instance_id = f"{group}-0"
    consumer = Consumer(
        {
            **kafka_broker.client_config("PLAINTEXT"),
            "group.id": group,
            "group.instance.id": instance_id,
            "session.timeout.ms": 10_000,
            "log_level": 0,
        }
    )
    assigned: list[int] = []
    consumer.subscribe(
        [topic], on_assign=lambda _c, parts: assigned.extend(p.partition for p in parts)
    )
    deadline = time.monotonic() + 60
    while not assigned and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert assigned, "the static member never got its assignment"
    try:
        yield group, topic, instance_id
    finally:
        consumer.close()


async def describe_view(backend: KafkaBackend, group: str) -> CoordinatorView:
    return CoordinatorView.from_described(await backend.describe(group))


async def exercise(backend: KafkaBackend, group: str, topic: str, instance_id: str) -> None:
    """Describe, Metadata and a batch LeaveGroup through the backend, each checked."""
    try:
        view = await describe_view(backend, group)
        assert instance_id in view.instance_ids
        assert await backend.topic_partitions({topic: None}) == {topic: PARTITIONS}
        response = await backend.leave(group, [instance_id])
        assert [m.group_instance_id for m in response.members] == [instance_id]
        view = await describe_view(backend, group)
        assert instance_id not in view.instance_ids
    finally:
        await backend.close()


def test_scram_sha_512_describe_leave_metadata(
    kafka_broker: KafkaBroker, secured_user: SecuredUser, static_member: tuple[str, str, str]
) -> None:
    group, topic, instance_id = static_member
    kafka_broker.grant(*operator_acls(secured_user.principal, group, topic))
    settings = settings_of(
        scram_spec(secured_user.name),
        {CA_SECRET: ca_secret(kafka_broker), "kafka-user": {"password": secured_user.password}},
    )
    backend = KafkaBackend(kafka_broker.sasl_ssl_bootstrap, settings=settings)
    asyncio.run(exercise(backend, group, topic, instance_id))


def test_mutual_tls_describe_leave_metadata(
    kafka_broker: KafkaBroker, ssl_client: SslClient, static_member: tuple[str, str, str]
) -> None:
    group, topic, instance_id = static_member
    kafka_broker.grant(*operator_acls(ssl_client.principal, group, topic))
    secrets = {
        CA_SECRET: ca_secret(kafka_broker),
        "kafka-user": {
            "user.crt": ssl_client.pair.cert.read_text(),
            "user.key": ssl_client.pair.key.read_text(),
        },
    }
    backend = KafkaBackend(kafka_broker.ssl_bootstrap, settings=settings_of(tls_spec(), secrets))
    asyncio.run(exercise(backend, group, topic, instance_id))


def test_oauthbearer_describe_leave_metadata(
    kafka_broker: KafkaBroker, static_member: tuple[str, str, str]
) -> None:
    group, topic, instance_id = static_member
    properties = kafka_broker.client_properties("SASL_SSL", mechanism="OAUTHBEARER")
    client_id = properties["sasl.oauthbearer.client.id"]
    kafka_broker.grant(*operator_acls(f"User:{client_id}", group, topic))
    secrets = {
        CA_SECRET: ca_secret(kafka_broker),
        "oauth-client": {"secret": properties["sasl.oauthbearer.client.secret"]},
    }
    settings = settings_of(oauth_spec(kafka_broker, client_id), secrets)
    backend = KafkaBackend(kafka_broker.sasl_ssl_bootstrap, settings=settings)
    asyncio.run(exercise(backend, group, topic, instance_id))


async def refused(backend: KafkaBackend, group: str) -> BaseException:
    try:
        await backend.describe(group)
    except Exception as error:
        return error
    finally:
        await backend.close()
    raise AssertionError("describe was not refused")


def test_each_refusal_is_its_own_error(
    kafka_broker: KafkaBroker, secured_user: SecuredUser, ssl_client: SslClient
) -> None:
    ca = ca_secret(kafka_broker)
    wrong = settings_of(
        scram_spec(secured_user.name), {CA_SECRET: ca, "kafka-user": {"password": "not-it"}}
    )
    error = asyncio.run(refused(KafkaBackend(kafka_broker.sasl_ssl_bootstrap, settings=wrong), "g"))
    assert isinstance(error, KafkaAuthenticationFailed), error
    assert error.reason == "KafkaAuthenticationFailed" and "not-it" not in str(error)

    untrusted = {CA_SECRET: {"ca.crt": kafka_broker.pki.untrusted_ca_path.read_text()}}
    settings = settings_of(
        scram_spec(secured_user.name),
        {**untrusted, "kafka-user": {"password": secured_user.password}},
    )
    error = asyncio.run(
        refused(KafkaBackend(kafka_broker.sasl_ssl_bootstrap, settings=settings), "g")
    )
    assert isinstance(error, KafkaTLSVerificationFailed), error

    good = settings_of(
        scram_spec(secured_user.name),
        {CA_SECRET: ca, "kafka-user": {"password": secured_user.password}},
    )
    # The broker's certificate names 127.0.0.1 only.
    by_name = kafka_broker.sasl_ssl_bootstrap.replace("127.0.0.1", "localhost")
    error = asyncio.run(refused(KafkaBackend(by_name, settings=good), "g"))
    assert isinstance(error, KafkaTLSHostnameMismatch), error

    # A user with no ACL at all: the group's coordinator cannot even be found.
    error = asyncio.run(
        refused(KafkaBackend(kafka_broker.sasl_ssl_bootstrap, settings=good), "no-acl-group")
    )
    assert isinstance(error, KafkaAuthorizationFailed), error
    assert (error.resource_type, error.resource_name) == ("Group", "no-acl-group")

    # A Secret that is not there never reaches the broker.
    with pytest.raises(KafkaCredentialsMissing, match="team/kafka-user"):
        settings_of(scram_spec(secured_user.name), {CA_SECRET: ca})


@pytest.mark.parametrize(
    ("missing", "operation"),
    [
        # DESCRIBE on the group instead of READ: describe works, LeaveGroup is refused.
        ("READ GROUP", "LeaveGroup"),
        # Nothing on the group: its coordinator cannot be found.
        ("GROUP", "FindCoordinator"),
    ],
)
def test_least_privilege(
    kafka_broker: KafkaBroker,
    secured_user: SecuredUser,
    static_member: tuple[str, str, str],
    missing: str,
    operation: str | None,
) -> None:
    """Exactly the documented ACLs work (the SCRAM test above); less is refused with
    KafkaAuthorizationFailed naming the request and the resource."""
    group, topic, instance_id = static_member
    acls = [Acl(secured_user.principal, "DESCRIBE", "TOPIC", topic)]
    if missing == "READ GROUP":
        acls.append(Acl(secured_user.principal, "DESCRIBE", "GROUP", group))
    kafka_broker.grant(*acls)
    settings = settings_of(
        scram_spec(secured_user.name),
        {CA_SECRET: ca_secret(kafka_broker), "kafka-user": {"password": secured_user.password}},
    )

    async def attempt() -> BaseException:
        backend = KafkaBackend(kafka_broker.sasl_ssl_bootstrap, settings=settings)
        try:
            if missing == "READ GROUP":
                view = await describe_view(backend, group)
                assert instance_id in view.instance_ids  # DESCRIBE is enough for that
                await backend.leave(group, [instance_id])
            else:
                await backend.describe(group)
        except KafkaAuthorizationFailed as error:
            return error
        finally:
            await backend.close()
        raise AssertionError(f"not refused without {missing}")

    error = asyncio.run(attempt())
    assert isinstance(error, KafkaAuthorizationFailed)
    assert (error.resource_type, error.resource_name) == ("Group", group)
    if operation is not None:
        assert error.operation == operation


def test_missing_topic_acl_hides_the_topic(
    kafka_broker: KafkaBroker, secured_user: SecuredUser, static_member: tuple[str, str, str]
) -> None:
    """Without DESCRIBE on a topic, Metadata leaves it out (Kafka answers a listing with the
    topics the principal may see): the operator reports TopicsNotFound for it."""
    group, topic, _ = static_member
    kafka_broker.grant(Acl(secured_user.principal, "READ", "GROUP", group))
    settings = settings_of(
        scram_spec(secured_user.name),
        {CA_SECRET: ca_secret(kafka_broker), "kafka-user": {"password": secured_user.password}},
    )

    async def partitions() -> dict[str, int]:
        backend = KafkaBackend(kafka_broker.sasl_ssl_bootstrap, settings=settings)
        try:
            return await backend.topic_partitions({topic: None})
        finally:
            await backend.close()

    assert asyncio.run(partitions()) == {}


def test_rotated_password_takes_effect_on_the_next_describe(
    kafka_broker: KafkaBroker, secured_user: SecuredUser, static_member: tuple[str, str, str]
) -> None:
    group, topic, instance_id = static_member
    kafka_broker.grant(*operator_acls(secured_user.principal, group, topic))
    spec = scram_spec(secured_user.name)
    secrets: dict[str, Mapping[str, str] | None] = {
        CA_SECRET: ca_secret(kafka_broker),
        "kafka-user": {"password": secured_user.password},
    }
    backends = KafkaBackends()

    async def describe_with_current_secret() -> CoordinatorView:
        settings = settings_of(spec, secrets)
        backend = await backends.for_group("team/orders", kafka_broker.sasl_ssl_bootstrap, settings)
        return await describe_view(backend, group)

    async def scenario() -> None:
        try:
            assert instance_id in (await describe_with_current_secret()).instance_ids
            before = backends.get(kafka_broker.sasl_ssl_bootstrap, settings_of(spec, secrets))
            kafka_broker.set_password(secured_user.name, "rotated-password")
            # The Secret is updated (as the user's rotation tooling does).
            secrets["kafka-user"] = {"password": "rotated-password"}
            assert instance_id in (await describe_with_current_secret()).instance_ids
            after = backends.get(kafka_broker.sasl_ssl_bootstrap, settings_of(spec, secrets))
            assert after is not before  # a new connection, with the new password
            # The old password is refused now: only the new settings could have described.
            old = KafkaBackend(kafka_broker.sasl_ssl_bootstrap, settings=before.settings)
            error = await refused(old, group)
            assert isinstance(error, KafkaAuthenticationFailed), error
        finally:
            await backends.close()

    asyncio.run(scenario())
