"""The real Kopf operator against kmock: adopted pods and the replacement grace period, and a
rollout that pauses on a member that does not come back, then resumes."""

from __future__ import annotations

import time
from typing import Any

import pytest

from coordinator.client import env as member_env
from staticfleet_operator.blockers import BlockerCode
from staticfleet_operator.group_ref import GroupRef
from staticfleet_operator.members import INSTANCE_ID_ANNOTATION, PROTOCOL_ANNOTATION
from tests.operator.kube_harness import NAMESPACE, Cluster, env_of, managed_spec, running_cluster
from tests.operator.test_handlers_kmock import adopted_spec, executor

SPARK = {"namespace": NAMESPACE, "group": "spark"}
ORDERS = {"namespace": NAMESPACE, "group": "orders"}
# A pause's Event is named by what blocks the rollout (blockers.py).
PAUSE_REASONS = frozenset(code.value for code in BlockerCode)


async def _status(cluster: Cluster, name: str) -> dict[str, Any]:
    return dict((await cluster.get_group(name)).get("status") or {})


async def _start_executors(cluster: Cluster, count: int, grace_seconds: int) -> None:
    await cluster.create_group(
        "spark", {**adopted_spec(), "replacementGracePeriodSeconds": grace_seconds}
    )
    await cluster.eventually(
        lambda: _status_has(cluster, "spark", "observedGeneration"), what="first pass"
    )
    for index in range(count):
        await cluster.admit_and_create(executor(f"exec-{index}"))
    await cluster.eventually(
        lambda: cluster.group_settled("spark", count), what=f"{count} executors"
    )


async def _status_has(cluster: Cluster, name: str, key: str) -> Any:
    return (await _status(cluster, name)).get(key)


async def _last_seq(cluster: Cluster, group_id: str) -> int:
    return max((e.seq for e in await cluster.journal(group_id)), default=0)


def _slots(cluster: Cluster) -> tuple[dict[int, str], dict[int, Any], frozenset[int]]:
    memory = cluster.operator.memories.get(GroupRef(NAMESPACE, "spark"))
    assert memory is not None
    table = memory.slots._tables[str(memory.ref)]
    return table.held, table.vacant, table.retiring


async def test_adopted_pods_gone_past_the_grace_period_leave_in_one_batch_and_free_slots() -> None:
    async with running_cluster(webhook=True) as cluster:
        # Grace (1 s) well under the session timeout (6 s): the members are still listed
        # when it runs out, so only the operator's LeaveGroup can remove them that soon.
        await _start_executors(cluster, 4, grace_seconds=1)
        since = await _last_seq(cluster, "spark-job")
        actions_before = len(cluster.actions())

        # Spark releases two executors at once. Holding the group's lock keeps a pass from
        # seeing only one of them gone (each slot's grace period runs from when its pod was
        # seen gone, so two passes would make two LeaveGroups).
        async with cluster.operator.memories.of(GroupRef(NAMESPACE, "spark")).lock:
            gone_at = time.monotonic()
            await cluster.kube.delete_pod(NAMESPACE, "exec-1")
            await cluster.kube.delete_pod(NAMESPACE, "exec-2")

        async def two_left() -> list[Any] | None:
            events = await cluster.journal("spark-job", since)
            left = [e for e in events if e.kind == "member_left"]
            return left if len(left) >= 2 else None

        left = await cluster.eventually(two_left, what="member_left x2")
        assert time.monotonic() - gone_at > 1.0  # not before the grace period ran out
        assert sorted(e.group_instance_id or "" for e in left) == ["spark-job-1", "spark-job-2"]
        events = await cluster.journal("spark-job", since)
        # One request: the two rows are adjacent and one rebalance follows them.
        first = events.index(left[0])
        assert events[first + 1] is left[1]
        assert events[first + 2].kind == "rebalance_started"
        await cluster.eventually(lambda: cluster.group_settled("spark", 2), what="2 executors")

        # Later passes send nothing more.
        await cluster.passes(5)
        events = await cluster.journal("spark-job", since)
        assert [e.kind for e in events].count("member_left") == 2
        actions = cluster.actions()[actions_before:]
        left_events = [a for a in actions if a.verb == "event" and a.name == "MembersLeft"]
        assert len(left_events) == 1
        assert "spark-job-1, spark-job-2" in left_events[0].detail["message"]
        assert cluster.metric("staticfleet_operator_batch_leaves_total", **SPARK) == 1
        assert cluster.metric("staticfleet_operator_batch_leave_members_total", **SPARK) == 2

        # Their slots are free: nothing vacant or retiring, and new executors take them.
        held, vacant, retiring = _slots(cluster)
        assert sorted(held) == [0, 3] and not vacant and not retiring
        members = "staticfleet_operator_group_members"
        assert cluster.metric(members, **SPARK, kind="slots") == 2
        for name, slot in (("exec-4", 1), ("exec-5", 2)):
            created = await cluster.admit_and_create(executor(name))
            assert created["metadata"]["annotations"][INSTANCE_ID_ANNOTATION] == f"spark-job-{slot}"
        await cluster.eventually(lambda: cluster.group_settled("spark", 4), what="4 again")
        assert cluster.metric("staticfleet_operator_slot_allocations_total", **SPARK) == 6


