"""Group tokens opt-in under pod identity, and the operator without its Secret watch
(`--no-secret-watch`, the chart's `rbac.secretWatch=false`): the real Kopf operator against
kmock. docs/operator.md, "Member tokens" and "Permissions"."""

from __future__ import annotations

import base64
import secrets
import time
import uuid
from typing import Any

import pytest

from coordinator.client import env as member_env
from staticfleet.kafka.broker import Acl, KafkaBroker
from tests.conftest import SecuredUser
from tests.operator.kube_harness import NAMESPACE, managed_spec, running_cluster
from tests.operator.test_kafka_secured_kmock import secret
from tests.operator.test_member_tokens_kmock import _heartbeat_status, _secret

AUDIENCE = "staticfleet-coordinator"


async def test_pod_identity_group_without_standbys_gets_no_token_secret() -> None:
    async with running_cluster(member_token_audience=AUDIENCE, secret_watch=False) as cluster:
        assert cluster.operator.observed.secrets is None  # no Secret informer at all
        await cluster.create_group("orders", managed_spec(replicas=2))
        await cluster.eventually(lambda: cluster.group_settled("orders", 2), what="2 Stable")
        assert await _secret(cluster, "orders-member-token") is None
        for pod in await cluster.pods("orders"):
            names = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
            assert member_env.TOKEN not in names and member_env.TOKEN_FILE in names

        # A group with hot standbys still needs its group token: the Secret is made.
        await cluster.create_group("spare", managed_spec("spare", replicas=1, standbys=1))

        async def made() -> bool:
            return await _secret(cluster, "spare-member-token") is not None

        await cluster.eventually(made, what="spare-member-token created")
        creates = [a.name for a in cluster.actions() if a.verb == "create" and a.kind == "Secret"]
        assert creates == ["spare-member-token"]


async def test_rotated_token_secret_is_seen_within_the_resync_without_a_watch() -> None:
    resync = 2.0
    async with running_cluster(http_members=True, secret_watch=False, resync=resync) as cluster:
        old, new = secrets.token_urlsafe(32), secrets.token_urlsafe(32)

        def data(token: str) -> dict[str, str]:
            return {"token": base64.b64encode(token.encode()).decode()}

        await cluster.kube.create_secret(
            NAMESPACE,
            {"metadata": {"name": "orders-token"}, "type": "Opaque", "data": data(old)},
        )
        spec = managed_spec(replicas=1, tokenSecretRef={"name": "orders-token"})
        await cluster.create_group("orders", spec)
        await cluster.eventually(lambda: cluster.group_settled("orders", 1), what="1 Stable")
        assert await _heartbeat_status(cluster, "orders", old) == 200

        await cluster.kube.patch_secret(NAMESPACE, "orders-token", {"data": data(new)})
        rotated = time.monotonic()

        async def picked_up() -> bool:
            return await _heartbeat_status(cluster, "orders", new) == 200

        await cluster.eventually(picked_up, timeout=resync + 5, what="new token registered")
        # The settled group's next pass is the resync's (no watch event wakes it).
        assert time.monotonic() - rotated <= resync + 2.0
        assert await _heartbeat_status(cluster, "orders", old) == 403


@pytest.mark.kafka
async def test_kafka_credential_secret_fixed_is_used_within_the_resync_without_a_watch(
    kafka_broker: KafkaBroker, secured_user: SecuredUser, kafka_topic: Any
) -> None:
    """A Kafka group's password Secret changed (here: from a wrong password to the user's):
    with no watch to wake the group, a pass GETs the new content within the resync."""
    resync = 3.0
    topic = kafka_topic(2)
    group_id = f"ksw-{uuid.uuid4().hex[:8]}"
    kafka_broker.grant(
        Acl(secured_user.principal, "READ", "GROUP", group_id),
        Acl(secured_user.principal, "DESCRIBE", "TOPIC", topic),
    )
    kafka = {
        "authentication": {
            "type": "scram-sha-512",
            "username": secured_user.name,
            "passwordSecret": {"secretName": "orders-user", "password": "password"},
        },
        "tls": {"trustedCertificates": [{"secretName": "ca", "certificate": "ca.crt"}]},
    }
    spec = managed_spec(
        group_id=group_id,
        replicas=0,
        topics=[{"name": topic}],
        coordinator={
            "type": "kafka",
            "bootstrapServers": kafka_broker.sasl_ssl_bootstrap,
            "kafka": kafka,
        },
    )
    async with running_cluster(secret_watch=False, resync=resync) as cluster:
        ca = kafka_broker.pki.ca_path.read_text()
        await cluster.kube.create_secret(NAMESPACE, secret("ca", {"ca.crt": ca}))
        await cluster.kube.create_secret(NAMESPACE, secret("orders-user", {"password": "wrong"}))
        await cluster.create_group("orders", spec)

        async def condition(kind: str, reason: str | None = None) -> bool:
            body = await cluster.get_group("orders")
            found = [
                c
                for c in (body.get("status") or {}).get("conditions") or []
                if c["type"] == kind and c["status"] == "True"
            ]
            return bool(found) and (reason is None or found[0]["reason"] == reason)

        await cluster.eventually(
            lambda: condition("Degraded", "KafkaAuthenticationFailed"), timeout=30, what="refused"
        )
        password = base64.b64encode(secured_user.password.encode()).decode()
        await cluster.kube.patch_secret(NAMESPACE, "orders-user", {"data": {"password": password}})
        fixed = time.monotonic()
        await cluster.eventually(lambda: condition("Ready"), timeout=30, what="Ready")
        assert time.monotonic() - fixed <= resync + 3.0
