"""A replica that does not hold the embedded coordinator's store (peering.py: not yet loaded
after it became the active one) plans nothing for an embedded group and reports no fault:
its pass waits for the store. The real Kopf operator on kmock's emulator."""

from __future__ import annotations

import asyncio

from tests.operator.kube_harness import managed_spec, running_cluster


async def test_a_pass_waits_for_the_store_and_reports_no_fault_meanwhile() -> None:
    async with running_cluster() as cluster:
        await cluster.coordinator.suspend()
        await cluster.create_group("orders", managed_spec(replicas=2))
        await asyncio.sleep(1.5)  # ten poll intervals of the harness's operator
        assert await cluster.pods("orders") == []
        conditions = ((await cluster.get_group("orders")).get("status") or {}).get("conditions")
        assert not conditions  # no status written on a guess: not even "Degraded"
        await cluster.coordinator.start()
        body = await cluster.eventually(
            lambda: cluster.group_settled("orders", 2), what="2 members Stable"
        )
        degraded = next(c for c in body["status"]["conditions"] if c["type"] == "Degraded")
        assert degraded["status"] == "False"
        reasons = {event.get("reason") for event in await cluster.events()}
        assert "CoordinatorUnreachable" not in reasons
