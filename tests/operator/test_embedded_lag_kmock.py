"""Lag of an embedded group that reads Kafka topics (spec.source.kafka): the real Kopf
operator on kmock reads the log ends on the real broker and the commits in its embedded
coordinator, and shows the figure in status, its gauges and the coordinator server's lag
route (an autoscaler's source) with the group's member token."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from coordinator.errors import ErrorCode as Code
from coordinator.messages import OffsetCommitPartition, OffsetCommitRequest
from staticfleet.kafka.broker import KafkaBroker
from staticfleet_operator.tokens import managed_secret_name
from tests.kafka.helpers import produce
from tests.operator.kube_harness import (
    ADMIN_TOKEN,
    NAMESPACE,
    Cluster,
    managed_spec,
    running_cluster,
)

pytestmark = pytest.mark.kafka


async def commit(cluster: Cluster, group_id: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit `offsets` (partition -> offset) in the embedded coordinator, as a consumer
    that uses no group management does (a member's commit lands in the same store)."""
    partitions = [OffsetCommitPartition(topic, p, offset) for p, offset in offsets.items()]
    response = await cluster.coordinator.commit_offsets(
        OffsetCommitRequest(group_id, -1, "", None, partitions)
    )
    assert [p.error_code for p in response.partitions] == [Code.NONE] * len(offsets)


async def get_lag(cluster: Cluster, group_id: str, token: str) -> tuple[int, Any]:
    assert cluster.server is not None
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"{cluster.server.url}/v1/groups/{group_id}/lag",
            headers={"Authorization": f"Bearer {token}"},
        ) as response,
    ):
        return response.status, await response.json()


async def test_embedded_group_lag_from_its_source_cluster(
    kafka_broker: KafkaBroker, kafka_topic: Callable[[int], str]
) -> None:
    topic = kafka_topic(3)
    bootstrap = kafka_broker.bootstrap
    group_id = f"elag-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, topic, 3, per_partition=20)
    spec = managed_spec(
        group_id=group_id,
        replicas=0,
        topics=[{"name": topic, "partitions": 3}],
        source={"kafka": {"bootstrapServers": bootstrap}},
    )
    async with running_cluster(http_members=True) as cluster:
        cluster.operator.metrics.partition_lag = True
        # Partition 0 at 5 of 20, partition 1 at its end, partition 2 never committed.
        await commit(cluster, group_id, topic, {0: 5, 1: 20})

        async def status() -> dict[str, Any] | None:
            body = await cluster.kube.get_group(NAMESPACE, "embedded")
            found = (body or {}).get("status") or {}
            return found if found.get("lag") is not None else None

        await cluster.create_group("embedded", spec)
        first = await cluster.eventually(status, timeout=60, what="status.lag")
        assert (first["lag"], first["lagPartitionsWithoutCommit"]) == (15, 1)
        labels = {"namespace": NAMESPACE, "group": "embedded"}
        await cluster.eventually(
            lambda: cluster.metric("staticfleet_operator_group_lag", **labels) == 15,
            what="the lag gauge at 15",
        )
        partition = "staticfleet_operator_group_partition_lag"
        assert cluster.metric(partition, **labels, topic=topic, partition="0") == 15
        assert cluster.metric(partition, **labels, topic=topic, partition="1") == 0
        assert cluster.metric(partition, **labels, topic=topic, partition="2") is None

        # The route KEDA's metrics-api scaler reads, with the group's member token (the
        # Secret a TriggerAuthentication names): the figure status shows.
        secret = await cluster.kube.get_secret(NAMESPACE, managed_secret_name("embedded"))
        assert secret is not None
        token = base64.b64decode(secret["data"]["token"]).decode()
        code, body = await get_lag(cluster, group_id, token)
        assert code == 200, body
        assert body["group_id"] == group_id
        assert (body["lag"], body["partitions_without_commit"]) == (15, 1)
        assert body["read_at_ms"] > 0
        # Another group's figure is not this token's to read; an unknown group has none.
        assert (await get_lag(cluster, "some-other-group", token))[0] == 403
        code, body = await get_lag(cluster, "some-other-group", ADMIN_TOKEN)
        assert code == 404 and body["error"] == "GROUP_ID_NOT_FOUND", body

        # Gone with the ConsumerGroup.
        await cluster.delete_group("embedded")
        await cluster.eventually(
            lambda: group_id not in cluster.operator.lag_figures, what="the figure forgotten"
        )
        assert (await get_lag(cluster, group_id, ADMIN_TOKEN))[0] == 404


async def test_unreachable_source_leaves_no_figure_and_the_group_works() -> None:
    """A source cluster that does not answer costs the lag figure, not the group: status
    has no lag, the group is not Degraded, the route answers 404."""
    group_id = f"elag-{uuid.uuid4().hex[:8]}"
    spec = managed_spec(
        group_id=group_id,
        replicas=1,
        topics=[{"name": "orders", "partitions": 2}],
        # A port nothing listens on (TEST-NET-free loopback: refused at once).
        source={"kafka": {"bootstrapServers": "127.0.0.1:9"}},
    )
    async with running_cluster(http_members=True) as cluster:
        await cluster.create_group("nosource", spec)
        body = await cluster.eventually(
            lambda: cluster.group_settled("nosource", 1), timeout=60, what="1 member Stable"
        )
        await cluster.passes(2)
        body = await cluster.get_group("nosource")
        assert body["status"].get("lag") is None
        conditions = {c["type"]: c for c in body["status"]["conditions"]}
        assert conditions.get("Degraded", {}).get("status") != "True"
        code, _ = await get_lag(cluster, group_id, ADMIN_TOKEN)
        assert code == 404
