"""What one pass over a managed fleet does, decided from what it saw. Pure; no I/O, no clock.

`plan(observation)` returns the one kind of step a pass takes; `reconcile` observes, calls
it, and acts. The kinds, in order of precedence (each holds the ones after it back until it
is done, so a pass never mixes two):

 1. `ScaleDown`: pods in slots at or above `replicas` are deleted (`replicas`: the
    count scaling.py allows this pass, which may hold a scale-down back).
 2. `Leave`: the coordinator still lists members in those slots once their pods are gone;
    they leave in one batch LeaveGroup by instance id (KIP-345), so the group rebalances
    once, at once, instead of after the session timeout.
 3. `Switch` (spec.rebalance.protocolChange: Switch): every member on another protocol is
    stopped; once all are gone, a `Leave` for the instance ids still listed on an assignor
    the target does not offer, then step 4 starts them all on the target.
 4. `CreateMissing`: slots below `replicas` with no pod get one, with the protocol of the
    bounce the fleet is in (so it needs no bounce itself).
 5. `Refuse`: a protocol change the members' client library cannot make as a two-bounce,
    or a migration to or from Kafka's consumer protocol its pre-checks refuse
    (migration.py: the client family, the assignor, the broker).
 6. `Rollout`: the rollout orchestrator's next step (`decide`), with the state to persist.

Scale-down is derived, not remembered: members listed in slots at or above `replicas` are
retiring, whatever the operator knew before a restart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.crd import ConsumerGroupSpec, ProtocolChange, RolloutStatus
from staticfleet_operator.rollout.decisions import Decision
from staticfleet_operator.rollout.migration import BrokerFacts, ClassicMetadata, migration_refusal
from staticfleet_operator.rollout.observation import CoordinatorView, MemberPod, Observation
from staticfleet_operator.rollout.orchestrator import decide
from staticfleet_operator.rollout.plan import (
    Assignors,
    protocol_for_new_pod,
    rollout_bounces,
    uniform_protocol,
)


@dataclass(frozen=True, slots=True)
class FleetObservation:
    """Everything a pass over a managed group decides on."""

    spec: ConsumerGroupSpec
    # The hash of the pod template (and injected settings) a member is created with now.
    template_hash: str
    pods: tuple[MemberPod, ...]
    view: CoordinatorView
    # False: describe failed, so the rollout decides nothing on the view (a group nobody
    # joined yet answers GROUP_ID_NOT_FOUND: observed, and empty).
    describable: bool
    rollout: RolloutStatus
    now: datetime
    # A Kafka cluster's consumer-protocol facts (ApiVersions, DescribeConfigs), when read:
    # the broker's half of a consumer-protocol migration's pre-checks.
    broker: BrokerFacts | None = None
    # A classic Kafka group's member metadata (DescribeGroups), the group's half of the
    # pre-checks: custom assignor data the broker's conversion would drop.
    classic_metadata: ClassicMetadata | None = None
    # The count to scale to this pass (scaling.py: a scale-down held by its stabilization
    # window or a rebalance in flight keeps it above spec.replicas); None: spec.replicas.
    replicas: int | None = None


@dataclass(frozen=True, slots=True)
class ScaleDown:
    """Delete the pods in `pods` not already terminating (all are above `replicas`)."""

    pods: tuple[MemberPod, ...]


@dataclass(frozen=True, slots=True)
class Leave:
    """One batch LeaveGroup naming exactly `instance_ids`; `why` goes into its Event."""

    instance_ids: tuple[str, ...]
    why: str


@dataclass(frozen=True, slots=True)
class Switch:
    """Stop `running` (every live member); with none running, wait for the terminating."""

    running: tuple[MemberPod, ...]
    terminating: bool


@dataclass(frozen=True, slots=True)
class CreateMissing:
    """Create a member pod for each slot in `slots`, created with `protocol`."""

    slots: tuple[int, ...]
    protocol: RebalanceProtocolSetting


@dataclass(frozen=True, slots=True)
class Refuse:
    """Do nothing but say why (a Degraded condition and one Warning Event)."""

    reason: str


@dataclass(frozen=True, slots=True)
class Rollout:
    """Persist `decision.state`, then carry the decision out."""

    decision: Decision


Step = ScaleDown | Leave | Switch | CreateMissing | Refuse | Rollout


def plan(observation: FleetObservation) -> Step:
    """The one step this pass takes (the order is in the module docstring)."""
    spec, pods, view = observation.spec, observation.pods, observation.view
    replicas = observation.replicas if observation.replicas is not None else spec.replicas or 0
    excess = tuple(m for m in pods if m.slot >= replicas)
    if excess:
        return ScaleDown(excess)
    retiring = retiring_instance_ids(view, spec, replicas, {m.slot for m in excess})
    if retiring:
        return Leave(tuple(retiring), "scale-down")
    refusal = unsafe_protocol_change(spec, pods, observation.template_hash) or migration_refusal(
        spec,
        (p.protocol for p in pods if not p.deleting),
        observation.broker,
        observation.classic_metadata,
    )
    if refusal is None and switch_slots(spec, pods):
        running = tuple(m for m in pods if not m.deleting)
        return Switch(running, terminating=any(m.deleting for m in pods))
    stale = switch_leavers(spec, view, pods)
    if stale:
        return Leave(tuple(stale), "switch: every member restarts on the target")
    missing = missing_slots(pods, replicas)
    if missing:
        protocol = new_pod_protocol(spec, observation.rollout, pods)
        if refusal is not None:
            # A refused change (a migration's pre-check, say) leaves the fleet as it is: a
            # replaced pod joins on the protocol its peers run, not on the refused one.
            protocol = uniform_protocol(p.protocol for p in pods if not p.deleting) or protocol
        return CreateMissing(tuple(missing), protocol)
    if refusal is not None:
        return Refuse(refusal)
    rollout = Observation(
        desired_protocol=desired_protocol(spec),
        desired_template_hash=observation.template_hash,
        assignors=assignors(spec),
        desired_members=replicas,
        member_ready_timeout_seconds=spec.rollout.member_ready_timeout_seconds,
        pods=pods,
        coordinator=view if observation.describable else None,
    )
    return Rollout(decide(rollout, observation.rollout, observation.now))


# --- the rules, one function each ------------------------------------------------------------


def desired_protocol(spec: ConsumerGroupSpec) -> RebalanceProtocolSetting:
    return RebalanceProtocolSetting(spec.rebalance.protocol.value)


def assignors(spec: ConsumerGroupSpec) -> Assignors:
    return Assignors(
        eager=spec.rebalance.eager_assignor.value,
        cooperative=spec.rebalance.cooperative_assignor.value,
    )


def missing_slots(members: Sequence[MemberPod], replicas: int) -> list[int]:
    """Slots below `replicas` with no pod at all (a terminating pod still holds its slot:
    its replacement waits, so two pods never carry one instance id)."""
    held = {m.slot for m in members}
    return [slot for slot in range(replicas) if slot not in held]


def retiring_instance_ids(
    view: CoordinatorView, spec: ConsumerGroupSpec, replicas: int, slots_with_pods: set[int]
) -> list[str]:
    """Instance ids the coordinator lists in slots at or above `replicas` whose pods are
    gone: the batch LeaveGroup of a scale-down."""
    prefix = spec.instance_id_prefix + "-"
    retiring: list[str] = []
    for member in view.members:
        instance_id = member.instance_id
        if not instance_id or not instance_id.startswith(prefix):
            continue
        suffix = instance_id[len(prefix) :]
        if suffix.isdigit() and int(suffix) >= replicas and int(suffix) not in slots_with_pods:
            retiring.append(instance_id)
    return sorted(retiring)


def unsafe_protocol_change(
    spec: ConsumerGroupSpec, pods: Sequence[MemberPod], template_hash: str
) -> str | None:
    """Why the fleet's protocol change cannot be the two-bounce, or None. librdkafka and
    kafka-python refuse a list of an eager and a cooperative assignor, so KIP-429's bridge
    bounce cannot be configured for them."""
    family = spec.coordinator.client_family
    if family.mixes_assignors or spec.rebalance.protocol_change is not ProtocolChange.TWO_BOUNCE:
        return None
    live = [(p.protocol, p.template_hash) for p in pods if not p.deleting]
    bounces = rollout_bounces(live, desired_protocol(spec), template_hash)
    if RebalanceProtocolSetting.COMPATIBLE not in bounces:
        return None
    return (
        f"{family.value} clients cannot offer an eager and a cooperative assignor at once, so "
        "the two-bounce upgrade is impossible; set spec.rebalance.protocolChange: Switch "
        "(stops the fleet for one rebalance) or set spec.rebalance.protocol back"
    )


def switch_slots(spec: ConsumerGroupSpec, pods: Sequence[MemberPod]) -> list[int]:
    """Slots whose pod runs another protocol than the spec's, when protocol changes are
    done by a Switch: the whole fleet stops and restarts on the target."""
    if spec.rebalance.protocol_change is not ProtocolChange.SWITCH:
        return []
    desired = desired_protocol(spec)
    return sorted({p.slot for p in pods if p.protocol is not desired})


def switch_leavers(
    spec: ConsumerGroupSpec, view: CoordinatorView, pods: Sequence[MemberPod]
) -> list[str]:
    """In a Switch, once the old members' pods are gone: the instance ids the coordinator
    still lists on an assignor the target does not offer. They leave in one batch before
    anyone restarts, or the restarted members would be refused (no common assignor) until
    the old ones' sessions expired."""
    if spec.rebalance.protocol_change is not ProtocolChange.SWITCH:
        return []
    offered = assignors(spec).offered_by(desired_protocol(spec))
    held = {p.instance_id for p in pods}
    return sorted(
        m.instance_id
        for m in view.members
        if m.instance_id and m.instance_id not in held and not (m.supported_protocols & offered)
    )


def new_pod_protocol(
    spec: ConsumerGroupSpec, state: RolloutStatus, pods: Sequence[MemberPod]
) -> RebalanceProtocolSetting:
    """The protocol a pod created outside a bounce gets (a missing slot, an adopted pod at
    admission, a standby). Families that cannot mix assignors never get the compatible
    bridge: a refused fleet keeps its protocol, a switched one the target."""
    protocols = [m.protocol for m in pods if not m.deleting]
    protocol = protocol_for_new_pod(state.bounce_protocol, protocols, desired_protocol(spec))
    if protocol is RebalanceProtocolSetting.COMPATIBLE and not (
        spec.coordinator.client_family.mixes_assignors
    ):
        current = uniform_protocol(protocols)
        if spec.rebalance.protocol_change is ProtocolChange.SWITCH or current is None:
            return desired_protocol(spec)
        return current
    return protocol
