"""`status` of a ConsumerGroup: built from what was observed, as plain data. Pure.

`status.rollout` is the orchestrator's own `RolloutStatus` (one model, written as it is):
what a person reads is what a restarted operator resumes from.
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
    MemberInstance,
    ObservedGroupState,
    RolloutPhase,
    RolloutStatus,
)
from staticfleet_operator.rollout import CoordinatorView, MemberPod


def read_status(body: Mapping[str, Any]) -> ConsumerGroupStatus:
    """The object's status as a model; an unreadable one reads as empty (and is rewritten).
    An unreadable status.rollout alone reads as a fresh one (the pods tell the rest)."""
    try:
        return ConsumerGroupStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return ConsumerGroupStatus()


def observed_status(
    previous: ConsumerGroupStatus,
    *,
    generation: int | None,
    view: CoordinatorView | None,
    selected_protocol: str | None,
    pods: Sequence[MemberPod],
    desired_members: int,
    rollout: RolloutStatus,
    now: datetime,
    degraded_reason: str | None = None,
    degraded_message: str = "",
) -> ConsumerGroupStatus:
    """The next status: the coordinator's view, the member pods and the rollout."""
    status = previous.model_copy(deep=True)
    status.observed_generation = generation
    if view is not None:
        status.group_state = ObservedGroupState(view.group_state.value)
        status.generation = view.generation_id
        status.members = len(view.members)
        status.group_protocol = view.protocol
    else:
        status.group_state = ObservedGroupState.UNKNOWN
    put_consumer_progress(status, view)
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
    status.rollout = rollout
    apply_conditions(
        status,
        generation=generation,
        desired_members=desired_members,
        ready_pods=sum(1 for p in live if p.ready),
        rollout=rollout,
        now=now,
        degraded_reason=degraded_reason,
        degraded_message=degraded_message,
    )
    return status


def put_consumer_progress(status: ConsumerGroupStatus, view: CoordinatorView | None) -> None:
    """A consumer-protocol group's epochs and convergence; cleared for a classic group (and
    kept as last seen while the group cannot be observed)."""
    if view is None:
        return
    progress = view.consumer
    status.group_epoch = progress.group_epoch if progress else None
    status.assignment_epoch = progress.assignment_epoch if progress else None
    status.converged = progress.converged if progress else None
    status.converged_members = progress.converged_members if progress else None
    status.classic_members = progress.classic_members if progress else None


def apply_conditions(
    status: ConsumerGroupStatus,
    *,
    generation: int | None,
    desired_members: int,
    ready_pods: int,
    rollout: RolloutStatus,
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

    stable = status.group_state is ObservedGroupState.STABLE or (
        desired_members == 0
        and status.group_state in (ObservedGroupState.EMPTY, ObservedGroupState.DEAD)
    )
    if rollout.phase is RolloutPhase.PAUSED:
        # The cause's code (blockers.py), so conditions group by it like Events and metrics.
        paused_on = rollout.blocker.value if rollout.blocker is not None else "RolloutPaused"
        degraded_reason, degraded_message = paused_on, rollout.message
    settled = stable and ready_pods == desired_members and (status.members or 0) == desired_members
    if status.converged is False:
        settled = False  # a consumer group's Stable is its convergence
    if settled and not rollout.active:
        if status.converged:
            put(
                ConditionType.READY,
                True,
                "GroupConverged",
                f"{desired_members} members, consumer group converged at group epoch "
                f"{status.group_epoch}",
            )
        else:
            put(
                ConditionType.READY, True, "GroupStable", f"{desired_members} members, group Stable"
            )
    else:
        put(
            ConditionType.READY,
            False,
            "RolloutInProgress" if rollout.active else "MembersNotReady",
            f"{ready_pods}/{desired_members} pods ready, group {status.group_state}",
        )
    if rollout.progressing:
        waiting_on = rollout.blocker.value if rollout.blocker is not None else "RollingBounce"
        put(ConditionType.PROGRESSING, True, waiting_on, rollout.message)
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


def status_differs(body: Mapping[str, Any], status: ConsumerGroupStatus) -> bool:
    """Whether writing `status` would change what the object carries (a merge patch's
    nulls remove keys, so both are compared with them gone)."""
    current = _without_nulls(body.get("status") or {})
    patch = _without_nulls(status.to_patch())
    return not all(current.get(key) == value for key, value in patch.items())


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value
