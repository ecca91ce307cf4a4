"""`plan(observation)`: what one pass over a managed fleet does, as a pure function.

A table of observations and the step each must produce, then properties over generated
fleets: the precedence of the steps and that a plan never touches a pod it should not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import GroupState
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.blockers import Blocker, BlockerCode
from staticfleet_operator.crd import RolloutStatus, parse_spec
from staticfleet_operator.rollout import (
    Bounce,
    CoordinatorView,
    CreateMissing,
    Done,
    FleetObservation,
    GroupMemberView,
    Leave,
    MemberPod,
    Refuse,
    Rollout,
    ScaleDown,
    Step,
    Switch,
    Wait,
    plan,
)
from staticfleet_operator.rollout.fleet import assignors

EAGER = RebalanceProtocolSetting.EAGER
COMPATIBLE = RebalanceProtocolSetting.COMPATIBLE
COOPERATIVE = RebalanceProtocolSetting.COOPERATIVE
NOW = datetime(2026, 1, 1, tzinfo=UTC)
HASH = "t1"


def spec(replicas: int = 3, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "groupId": "orders",
        "topics": [{"name": "orders", "partitions": 6}],
        "replicas": replicas,
        "template": {"spec": {"containers": [{"name": "member", "image": "m:1"}]}},
    }
    body.update(extra)
    return body


def pod(slot: int, protocol: RebalanceProtocolSetting = EAGER, **changes: Any) -> MemberPod:
    fields: dict[str, Any] = {
        "slot": slot,
        "instance_id": f"orders-{slot}",
        "pod_name": f"orders-{slot}",
        "protocol": protocol,
        "template_hash": HASH,
        "ready": True,
        "pod_uid": f"uid-{slot}",
    }
    fields.update(changes)
    return MemberPod(**fields)


@dataclass(frozen=True)
class Seen:
    """A test's shorthand for an observation."""

    pods: tuple[MemberPod, ...]
    listed: tuple[int, ...] | None = None  # slots the coordinator lists (default: the pods')
    desired: str = "eager"
    protocol_change: str | None = None
    client_family: str | None = None
    replicas: int = 3
    state: RolloutStatus = field(default_factory=RolloutStatus)

    def observe(self) -> FleetObservation:
        rebalance: dict[str, Any] = {"protocol": self.desired}
        if self.protocol_change:
            rebalance["protocolChange"] = self.protocol_change
        extra: dict[str, Any] = {"rebalance": rebalance}
        if self.client_family:
            extra["coordinator"] = {
                "type": "kafka",
                "bootstrapServers": "kafka:9092",
                "clientFamily": self.client_family,
            }
            extra["topics"] = [{"name": "orders"}]
        parsed = parse_spec(spec(self.replicas, **extra))
        listed = self.listed if self.listed is not None else tuple(p.slot for p in self.pods)
        by_slot = {p.slot: p for p in self.pods}
        members = tuple(
            GroupMemberView(
                f"orders-{slot}",
                f"member-{slot}",
                assignors(parsed).offered_by(by_slot[slot].protocol if slot in by_slot else EAGER),
            )
            for slot in listed
        )
        view = CoordinatorView(GroupState.STABLE, 3, "orders-0", members)
        return FleetObservation(
            spec=parsed,
            template_hash=HASH,
            pods=self.pods,
            view=view,
            describable=True,
            rollout=self.state,
            now=NOW,
        )


FLEET = (pod(0), pod(1), pod(2))
IN_TRANSIT = "waiting for the fleet before planning: 2 of 3 member pods live, 1 terminating"

