"""Per-group member tokens, end to end: the real Kopf operator against kmock, the embedded
coordinator serving HTTP, members joining over HTTP with the token their pod env resolves to."""

from __future__ import annotations

import base64
from typing import Any

import aiohttp

from coordinator import HeartbeatRequest
from coordinator.client import env as member_env
from coordinator.wire import to_json
from staticfleet_operator.tokens import managed_secret_name
from tests.operator.kube_harness import (
    NAMESPACE,
    Cluster,
    managed_spec,
    running_cluster,
)
from tests.operator.test_handlers_kmock import _status_field, adopted_spec, executor


async def _secret(cluster: Cluster, name: str) -> dict[str, Any] | None:
    return await cluster.kube.get_secret(NAMESPACE, name)


def _token_of(secret: dict[str, Any], key: str = "token") -> str:
    return base64.b64decode(secret["data"][key]).decode()


def _token_env(pod: dict[str, Any]) -> dict[str, Any]:
    [entry] = [e for e in pod["spec"]["containers"][0]["env"] if e["name"] == member_env.TOKEN]
    return dict(entry)


async def _heartbeat_status(cluster: Cluster, group_id: str, token: str) -> int:
    """The HTTP status of a heartbeat with `token` (auth happens before the coordinator sees
    it: 200 with an error code for an unknown member, 403 for a token that may not)."""
    assert cluster.server is not None
    body = to_json(HeartbeatRequest(group_id, 1, "nobody", None))
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{cluster.server.url}/v1/groups/{group_id}/heartbeat",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
        ) as response,
    ):
        return response.status


async def test_managed_group_token_secret_members_join_over_http_and_delete_unregisters() -> None:
    async with running_cluster(http_members=True) as cluster:
        await cluster.create_group("orders", managed_spec(replicas=2))
        await cluster.eventually(lambda: cluster.group_settled("orders", 2), what="2 Stable")
        group = await cluster.get_group("orders")

        secret = await _secret(cluster, "orders-member-token")
        assert secret is not None and managed_secret_name("orders") == "orders-member-token"
        [owner] = secret["metadata"]["ownerReferences"]
        assert owner["kind"] == "ConsumerGroup" and owner["name"] == "orders"
        assert owner["uid"] == group["metadata"]["uid"] and owner["controller"] is True
        token = _token_of(secret)
        assert len(token) >= 43  # 32 random bytes, urlsafe base64

        # Pods carry a reference to the Secret, never the token itself.
        pods = await cluster.pods("orders")
        assert len(pods) == 2
        for pod in pods:
            entry = _token_env(pod)
            assert "value" not in entry
            assert entry["valueFrom"] == {
                "secretKeyRef": {"name": "orders-member-token", "key": "token"}
            }
        # The members joined over HTTP with the resolved token.
        assert len(cluster.kubelet.transports) == 2
        assert await _heartbeat_status(cluster, "orders", token) == 200
        assert await _heartbeat_status(cluster, "orders", "a-wrong-token") == 403
        assert await _heartbeat_status(cluster, "another-group", token) == 403

        # A restart: the embedded server forgets runtime tokens, the operator its memory.
        # The first pass reads the Secret again (not regenerated) and re-registers it.
        fresh = cluster.forget_operator_memory()
        assert fresh.authenticator is not None and not len(fresh.memories)
        fresh.authenticator.remove_group("orders")

        async def registered() -> bool:
            return await _heartbeat_status(cluster, "orders", token) == 200

        await cluster.eventually(registered, what="token registered again after restart")
        again = await _secret(cluster, "orders-member-token")
        assert again is not None and _token_of(again) == token
        # Every operator's writes (the restarted one's too: same User-Agent).
        creates = [a for a in cluster.actions() if a.verb == "create" and a.kind == "Secret"]
        assert [a.name for a in creates] == ["orders-member-token"]

        # Deleting the group unregisters its token.
        await cluster.delete_group("orders")

        async def gone() -> bool:
            return await cluster.kube.get_group(NAMESPACE, "orders") is None

        await cluster.eventually(gone, what="ConsumerGroup gone")
        assert await _heartbeat_status(cluster, "orders", token) == 403
        assert "orders" not in fresh.authenticator.runtime_groups()


async def test_adopted_pods_get_the_token_by_reference_from_the_webhook() -> None:
    async with running_cluster(webhook=True, http_members=True) as cluster:
        await cluster.create_group("spark", adopted_spec())
        await cluster.eventually(
            lambda: _status_field(cluster, "spark", "observedGeneration"), what="first pass"
        )
        for index in range(2):
            created = await cluster.admit_and_create(executor(f"exec-{index}"))
            assert _token_env(created) == {
                "name": member_env.TOKEN,
                "valueFrom": {"secretKeyRef": {"name": "spark-member-token", "key": "token"}},
            }
        await cluster.eventually(lambda: cluster.group_settled("spark", 2), what="2 executors")
        secret = await _secret(cluster, "spark-member-token")
        assert secret is not None
        assert secret["metadata"]["ownerReferences"][0]["name"] == "spark"
        assert len(cluster.kubelet.transports) == 2
        assert await _heartbeat_status(cluster, "spark-job", _token_of(secret)) == 200
