"""Scale-up 3 -> 6 on the embedded coordinator, with and without expected members (kmock)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from tests.operator.kube_harness import Cluster, managed_spec, running_cluster
from tests.operator.test_watch_kmock import counted

FLEET = [f"orders-{slot}" for slot in range(6)]


async def _scale_up_with_stragglers(cluster: Cluster) -> list[str]:
    """3 -> 6 where orders-3 starts at once and orders-4, orders-5 a second later (their
    images still pulling); returns the journal kinds of the scale-up."""
    await cluster.eventually(lambda: cluster.group_settled("orders", 3), what="3 Stable")
    since = max(e.seq for e in await cluster.journal("orders"))
    cluster.kubelet.refused.update({"orders-4", "orders-5"})
    await cluster.update_spec("orders", {"replicas": 6})

    async def first_joined() -> bool:
        events = await cluster.journal("orders", since)
        return any(e.kind == "member_joined" and e.group_instance_id == "orders-3" for e in events)

    await cluster.eventually(first_joined, what="orders-3 joined")
    # Members heartbeat every 100 ms: a second is ample for the old ones to rejoin.
    await asyncio.sleep(1.0)
    cluster.kubelet.refused.clear()
    await cluster.eventually(lambda: cluster.group_settled("orders", 6), what="6 Stable")
    return [e.kind for e in await cluster.journal("orders", since)]


async def test_a_scale_up_with_expected_members_is_exactly_one_rebalance() -> None:
    async with running_cluster() as cluster:
        await cluster.create_group("orders", managed_spec(replicas=3))
        kinds = await _scale_up_with_stragglers(cluster)
        assert kinds.count("generation_started") == 1, kinds
        assert kinds.count("member_joined") == 3
        events = [a for a in cluster.actions() if a.verb == "event"]
        assert "ExpectingMembers" in [a.name for a in events]
        # Fulfilled in a Stable group: the expected members are cleared on a later pass.
        await cluster.eventually(
            lambda: cluster.coordinator.expected_members("orders") is None,
            what="expected members cleared",
        )


async def test_scale_down_and_delete_clear_the_expected_members() -> None:
    async with running_cluster() as cluster:
        await cluster.create_group("orders", managed_spec(replicas=3))
        await cluster.eventually(lambda: cluster.group_settled("orders", 3), what="3 Stable")
        # Pods that never start: the expected members stay pending until the spec shrinks.
        cluster.kubelet.refused.update({"orders-3", "orders-4"})
        await cluster.update_spec("orders", {"replicas": 5})
        await cluster.eventually(
            lambda: cluster.coordinator.expected_members("orders") is not None,
            what="expected",
        )
        expected = cluster.coordinator.expected_members("orders")
        assert expected is not None and expected.instance_ids == set(FLEET[:5])

        async def missing() -> list[str]:
            status = (await cluster.get_group("orders")).get("status") or {}
            return list(status.get("missingExpectedMembers") or [])

        await cluster.eventually(
            lambda: _equals(missing(), ["orders-3", "orders-4"]),
            what="status missingExpectedMembers",
        )
        group = {"namespace": "default", "group": "orders", "kind": "missing_expected"}
        await cluster.eventually(
            lambda: cluster.metric("staticfleet_operator_group_members", **group) == 2,
            what="missing_expected metric",
        )
        await cluster.update_spec("orders", {"replicas": 2})
        await cluster.eventually(
            lambda: cluster.coordinator.expected_members("orders") is None,
            what="cleared by the scale-down",
        )
        await cluster.eventually(lambda: _equals(missing(), []), what="status cleared")
        cluster.kubelet.refused.clear()
        await cluster.eventually(lambda: cluster.group_settled("orders", 2), what="2 Stable")
        await cluster.delete_group("orders")
        await cluster.eventually(
            lambda: cluster.coordinator.group_state("orders") is None, what="group dropped"
        )
        assert cluster.coordinator.expected_members("orders") is None


async def test_pending_expected_members_wait_for_their_deadline_without_polling() -> None:
    """Expected members that never come cost no passes and no requests until their
    deadline, then one pass clears them (the harness requeues every 0.1 s: a group counted
    unsettled while members are expected would run about 10 passes in the quiet window)."""
    async with running_cluster() as cluster:
        spec = managed_spec(replicas=3, scaleUp={"expectedMembersTimeoutSeconds": 3})
        await cluster.create_group("orders", spec)
        await cluster.eventually(lambda: cluster.group_settled("orders", 3), what="3 Stable")
        cluster.kubelet.refused.update({"orders-3"})
        await cluster.update_spec("orders", {"replicas": 4})
        await cluster.eventually(
            lambda: cluster.coordinator.expected_members("orders") is not None,
            what="expected",
        )
        expected = cluster.coordinator.expected_members("orders")
        assert expected is not None
        expected_at = asyncio.get_running_loop().time()
        await asyncio.sleep(0.5)  # the scale-up's own passes and their events are done
        passes_before = cluster.passes_done()
        with counted(cluster) as requests:
            await asyncio.sleep(1.0)
        assert requests == []
        assert cluster.passes_done() - passes_before <= 3
        assert cluster.coordinator.expected_members("orders") == expected  # still pending
        await cluster.eventually(
            lambda: cluster.coordinator.expected_members("orders") is None,
            timeout=15,
            what="cleared at its deadline",
        )
        assert asyncio.get_running_loop().time() - expected_at >= 2.5


async def _equals(value: Awaitable[list[str]], expected: list[str]) -> bool:
    return await value == expected