async def test_a_replacement_within_the_grace_period_takes_the_slot_and_nobody_leaves() -> None:
    grace = 3
    async with running_cluster(webhook=True) as cluster:
        await _start_executors(cluster, 3, grace_seconds=grace)
        since = await _last_seq(cluster, "spark-job")
        actions_before = len(cluster.actions())

        await cluster.kube.delete_pod(NAMESPACE, "exec-1")
        gone_at = time.monotonic()

        async def slot_vacant() -> bool:
            _, vacant, _ = _slots(cluster)
            return 1 in vacant

        await cluster.eventually(slot_vacant, what="slot 1 vacant")
        # The replacement comes a while later (Spark asks for a new executor), well within
        # the grace period: passes in between keep the slot vacant, not retired.
        await cluster.passes(5)
        held, vacant, retiring = _slots(cluster)
        assert 1 in vacant and not retiring and sorted(held) == [0, 2]
        assert time.monotonic() - gone_at < grace
        replacement = await cluster.admit_and_create(executor("exec-3"))
        assert replacement["metadata"]["annotations"][INSTANCE_ID_ANNOTATION] == "spark-job-1"
        assert env_of(replacement)[member_env.INSTANCE_ID] == "spark-job-1"
        await cluster.eventually(lambda: cluster.group_settled("spark", 3), what="3 again")

        # Past the grace period, and a few passes later: still nobody told to leave.
        deadline = gone_at + grace + 0.5
        await cluster.eventually(lambda: time.monotonic() > deadline, what="grace period over")
        await cluster.passes(3)
        kinds = [e.kind for e in await cluster.journal("spark-job", since)]
        assert "member_left" not in kinds and "member_removed" not in kinds
        # The replacement rejoined as the same static member (a new member id, no new one).
        rejoined = [
            e
            for e in await cluster.journal("spark-job", since)
            if e.kind in ("static_rejoin", "member_replaced")
        ]
        assert {e.group_instance_id for e in rejoined} == {"spark-job-1"}
        assert "member_joined" not in kinds
        actions = cluster.actions()[actions_before:]
        assert not [a for a in actions if a.verb == "event" and a.name == "MembersLeft"]
        assert cluster.metric("staticfleet_operator_batch_leaves_total", **SPARK) == 0
        held, vacant, retiring = _slots(cluster)
        assert sorted(held) == [0, 1, 2] and not vacant and not retiring
        assert held[1] == replacement["metadata"]["annotations"]["staticfleet.dev/pod-key"]


