"""Hot standby in a managed group on the embedded coordinator: the standby pods, and the
promotion step of a pass, pure (the rules are `promotion.decide_promotions`; the actuator
makes the promotions).

A standby pod (`<group>-standby-<n>`, label `staticfleet.dev/role: standby`) runs the member
image with `STATICFLEET_STANDBY_ID` (its pod name) and no instance id: it heartbeats as a
standby and holds nothing. It has no slot annotation, so every slot rule (scale-down,
rollout, missing slots) ignores it.

A promotion, one pass (`plan_promotions`, then the actuator):
1. decide from the slots' pod health, the coordinator's ready standbys and the
   promotions already in status;
2. write them into `status.promotions` (write-ahead: a restarted operator resumes them);
3. `GroupCoordinator.promote` (idempotent; the old holder is fenced, no rebalance);
4. relabel the standby pod into the slot (slot label and annotations, role `member`): it
   now is the slot's pod for every other rule, so no replacement pod is created for the
   slot, and the standby count is short by one: the next pass creates a new standby (the
   replacement pod becomes the standby);
5. record `status.lastPromotion`, an Event and the metrics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Final

from coordinator import ErrorCode
from coordinator.client import env
from coordinator.client.config import RebalanceProtocolSetting
from staticfleet_operator.actions import CreatePod, DeletePod
from staticfleet_operator.crd import ConsumerGroupSpec, ConsumerGroupStatus, Mode, PromotionStatus
from staticfleet_operator.members import (
    INSTANCE_ID_ANNOTATION,
    POD_KEY_ANNOTATION,
    PROTOCOL_ANNOTATION,
    SLOT_ANNOTATION,
    SLOT_LABEL,
    TEMPLATE_HASH_ANNOTATION,
    MemberSettings,
    member_env,
    member_manifest,
    pod_slot,
    template_hash,
)
from staticfleet_operator.promotion import ActiveSlot, PodHealth, Standby
from staticfleet_operator.promotion import decide_promotions as decide

ROLE_LABEL: Final = "staticfleet.dev/role"
STANDBY_ROLE: Final = "standby"
MEMBER_ROLE: Final = "member"  # a promoted standby: the slot's pod now
STANDBY_ID_ANNOTATION: Final = "staticfleet.dev/standby-id"
# A Kafka consumer-protocol group's standby: the slot whose instance id it waits on
# (kafka_standby.py). Such a pod is not one of this module's standbys.
STANDBY_SLOT_ANNOTATION: Final = "staticfleet.dev/standby-slot"
# A promotion the coordinator keeps refusing with REBALANCE_IN_PROGRESS is given up after
# this long: the slot then gets a plain static replacement pod, as without standbys.
PROMOTION_RETRY_SECONDS: Final = 30.0


def standbys_enabled(spec: ConsumerGroupSpec) -> bool:
    return spec.mode is Mode.MANAGED and not spec.coordinator.is_kafka


@dataclass(frozen=True, slots=True)
class StandbyPod:
    name: str
    template_hash: str
    protocol: str
    deleting: bool


def standby_pods(pods: Sequence[Mapping[str, Any]]) -> list[StandbyPod]:
    """Pods waiting as standbys (labelled so, and not relabeled into a slot yet)."""
    found = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        labels = metadata.get("labels") or {}
        annotations = metadata.get("annotations") or {}
        if labels.get(ROLE_LABEL) != STANDBY_ROLE or pod_slot(pod) is not None:
            continue
        if STANDBY_SLOT_ANNOTATION in annotations:
            continue
        found.append(
            StandbyPod(
                name=str(metadata.get("name", "")),
                template_hash=annotations.get(TEMPLATE_HASH_ANNOTATION, ""),
                protocol=annotations.get(PROTOCOL_ANNOTATION, ""),
                deleting=bool(metadata.get("deletionTimestamp")),
            )
        )
    return sorted(found, key=lambda p: p.name)


def standby_pod_name(group_name: str, taken: set[str]) -> str:
    """The lowest free `<group>-standby-<n>` (a promoted standby keeps its name)."""
    n = 0
    while f"{group_name}-standby-{n}" in taken:
        n += 1
    return f"{group_name}-standby-{n}"


def standby_pod(
    spec: ConsumerGroupSpec,
    settings: MemberSettings,
    *,
    namespace: str,
    owner_uid: str,
    name: str,
    protocol: RebalanceProtocolSetting,
    pod_key: str,
) -> dict[str, Any]:
    """A standby's manifest: the member template, no slot, STATICFLEET_STANDBY_ID set."""
    if spec.template is None:
        raise ValueError("a standby pod needs spec.template")
    entries = [
        entry
        for entry in member_env(spec, settings, "", protocol, group_token=True)
        if entry["name"] != env.INSTANCE_ID
    ]
    entries.append({"name": env.STANDBY_ID, "value": name})
    return member_manifest(
        spec,
        settings,
        name=name,
        namespace=namespace,
        owner_uid=owner_uid,
        labels={ROLE_LABEL: STANDBY_ROLE},
        annotations={
            STANDBY_ID_ANNOTATION: name,
            PROTOCOL_ANNOTATION: protocol.value,
            TEMPLATE_HASH_ANNOTATION: template_hash(spec, settings.token_audience),
            POD_KEY_ANNOTATION: pod_key,
        },
        entries=entries,
    )


