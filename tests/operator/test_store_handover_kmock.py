"""A replica that does not hold the embedded coordinator's store (peering.py: paused, or not
yet loaded after it became the active one) decides nothing: its passes, asked for by its own
informers and resync as on any replica, are dropped; taking the store over asks for every
group's pass. The real Kopf operator on kmock's emulator."""

from __future__ import annotations

import asyncio

from staticfleet_operator.peering import PeeringGate
from tests.operator.kube_harness import managed_spec, running_cluster


async def test_a_replica_that_does_not_hold_the_store_decides_nothing_until_it_does() -> None:
    async with running_cluster() as cluster:
        gate = PeeringGate()  # closed: this replica is paused
        cluster.operator.acting = gate
        await cluster.coordinator.suspend()
        await cluster.create_group("orders", managed_spec(replicas=2))
        await asyncio.sleep(1.5)  # fifteen poll intervals of the harness's operator
        assert await cluster.pods("orders") == []
        status = (await cluster.get_group("orders")).get("status") or {}
        assert not status.get("conditions")  # no status written: not even "Degraded"
        # Taking over, as watch_peering does it: load, open the gate, ask for every pass.
        await cluster.coordinator.start()
        gate.active = True
        cluster.operator.request_every_pass()
        body = await cluster.eventually(
            lambda: cluster.group_settled("orders", 2), what="2 members Stable"
        )
        degraded = next(c for c in body["status"]["conditions"] if c["type"] == "Degraded")
        assert degraded["status"] == "False"
        reasons = {event.get("reason") for event in await cluster.events()}
        assert "CoordinatorUnreachable" not in reasons
