"""Hot standby with the real operator on kmock: a deleted member pod's instance id is taken
over by a Ready standby with no rebalance, and a new standby replaces it."""

from __future__ import annotations

import time
from typing import Any

from tests.operator.kube_harness import (
    NAMESPACE,
    Cluster,
    StandbyContainer,
    managed_spec,
    running_cluster,
)


async def _member(cluster: Cluster, instance_id: str) -> Any:
    (described,) = await cluster.coordinator.describe_groups(["orders"])
    return next((m for m in described.members if m.group_instance_id == instance_id), None)


async def _status(cluster: Cluster) -> dict[str, Any]:
    return dict((await cluster.get_group("orders")).get("status") or {})


async def _standby_names(cluster: Cluster) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in await cluster.pods("orders")
        if p["metadata"]["labels"].get("staticfleet.dev/role") == "standby"
        and not p["metadata"].get("deletionTimestamp")
    )


def _container(cluster: Cluster, standby: str) -> StandbyContainer:
    for container in cluster.kubelet.members.values():
        if isinstance(container, StandbyContainer) and container.standby_id == standby:
            return container
    raise AssertionError(f"no container for {standby}")


async def _ready_with_standbys(cluster: Cluster, standbys: int) -> None:
    await cluster.eventually(lambda: cluster.group_settled("orders", 3), what="3 Stable")

    async def ready() -> bool:
        return (await _status(cluster)).get("standbysReady") == standbys

    await cluster.eventually(ready, what=f"{standbys} standby(s) ready")


async def test_a_deleted_member_is_taken_over_by_a_standby_without_a_rebalance() -> None:
    async with running_cluster() as cluster:
        await cluster.create_group("orders", managed_spec(replicas=3, standbys=1))
        await _ready_with_standbys(cluster, 1)
        assert await _standby_names(cluster) == ["orders-standby-0"]
        since = max(e.seq for e in await cluster.journal("orders"))
        generation = cluster.coordinator.generation_of("orders")
        before = await _member(cluster, "orders-1")
        assert before is not None and before.member_assignment

        deleted_at = time.monotonic()
        await cluster.kube.delete_pod(NAMESPACE, "orders-1")
        standby = _container(cluster, "orders-standby-0")

        async def took_over() -> bool:
            member = standby.member
            return member is not None and member.state == "stable"

        await cluster.eventually(took_over, what="the standby stable as orders-1")
        failover_s = time.monotonic() - deleted_at
        assert standby.member is not None
        assert standby.member.group_instance_id == "orders-1"
        after = await _member(cluster, "orders-1")
        assert after is not None and after.member_id != before.member_id
        assert after.member_id == standby.member.member_id
        assert after.member_assignment == before.member_assignment
        assert cluster.coordinator.generation_of("orders") == generation
        kinds = [e.kind for e in await cluster.journal("orders", since)]
        assert "generation_started" not in kinds and "rebalance_started" not in kinds, kinds
        # The pod is relabeled into slot 1; orders-1 is not recreated; a new standby is.
        await cluster.eventually(
            lambda: _equals(_standby_names(cluster), ["orders-standby-1"]), what="new standby"
        )
        pods = {p["metadata"]["name"]: p for p in await cluster.pods("orders")}
        assert "orders-1" not in pods
        promoted = pods["orders-standby-0"]["metadata"]
        assert promoted["annotations"]["staticfleet.dev/slot"] == "1"
        assert promoted["annotations"]["staticfleet.dev/instance-id"] == "orders-1"
        status = await _status(cluster)
        assert status["lastPromotion"]["instanceId"] == "orders-1"
        assert status["lastPromotion"]["standby"] == "orders-standby-0"
        assert status.get("promotions", []) == []
        events = [a.name for a in cluster.actions() if a.verb == "event"]
        assert "StandbyPromoted" in events
        labels = {"namespace": "default", "group": "orders", "result": "promoted"}
        assert cluster.metric("staticfleet_operator_standby_promotions_total", **labels) == 1
        await cluster.eventually(lambda: cluster.group_settled("orders", 3), what="Ready again")
        await cluster.eventually(
            lambda: _standby_count_is(cluster, 1), what="standbysReady back to 1"
        )
        # Far below the session timeout (6 s) the fleet would otherwise wait out.
        assert failover_s < 6, failover_s
        assert cluster.coordinator.generation_of("orders") == generation


async def _standby_count_is(cluster: Cluster, count: int) -> bool:
    return (await _status(cluster)).get("standbysReady") == count


async def _equals(value: Any, expected: Any) -> bool:
    return bool(await value == expected)