def promoted_patch(slot: int, instance_id: str) -> dict[str, Any]:
    """What makes a promoted standby pod the slot's pod for every other rule."""
    return {
        "metadata": {
            "labels": {SLOT_LABEL: str(slot), ROLE_LABEL: MEMBER_ROLE},
            "annotations": {SLOT_ANNOTATION: str(slot), INSTANCE_ID_ANNOTATION: instance_id},
        }
    }


def pod_health(pod: Mapping[str, Any] | None) -> PodHealth:
    if pod is None:
        return PodHealth.DELETED
    status = pod.get("status") or {}
    # Before the deletion check: a pod on a lost node never finishes terminating.
    if status.get("reason") == "NodeLost" or status.get("phase") == "Unknown":
        return PodHealth.NODE_LOST
    if status.get("phase") in ("Failed", "Succeeded"):
        return PodHealth.FAILED
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return PodHealth.TERMINATING
    return PodHealth.RUNNING


def active_slots(
    spec: ConsumerGroupSpec,
    pods: Sequence[Mapping[str, Any]],
    replicas: int,
    listed_instance_ids: set[str],
) -> list[ActiveSlot]:
    """Each slot below `replicas` with the health of its live pod (a running one wins over
    a terminating one: that is a replacement already made)."""
    by_slot: dict[int, list[Mapping[str, Any]]] = {}
    for pod in pods:
        slot = pod_slot(pod)
        if slot is not None:
            by_slot.setdefault(slot, []).append(pod)
    slots = []
    for slot in range(replicas):
        healths = [pod_health(pod) for pod in by_slot.get(slot, [])] or [PodHealth.DELETED]
        # A live pod wins: a running one (a replacement already made), then one still
        # shutting down.
        health = next(
            (h for h in (PodHealth.RUNNING, PodHealth.TERMINATING) if h in healths), healths[0]
        )
        instance_id = spec.instance_id(slot)
        slots.append(ActiveSlot(slot, instance_id, health, instance_id in listed_instance_ids))
    return slots


def plan_promotions(
    spec: ConsumerGroupSpec,
    previous: ConsumerGroupStatus,
    pods: Sequence[Mapping[str, Any]],
    listed_instance_ids: set[str],
    ready_standbys: frozenset[str],
    *,
    rollout_active: bool,
    now: datetime,
) -> ConsumerGroupStatus | None:
    """The status that records this pass's promotions (write-ahead: written before any is
    made, so a restarted operator resumes them), or None when there is nothing to promote."""
    if not standbys_enabled(spec):
        return None
    recorded = previous.promotions
    if rollout_active and not recorded:
        return None  # a rollout deletes pods on purpose: its own replacements take over
    standbys = [
        Standby(p.name, p.name in ready_standbys and not p.deleting) for p in standby_pods(pods)
    ]
    slots = active_slots(spec, pods, spec.replicas or 0, listed_instance_ids)
    decisions = decide(slots, standbys, recorded)
    if not decisions:
        return None
    status = previous.model_copy(deep=True)
    # Recorded ones keep when they started; new ones start now.
    status.promotions = [
        d if d.started_at is not None else d.model_copy(update={"started_at": now})
        for d in decisions
    ]
    return status


class Outcome(Enum):
    PROMOTED = "promoted"  # the coordinator handed over the instance id; the pod relabeled
    GIVEN_UP = "given up"  # the slot gets a plain static replacement
    RETRY = "retry"  # refused for a rebalance in progress: tried again next pass


def promotion_outcome(
    record: PromotionStatus, error: ErrorCode, relabeled: bool, now: datetime
) -> Outcome:
    """What became of one promotion: the coordinator's answer and whether the standby's
    pod could be relabeled into the slot."""
    if error is ErrorCode.NONE and relabeled:
        return Outcome.PROMOTED
    waited = (now - (record.started_at or now)).total_seconds()
    if error is ErrorCode.REBALANCE_IN_PROGRESS and waited < PROMOTION_RETRY_SECONDS:
        return Outcome.RETRY
    return Outcome.GIVEN_UP


def keep_standbys(
    spec: ConsumerGroupSpec,
    settings: MemberSettings,
    pods: Sequence[Mapping[str, Any]],
    protocol: RebalanceProtocolSetting,
    *,
    namespace: str,
    owner_uid: str,
    pass_id: str,
) -> list[CreatePod | DeletePod]:
    """Create missing standby pods, delete surplus and outdated ones (they hold nothing, so
    this costs no rebalance)."""
    wanted = spec.standbys if standbys_enabled(spec) else 0
    current = template_hash(spec, settings.token_audience)
    live = [p for p in standby_pods(pods) if not p.deleting]
    # A standby becomes a member as it was configured: one made for another template or
    # protocol is replaced now, while that costs nothing.
    outdated = [p for p in live if p.template_hash != current or p.protocol != protocol.value]
    surplus = live[wanted:] if len(live) > wanted else []
    deleting = list({p.name: p for p in outdated + surplus})
    actions: list[CreatePod | DeletePod] = [DeletePod(name) for name in deleting]
    keeping = len([p for p in live if p.name not in deleting])
    taken = {str((p.get("metadata") or {}).get("name", "")) for p in pods}
    for _ in range(max(wanted - keeping, 0)):
        pod_name = standby_pod_name(settings.group_name, taken)
        taken.add(pod_name)
        manifest = standby_pod(
            spec,
            settings,
            namespace=namespace,
            owner_uid=owner_uid,
            name=pod_name,
            protocol=protocol,
            pod_key=f"{pass_id}-{pod_name}",
        )
        actions.append(CreatePod(manifest))
    return actions
