"""`status` of a ConsumerGroup: built from what was observed, as plain data. Pure.

The orchestrator's `RolloutState` has three phases (Idle, Rolling, Paused); the CRD's
`status.rollout.phase` names the bounce (Bounce1, VerifyCompatible, Bounce2, StaticBounce,
Paused, Completed). The mapping lives here, both ways, so status is what a person reads
and still what a restarted operator resumes from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.crd import (
    ConditionStatus,
    ConditionType,
    ConsumerGroupStatus,
    GroupState,
    MemberInstance,
    RolloutPhase,
    RolloutStatus,
    bounce_phase,
)
from staticfleet_operator.rollout import CoordinatorView, MemberPod, RolloutState
from staticfleet_operator.rollout import RolloutPhase as OrchestratorPhase

_ROLLING_PHASES = frozenset(
    {
        RolloutPhase.BOUNCE1,
        RolloutPhase.VERIFY_COMPATIBLE,
        RolloutPhase.BOUNCE2,
        RolloutPhase.STATIC_BOUNCE,
    }
)


def read_status(body: Mapping[str, Any]) -> ConsumerGroupStatus:
    """The object's status as a model; an unreadable one reads as empty (and is rewritten)."""
    try:
        return ConsumerGroupStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return ConsumerGroupStatus()


def rollout_phase(state: RolloutState) -> RolloutPhase:
    """The CRD's name for where the rollout is."""
    if state.phase is OrchestratorPhase.PAUSED:
        return RolloutPhase.PAUSED
    if state.phase is OrchestratorPhase.IDLE:
        return RolloutPhase.COMPLETED if state.completed_at else RolloutPhase.IDLE
    index = state.bounce_index
    if (
        index + 1 < len(state.bounces)
        and not state.pending_slots
        and state.current_slot is None
        and state.bounced_slots
    ):
        return RolloutPhase.VERIFY_COMPATIBLE
    return bounce_phase(state.bounces, index, state.from_protocol)


def rollout_to_status(state: RolloutState) -> RolloutStatus:
    wire = state.to_dict()
    phase = rollout_phase(state)
    wire["phase"] = phase.value
    if phase is RolloutPhase.PAUSED and state.bounces:
        wire["pausedPhase"] = bounce_phase(
            state.bounces, state.bounce_index, state.from_protocol
        ).value
    # The CRD's toProtocol is eager|cooperative (never compatible), as the orchestrator's.
    return RolloutStatus.model_validate({k: v for k, v in wire.items() if v is not None})


def rollout_from_status(status: ConsumerGroupStatus) -> RolloutState:
    """The orchestrator's state from status.rollout; unreadable -> fresh (the pods' recorded
    settings tell the orchestrator the rest)."""
    wire: dict[str, Any] = status.rollout.model_dump(mode="json", by_alias=True)
    phase = status.rollout.phase
    if phase in _ROLLING_PHASES:
        wire["phase"] = OrchestratorPhase.ROLLING.value
    elif phase is RolloutPhase.PAUSED:
        wire["phase"] = OrchestratorPhase.PAUSED.value
    else:
        wire["phase"] = OrchestratorPhase.IDLE.value
    try:
        return RolloutState.from_dict(wire)
    except ValueError:
        return RolloutState()


def observed_status(
    previous: ConsumerGroupStatus,
    *,
    generation: int | None,
    view: CoordinatorView | None,
    selected_protocol: str | None,
    pods: Sequence[MemberPod],
    expected_members: int,
    rollout: RolloutState,
    now: datetime,
    degraded_reason: str | None = None,
    degraded_message: str = "",
) -> ConsumerGroupStatus:
    """The next status: the coordinator's view, the member pods and the rollout."""
    status = previous.model_copy(deep=True)
    status.observed_generation = generation
    if view is not None:
        status.group_state = GroupState(view.group_state.value)
        status.generation = view.generation_id
        status.members = len(view.members)
    else:
        status.group_state = GroupState.UNKNOWN
    status.selected_protocol = selected_protocol or None
    live = sorted((p for p in pods if not p.deleting), key=lambda p: p.slot)
    protocols = {p.protocol for p in live}
    status.effective_rebalance_protocol = (
        RebalanceProtocolSetting(protocols.pop()) if len(protocols) == 1 else None
    )
    member_ids = {m.instance_id: m.member_id for m in view.members} if view else {}
    status.member_instances = [
        MemberInstance(
            instance_id=p.instance_id,
            slot=p.slot,
            pod=p.pod_name,
            member_id=member_ids.get(p.instance_id),
            rebalance_protocol=p.protocol,
        )
        for p in live
    ]
    status.rollout = rollout_to_status(rollout)
    apply_conditions(
        status,
        generation=generation,
        expected_members=expected_members,
        ready_pods=sum(1 for p in live if p.ready),
        rollout=rollout,
        now=now,
        degraded_reason=degraded_reason,
        degraded_message=degraded_message,
    )
    return status


def apply_conditions(
    status: ConsumerGroupStatus,
    *,
    generation: int | None,
    expected_members: int,
    ready_pods: int,
    rollout: RolloutState,
    now: datetime,
    degraded_reason: str | None,
    degraded_message: str,
) -> None:
    def put(kind: ConditionType, value: bool, reason: str, message: str) -> None:
        status.set_condition(
            kind.value,
            ConditionStatus.TRUE if value else ConditionStatus.FALSE,
            reason,
            message,
            observed_generation=generation,
            now=now,
        )

    stable = status.group_state is GroupState.STABLE or (
        expected_members == 0 and status.group_state in (GroupState.EMPTY, GroupState.DEAD)
    )
    if rollout.phase is OrchestratorPhase.PAUSED:
        degraded_reason, degraded_message = "RolloutPaused", rollout.message
    settled = (
        stable and ready_pods == expected_members and (status.members or 0) == expected_members
    )
    if settled and not rollout.active:
        put(ConditionType.READY, True, "GroupStable", f"{expected_members} members, group Stable")
    else:
        put(
            ConditionType.READY,
            False,
            "RolloutInProgress" if rollout.active else "MembersNotReady",
            f"{ready_pods}/{expected_members} pods ready, group {status.group_state}",
        )
    if rollout.phase is OrchestratorPhase.ROLLING:
        put(ConditionType.PROGRESSING, True, "RollingBounce", rollout.message)
    else:
        put(ConditionType.PROGRESSING, False, "NoRollout", "")
    if degraded_reason:
        put(ConditionType.DEGRADED, True, degraded_reason, degraded_message)
    else:
        put(ConditionType.DEGRADED, False, "AsExpected", "")


def invalid_spec_status(
    previous: ConsumerGroupStatus, generation: int | None, problems: Sequence[str], now: datetime
) -> ConsumerGroupStatus:
    """The status of an object whose spec the operator refuses: nothing is acted on."""
    status = previous.model_copy(deep=True)
    status.observed_generation = generation
    message = "; ".join(problems)
    for kind, value, reason in (
        (ConditionType.READY, ConditionStatus.FALSE, "InvalidSpec"),
        (ConditionType.PROGRESSING, ConditionStatus.FALSE, "InvalidSpec"),
        (ConditionType.DEGRADED, ConditionStatus.TRUE, "InvalidSpec"),
    ):
        status.set_condition(
            kind.value, value, reason, message, observed_generation=generation, now=now
        )
    return status
