"""Scale-step hygiene on the embedded coordinator (kmock): a flapping spec.replicas within
the scale-down stabilization window, and replica changes while a step is in flight.

Rebalances are counted from the coordinator's journal (`generation_started`), batch
LeaveGroups from the operator's `MembersLeft` Events."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from coordinator import ErrorCode, GroupState
from coordinator.messages import JoinGroupProtocol, JoinGroupRequest
from coordinator.protocol import Subscription, encode_subscription
from tests.operator.kube_harness import Cluster, managed_spec, running_cluster


async def _settled_at(cluster: Cluster, replicas: int, **spec: Any) -> int:
    """Create `orders` with `replicas` members; the journal's last seq once it is Stable."""
    await cluster.create_group("orders", managed_spec(replicas=replicas, **spec))
    await cluster.eventually(lambda: cluster.group_settled("orders", replicas), what="Stable")
    return max(e.seq for e in await cluster.journal("orders"))


async def _rebalances(cluster: Cluster, since: int) -> int:
    return sum(e.kind == "generation_started" for e in await cluster.journal("orders", since))


def _events(cluster: Cluster, reason: str) -> list[str]:
    events = (a for a in cluster.actions() if a.verb == "event" and a.name == reason)
    return [a.detail["message"] for a in events]


async def _held(cluster: Cluster) -> dict[str, Any] | None:
    status = (await cluster.get_group("orders")).get("status") or {}
    held: dict[str, Any] | None = status.get("scaleDownHeld")
    return held


async def test_a_flapping_target_costs_one_step_up_and_one_down_after_the_window() -> None:
    """8 flaps 4 <-> 6, one every 0.3 s, inside a 4 s window, ending at 4: the fleet goes
    to 6 once and back to 4 once, one batch LeaveGroup, after the window (without it:
    8 rebalances, bench/scale_flap.py)."""
    window = 4
    async with running_cluster() as cluster:
        since = await _settled_at(cluster, 4, scaleDown={"stabilizationWindowSeconds": window})
        loop = asyncio.get_running_loop()
        last_six = loop.time()
        for flap in range(8):
            await cluster.update_spec("orders", {"replicas": 6 if flap % 2 == 0 else 4})
            if flap % 2 == 0:
                last_six = loop.time()
            await asyncio.sleep(0.3)
        held = await cluster.eventually(lambda: _held(cluster), what="status.scaleDownHeld")
        assert (held["replicas"], held["holding"], held["reason"]) == (
            4,
            6,
            "StabilizationWindow",
        )
        assert len(await cluster.pods("orders")) == 6
        assert _events(cluster, "MembersLeft") == []
        await cluster.eventually(lambda: cluster.group_settled("orders", 6), what="6 Stable")
        await cluster.eventually(
            lambda: _events(cluster, "MembersLeft"), timeout=window + 10, what="the scale-down"
        )
        assert loop.time() - last_six >= window - 0.5  # the window's clock is the pass's
        await cluster.eventually(lambda: cluster.group_settled("orders", 4), what="4 Stable")
        assert await _held(cluster) is None
        assert await _rebalances(cluster, since) == 2
        [left] = _events(cluster, "MembersLeft")
        assert "orders-4" in left and "orders-5" in left
        # One Event for the whole held episode, however often the target flapped.
        assert len(_events(cluster, "ScaleDownHeld")) == 1


async def test_scale_ups_during_a_scale_up_in_flight_join_its_rebalance() -> None:
    """3 -> 5 with orders-4's image still pulling (orders-3 joined: the join phase is held
    for orders-4), then 6 and 7 while it is held: one rebalance for all four new members."""
    async with running_cluster() as cluster:
        since = await _settled_at(cluster, 3)
        cluster.kubelet.refused.update({"orders-4"})
        await cluster.update_spec("orders", {"replicas": 5})

        async def joined(instance_id: str) -> bool:
            events = await cluster.journal("orders", since)
            return any(
                e.kind == "member_joined" and e.group_instance_id == instance_id for e in events
            )

        await cluster.eventually(lambda: joined("orders-3"), what="orders-3 joined")
        await cluster.update_spec("orders", {"replicas": 6})
        await cluster.update_spec("orders", {"replicas": 7})
        await cluster.eventually(lambda: joined("orders-6"), what="orders-6 joined")
        cluster.kubelet.refused.clear()
        await cluster.eventually(lambda: cluster.group_settled("orders", 7), what="7 Stable")
        assert await _rebalances(cluster, since) == 1