@pytest.mark.slow
async def test_a_member_that_does_not_come_back_pauses_the_rollout_until_it_recovers() -> None:
    timeout = 10  # the CRD's minimum memberReadyTimeoutSeconds
    async with running_cluster() as cluster:
        spec = managed_spec(replicas=3, rollout={"memberReadyTimeoutSeconds": timeout})
        await cluster.create_group("orders", spec)
        await cluster.eventually(lambda: cluster.group_settled("orders", 3), what="3 Stable")
        [described] = await cluster.coordinator.describe_groups(["orders"])
        leader = next(
            m.group_instance_id for m in described.members if m.member_id == described.leader
        )
        # The first member bounce 1 takes: lowest slot, the leader last.
        stuck = next(f"orders-{s}" for s in range(3) if f"orders-{s}" != leader)
        cluster.kubelet.refused.add(stuck)  # its replacement's container never starts
        started_before = len(cluster.kubelet.history)
        actions_before = len(cluster.actions())

        await cluster.update_spec("orders", {"rebalance": {"protocol": "cooperative"}})
        bounced_at = time.monotonic()

        async def paused() -> dict[str, Any] | None:
            status = await _status(cluster, "orders")
            return status if (status.get("rollout") or {}).get("phase") == "Paused" else None

        status = await cluster.eventually(paused, timeout=timeout + 20, what="rollout paused")
        assert time.monotonic() - bounced_at >= timeout
        assert status["rollout"]["pausedPhase"] == "Bounce1"
        assert status["rollout"]["currentPod"] == stuck
        degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
        # The reason is the typed cause: its replacement's container never starts.
        assert (degraded["status"], degraded["reason"]) == ("True", "PodNotReady")
        assert status["rollout"]["blocker"] == "PodNotReady"
        assert stuck in cluster.kubelet.waiting
        # A Warning Event, posted to the API.
        events = {"items": await cluster.events()}
        pause_events = [e for e in events["items"] if e.get("reason") in PAUSE_REASONS]
        assert pause_events and {e["type"] for e in pause_events} == {"Warning"}
        assert {e["involvedObject"]["name"] for e in pause_events} == {"orders"}
        assert cluster.metric("staticfleet_operator_rollout_paused", **ORDERS) == 1
        assert cluster.metric("staticfleet_operator_rollout_phase", **ORDERS, phase="Paused") == 1
        blocked = "staticfleet_operator_rollout_blocked"
        assert cluster.metric(blocked, **ORDERS, reason="PodNotReady") == 1

        # Not skipped: while paused nobody else is bounced, however many passes run.
        await cluster.passes(10)
        deletes = [a.name for a in cluster.actions()[actions_before:] if a.verb == "delete"]
        assert deletes == [stuck]
        assert cluster.kubelet.history[started_before:] == []
        others = [p for p in await cluster.pods("orders") if p["metadata"]["name"] != stuck]
        assert {p["metadata"]["annotations"][PROTOCOL_ANNOTATION] for p in others} == {"eager"}
        bounces = "staticfleet_operator_member_bounces_total"
        assert cluster.metric(bounces, **ORDERS, phase="Bounce1") == 1
        assert (await _status(cluster, "orders"))["rollout"]["phase"] == "Paused"
        # One Event for the pause, however many passes repeated it.
        events = {"items": await cluster.events()}
        assert [e for e in events["items"] if e.get("reason") in PAUSE_REASONS] == pause_events

        # The member recovers: the rollout resumes where it stopped and completes.
        cluster.kubelet.refused.discard(stuck)

        async def completed() -> dict[str, Any] | None:
            status = await _status(cluster, "orders")
            done = (status.get("rollout") or {}).get("phase") == "Completed"
            cooperative = status.get("effectiveRebalanceProtocol") == "cooperative"
            return status if done and cooperative else None

        status = await cluster.eventually(completed, timeout=40, what="rollout completed")
        restarts = cluster.kubelet.history[started_before:]
        assert restarts[0].name == stuck
        assert [e.protocol for e in restarts] == ["compatible"] * 3 + ["cooperative"] * 3
        assert len({e.instance_id for e in restarts[:3]}) == 3
        assert len({e.instance_id for e in restarts[3:]}) == 3
        degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
        assert degraded["status"] == "False"
        assert cluster.metric("staticfleet_operator_rollout_paused", **ORDERS) == 0
        assert cluster.metric(bounces, **ORDERS, phase="Bounce1") == 3
        assert cluster.metric(bounces, **ORDERS, phase="Bounce2") == 3
        events = {"items": await cluster.events()}
        # Every pause was about that member. (While it rejoins, its wait is still past the
        # timeout, so a changed blocker -- PodNotReady -> MemberNotListed -- may post one
        # more pause Event before the rollout moves on.)
        messages = [e["message"] for e in events["items"] if e.get("reason") in PAUSE_REASONS]
        assert all(f"waiting for {stuck} to come back" in m for m in messages), messages