TABLE: list[tuple[str, Seen, Step]] = [
    (
        "a pod above replicas is deleted first",
        Seen((*FLEET, pod(3)), replicas=3),
        ScaleDown((pod(3),)),
    ),
    (
        "a scale-down goes before a missing slot is filled",
        Seen((pod(0), pod(3)), replicas=2),
        ScaleDown((pod(3),)),
    ),
    (
        "its pod gone, a retiring member leaves in one batch",
        Seen(FLEET[:2], listed=(0, 1, 2, 3), replicas=2),
        Leave(("orders-2", "orders-3"), "scale-down"),
    ),
    (
        "a missing slot gets a pod with the fleet's protocol",
        Seen(FLEET[:2]),
        CreateMissing((2,), EAGER),
    ),
    (
        "a terminating pod holds its slot: nothing is created for it",
        Seen((pod(0), pod(1), pod(2, deleting=True))),
        Rollout(
            Wait(
                IN_TRANSIT,
                RolloutStatus(message=IN_TRANSIT, blocker=BlockerCode.FLEET_IN_TRANSIT),
                Blocker(BlockerCode.FLEET_IN_TRANSIT, IN_TRANSIT),
            )
        ),
    ),
    (
        "a missing slot mid-upgrade gets the bridge protocol, not the target",
        Seen((pod(0, COMPATIBLE), pod(1)), desired="cooperative"),
        CreateMissing((2,), COMPATIBLE),
    ),
    (
        "a switch stops every member on another protocol",
        Seen(FLEET, desired="cooperative", protocol_change="Switch"),
        Switch(FLEET, terminating=False),
    ),
    (
        "a switch, once the old pods are gone, sends the old members' leave",
        Seen((), listed=(0, 1, 2), desired="cooperative", protocol_change="Switch"),
        Leave(
            ("orders-0", "orders-1", "orders-2"),
            "switch: every member restarts on the target",
        ),
    ),
    (
        "a switch, once they have left, creates them all on the target",
        Seen((), listed=(), desired="cooperative", protocol_change="Switch"),
        CreateMissing((0, 1, 2), COOPERATIVE),
    ),
]


@pytest.mark.parametrize(("rule", "seen", "step"), TABLE, ids=[row[0] for row in TABLE])
def test_plan_table(rule: str, seen: Seen, step: Step) -> None:
    assert plan(seen.observe()) == step, rule


def test_a_client_that_cannot_mix_assignors_is_refused_the_two_bounce() -> None:
    step = plan(Seen(FLEET, desired="cooperative", client_family="librdkafka").observe())
    assert isinstance(step, Refuse) and "protocolChange: Switch" in step.reason
    # A missing member still comes back meanwhile, on the protocol the fleet runs.
    partial = Seen(FLEET[:2], desired="cooperative", client_family="librdkafka")
    assert plan(partial.observe()) == CreateMissing((2,), EAGER)


def test_a_settled_fleet_is_a_rollout_step_that_is_done() -> None:
    step = plan(Seen(FLEET).observe())
    assert isinstance(step, Rollout) and isinstance(step.decision, Done)


def test_a_protocol_change_is_the_rollout_s_first_bounce() -> None:
    step = plan(Seen(FLEET, desired="cooperative").observe())
    assert isinstance(step, Rollout) and isinstance(step.decision, Bounce)
    assert step.decision.protocol is COMPATIBLE


# --- properties over generated fleets ---------------------------------------------------------

protocols = st.sampled_from([EAGER, COMPATIBLE, COOPERATIVE])


@st.composite
def fleets(draw: st.DrawFn) -> Seen:
    replicas = draw(st.integers(0, 5))
    slots = draw(st.sets(st.integers(0, 6), max_size=7))
    pods = tuple(
        pod(slot, draw(protocols), deleting=draw(st.booleans()), ready=draw(st.booleans()))
        for slot in sorted(slots)
    )
    listed = tuple(sorted(draw(st.sets(st.integers(0, 6), max_size=7))))
    return Seen(
        pods,
        listed=listed,
        desired=draw(st.sampled_from(["eager", "cooperative"])),
        protocol_change=draw(st.sampled_from([None, "Switch"])),
        replicas=replicas,
    )


@settings(max_examples=300, deadline=None)
@given(fleets())
def test_a_plan_only_touches_what_it_should(seen: Seen) -> None:
    observation = seen.observe()
    step = plan(observation)
    replicas = seen.replicas
    excess = [p for p in seen.pods if p.slot >= replicas]
    if excess:
        # Scale-down before anything else, and only the pods above replicas.
        assert step == ScaleDown(tuple(excess))
        return
    assert not isinstance(step, ScaleDown)
    if isinstance(step, Leave):
        # Only members without a pod ever leave (a live member is never kicked).
        assert not set(step.instance_ids) & {p.instance_id for p in seen.pods}
    if isinstance(step, CreateMissing):
        # Never a second pod for a slot, never a slot above replicas.
        assert not set(step.slots) & {p.slot for p in seen.pods}
        assert all(slot < replicas for slot in step.slots)
    if isinstance(step, Rollout):
        # The rollout runs only on a complete fleet: every slot below replicas has a pod.
        assert {p.slot for p in seen.pods} == set(range(replicas))
    assert plan(observation) == step  # pure: the same observation, the same plan