async def test_scale_downs_during_a_scale_up_in_flight_go_straight_to_the_latest_count() -> None:
    """3 -> 6 with orders-4 and orders-5 still pulling (orders-3 joined, the phase held for
    them), then 5 and 4 while it is held: the phase ends with the members present (their
    expected members no longer describe the fleet), the never-started pods go, and nobody
    needs a LeaveGroup: one rebalance in all, settled at 4."""
    async with running_cluster() as cluster:
        since = await _settled_at(cluster, 3)
        cluster.kubelet.refused.update({"orders-4", "orders-5"})
        await cluster.update_spec("orders", {"replicas": 6})

        async def joined() -> bool:
            events = await cluster.journal("orders", since)
            return any(e.group_instance_id == "orders-3" for e in events)

        await cluster.eventually(joined, what="orders-3 joined")
        await cluster.update_spec("orders", {"replicas": 5})
        await cluster.update_spec("orders", {"replicas": 4})
        await cluster.eventually(lambda: cluster.group_settled("orders", 4), what="4 Stable")
        names = sorted(p["metadata"]["name"] for p in await cluster.pods("orders"))
        await cluster.eventually(
            lambda: _names(cluster, ["orders-0", "orders-1", "orders-2", "orders-3"]),
            what=f"pods 0-3 (have {names})",
        )
        assert _events(cluster, "MembersLeft") == []
        assert await _rebalances(cluster, since) == 1
        cluster.kubelet.refused.clear()


async def _names(cluster: Cluster, expected: list[str]) -> bool:
    pods = await cluster.pods("orders")
    return sorted(p["metadata"]["name"] for p in pods) == expected


async def test_a_scale_down_during_a_rebalance_stops_no_member_until_stable() -> None:
    """A rebalance the operator cannot end: a client that joins and never syncs (a member
    that stopped responding) keeps the group PreparingRebalance until its session expires. A
    scale-down 3 -> 2 asked meanwhile is held (RebalanceInProgress) and no member pod is
    stopped until the group is Stable; then one batch LeaveGroup. Without the rule
    (scaling.scale_target's `settled`) orders-2's pod is deleted in the middle of it."""
    async with running_cluster() as cluster:
        await _settled_at(cluster, 3)
        subscription = encode_subscription(Subscription(("orders",)))

        def join(instance_id: str) -> JoinGroupRequest:
            return JoinGroupRequest(
                group_id="orders",
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                member_id="",
                group_instance_id=instance_id,
                protocol_type="consumer",
                protocols=[JoinGroupProtocol("range", subscription)],
            )

        # `slow` joins and then goes quiet; `other` joining starts a rebalance that waits
        # for `slow` to rejoin, which it never does (until its session expires).
        first = await cluster.coordinator.join_group(join("slow"))
        assert first.error_code == ErrorCode.NONE, first
        joining = asyncio.create_task(cluster.coordinator.join_group(join("other")))
        await cluster.eventually(
            lambda: cluster.coordinator.group_state("orders") is GroupState.PREPARING_REBALANCE,
            what="a rebalance waiting for `slow`",
        )
        states_at_stop: list[GroupState | None] = []

        async def watch() -> None:
            while True:
                pods = {p["metadata"]["name"]: p for p in await cluster.pods("orders")}
                pod = pods.get("orders-2")
                if pod is None or pod["metadata"].get("deletionTimestamp"):
                    states_at_stop.append(cluster.coordinator.group_state("orders"))
                    return
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch())
        await cluster.update_spec("orders", {"replicas": 2})
        await asyncio.wait_for(watcher, 20)
        assert states_at_stop == [GroupState.STABLE]
        [held] = _events(cluster, "ScaleDownHeld")
        assert "until the rebalance in progress ends" in held, held
        await cluster.eventually(lambda: cluster.group_settled("orders", 2), what="2 Stable")
        [message] = _events(cluster, "MembersLeft")
        assert "orders-2" in message
        joining.cancel()  # `other`: the test's, not the operator's to clean up
        with contextlib.suppress(asyncio.CancelledError):
            await joining
