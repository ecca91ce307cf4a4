"""The real Kopf operator against kmock, a group on the secured broker (SASL_SSL,
SCRAM-SHA-512) configured by spec.coordinator.kafka and Secrets the test writes.

A missing Secret, then a wrong password, each become the group's Degraded reason and one
Warning Event (never CoordinatorUnreachable), nothing is done on a guess and the passes do
not storm; the Secret fixed, the next pass connects with it (the Secret's change wakes the
group) and the group's client configuration Secret is written for its members.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest
from jproperties import Properties  # type: ignore[import-untyped]

from coordinator.client.kafka_settings import KafkaClientSettings
from staticfleet.kafka.broker import Acl, KafkaBroker
from staticfleet_operator.kafka_clients import PROPERTIES_FILE
from tests.conftest import SecuredUser
from tests.operator.kube_harness import NAMESPACE, managed_spec, running_cluster

pytestmark = pytest.mark.kafka


def secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
    }


def degraded(body: dict[str, Any]) -> dict[str, Any] | None:
    conditions = (body.get("status") or {}).get("conditions") or []
    found = next((c for c in conditions if c["type"] == "Degraded"), None)
    return found if found is not None and found["status"] == "True" else None


async def test_refusals_are_reported_as_themselves_then_the_fixed_secret_is_used(
    kafka_broker: KafkaBroker, secured_user: SecuredUser, kafka_topic: Any
) -> None:
    topic = kafka_topic(2)
    group_id = f"ksec-{uuid.uuid4().hex[:8]}"
    kafka_broker.grant(
        Acl(secured_user.principal, "READ", "GROUP", group_id),
        Acl(secured_user.principal, "DESCRIBE", "TOPIC", topic),
    )
    spec = managed_spec(
        group_id=group_id,
        replicas=0,
        topics=[{"name": topic}],
        coordinator={
            "type": "kafka",
            "bootstrapServers": kafka_broker.sasl_ssl_bootstrap,
            "kafka": {
                "authentication": {
                    "type": "scram-sha-512",
                    "username": secured_user.name,
                    "passwordSecret": {"secretName": "orders-user", "password": "password"},
                },
                "tls": {"trustedCertificates": [{"secretName": "ca", "certificate": "ca.crt"}]},
            },
        },
    )
    async with running_cluster() as cluster:
        kube = cluster.kube
        await kube.create_secret(
            NAMESPACE, secret("ca", {"ca.crt": kafka_broker.pki.ca_path.read_text()})
        )
        await cluster.create_group("orders", spec)

        async def reason(wanted: str) -> dict[str, Any] | None:
            found = degraded(await cluster.get_group("orders"))
            return found if found is not None and found["reason"] == wanted else None

        # No password Secret yet: its own reason, naming the Secret.
        found = await cluster.eventually(
            lambda: reason("KafkaCredentialsMissing"), timeout=30, what="credentials missing"
        )
        assert f"{NAMESPACE}/orders-user" in found["message"]

        # A wrong password: authentication fails, reported once, nothing else done.
        await kube.create_secret(NAMESPACE, secret("orders-user", {"password": "wrong-one"}))
        found = await cluster.eventually(
            lambda: reason("KafkaAuthenticationFailed"), timeout=30, what="auth failed"
        )
        assert "wrong-one" not in found["message"]

        async def refusal_event() -> bool:
            events = await cluster.events()
            return any(e.get("reason") == "KafkaAuthenticationFailed" for e in events)

        # The actuator posts the Event after it writes the status seen above.
        await cluster.eventually(refusal_event, timeout=30, what="the refusal's Event")
        writes_before = len(cluster.actions())
        passes_before = cluster.passes_done()
        await cluster.passes(5)
        # Polled like any Kafka group, each pass writing nothing new: no Event, no status.
        assert len(cluster.actions()) == writes_before
        assert cluster.passes_done() - passes_before < 60
        events = [e for e in await cluster.events() if e.get("type") == "Warning"]
        assert [e["reason"] for e in events].count("KafkaAuthenticationFailed") == 1
        assert "CoordinatorUnreachable" not in {e["reason"] for e in events}
        assert all("wrong-one" not in e.get("message", "") for e in events)
        # The alert's series (StaticfleetKafkaAccessRefused): the refusal's own reason.
        unreachable = "staticfleet_operator_kafka_unreachable"
        labels = {"namespace": NAMESPACE, "group": "orders"}
        assert cluster.metric(unreachable, **labels, reason="KafkaAuthenticationFailed") == 1

        # The Secret fixed: the next pass connects with it and the group is not degraded.
        await kube.patch_secret(
            NAMESPACE,
            "orders-user",
            {"data": {"password": base64.b64encode(secured_user.password.encode()).decode()}},
        )

        async def healthy() -> dict[str, Any] | None:
            body = await cluster.get_group("orders")
            conditions = (body.get("status") or {}).get("conditions") or []
            ready = next((c for c in conditions if c["type"] == "Ready"), None)
            return body if ready is not None and ready["status"] == "True" else None

        await cluster.eventually(healthy, timeout=30, what="Ready with the fixed password")
        # The actuator sets the series after it writes status: the pass that wrote Ready
        # may not have got there yet.
        await cluster.eventually(
            lambda: (
                cluster.metric(unreachable, **labels, reason="KafkaAuthenticationFailed") is None
            ),
            what="the refusal's series gone",
        )

        # The members' configuration: one file, librdkafka names, the CA inline. (Written
        # by the same pass, after its status: the status write goes first.)
        async def client_secrets() -> dict[str, Any] | None:
            found = {s["metadata"]["name"]: s for s in await cluster.secrets()}
            return found if "orders-kafka-client" in found else None

        written = await cluster.eventually(client_secrets, what="the client configuration")
        data = {
            key: base64.b64decode(value).decode()
            for key, value in written["orders-kafka-client"]["data"].items()
        }
        assert list(data) == [PROPERTIES_FILE]
        parsed = Properties()
        parsed.load(data[PROPERTIES_FILE].encode(), "utf-8")
        properties = {key: value.data for key, value in parsed.items()}
        assert properties["sasl.password"] == secured_user.password
        assert properties["ssl.ca.pem"] == kafka_broker.pki.ca_path.read_text().strip() + "\n"
        settings = KafkaClientSettings.from_properties(properties)
        assert settings.sasl_username == secured_user.name
        owner = written["orders-kafka-client"]["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "ConsumerGroup" and owner["name"] == "orders"
